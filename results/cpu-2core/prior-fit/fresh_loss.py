"""Loss on prior tables no run trained on: a fresh dump of the recipe's prior (another seed, made on this CPU), the
recipe's batch transforms, inference weights. From the repository root:
    python prior_dump.py --device cpu --no-progress --preset real --rows 512 --num-datasets 512 --seed 999 --out F.h5
    python results/cpu-2core/prior-fit/fresh_loss.py F.h5 NAME=CKPT ...
Per checkpoint: its training steps and the mean test-row cross-entropy over the dump's 32 batches of 16."""
import os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np, torch
torch.set_num_threads(2)
from checkpoint import read_checkpoint
from classifier import model_from_checkpoint
from loaders import make_loader
from prior_transforms import apply_prior_transforms
from train import loss_on_batch

TRANSFORMS = {"categorical_columns": 0.2, "missing_cells": 0.1}   # the recipe's
dump, pairs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
for name, path in pairs:
    start, steps = time.time(), read_checkpoint(path)["step"]
    model = model_from_checkpoint(path).eval()
    losses = []
    with torch.no_grad(), make_loader(dump, 16, "cpu") as loader:
        for step, batch in zip(range(loader_steps := 32), loader):
            batch = apply_prior_transforms(batch, TRANSFORMS, 12345, step)
            losses.append(loss_on_batch(model, batch).item())
    print(f"{name:24s} steps {steps:6d} | fresh-table loss {np.mean(losses):.4f} (batch p10 {np.percentile(losses, 10):.4f}, "
          f"p90 {np.percentile(losses, 90):.4f}) | {time.time() - start:.0f} s", flush=True)
