"""CPU inference of NanoTabPFNClassifier on a 500-row train / 1000-row test table: this repository's classifier
beside an older classifier.py, alternating call by call in one process (this VM's speed drifts over minutes).

    python results/cpu-2core/inference/bench_inference.py OLD_CLASSIFIER_PY CHECKPOINT ['{"autocast": "bf16"}']
fit + predict_proba at 5 and 16 features; 2 warm-up rounds, then 12 timed rounds; median and range. The optional
JSON adds this repository's classifier with those parameters as a third entry.
"""
import importlib.util
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from classifier import NanoTabPFNClassifier, model_from_checkpoint  # noqa: E402

spec = importlib.util.spec_from_file_location("classifier_old", sys.argv[1])
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
rng = np.random.default_rng(0)
for features in (5, 16):
    X = rng.normal(size=(1500, features))
    y = (X[:, 0] + rng.normal(size=1500) > 0).astype(int)
    classifiers = {"new": NanoTabPFNClassifier.from_checkpoint(sys.argv[2]),
                   "old": old.NanoTabPFNClassifier(old.model_from_checkpoint(sys.argv[2]), device="cpu")}
    if len(sys.argv) > 3:
        classifiers[f"new {sys.argv[3]}"] = NanoTabPFNClassifier.from_checkpoint(sys.argv[2], **json.loads(sys.argv[3]))
    times = {name: [] for name in classifiers}
    probabilities = {}
    for round_ in range(14):
        for name, clf in classifiers.items():
            start = time.perf_counter()
            probabilities[name] = clf.fit(X[:500], y[:500]).predict_proba(X[500:])
            if round_ >= 2:
                times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        gap = np.abs(probabilities[name] - probabilities["old"]).max()
        print(f"{name}: {features} features, {torch.get_num_threads()} threads: median {np.median(t):.3f} s "
              f"[{min(t):.3f}-{max(t):.3f}] (max |p - p_old| {gap:.1e})", flush=True)
