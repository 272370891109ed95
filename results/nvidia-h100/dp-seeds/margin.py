"""How sure is each margin over the baselines? Per task, the runs' mean ROC AUC over seeds minus a baseline's, then
the mean over tasks with a 95% paired bootstrap interval over tasks (10,000 resamples) and wins / losses. From the
repository root:  python results/nvidia-h100/dp-seeds/margin.py"""
import json, os, sys
sys.path.insert(0, os.getcwd())
sys.path.insert(0, "results/cpu-2core/ceiling")
import numpy as np
import real_data
from ceiling import per_task
from quality import group_names

HERE = "results/nvidia-h100/dp-seeds"
RUNS = {"1 GPU, 10 min (seeds 0, 1)": [f"{HERE}/score-recipe-s{seed}-600s.json" for seed in (0, 1)],
        "2 GPUs, 6 min (seeds 1, 2)": [f"{HERE}/score-dp-s{seed}-360s.json" for seed in (1, 2)]}
RESAMPLES = 10_000


def interval(differences: np.ndarray, rng) -> tuple:
    """Mean and the 2.5th / 97.5th percentiles of the mean over tasks resampled with replacement."""
    means = differences[rng.integers(0, len(differences), (RESAMPLES, len(differences)))].mean(1)
    return differences.mean(), *np.percentile(means, [2.5, 97.5])


if __name__ == "__main__":
    suite, heldout = (real_data.read_cache(f"data/real_{which}.npz") for which in ("suite", "heldout"))
    groups = {**{g: n for g, n in group_names(suite + heldout).items() if g != "binary"},
              "held out": {t.name for t in heldout}}
    baselines = {}
    for scope in ("suite", "heldout"):
        for name, result in json.load(open(f"data/baselines-{scope}.json"))["results"].items():
            baselines.setdefault(name, {}).update(result["per_task"])
    print("| run | against | " + " | ".join(f"{g} ({len(n)})" for g, n in groups.items()) + " |")
    print("|---|---|" + "---|" * len(groups))
    for run, paths in RUNS.items():
        ours = per_task(paths)
        for baseline in ("catboost", "lightgbm"):
            cells = []
            for names in groups.values():
                names = sorted(names)
                differences = np.array([ours[t] - baselines[baseline][t] for t in names])
                mean, low, high = interval(differences, np.random.default_rng(0))
                cells.append(f"{mean:+.4f} [{low:+.4f}, {high:+.4f}] {int((differences > 0).sum())}-"
                             f"{int((differences < 0).sum())}")
            print(f"| {run} | {baseline} | " + " | ".join(cells) + " |")
    print(f"\nEach cell: mean difference in ROC AUC [95% bootstrap interval over tasks, {RESAMPLES} resamples] "
          "tasks won-lost.")
