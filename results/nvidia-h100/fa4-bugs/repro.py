"""Two flash-attn-4 4.0.0b36 bugs on Hopper (sm90), standalone: torch, flash-attn-4 and one sm90 GPU.

1. The backward's dq is wrong at head dims 8, 16, 40 and 48; out, dk and dv are right, and so is dq at 24, 32, 64, 96
   and 128. Reference: SDPA in fp32 on the same bf16 inputs.
2. With seqused_k, the backward leaves dk and dv of the keys past the count unwritten: whatever the allocator held
   there (made visible below by freeing a NaN-filled block first) comes back as their gradient.
"""
import importlib.metadata

import torch
import torch.nn.functional as F
from flash_attn.cute import flash_attn_func, flash_attn_varlen_func


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def grads(out, inputs, g):
    return torch.autograd.grad(out, inputs, g.to(out.dtype))


print(torch.cuda.get_device_name(), torch.cuda.get_device_capability(), "torch", torch.__version__,
      "flash-attn-4", importlib.metadata.version("flash-attn-4"))
print("1. dq against fp32 SDPA (relative error ||x - ref|| / ||ref||; bf16 rounding alone gives ~5e-3)")
for batch, seqlen_q, seqlen_k in ((2, 1000, 1000), (2, 4999, 2501)):
    for d in (8, 16, 24, 32, 40, 48, 64, 96, 128):
        torch.manual_seed(d)
        q = torch.randn(batch, seqlen_q, 4, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(batch, seqlen_k, 4, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                for _ in range(2))
        g = torch.randn(batch, seqlen_q, 4, d, device="cuda")
        out = flash_attn_func(q, k, v)[0]                                           # (B, Sq, H, D)
        dq, dk, dv = grads(out, (q, k, v), g)
        ref = F.scaled_dot_product_attention(*(t.float().transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
        rdq, rdk, rdv = grads(ref, (q, k, v), g)
        errs = [rel(out, ref), rel(dq, rdq), rel(dk, rdk), rel(dv, rdv)]
        flag = "  <-- dq wrong" if errs[1] > 0.05 else ""
        print(f"  B={batch} Sq={seqlen_q} Sk={seqlen_k} D={d:3d}: out {errs[0]:.1e}  dq {errs[1]:.1e}  "
              f"dk {errs[2]:.1e}  dv {errs[3]:.1e}{flag}")

print("2. seqused_k: dk, dv of the keys past the count")
batch, rows, used = 2, 1000, 300
torch.manual_seed(0)
q, k, v = (torch.randn(batch, rows, 4, 24, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
g = torch.randn(batch, rows, 4, 24, device="cuda")
seqused_k = torch.full((batch,), used, dtype=torch.int32, device="cuda")
out = flash_attn_varlen_func(q, k, v, seqused_k=seqused_k)[0]
poison = torch.full((64 << 20,), float("nan"), device="cuda")   # 256 MB of NaN, freed: the allocator reuses it
del poison
dq, dk, dv = grads(out, (q, k, v), g)
for name, t in (("dk", dk), ("dv", dv)):
    past = t[:, used:].float()
    print(f"  {name}[:, {used}:]: finite {bool(torch.isfinite(past).all())}, NaN count {int(past.isnan().sum())}, "
          f"max |finite| {past[past.isfinite()].abs().max().item() if past.isfinite().any() else 0:.3g} "
          f"(should be exactly 0: those keys are not used)")
ref = F.scaled_dot_product_attention(*(t.float().transpose(1, 2)[:, :, :used] if i else t.float().transpose(1, 2)
                                       for i, t in enumerate((q, k, v)))).transpose(1, 2)
rdq, = torch.autograd.grad(ref, (q,), g)
print(f"  out {rel(out, ref):.1e}, dq {rel(dq, rdq):.1e} against fp32 SDPA on the first {used} keys (these are right)")
