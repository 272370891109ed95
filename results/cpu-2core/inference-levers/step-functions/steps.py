"""Synthetic tables whose class is a step function of the features: 5 uniform features, 200 training and 300 test
rows, 5% of labels flipped, 8 tables per rule. ROC AUC of each checkpoint given against CatBoost at its defaults.

    python results/cpu-2core/inference-levers/step-functions/steps.py CKPT...
"""
import sys
import warnings

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, __file__.rsplit("/results/", 1)[0])
from classifier import NanoTabPFNClassifier   # noqa: E402

RULES = {"one threshold": lambda x: x[:, 0] > 0.37,
         "three intervals": lambda x: ((x[:, 0] > 0.2) & (x[:, 0] < 0.45)) | (x[:, 0] > 0.8),
         "eight intervals": lambda x: np.floor(x[:, 0] * 8) % 2 == 1,
         "two-feature box": lambda x: (x[:, 0] > 0.5) & (x[:, 1] < 0.3)}


def main(paths, tables=8):
    from catboost import CatBoostClassifier
    warnings.filterwarnings("ignore")
    models = {path: NanoTabPFNClassifier.from_checkpoint(path) for path in paths}
    rng = np.random.default_rng(0)
    for rule_name, rule in RULES.items():
        scores = {name: [] for name in ["catboost", *paths]}
        for _ in range(tables):
            x = rng.uniform(size=(500, 5))
            y = np.where(rng.uniform(size=500) < 0.05, 1 - rule(x), rule(x)).astype(int)
            train, test = slice(0, 200), slice(200, 500)
            cb = CatBoostClassifier(verbose=0, thread_count=2, random_seed=0, allow_writing_files=False)
            scores["catboost"].append(roc_auc_score(y[test], cb.fit(x[train], y[train]).predict_proba(x[test])[:, 1]))
            for path, clf in models.items():
                probability = clf.fit(x[train], y[train]).predict_proba(x[test])[:, 1]
                scores[path].append(roc_auc_score(y[test], probability))
        print(f"{rule_name}: " + " | ".join(f"{name} {np.mean(s):.3f}" for name, s in scores.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
