"""The nominal rule and a permutation test for id columns, and which training splits of the suite and the held-out
tasks they change (score.py and wine.py import the rule from here).
    python results/cpu-2core/inference-levers/nominal-ids/changes.py > changes.log   (from the repository root)"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
import classifier  # noqa: E402

NOMINAL_RATIO = 0.75   # set before any score
ORIGINAL_ID_GROUPS = classifier._id_groups   # the rule as committed (score.py and wine.py patch it)


def gain_of(column, y, k, merge_neighbours=False):
    """The id rule's label gain of a column's value groups; merge_neighbours: each pair of adjacent values as one."""
    observed = ~np.isnan(column)
    _, group = np.unique(column[observed], return_inverse=True)
    return classifier._shared_labels(group // 2 if merge_neighbours else group, y[observed], k)[2]


def is_nominal(column, y, k):
    """An id's numbering carries no order: merging neighbouring values must lose a quarter of the gain or more."""
    return gain_of(column, y, k, merge_neighbours=True) < NOMINAL_RATIO * gain_of(column, y, k)


def nominal_id_groups(column, y, k):
    """classifier._id_groups with the nominal rule added (the variant score.py and wine.py patch in)."""
    groups = ORIGINAL_ID_GROUPS(column, y, k)
    return groups if groups is not None and is_nominal(column, y, k) else None


def beats_shuffles(column, y, k, rng, shuffles=200, alpha=0.05):
    """The gain beats the label-shuffled gains at p < alpha."""
    observed = ~np.isnan(column)
    _, group = np.unique(column[observed], return_inverse=True)
    null = [classifier._shared_labels(group, rng.permutation(y[observed]), k)[2] for _ in range(shuffles)]
    return (np.sum(np.array(null) >= gain_of(column, y, k)) + 1) / (shuffles + 1) < alpha


if __name__ == "__main__":
    import real_data
    for scope, path in (("suite", "data/real_suite.npz"), ("heldout", "data/real_heldout.npz")):
        for task in real_data.read_cache(path):
            for i in range(len(task.splits)):
                X_tr, _, y_tr, _ = task.split(i)
                classes, y = np.unique(y_tr, return_inverse=True)
                k = len(classes)
                ids = [j for j in range(X_tr.shape[1]) if ORIGINAL_ID_GROUPS(X_tr[:, j], y, k) is not None]
                if not ids:
                    continue
                rng = np.random.default_rng(0)
                perm = [j for j in ids if beats_shuffles(X_tr[:, j], y, k, rng)]
                merge = [j for j in ids if is_nominal(X_tr[:, j], y, k)]
                if perm != ids or merge != ids:
                    print(f"{scope} {task.name}#{i} n={len(y)} ids {ids} perm {perm} merge {merge}", flush=True)
