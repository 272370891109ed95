"""The key rule on a table nobody here chose where it fires: scikit-learn's digits (64 integer pixel columns, 10
classes), the split protocol of results/cpu-2core/sklearn-tables, the classifier with its composite key off and on.
    python results/cpu-2core/inference-levers/composite-keys/digits.py CKPT [CKPT ...]"""
import os
import sys

import numpy as np
import torch
from sklearn import datasets
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
import classifier  # noqa: E402
import evaluation  # noqa: E402

torch.set_num_threads(2)
X, y = datasets.load_digits(return_X_y=True)
find_key = classifier._find_key
for path in sys.argv[1:]:
    model = classifier.model_from_checkpoint(path)
    for setting in ("off", "on"):
        classifier._find_key = find_key if setting == "on" else (lambda *args: None)
        aucs, keys = [], []
        for split in range(5):
            X_tr, X_te, y_tr, y_te = train_test_split(X, y, train_size=500, stratify=y, random_state=split)
            clf = classifier.NanoTabPFNClassifier(model, device="cpu").fit(X_tr, y_tr)
            auc, _ = evaluation.split_scores(y_te, np.asarray(clf.predict_proba(X_te)), np.unique(y_tr), 10)
            aucs.append(auc)
            keys.append(clf.key_columns_)
        print(f"{os.path.basename(path)} key {setting}: digits ROC AUC {np.mean(aucs):.4f} "
              f"(splits {' '.join(f'{a:.4f}' for a in aucs)}); keys {keys}", flush=True)
