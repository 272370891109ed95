"""Scores checkpoints on the real-data suite's cached tasks (data/real_suite.npz) on the GPU: ours only, the
baselines are scored on the CPU against the same splits.   python score.py OUT.json SPLITS NAME=CKPT [...]"""
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import evaluation  # noqa: E402
import real_data  # noqa: E402
from classifier import NanoTabPFNClassifier  # noqa: E402

out, splits, pairs = sys.argv[1], int(sys.argv[2]), [a.split("=", 1) for a in sys.argv[3:]]
tasks = real_data.load_suite(os.path.join("data", "real_suite.npz"))
results = {}
for name, path in pairs:
    if not os.path.exists(path):
        print(f"{name}: no checkpoint {path}")
        continue
    start = time.perf_counter()
    classifier = NanoTabPFNClassifier.from_checkpoint(path, device="cuda" if torch.cuda.is_available() else "cpu")
    results[name] = evaluation.evaluate_suite(lambda: classifier, tasks, splits)
    print(f"{name}: mean ROC AUC {results[name]['roc_auc']:.4f} over {results[name]['splits']} splits "
          f"({time.perf_counter() - start:.0f} s)")
with open(out, "w") as f:
    json.dump(results, f)
