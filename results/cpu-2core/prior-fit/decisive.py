"""How often one column nearly decides the label: per table, the best ROC AUC of a single column against the label
(binary: class 1; more classes: the largest class against the rest), folded to >= 0.5, on all rows. The 104 real
tasks against the first 512 tables of each dump (the raw dump, no batch transforms); then, by the real tasks' best
column, the recipe's eight 10-minute score records against the baselines. From the repository root:
    python results/cpu-2core/prior-fit/decisive.py F.h5 ..."""
import os, sys
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h5py, numpy as np
from sklearn.metrics import roc_auc_score
import real_data
from difficulty import recipe_and_baselines

BINS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1.01)


def best_single_column(X, y):
    present = np.unique(y)
    target = y == (present[1] if len(present) == 2 else np.bincount(y).argmax())
    best = 0.5
    for column in X.T:
        kept = ~np.isnan(column)
        if kept.sum() >= 10 and len(np.unique(column[kept])) > 1 and len(np.unique(target[kept])) > 1:
            auc = roc_auc_score(target[kept], column[kept])
            best = max(best, auc, 1 - auc)
    return best


def row(label, values):
    shares = np.histogram(values, BINS)[0] / len(values)
    return f"| {label} | {len(values)} | {np.median(values):.3f} | " + " | ".join(f"{s:.0%}" for s in shares) + " |"


def gap_by_best_column(best):
    """{task: best column} -> rows of the recipe's mean ROC AUC against CatBoost, logistic regression and the best
    baseline of each task, by the task's best single column."""
    records, tasks = recipe_and_baselines()
    rows = [(best[task], ours, b["catboost"], b["logistic_regression"], max(b.values())) for task, ours, b in tasks]
    rows = np.array(rows)
    print(f"\nThe recipe ({len(records)} score records) by the real task's best single column:\n"
          "| best column | tasks | recipe | - CatBoost | - logistic regression | - the task's best baseline |\n"
          "|---|---|---|---|---|---|")
    for low, high in ((0.5, 0.7), (0.7, 0.9), (0.9, 1.01)):
        part = rows[(rows[:, 0] >= low) & (rows[:, 0] < high)]
        print(f"| {low}-{min(high, 1)} | {len(part)} | {part[:, 1].mean():.4f} | "
              + " | ".join(f"{np.mean(part[:, 1] - part[:, k]):+.4f}" for k in (2, 3, 4)) + " |")


if __name__ == "__main__":
    print("| tables | count | median | " + " | ".join(f"{lo}-{min(hi, 1)}" for lo, hi in zip(BINS, BINS[1:]))
          + " |\n|" + "---|" * (len(BINS) + 2))
    tasks = real_data.read_cache("data/real_suite.npz") + real_data.read_cache("data/real_heldout.npz")
    best = {t.name: best_single_column(t.X, t.y) for t in tasks}
    print(row("real tasks", list(best.values())))
    for path in sys.argv[1:]:
        with h5py.File(path, "r") as f:
            X, y, columns = f["X"][:512], f["y"][:512].astype(int), f["num_features"][:512]
            mix = f"noise scale {f.attrs.get('noise_scale', 1.0):g}, proxy share {f.attrs.get('proxy_share', 0.0):g}"
        print(row(f"prior, {mix}", [best_single_column(x[:, :c], t) for x, t, c in zip(X, y, columns)]))
    gap_by_best_column(best)
