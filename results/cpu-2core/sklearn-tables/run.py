"""scikit-learn's bundled classification tables (no choice of ours), 5 stratified splits of at most 500 training rows
each, the recipe's checkpoints beside CatBoost, LightGBM and a random forest at the project's settings.
    python results/cpu-2core/sklearn-tables/run.py CKPT [CKPT ...]"""
import os
import sys

import numpy as np
from sklearn import datasets
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
import evaluation  # noqa: E402
from classifier import NanoTabPFNClassifier  # noqa: E402

TABLES = {"breast_cancer": datasets.load_breast_cancer, "wine": datasets.load_wine, "iris": datasets.load_iris,
          "digits": datasets.load_digits}
scores = {}
for table, load in TABLES.items():
    X, y = load(return_X_y=True)
    for split in range(5):
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, train_size=min(500, len(y) // 2), stratify=y,
                                                  random_state=split)
        methods = {f"recipe-{i}": NanoTabPFNClassifier.from_checkpoint(c) for i, c in enumerate(sys.argv[1:])}
        methods.update({b: evaluation.make_baseline(b, seed=split) for b in ("catboost", "lightgbm", "random_forest")})
        for name, model in methods.items():
            probabilities = np.asarray(model.fit(X_tr, y_tr).predict_proba(X_te))
            auc, _ = evaluation.split_scores(y_te, probabilities, np.unique(y_tr), int(y.max()) + 1)
            scores.setdefault(name, {}).setdefault(table, []).append(auc)
print(f"| method | {' | '.join(f'{t} ({load(return_X_y=True)[0].shape[1]} features, {len(np.unique(load(return_X_y=True)[1]))} classes)' for t, load in TABLES.items())} | mean |")
print("|---" * (len(TABLES) + 2) + "|")
for name, per_table in scores.items():
    means = [float(np.mean(per_table[t])) for t in TABLES]
    print(f"| {name} | {' | '.join(f'{m:.4f}' for m in means)} | {np.mean(means):.4f} |")
