"""Mean training loss per window of steps, linear against periodic, over the steps both runs of a seed made (they
read the same batches): python results/cpu-2core/periodic-probe/losses.py [FOLDER]"""
import json
import sys

import numpy as np

folder = sys.argv[1] if len(sys.argv) > 1 else "results/cpu-2core/periodic-probe"
for seed in (0, 1):
    losses = {enc: np.array(json.load(open(f"{folder}/{enc}-s{seed}.json"))["extra"]["losses"])
              for enc in ("linear", "periodic")}
    shared = min(len(v) for v in losses.values())
    for first in range(0, shared, 250):
        last = min(first + 250, shared)
        a, b = (losses[enc][first:last].mean() for enc in ("linear", "periodic"))
        print(f"seed {seed} steps {first + 1}-{last}: linear {a:.4f} periodic {b:.4f} ({b - a:+.4f})")
