"""One layer's datapoint attention at the blog's median split, as the model calls it, for ncu: q/k/v are views of
one (N, R, 3, H, D) bf16 buffer; keys are the first S rows. argv[1]: 'shared' (default launch) or 'split' (dQ programs
in their own launch, so ncu times the dK/dV and dQ parts apart)."""
import sys

import torch

import triton_attention as ta

N, H, R, S, D = 36, 4, 5000, 2500, 24
torch.manual_seed(0)
qkv = torch.randn(N, R, 3, H, D, device="cuda", dtype=torch.bfloat16)
q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))        # (N, H, R, D) views
k, v = k[:, :, :S], v[:, :, :S]
q.requires_grad_(False)
cfg = ta.DEFAULT_CONFIG if sys.argv[1:] != ["split"] else ta.KernelConfig(q_warps=4, q_stages=3)
qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
for _ in range(3):
    out = ta.datapoint_attention(qq, kk, vv, config=cfg)
    out.backward(torch.ones_like(out))
torch.cuda.synchronize()
