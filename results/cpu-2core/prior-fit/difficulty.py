"""How hard are the prior's tables next to the real ones? Per table ROC AUC of the recipe's model (raw forward, inference
weights) and of logistic regression (the suite's baseline settings) on fresh prior tables with the recipe's batch
transforms, against the same two on the 104 real tasks (the model: the recipe's eight 10-minute score records; logistic
regression: the baseline cache). From the repository root:
    python prior_dump.py --device cpu --no-progress --preset real --rows 512 --num-datasets 512 --seed 999 --out F.h5
    python results/cpu-2core/prior-fit/difficulty.py F.h5 CKPT"""
import glob, json, os, sys
sys.path.insert(0, os.getcwd())
import numpy as np, torch
torch.set_num_threads(2)
from sklearn.metrics import roc_auc_score
from classifier import model_from_checkpoint
import evaluation  # noqa: E402
from evaluation import make_baseline
from loaders import make_loader
from prior_transforms import apply_prior_transforms

TRANSFORMS = {"categorical_columns": 0.2, "missing_cells": 0.1}   # the recipe's
BINS = (0.0, 0.6, 0.7, 0.8, 0.9, 1.01)
H100 = "results/nvidia-h100"


def auc(y, proba):
    """Binary: class 1's column; more classes: one-vs-rest macro over the classes present (the suite's score)."""
    present = np.unique(y)
    if len(present) < 2:
        return None
    if proba.shape[1] == 2:
        return roc_auc_score(y, proba[:, 1])
    proba = proba[:, present] / proba[:, present].sum(1, keepdims=True)
    return roc_auc_score(np.searchsorted(present, y), proba, multi_class="ovr") if len(present) > 2 else \
        roc_auc_score(y == present[1], proba[:, 1])


def prior_aucs(dump, ckpt):
    model, out = model_from_checkpoint(ckpt).eval(), {"model": [], "logistic_regression": []}
    with torch.no_grad(), make_loader(dump, 16, "cpu") as loader:
        for step, batch in zip(range(32), loader):
            batch = apply_prior_transforms(batch, TRANSFORMS, 12345, step)
            split = batch.split
            logits = model((batch.x, batch.y[:, :split]), train_test_split_index=split)   # (B, R-S, O)
            for x, y, table_logits in zip(batch.x.numpy(), batch.y.long().numpy(), logits):
                classes = int(y.max()) + 1
                columns = x.shape[1] - int((np.abs(x).sum(0) == 0)[::-1].cumprod().sum())  # zero padding dropped
                proba = torch.softmax(table_logits[:, :classes].float(), -1).numpy()
                out["model"].append(auc(y[split:], proba))
                baseline = make_baseline("logistic_regression", 0).fit(x[:split, :columns], y[:split])
                lr_proba = np.zeros((len(y) - split, classes))
                lr_proba[:, baseline.classes_] = baseline.predict_proba(x[split:, :columns])
                out["logistic_regression"].append(auc(y[split:], lr_proba))
    return {name: np.array([v for v in values if v is not None]) for name, values in out.items()}


def recipe_and_baselines():
    """(the recipe's eight 10-minute score records, [(task, its mean ROC AUC over them, {baseline: ROC AUC})])."""
    records = [json.load(open(p)) for p in sorted(glob.glob(f"{H100}/curve-matmul/score-medium-s[01]-600s.json"))
               + sorted(glob.glob(f"{H100}/*/score-recipe-s[2-7]-600s.json"))]
    rows = []
    for scope in ("suite", "heldout"):
        baselines = json.load(open(f"data/baselines-{scope}.json"))["results"]
        for task in baselines["catboost"]["per_task"]:
            ours = np.mean([evaluation.from_stored(next(iter(r["results"].values()))[scope])["per_task"][task]
                            for r in records])
            rows.append((task, ours, {name: b["per_task"][task] for name, b in baselines.items()}))
    return records, rows


def real_aucs():
    records, rows = recipe_and_baselines()
    return {"model": np.array([ours for _, ours, _ in rows]),
            "logistic_regression": np.array([b["logistic_regression"] for _, _, b in rows])}, len(records)


def row(label, aucs):
    counts = np.histogram(aucs, BINS)[0] / len(aucs)
    return f"| {label} | {len(aucs)} | {np.median(aucs):.3f} | " + " | ".join(f"{c:.0%}" for c in counts) + " |"


if __name__ == "__main__":
    prior = prior_aucs(sys.argv[1], sys.argv[2])
    real, seeds = real_aucs()
    print(f"prior: {sys.argv[1]} (first 512 tables, recipe transforms); model {sys.argv[2]}; real: 104 tasks, "
          f"model = mean of {seeds} score records")
    print("| tables, scorer | tables | median ROC AUC | " + " | ".join(
        f"{lo:.1f}-{min(hi, 1.0):.1f}" for lo, hi in zip(BINS, BINS[1:])) + " |\n|" + "---|" * (len(BINS) + 2))
    for name in ("model", "logistic_regression"):
        print(row(f"prior, {name}", prior[name]))
        print(row(f"real, {name}", real[name]))
