"""Did each prior gain where it was aimed? Per run and minute, the mean ROC AUC minus CatBoost's over seeds 0 and 1,
by the real task's best single column (prior-fit/decisive.py's measure). From the repository root:
    python results/nvidia-h100/prior-difficulty/by_column.py"""
import json, os, sys
sys.path.insert(0, os.getcwd())
sys.path.insert(0, "results/cpu-2core/prior-fit")
sys.path.insert(0, "results/cpu-2core/ceiling")
import numpy as np
import real_data
from ceiling import per_task
from decisive import best_single_column

HERE = "results/nvidia-h100/prior-difficulty"
RUNS = {"medium (the recipe)": "results/nvidia-h100/curve-matmul/score-medium", "quiet1": f"{HERE}/score-quiet1",
        "proxy2": f"{HERE}/score-proxy2"}
BUCKETS = ((0.5, 0.7), (0.7, 0.9), (0.9, 1.01))


if __name__ == "__main__":
    tasks = real_data.read_cache("data/real_suite.npz") + real_data.read_cache("data/real_heldout.npz")
    best = {t.name: best_single_column(t.X, t.y) for t in tasks}
    catboost = {}
    for scope in ("suite", "heldout"):
        catboost.update(json.load(open(f"data/baselines-{scope}.json"))["results"]["catboost"]["per_task"])
    counts = [sum(low <= b < high for b in best.values()) for low, high in BUCKETS]
    print("| run | minutes | " + " | ".join(f"best column {low}-{min(high, 1)} ({n} tasks)"
                                          for (low, high), n in zip(BUCKETS, counts)) + " |\n|---|---|---|---|---|")
    for name, prefix in RUNS.items():
        for seconds in (600, 1200):
            ours = per_task([f"{prefix}-s{seed}-{seconds}s.json" for seed in (0, 1)])
            gaps = [np.mean([ours[t] - catboost[t] for t, b in best.items() if low <= b < high]) for low, high in BUCKETS]
            print(f"| {name} | {seconds // 60} | " + " | ".join(f"{g:+.4f}" for g in gaps) + " |")
