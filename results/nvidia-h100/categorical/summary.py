"""Table of the run records (.json or .json.gz) in a folder: ROC AUC and rank at the last eval, and the tasks with categorical columns.

    python results/nvidia-h100/categorical/summary.py DIR
"""
import gzip
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.getcwd())
import real_data  # noqa: E402

tasks = real_data.load_suite()
categorical = [t.name for t in tasks if t.categorical.any()]
folder = sys.argv[1]
print(f"| run | steps | ROC AUC at the 30 s eval, at 60 s | rank at 60 s | {len(categorical)} tasks with categorical columns | "
      f"the other {len(tasks) - len(categorical)} | arthritis / bladder / mpg / cu.summary |")
print("|---|---|---|---|---|---|---|")
for file in sorted(f for f in os.listdir(folder) if f.endswith((".json", ".json.gz"))):
    name = file.split(".json")[0]
    record = json.load((gzip.open if file.endswith(".gz") else open)(os.path.join(folder, file), "rt"))
    if "extra" not in record:
        continue   # not a run record (heldout.json)
    extra = record["extra"]
    last = extra["eval"]
    per_task = last["per_task"]
    cat = np.mean([per_task[t] for t in categorical])
    other = np.mean([v for t, v in per_task.items() if t not in categorical])
    picks = " / ".join(f"{per_task[t]:.3f}" for t in ("multgee/arthritis", "survival/bladder", "ggplot2/mpg",
                                                        "rpart/cu.summary"))
    evals = ", ".join(f"{h['scores']['roc_auc']:.4f}" for h in extra["eval_history"]) + f", {last['roc_auc']:.4f}"
    print(f"| {name} | {extra['steps_done']} | {evals} | {last['rank']:.2f} | {cat:.4f} | {other:.4f} | {picks} |")
