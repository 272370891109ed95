"""Where the backward op's time goes: the op (torch.ops...datapoint_attention_bwd) against its launches timed alone
(delta, dK/dV part, dQ part) and back to back; blog shape, one layer, do_bench (CUDA events, L2 flushed)."""
import sys

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, sys.argv[1])
import triton_attention as ta  # noqa: E402

N, H, R, S, D = 36, 4, 5000, 2500, 24
torch.manual_seed(0)
qkv = torch.randn(N, R, 3, H, D, device="cuda", dtype=torch.bfloat16)
q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
k, v = k[:, :, :S], v[:, :, :S]
scale, cfg = D ** -0.5, ta._config_ints(ta.DEFAULT_CONFIG)
out, lse = torch.ops.nanotabpfn.datapoint_attention_fwd(q, k, v, scale, cfg)
dout = torch.randn_like(out)
op = lambda: torch.ops.nanotabpfn.datapoint_attention_bwd(q, k, v, out, lse, dout, scale, cfg)
fwd = lambda: torch.ops.nanotabpfn.datapoint_attention_fwd(q, k, v, scale, cfg)
g_contig = torch.randn(N, H, R, D, device="cuda").to(torch.bfloat16)   # kernel_ab.py's gradient: (N, H, R, D) memory
op_contig = lambda: torch.ops.nanotabpfn.datapoint_attention_bwd(q, k, v, out, lse, g_contig, scale, cfg)
leaf = qkv.detach().requires_grad_()
lq, lk, lv = (t.transpose(1, 2) for t in leaf.unbind(2))
attn = ta.datapoint_attention(lq, lk[:, :, :S], lv[:, :, :S])
autograd_bwd = lambda: torch.autograd.grad(attn, leaf, g_contig, retain_graph=True)
rows = {"fwd op": fwd, "bwd op": op, "bwd op, (N, H, R, D) gradient": op_contig, "autograd backward": autograd_bwd}
if hasattr(ta.KernelConfig(), "kv_warps"):
    c = ta.DEFAULT_CONFIG
    delta = torch.empty_like(lse)
    dq, dk, dv = ta._rows_major(N, R, H, D, q), ta._rows_major(N, S, H, D, k), ta._rows_major(N, S, H, D, v)
    args = (q, k, v, dout, dq, dk, dv, lse, delta, R, S, H, *q.stride(), *k.stride(), *v.stride(), *dout.stride(),
            *dq.stride()[:3], *dk.stride()[:3], *dv.stride()[:3])
    meta = dict(QK_SCALE=scale * ta.LOG2E, SM_SCALE=scale, D=D, BLOCK_D=32, ALIGN=ta._align(q, k, v, dout, dq, dk, dv),
                ATOMIC_DQ=False)
    kv = lambda: ta._bwd_kernel[(triton.cdiv(S, c.kv_block_n), N * H)](
        *args, **meta, BLOCK_M=c.kv_block_m, BLOCK_N=c.kv_block_n, KEY_PART=True, num_warps=c.kv_warps,
        num_stages=c.kv_stages)
    qp = lambda: ta._bwd_kernel[(triton.cdiv(R, c.q_block_m), N * H)](
        *args, **meta, BLOCK_M=c.q_block_m, BLOCK_N=c.q_block_n, KEY_PART=False, num_warps=c.q_warps,
        num_stages=c.q_stages)
    dl = lambda: ta._delta_kernel[(triton.cdiv(R, 128), N * H)](out, dout, delta, R, H, *out.stride(), *dout.stride(),
                                                               D=D, BLOCK_D=32, ALIGN=8, BLOCK_M=128)
    rows.update({"delta": dl, "dK/dV part": kv, "dQ part": qp, "dK/dV + dQ": lambda: (kv(), qp())})
for rnd in range(2):
    for name, fn in rows.items():
        fn()
        torch.cuda.synchronize()
        print(f"{sys.argv[1]} round {rnd} {name}: {do_bench(fn, warmup=20, rep=200):.3f} ms", flush=True)
