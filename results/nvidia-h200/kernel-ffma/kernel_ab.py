"""One process: the triton datapoint attention of the tree given as argv[1], blog shape (N=36, H=4, R=5000, D=24),
checked against SDPA, then fwd and fwd+bwd timed at three splits. Run it alternately on two trees to compare."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.abspath(sys.argv[1]))
import triton  # noqa: E402
import triton_attention as ta  # noqa: E402

N, H, R, D = 36, 4, 5000, 24


def views(S, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    qkv = torch.randn(N, R, 3, H, D, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))          # (N, H, R, D) views
    return qkv, q, k[:, :, :S], v[:, :, :S]


def main():
    out = {"tree": sys.argv[1], "gpu": torch.cuda.get_device_name(), "rows": []}
    for S in (1, 1237, 2500):                                             # correctness first
        qkv, q, k, v = views(S, seed=S)
        got = ta.datapoint_attention(q, k, v)
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
        rel = ((got.float() - ref).norm() / ref.norm()).item()
        assert rel < 1e-2, (S, rel)
        out.setdefault("check_rel_err", {})[S] = rel
    for S in (900, 2500, 4100):
        qkv, q, k, v = views(S)
        g = torch.randn(N, H, R, D, device="cuda").to(torch.bfloat16)
        fwd = lambda: ta.datapoint_attention(q, k, v)
        both = lambda: torch.autograd.grad(ta.datapoint_attention(q, k, v), qkv, g)
        row = {"S": S}
        for name, fn in (("fwd", fwd), ("fwd_bwd", both)):
            times = triton.testing.do_bench(fn, warmup=50, rep=400, return_mode="all")   # CUDA events, L2 flushed
            times = sorted(times)
            row[name] = {"median": times[len(times) // 2], "p10": times[len(times) // 10],
                         "p90": times[9 * len(times) // 10], "n": len(times)}
        out["rows"].append(row)
        print(f"S={S} fwd {row['fwd']['median']:.3f} ms fwd+bwd {row['fwd_bwd']['median']:.3f} ms", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
