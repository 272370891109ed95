"""make_linear_columns' held-out scores: the (S, B, P, K) weight gather of 5602e54 beside the (folds, B, S, K)
product that replaced it, at the recipe's shape on one GPU: largest difference, then CUDA-event times and peak memory.
    python results/nvidia-h200/ddp-test/linear_check.py"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import prior_transforms as pt  # noqa: E402


def gather(z, weights, fold, split):      # 5602e54's line
    return torch.einsum("bsp,sbpk->bsk", z[:, :split], weights[fold])


def product(z, weights, fold, split):     # prior_transforms.make_linear_columns now
    every = torch.einsum("bsp,fbpk->fbsk", z[:, :split], weights[:-1])
    return every[fold, :, torch.arange(split, device=z.device)].transpose(0, 1)


def timed(fn, args, reps=200, repeats=5):
    for _ in range(20):
        fn(*args)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn(*args)
        end.record()
        torch.cuda.synchronize()     # the events are read after the GPU reached them
        times.append(start.elapsed_time(end) * 1000 / reps)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(*args)
    torch.cuda.synchronize()
    return times, (torch.cuda.max_memory_allocated() - base) / 2**20


def main():
    torch.manual_seed(0)
    device = torch.device("cuda")
    tables, rows, features, classes, split = 16, 512, 32, 10, 256     # the recipe's batch, 512 rows, 10 outputs
    z = torch.randn(tables, rows, 1 + features, device=device)
    labels = torch.randint(0, classes, (tables, split), device=device)
    targets = torch.nn.functional.one_hot(labels, classes).float()
    fold = torch.arange(split, device=device) % pt.LINEAR_FOLDS
    fits = (fold[None, :] != torch.arange(pt.LINEAR_FOLDS, device=device)[:, None]).float()
    weights = pt._ridge_weights(z[:, :split], targets, torch.cat([fits, torch.ones_like(fits[:1])]))
    args = (z, weights, fold, split)
    old, new = gather(*args), product(*args)
    print(f"shape {tuple(new.shape)}; largest |gather - product| {(old - new).abs().max().item():.3g} "
          f"of values up to {old.abs().max().item():.3g}")
    for name, fn in (("gather", gather), ("product", product)):
        times, peak = timed(fn, args)
        print(f"{name}: median {statistics.median(times):.1f} us (range {min(times):.1f}-{max(times):.1f}, "
              f"5 repeats of 200), peak extra memory {peak:.1f} MiB")


if __name__ == "__main__":
    main()
