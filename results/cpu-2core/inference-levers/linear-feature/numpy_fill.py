"""classifier._Linear against the sklearn pipeline it replaced (SimpleImputer with indicators, StandardScaler,
LogisticRegression C=1): decision values on the test rows of splits 0 and 1 of all 104 tasks, and the time of each.
Run from the repository root: python results/cpu-2core/inference-levers/linear-feature/numpy_fill.py"""
import sys
import time
import warnings

import numpy as np
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, ".")
import classifier  # noqa: E402
import real_data  # noqa: E402

warnings.simplefilter("ignore")
tasks = real_data.read_cache("data/real_suite.npz") + real_data.read_cache("data/real_heldout.npz")
worst, seconds = 0.0, {"pipeline": 0.0, "numpy": 0.0}
for task in tasks:
    for split in range(2):
        X_train, X_test, y_train, _ = task.split(split)
        X_train, X_test = classifier._as_features(X_train, "X"), classifier._as_features(X_test, "X")
        y_train = np.unique(y_train, return_inverse=True)[1]
        start = time.perf_counter()
        old = make_pipeline(SimpleImputer(add_indicator=True), StandardScaler(),
                            LogisticRegression(C=1.0, max_iter=2000)).fit(X_train, y_train).decision_function(X_test)
        middle = time.perf_counter()
        new = classifier._Linear().fit(X_train, y_train).decision_function(X_test)
        seconds["pipeline"] += middle - start
        seconds["numpy"] += time.perf_counter() - middle
        worst = max(worst, float(np.abs(old - new).max()))
fits = 2 * len(tasks)
print(f"{fits} fits: largest difference in decision values {worst:.1e}; pipeline {1000 * seconds['pipeline'] / fits:.1f} "
      f"ms a fit, numpy fill {1000 * seconds['numpy'] / fits:.1f} ms")
