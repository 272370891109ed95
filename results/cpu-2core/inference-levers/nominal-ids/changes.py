"""Which training splits of the suite and the held-out tasks change their id columns under a permutation test
(p < 0.05, 200 label shuffles) or the nominal rule (merging neighbouring values keeps < 0.75 of the label gain).
    python results/cpu-2core/inference-levers/nominal-ids/changes.py > changes.log   (from the repository root)"""
import os
import sys, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
import real_data, classifier as C
suite = real_data.read_cache("data/real_suite.npz"); held = real_data.read_cache("data/real_heldout.npz")

def perm_ok(col, y, k, rng, n=200, alpha=0.05):
    obs = ~np.isnan(col); _, grp = np.unique(col[obs], return_inverse=True)
    gain = C._shared_labels(grp, y[obs], k)[2]
    null = np.array([C._shared_labels(grp, rng.permutation(y[obs]), k)[2] for _ in range(n)])
    return (np.sum(null >= gain) + 1) / (n + 1) < alpha

def merge_ok(col, y, k, ratio=0.75):
    obs = ~np.isnan(col); _, grp = np.unique(col[obs], return_inverse=True)
    gain = C._shared_labels(grp, y[obs], k)[2]
    coarse = C._shared_labels(grp // 2, y[obs], k)[2]
    return coarse < ratio * gain

for scope, tasks in (("suite", suite), ("heldout", held)):
    for t in tasks:
        for i in range(len(t.splits)):
            Xtr, Xte, ytr, yte = t.split(i)
            classes, y = np.unique(ytr, return_inverse=True); k = len(classes)
            ids = [j for j in range(Xtr.shape[1]) if C._id_groups(Xtr[:, j], y, k) is not None]
            if not ids: continue
            rng = np.random.default_rng(0)
            p = [j for j in ids if perm_ok(Xtr[:, j], y, k, rng)]
            m = [j for j in ids if merge_ok(Xtr[:, j], y, k)]
            if p != ids or m != ids:
                print(f"{scope} {t.name}#{i} n={len(y)} ids {ids} perm {p} merge {m}", flush=True)
