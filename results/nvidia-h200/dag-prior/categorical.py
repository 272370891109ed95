"""Post hoc, after the rule rejected both DAG priors: does the DAG prior, whose categorical nodes make columns of
codes, do better on the tasks that have categorical columns? Per task: the DAG run's mean ROC AUC minus the recipe's
(recipe-30min phase a), seeds 0 and 1 averaged (quality.mean_per_task), split by whether the task has a categorical
column (real_data's flag). Run from the repository root with the suite caches in data/; writes nothing
(categorical.log)."""
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, ".")   # the repository root
import quality     # noqa: E402
import real_data   # noqa: E402

HERE = pathlib.Path("results/nvidia-h200/dag-prior")
RECIPE = pathlib.Path("results/nvidia-h200/recipe-30min")


def main():
    caches = ("data/real_suite.npz", "data/real_heldout.npz")
    tasks = {t.name: t for cache in caches for t in real_data.read_cache(cache)}
    read = lambda path: json.loads(path.read_text())
    recipe = quality.mean_per_task([read(RECIPE / f"score-recipe-s{s}-600s.json") for s in (0, 1)])
    keys = sorted(recipe)
    has_categorical = np.array([bool(tasks[k].categorical.any()) for k in keys])
    print(f"{len(keys)} tasks, {has_categorical.sum()} with a categorical column; cells: mean difference from the "
          "recipe [95% bootstrap interval over tasks] won-lost")
    for name in ("dag5", "dag10"):
        run = quality.mean_per_task([read(HERE / f"score-{name}-s{s}-600s.json") for s in (0, 1)])
        difference = np.array([run[k] - recipe[k] for k in keys])
        cells = [quality.margin_cell(difference[mask]) for mask in (has_categorical, ~has_categorical)]
        print(f"{name}: with categorical columns {cells[0]} | without {cells[1]}")


if __name__ == "__main__":
    main()
