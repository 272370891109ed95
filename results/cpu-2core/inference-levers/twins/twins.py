"""Does the recipe's model find a test row's twin among the training rows? HSAUR/respiratory (held out): four visits
per patient, the label (the centre) the patient's; a test row's twin is a training row equal on the patient's
columns 0-4 (id within centre, treatment, sex, age, baseline). ROC AUC on rows with and without a twin, the model
of each checkpoint given against CatBoost at its defaults, every split.

    python results/cpu-2core/inference-levers/twins/twins.py CKPT...
"""
import sys
import warnings

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, __file__.rsplit("/results/", 1)[0])
from classifier import NanoTabPFNClassifier   # noqa: E402
from real_data import load_suite              # noqa: E402

TASK, PATIENT_COLUMNS = "HSAUR/respiratory", slice(0, 5)


def auc(y, score, rows):
    return roc_auc_score(y[rows], score[rows])


def main(paths):
    from catboost import CatBoostClassifier
    warnings.filterwarnings("ignore")
    task = {t.name: t for t in load_suite(which="heldout")}[TASK]
    X, y = task.X, task.y
    models = {path: NanoTabPFNClassifier.from_checkpoint(path) for path in paths}
    rows = []
    for split, (train, test) in enumerate(task.splits):
        seen = {tuple(X[i, PATIENT_COLUMNS]) for i in train}
        twin = np.array([tuple(X[i, PATIENT_COLUMNS]) in seen for i in test])
        scores = {"catboost": CatBoostClassifier(verbose=0, thread_count=2, random_seed=0, allow_writing_files=False)
                  .fit(X[train], y[train]).predict_proba(X[test])[:, 1]}
        scores.update({path: clf.fit(X[train], y[train]).predict_proba(X[test])[:, 1] for path, clf in models.items()})
        for name, score in scores.items():
            row = (split, name, twin.mean(), auc(y[test], score, slice(None)), auc(y[test], score, twin),
                   auc(y[test], score, ~twin))
            rows.append(row)
            print("split {} {}: twins {:.2f} of the test rows | ROC AUC all {:.3f}, with a twin {:.3f}, "
                  "without {:.3f}".format(*row), flush=True)
    for name in ["catboost", *paths]:
        mine = np.array([r[3:] for r in rows if r[1] == name])
        print("mean {}: all {:.3f}, with a twin {:.3f}, without {:.3f}".format(name, *mine.mean(0)))


if __name__ == "__main__":
    main(sys.argv[1:])
