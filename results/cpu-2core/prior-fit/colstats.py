"""How the suite's feature columns and the prior's differ (scale-free and integer statistics). The held-out tasks are
not read. From the repository root:
    python results/cpu-2core/prior-fit/colstats.py FRESH.h5 ORDINAL_SHARE [SKEWED_SHARE]
FRESH.h5: the fresh dump of fresh_loss.py; its first 8 batches of 16 with the recipe's transforms and, when
ORDINAL_SHARE or SKEWED_SHARE > 0, --ordinal-columns ORDINAL_SHARE --skewed-columns SKEWED_SHARE."""
import os, sys
sys.path.insert(0, os.getcwd())
import numpy as np
from scipy.stats import skew
import real_data
from loaders import make_loader
from prior_transforms import apply_prior_transforms


def stats(columns):
    """n, share integer-valued, median distinct/rows, share with <= 10 levels, median |skew|, share |skew| > 2."""
    rows = []
    for c in columns:
        c = c[np.isfinite(c)]
        if len(c) >= 10 and np.ptp(c) > 0:
            distinct = len(np.unique(c))
            rows.append((np.mean(np.round(c) == c), distinct / len(c), distinct <= 10, abs(skew(c))))
    a = np.array(rows)
    return (f"n={len(a)} | integer-valued {a[:, 0].mean():.2f} | distinct/rows median {np.median(a[:, 1]):.3f} | "
            f"<=10 levels {a[:, 2].mean():.2f} | |skew| median {np.median(a[:, 3]):.2f} | |skew|>2 {np.mean(a[:, 3] > 2):.2f}")


fresh, ordinal, skewed = sys.argv[1], float(sys.argv[2]), float((sys.argv[3:] or [0])[0])
print("suite:", stats([t.X[:, j] for t in real_data.load_suite() for j in range(t.X.shape[1])]))
shares = {"categorical_columns": 0.2, "missing_cells": 0.1, "ordinal_columns": ordinal, "skewed_columns": skewed}
columns = []
with make_loader(fresh, 16, "cpu") as loader:
    for step, batch in zip(range(8), loader):
        batch = apply_prior_transforms(batch, shares, 1, step)
        x = batch.x.numpy()
        columns += [x[i, :, j] for i in range(x.shape[0]) for j in range(x.shape[2]) if np.ptp(x[i, :, j]) > 0]
print(f"prior, the recipe's transforms, --ordinal-columns {ordinal:g} --skewed-columns {skewed:g}:", stats(columns))
