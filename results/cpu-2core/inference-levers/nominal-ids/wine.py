"""scikit-learn's wine (the one bundled table whose id columns the nominal rule changes), split as sklearn-tables
splits it, with the id rule as committed and with the nominal rule.
    python results/cpu-2core/inference-levers/nominal-ids/wine.py CKPT [CKPT ...]"""
import sys

import numpy as np
import torch
from sklearn import datasets
from sklearn.model_selection import train_test_split

from changes import ORIGINAL_ID_GROUPS, classifier, nominal_id_groups
import evaluation  # noqa: E402  (the repository root is on the path through changes)

torch.set_num_threads(1)
X, y = datasets.load_wine(return_X_y=True)
for path in sys.argv[1:]:
    model = classifier.model_from_checkpoint(path)
    for name, rule in (("_id_groups", ORIGINAL_ID_GROUPS), ("merged", nominal_id_groups)):
        classifier._id_groups = rule
        aucs = []
        for split in range(5):
            X_tr, X_te, y_tr, y_te = train_test_split(X, y, train_size=min(500, len(y) // 2), stratify=y,
                                                      random_state=split)
            clf = classifier.NanoTabPFNClassifier(model, device="cpu").fit(X_tr, y_tr)
            aucs.append(evaluation.split_scores(y_te, np.asarray(clf.predict_proba(X_te)), np.unique(y_tr), 3)[0])
        print(path.split("/")[-1], name, f"{np.mean(aucs):.4f}", [round(a, 4) for a in aucs], flush=True)
    classifier._id_groups = ORIGINAL_ID_GROUPS
