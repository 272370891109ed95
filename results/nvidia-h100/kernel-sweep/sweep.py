"""Triton datapoint-attention configs at the blog's median split (N=36, H=4, R=5000, S=2500, D=24), one process:
each config's gradients checked against the default's, then fwd+bwd timed (do_bench, CUDA events), two rounds
interleaved. Prints one line per config and round; the last line is the table's JSON.

    python results/nvidia-h100/kernel-sweep/sweep.py
"""
import dataclasses
import json
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
import triton  # noqa: E402
import triton_attention as ta  # noqa: E402

N, H, R, S, D = 36, 4, 5000, 2500, 24
CONFIGS = {
    "default": {},
    "bwd_stages 2": dict(bwd_stages=2), "bwd_stages 4": dict(bwd_stages=4),
    "kv 32x64": dict(kv_block_n=64), "kv 16x128": dict(kv_block_m=16),
    "bwd_warps 8": dict(bwd_warps=8),
    "dq own launch 4w/3s": dict(q_warps=4, q_stages=3), "dq own launch 8w/3s": dict(q_warps=8, q_stages=3),
    "dq 64x64": dict(q_block_m=64, q_block_n=64), "dq 128x64": dict(q_block_n=64),
    "fwd_stages 4": dict(fwd_stages=4), "fwd_stages 2": dict(fwd_stages=2), "fwd 128x64": dict(fwd_block_n=64),
}


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    qkv = torch.randn(N, R, 3, H, D, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    k, v = k[:, :, :S], v[:, :, :S]
    dout = torch.randn(N, H, R, D, device="cuda", generator=g).to(torch.bfloat16)
    configs = {name: dataclasses.replace(ta.DEFAULT_CONFIG, **c) for name, c in CONFIGS.items()}
    run = {name: (lambda c=c: torch.autograd.grad(ta.datapoint_attention(q, k, v, config=c), qkv, dout)[0])
           for name, c in configs.items()}
    reference = run["default"]().float()
    for name, fn in run.items():
        err = ((fn().float() - reference).norm() / reference.norm()).item()
        assert err < 1e-2, (name, err)
    times = {name: [] for name in run}
    for round_ in range(2):
        for name, fn in run.items():
            t = sorted(triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="all"))
            times[name].append(t[len(t) // 2])
            print(f"round {round_} {name}: fwd+bwd {times[name][-1]:.3f} ms", flush=True)
    print(f"{torch.cuda.get_device_name()} | config | fwd+bwd ms, 2 rounds")
    for name, t in sorted(times.items(), key=lambda kv: min(kv[1])):
        print(f"| {name} | {t[0]:.3f} / {t[1]:.3f} |")
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "shape": [N, H, R, S, D], "ms": times}))


if __name__ == "__main__":
    main()
