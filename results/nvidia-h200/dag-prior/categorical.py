"""Post hoc, after the rule rejected both DAG priors: does the DAG prior, whose categorical nodes make columns of
codes, do better on the tasks that have categorical columns? Per task: the DAG run's mean ROC AUC minus the recipe's
(recipe-30min phase a), seeds 0 and 1 averaged, split by whether the task has a categorical column (real_data's
flag). Run from the repository root with the suite caches in data/; writes nothing (categorical.log)."""
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, ".")   # the repository root
import quality     # noqa: E402
import real_data   # noqa: E402

HERE = pathlib.Path("results/nvidia-h200/dag-prior")
RECIPE = pathlib.Path("results/nvidia-h200/recipe-30min")


def per_task(path, name):
    scores = json.loads(path.read_text())["results"][name]
    return {(part, task): float(np.mean(v)) for part in ("suite", "heldout")
            for task, v in scores[part]["roc_auc_per_split"].items()}


def main():
    tasks = {("suite", t.name): t for t in real_data.read_cache("data/real_suite.npz")}
    tasks |= {("heldout", t.name): t for t in real_data.read_cache("data/real_heldout.npz")}
    recipe = [per_task(RECIPE / f"score-recipe-s{s}-600s.json", "recipe") for s in (0, 1)]
    keys = sorted(recipe[0])
    has_categorical = np.array([bool(tasks[k].categorical.any()) for k in keys])
    print(f"{len(keys)} tasks, {has_categorical.sum()} with a categorical column; cells: mean difference from the "
          "recipe [95% bootstrap interval over tasks] won-lost")
    for name in ("dag5", "dag10"):
        runs = [per_task(HERE / f"score-{name}-s{s}-600s.json", name) for s in (0, 1)]
        difference = np.array([np.mean([runs[s][k] - recipe[s][k] for s in (0, 1)]) for k in keys])
        cells = [quality.margin_cell(difference[mask]) for mask in (has_categorical, ~has_categorical)]
        print(f"{name}: with categorical columns {cells[0]} | without {cells[1]}")


if __name__ == "__main__":
    main()
