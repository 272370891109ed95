"""Host time to issue one bf16 GEMM of the blog step's shapes: a repeated M against a new M at each call.

The last layer under --last-layer-target-only and the decoder see B * (R - S) rows, S drawn anew for every batch.
python mm_probe.py  (CUDA)"""
import time

import torch
import torch.nn.functional as F


def host_us(calls) -> float:
    """Median over 5 rounds of the host's µs per call; the GPU drains between rounds."""
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for call in calls:
            call()
        rounds.append((time.perf_counter() - t0) / len(calls) * 1e6)
        torch.cuda.synchronize()
    return sorted(rounds)[2]


def main():
    dev, bf = "cuda", torch.bfloat16
    E, H, B, R = 96, 192, 6, 5000
    big = torch.randn(B * R, H, device=dev, dtype=bf)
    w1, b1 = torch.randn(H, E, device=dev, dtype=bf), torch.randn(H, device=dev, dtype=bf)
    g = torch.randn(B * R, E, device=dev, dtype=bf)
    gen = torch.Generator().manual_seed(0)
    rows = lambda n: [B * (R - int(s)) for s in torch.randint(1, R, (n,), generator=gen)]
    fixed, seen = [B * 2500] * 200, rows(200)
    print("| library | call | repeated M | new M each call | the same new Ms again |")
    print("|---|---|---|---|---|")
    for lib in ("cublas", "cublaslt"):
        torch.backends.cuda.preferred_blas_library(lib)
        cases = {
            "linear (M, 96) -> 192, bias (addmm)": lambda m: (lambda: F.linear(big[:m, :E], w1, b1)),
            "mm (M, 96) @ (96, 192)": lambda m: (lambda: big[:m, :E] @ w1.t()),
            "weight grad (192, M) @ (M, 96)": lambda m: (lambda: big[:m].t() @ g[:m]),
        }
        for name, make in cases.items():
            repeated, again = (host_us([make(m) for m in ms]) for ms in (fixed, seen))   # `seen`: 5 rounds
            first = rows(200)   # a new draw, timed once: every M new to the library
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for m in first:
                make(m)()
            once = (time.perf_counter() - t0) / 200 * 1e6
            torch.cuda.synchronize()
            print(f"| {lib} | {name} | {repeated:.1f} µs | {once:.1f} µs | {again:.1f} µs |")


if __name__ == "__main__":
    main()
