"""ROC AUC of each checkpoint on the test tables of /tmp/lk (plain and grouped), one member, no id columns."""
import sys
import warnings

import h5py
import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, ".")
from classifier import NanoTabPFNClassifier   # noqa: E402

TESTS = ("/tmp/lk/test-g0.h5", "/tmp/lk/test-g1.h5")


def tables(path):
    """(X_train, y_train, X_test, y_test) of each table with both classes on both sides of its split."""
    with h5py.File(path) as f:
        X, Y, NF, S = f["X"][:], f["y"][:].astype(int), f["num_features"][:], f["single_eval_pos"][:]
    for x, y, nf, s in zip(X, Y, NF, S):
        if len(np.unique(y[:s])) == 2 and len(np.unique(y[s:])) == 2:
            yield x[:s, :nf], y[:s], x[s:, :nf], y[s:]


def mean_auc(fit_predict, path):
    return np.mean([roc_auc_score(yt, fit_predict(xa, ya, xt)) for xa, ya, xt, yt in tables(path)])


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    for ckpt in sys.argv[1:]:
        clf = NanoTabPFNClassifier.from_checkpoint(ckpt, n_estimators=1, id_encoding=False)
        scores = [mean_auc(lambda xa, ya, xt: clf.fit(xa, ya).predict_proba(xt)[:, 1], path) for path in TESTS]
        print(ckpt, "|", " | ".join(f"{path.split('/')[-1]} {score:.4f}" for path, score in zip(TESTS, scores)))
