"""Two checkpoints alone and their probabilities averaged, on both suites (all 5 splits), beside the cached
baselines: what two GPUs buy when each trains its own seed for the same minutes instead of one data-parallel run.
Run from the repository root: python results/cpu-2core/inference-levers/seed-ensemble/ens.py CKPT_A CKPT_B"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.getcwd())
import evaluation  # noqa: E402
import quality  # noqa: E402
from classifier import NanoTabPFNClassifier  # noqa: E402

torch.set_num_threads(2)
tasks, baselines = quality.load_cached()
models = [NanoTabPFNClassifier.from_checkpoint(path) for path in sys.argv[1:3]]
for which in ("suite", "heldout"):
    per_split, log_loss = {"a": {}, "b": {}, "a+b": {}}, {"a": {}, "b": {}, "a+b": {}}
    for task in evaluation.usable_tasks(tasks[which], 10):
        for index in range(len(task.splits)):
            X_tr, X_te, y_tr, y_te = task.split(index)
            probabilities = [np.asarray(m.fit(X_tr, y_tr).predict_proba(X_te)) for m in models]
            for name, p in (("a", probabilities[0]), ("b", probabilities[1]), ("a+b", np.mean(probabilities, 0))):
                key = f"{task.name}#{index}"
                per_split[name][key], log_loss[name][key] = evaluation.split_scores(
                    y_te, p, models[0].classes_, int(task.y.max()) + 1)
    results = {n: evaluation.summarize(per_split[n], 0.0, log_loss[n]) for n in per_split}
    cells = []
    for name, result in results.items():   # each ranked among itself and the 7 baselines, as quality.py does
        methods = evaluation.compare({name: result, **baselines[which]}, name)["methods"]
        cells.append(f"{name} {methods[name]['roc_auc']:.4f} / {methods[name]['mean_rank']:.2f}")
    cells.append(f"catboost {methods['catboost']['roc_auc']:.4f}")
    print(f"{which}: {' | '.join(cells)}", flush=True)
