"""CPU inference of NanoTabPFNClassifier with the last-layer shortcut (the default) and without it, alternating
call by call in one process: 500-row train / 1000-row test table, 5 and 16 features, 2 warm-up + 12 timed rounds.

    python results/cpu-2core/inference/bench_last_layer.py CHECKPOINT
"""
import dataclasses
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from classifier import NanoTabPFNClassifier, model_from_checkpoint  # noqa: E402
from model import NanoTabPFNModel  # noqa: E402

shortcut = model_from_checkpoint(sys.argv[1])
full = NanoTabPFNModel(dataclasses.replace(shortcut.config, last_layer_target_only=False))
full.load_state_dict(shortcut.state_dict())
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; shortcut: {shortcut.config}")
rng = np.random.default_rng(0)
for features in (5, 16):
    X = rng.normal(size=(1500, features))
    y = (X[:, 0] + rng.normal(size=1500) > 0).astype(int)
    classifiers = {"shortcut": NanoTabPFNClassifier(shortcut, device="cpu"),
                   "full last layer": NanoTabPFNClassifier(full, device="cpu")}
    times, probabilities = {name: [] for name in classifiers}, {}
    for round_ in range(14):
        for name, clf in classifiers.items():
            start = time.perf_counter()
            probabilities[name] = clf.fit(X[:500], y[:500]).predict_proba(X[500:])
            if round_ >= 2:
                times[name].append(time.perf_counter() - start)
    gap = np.abs(probabilities["shortcut"] - probabilities["full last layer"]).max()
    for name, t in times.items():
        print(f"{features:2d} features | {name:15s} | fit+predict median {np.median(t):.3f} s "
              f"(range {min(t):.3f}-{max(t):.3f}) | max probability gap {gap:.1e}")
