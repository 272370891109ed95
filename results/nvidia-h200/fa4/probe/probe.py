"""FlashAttention-4 (flash-attn-4, CuTe DSL; its sm90 path is warp-specialized, TMA + wgmma) on the datapoint attention:
correctness against an fp32 reference beside SDPA's bf16 error on awkward shapes, then fwd + bwd at the blog shape
beside the repository's kernels in the same process (CUDA graph replays, as bench_micro times them)."""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.getcwd())
import bench_micro  # noqa: E402

OUT = sys.argv[1]
dev = torch.device("cuda")
record = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "checks": [], "timing": []}


def say(*a):
    print(*a, flush=True)


t0 = time.time()
import flash_attn.cute as fa  # noqa: E402
from flash_attn.cute import flash_attn_func, flash_attn_varlen_func  # noqa: E402
record["fa4"] = getattr(fa, "__version__", "?")
say(f"flash-attn-4 {record['fa4']} imported in {time.time() - t0:.1f} s on {record['device']}")


def run_fa4(q, k, v, used=None):
    """(N, R, H, D) q and (N, S, H, D) k/v; used: (N,) int32 key counts in device memory (all R keys passed)."""
    if used is None:
        return flash_attn_func(q, k, v)[0]
    return flash_attn_varlen_func(q, k, v, seqused_k=used)[0]


def reference(q, k, v):
    o = F.scaled_dot_product_attention(*(t.float().transpose(1, 2) for t in (q, k, v)))
    return o.transpose(1, 2)


def sdpa_bf16(q, k, v):
    return F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)


for N, R, S, padded in [(2, 4999, 1, False), (3, 37, 17, False), (2, 4999, 2501, False), (36, 5000, 2500, False),
                        (3, 37, 17, True), (2, 4999, 2501, True)]:
    torch.manual_seed(0)
    qkv = torch.randn(N, R, 3, 4, 24, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(N, R, 4, 24, device=dev, dtype=torch.bfloat16)
    used = torch.full((N,), S, device=dev, dtype=torch.int32) if padded else None

    def views(keys=S):
        return qkv[:, :, 0], qkv[:, :keys, 1], qkv[:, :keys, 2]

    def grads(fn, *args):
        out = fn(*args)
        out.backward(g.to(out.dtype))
        grad, qkv.grad = qkv.grad.clone(), None
        return out.float(), grad.float()

    row = {"N": N, "R": R, "S": S, "padded_seqused_k": padded}
    try:
        t = time.time()
        o, gr = grads(run_fa4, *(views(R) if padded else views()), used)
        row["first_s"] = time.time() - t
        o_ref, g_ref = grads(reference, *views())
        o_sd, g_sd = grads(sdpa_bf16, *views())
        row |= {"fa4_out_err": (o - o_ref).abs().max().item(), "fa4_grad_err": (gr - g_ref).abs().max().item(),
                "sdpa_out_err": (o_sd - o_ref).abs().max().item(), "sdpa_grad_err": (g_sd - g_ref).abs().max().item(),
                "finite": bool(torch.isfinite(o).all() and torch.isfinite(gr).all())}
        if padded:   # the padded keys' gradients must be zero
            row["padded_kv_grad_max"] = gr[:, S:, 1:].abs().max().item() if S < R else 0.0
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    record["checks"].append(row)
    say("check", json.dumps(row))

N, R, H, D = 36, 5000, 4, 24
qkv = torch.randn(N, R, 3, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
grad = torch.randn(N, R, H, D, device=dev, dtype=torch.bfloat16)
for S in (900, 2500, 4100):
    for name in ("fa4", "fa4-seqused", "triton-padded", "triton", "flash", "cudnn"):
        row = {"kernel": name, "S": S}
        try:
            if name.startswith("fa4"):
                padded = name == "fa4-seqused"
                used = torch.full((N,), S, device=dev, dtype=torch.int32) if padded else None
                keys = slice(None) if padded else slice(0, S)

                def call():
                    run_fa4(qkv[:, :, 0], qkv[:, keys, 1], qkv[:, keys, 2], used).backward(grad)

                t = time.time()
                call()
                torch.cuda.synchronize()
                row["first_ms"] = (time.time() - t) * 1e3
                call()
                qkv.grad = None
                eager = [bench_micro.timed_ms(dev, call) for _ in range(10)]
                qkv.grad = None
                try:
                    run, row["clock"] = bench_micro.replayed(call, dev), "graph"
                except Exception as e:
                    torch.cuda.synchronize()
                    qkv.grad = None
                    run, row["clock"] = call, f"eager ({type(e).__name__}: {str(e)[:80]})"
                times = [bench_micro.timed_ms(dev, run) for _ in range(15)]
                qkv.grad = None
                row["eager_median_ms"] = statistics.median(eager)
            else:
                qkv_v = qkv.detach().requires_grad_(True)
                t_ = bench_micro.time_attention(name, qkv_v, grad.transpose(1, 2), S, dev, 15)
                times, row["clock"], row["first_ms"] = t_["times_ms"], t_["clock"], t_["first_ms"]
            row |= {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
                    "per_step_3_layers_ms": 3 * statistics.median(times)}
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        record["timing"].append(row)
        say("time", json.dumps(row))

with open(os.path.join(OUT, "probe.json"), "w") as f:
    json.dump(record, f, indent=1)
say("\n| kernel | S | fwd+bwd one layer (ms) | range | 3 layers | clock |")
for r in record["timing"]:
    if "median_ms" in r:
        say(f"| {r['kernel']} | {r['S']} | {r['median_ms']:.3f} | {r['min_ms']:.3f}-{r['max_ms']:.3f} | "
            f"{r['per_step_3_layers_ms']:.2f} | {r['clock'][:30]} |")
    else:
        say(f"| {r['kernel']} | {r['S']} | {r.get('error', '')[:120]} |")
