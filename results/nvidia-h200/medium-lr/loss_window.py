"""The mean training loss over steps 8,711-9,710 of this run and of the recipe's seed 0 (recipe-30min), from the
records' every-25th-step losses (40 of them each), with the standard error of that mean. Run from the repository root;
writes nothing (README's table)."""
import json

for path in ("results/nvidia-h200/medium-lr/lr2-s0.json", "results/nvidia-h200/recipe-30min/recipe-s0.json"):
    extra = json.load(open(path))["extra"]
    every = extra.get("losses_every", 1)
    window = [loss for i, loss in enumerate(extra["losses"]) if 8710 < every * (i + 1) <= 9710]
    mean = sum(window) / len(window)
    spread = (sum((loss - mean) ** 2 for loss in window) / (len(window) - 1) / len(window)) ** 0.5
    print(f"{path}: {len(window)} losses, mean {mean:.4f}, standard error {spread:.4f}")
