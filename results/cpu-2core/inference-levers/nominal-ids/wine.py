"""scikit-learn's wine (the one bundled table whose id columns the nominal rule changes), split as sklearn-tables
splits it, with the id rule as committed and with the nominal rule.
    python results/cpu-2core/inference-levers/nominal-ids/wine.py CKPT [CKPT ...]"""
import os
import sys, numpy as np, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
import classifier as C, evaluation
from sklearn import datasets
from sklearn.model_selection import train_test_split
torch.set_num_threads(1)
orig = C._id_groups
def merged(column, y, k, ratio=0.75):
    g = orig(column, y, k)
    if g is None: return None
    obs = ~np.isnan(column); _, grp = np.unique(column[obs], return_inverse=True)
    return g if C._shared_labels(grp // 2, y[obs], k)[2] < ratio * C._shared_labels(grp, y[obs], k)[2] else None
X, y = datasets.load_wine(return_X_y=True)
for ck in sys.argv[1:]:
    model = C.model_from_checkpoint(ck)
    for rule in (orig, merged):
        C._id_groups = rule; aucs = []
        for split in range(5):
            X_tr, X_te, y_tr, y_te = train_test_split(X, y, train_size=min(500, len(y) // 2), stratify=y, random_state=split)
            clf = C.NanoTabPFNClassifier(model, device="cpu").fit(X_tr, y_tr)
            aucs.append(evaluation.split_scores(y_te, np.asarray(clf.predict_proba(X_te)), np.unique(y_tr), 3)[0])
        print(ck.split("/")[-1], rule.__name__, f"{np.mean(aucs):.4f}", [round(a, 4) for a in aucs], flush=True)
