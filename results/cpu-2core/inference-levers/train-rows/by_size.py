"""Score records' checkpoints against CatBoost per task, grouped by training rows and by features: the mean ROC AUC
difference (checkpoints averaged per task). Default: the 256-row recipe at 10 minutes, seeds 0 and 1. Run from the
repository root: python results/cpu-2core/inference-levers/train-rows/by_size.py [score records...]"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.getcwd())
import evaluation  # noqa: E402
import real_data  # noqa: E402

RECORDS = sys.argv[1:] or [f"results/nvidia-h100/real-curve10/score-s{seed}-10m.json" for seed in (0, 1)]
records = [json.load(open(path)) for path in RECORDS]
print("records:", " ".join(RECORDS))
for which in ("suite", "heldout"):
    tasks = real_data.read_cache(real_data.SUITES[which])
    catboost = evaluation.baseline_scores(tasks, evaluation.BASELINES_PATHS[which], 5, compute=False)["catboost"]
    rows, features, diff = [], [], []
    for task in tasks:
        ours = np.mean([evaluation.from_stored(r["results"][name][which])["per_task"][task.name] for r in records
                        for name in r["results"]])
        rows.append(len(task.splits[0][0]))
        features.append(task.X.shape[1])
        diff.append(ours - catboost["per_task"][task.name])
    rows, features, diff = map(np.array, (rows, features, diff))
    print(f"{which}: {len(tasks)} tasks, mean difference {diff.mean():+.4f}")
    for name, values, edges in (("training rows", rows, (0, 100, 200, 400, 501)), ("features", features,
                                                                                     (0, 5, 10, 20, 100))):
        for low, high in zip(edges, edges[1:]):
            chosen = (values >= low) & (values < high)
            print(f"  {name} {low}-{high - 1}: {chosen.sum()} tasks, {diff[chosen].mean():+.4f}")
