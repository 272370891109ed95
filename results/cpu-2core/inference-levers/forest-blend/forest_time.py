"""Where the forest columns' time goes on this host: RandomForestClassifier(100, oob_score=True) fitted on 500 x 20 rows
and predicting 1000, as classifier._fit_forest does, for several n_jobs, with torch loaded (as in the classifier).
Medians of 7 after 2 untimed. From the repository root: python results/cpu-2core/inference-levers/forest-blend/forest_time.py"""
import os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np
import torch
from sklearn.ensemble import RandomForestClassifier

rng = np.random.default_rng(0)
X = rng.normal(size=(1500, 20))
y = (X[:, 0] + rng.normal(size=1500) > 0).astype(int)
print(f"cpus {os.cpu_count()} | torch threads {torch.get_num_threads()}", flush=True)
for n_jobs in (1, 2, 4, 8, -1):
    fit, predict = [], []
    for i in range(9):
        start = time.perf_counter()
        forest = RandomForestClassifier(100, oob_score=True, n_jobs=n_jobs, random_state=0).fit(X[:500], y[:500])
        middle = time.perf_counter()
        forest.predict_proba(X[500:])
        fit.append(middle - start)
        predict.append(time.perf_counter() - middle)
    print(f"n_jobs {n_jobs:2} | fit with out-of-bag {1000 * np.median(fit[2:]):.1f} ms | predict 1000 rows "
          f"{1000 * np.median(predict[2:]):.1f} ms", flush=True)
