"""The feature attention alone, forward and backward: the model's broadcast sums compiled by Inductor (what --fast
ran) beside triton_attention.feature_attention under tile configs, bf16 qkv as the in-projection writes it, at the
blog's (6 x 6 columns x 5000 rows) and upstream's (32 x 6 x 150) shapes, all columns querying, or the target only
with a padded column masked. Checked against fp32 broadcast first. usage: PYTHONPATH=<tree> python bench.py
"""
import statistics

import torch
from triton.testing import do_bench

import triton_attention as ta
from model import broadcast_attention

H, D = 4, 24
SHAPES = {"blog": (6, 6, 5000), "upstream": (32, 6, 150)}
CONFIGS = [(32, 4, 16, 4), (64, 4, 32, 4), (16, 4, 8, 4), (32, 8, 32, 8), (64, 8, 16, 8), (128, 4, 32, 8)]


def broadcast(qkv, keys, target_only):
    q, k, v = qkv.unflatten(-1, (3, H, D)).unbind(-3)                     # (B, C, R, H, D) views
    out = broadcast_attention(q[:, -1:] if target_only else q, k, v, keys)
    return out.flatten(-2)                                                 # (B, Cq, R, E)


def med(fn):
    runs = [do_bench(fn, warmup=10, rep=100) for _ in range(3)]
    return statistics.median(runs), min(runs), max(runs)


def main():
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    compiled = torch.compile(broadcast)
    print("| shape | queries | variant | max rel. error out / dqkv vs fp32 | fwd ms (min-max) | fwd+bwd ms (min-max) |")
    print("|---|---|---|---|---|---|")
    for shape, (b, c, r) in SHAPES.items():
        for target_only in (False, True):
            g = torch.Generator(device="cuda").manual_seed(0)
            qkv = torch.randn(b, c, r, 3 * H * D, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
            keys = torch.tensor([True] * (c - 2) + [False, True], device="cuda") if target_only else None
            ref_in = qkv.detach().float().requires_grad_()
            ref = broadcast(ref_in, keys, target_only)
            grad = torch.randn(ref.shape, device="cuda", generator=g).to(torch.bfloat16)
            (ref_d,) = torch.autograd.grad(ref, ref_in, grad.float())
            variants = {"broadcast, compiled": lambda: compiled(qkv, keys, target_only)}
            for cfg in CONFIGS:
                variants[f"triton {cfg}"] = (lambda cfg=cfg: ta.feature_attention(qkv, H, keys, target_only, cfg))
            for name, fn in variants.items():
                out = fn()
                (d,) = torch.autograd.grad(out, qkv, grad)
                err = [float((a.float() - e).norm() / e.norm()) for a, e in ((out, ref), (d, ref_d))]
                assert max(err) < 2e-2, (name, err)
                f = med(lambda: fn())
                fb = med(lambda: torch.autograd.grad(fn(), qkv, grad))
                print(f"| {shape} | {'target' if target_only else 'all'} | {name} | {err[0]:.1e} / {err[1]:.1e} | "
                      f"{f[0]:.4f} ({f[1]:.4f}-{f[2]:.4f}) | {fb[0]:.4f} ({fb[1]:.4f}-{fb[2]:.4f}) |", flush=True)


if __name__ == "__main__":
    main()
