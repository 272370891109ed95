"""Evaluation of any object with fit(X, y) / predict_proba(X): the sklearn toy suite (a smoke check) and the
real-data suite (real_data.py) with its cached baselines and ranks. No import side effects."""
import contextlib
import functools
import hashlib
import json
import os
import time

import numpy as np

from safe_io import write_json_atomic

EVAL_TASKS = ("breast_cancer", "wine_0_vs_1", "iris_versicolor_vs_virginica", "digits_3_vs_8")
BASELINE_SETTINGS = {
    "random_forest": "RandomForestClassifier(n_estimators=200), NaN handled natively",
    "lightgbm": "LGBMClassifier(n_estimators=300, learning_rate=0.05, num_leaves=15, min_child_samples=5, "
                "subsample=0.8, subsample_freq=1, colsample_bytree=0.8, reg_lambda=1.0), NaN native",
    "hist_gradient_boosting": "HistGradientBoostingClassifier() at sklearn's defaults, NaN native",
    "logistic_regression": "mean imputation + missing indicators, StandardScaler, LogisticRegression(C=1.0)",
    "knn": "mean imputation + missing indicators, StandardScaler, KNeighborsClassifier(15, distance-weighted)",
}
BASELINES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "real_baselines.json")


def eval_splits(max_train_rows: int = 200, num_splits: int = 5):
    """[(task, X_train, X_test, y_train, y_test)]: num_splits stratified splits of each of EVAL_TASKS."""
    from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
    from sklearn.model_selection import train_test_split

    def binary(X, y, a, b):
        keep = (y == a) | (y == b)
        return X[keep], (y[keep] == b).astype(np.int64)

    tasks = [load_breast_cancer(return_X_y=True), binary(*load_wine(return_X_y=True), 0, 1),
             binary(*load_iris(return_X_y=True), 1, 2), binary(*load_digits(return_X_y=True), 3, 8)]
    return [(name, *train_test_split(X.astype(np.float32), y, train_size=min(max_train_rows, len(y) // 2),
                                     stratify=y, random_state=seed))
            for name, (X, y) in zip(EVAL_TASKS, tasks) for seed in range(num_splits)]


def evaluate(classifier, splits=None) -> dict:
    """Mean ROC AUC / accuracy / balanced accuracy over every (task, split); per-task ROC AUC too."""
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, roc_auc_score
    rows, per_task = [], {}
    for name, X_tr, X_te, y_tr, y_te in eval_splits() if splits is None else splits:
        classifier.fit(X_tr, y_tr)
        prob = classifier.predict_proba(X_te)
        pred = prob.argmax(axis=1)
        rows.append((roc_auc_score(y_te, prob[:, 1]), accuracy_score(y_te, pred), balanced_accuracy_score(y_te, pred)))
        per_task.setdefault(name, []).append(rows[-1][0])
    roc_auc, acc, balanced_acc = (float(np.mean(column)) for column in zip(*rows))
    return {"roc_auc": roc_auc, "acc": acc, "balanced_acc": balanced_acc,
            "per_task_roc_auc": {n: float(np.mean(v)) for n, v in per_task.items()}}


def RandomForestReference(seed: int = 0):
    """The toy suite's bar to reach: the random_forest baseline, fixed seed."""
    return make_baseline("random_forest", seed)


def format_scores(name: str, scores: dict) -> str:
    """One log line: toy suite (ROC AUC, acc, balanced acc, first task) or real suite (ROC AUC, mean rank)."""
    if "acc" not in scores:
        rank = "" if scores.get("rank") is None else \
            f" | mean rank {scores['rank']:.2f} of {len(scores.get('baselines_roc_auc', {})) + 1}"
        return f"{name:>14s} | real-suite roc_auc {scores['roc_auc']:.4f}{rank}"
    first = "".join(f" | {task} roc_auc {value:.4f}" for task, value in
                    list(scores.get("per_task_roc_auc", {}).items())[:1])
    return (f"{name:>14s} | roc_auc {scores['roc_auc']:.4f} | acc {scores['acc']:.4f} | "
            f"balanced_acc {scores['balanced_acc']:.4f}{first}")


def make_baseline(name: str, seed: int = 0):
    """A fresh estimator for a name of BASELINE_SETTINGS (its settings are stated there)."""
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    if name == "lightgbm":
        from lightgbm import LGBMClassifier
        return LGBMClassifier(n_estimators=300, learning_rate=0.05, num_leaves=15, min_child_samples=5,
                              subsample=0.8, subsample_freq=1, colsample_bytree=0.8, reg_lambda=1.0,
                              random_state=seed, n_jobs=-1, verbose=-1)
    if name == "random_forest":
        return RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=-1)
    if name == "hist_gradient_boosting":
        return HistGradientBoostingClassifier(random_state=seed)
    if name in ("logistic_regression", "knn"):
        model = LogisticRegression(C=1.0, max_iter=2000) if name == "logistic_regression" else \
            KNeighborsClassifier(n_neighbors=15, weights="distance")
        return make_pipeline(SimpleImputer(add_indicator=True), StandardScaler(), model)
    raise ValueError(f"unknown baseline {name!r}; known: {sorted(BASELINE_SETTINGS)}")


def evaluate_suite(make_classifier, tasks, splits_per_task=None) -> dict:
    """summarize() of make_classifier()'s ROC AUC on each task's first splits_per_task splits (None: all)."""
    from sklearn.metrics import roc_auc_score
    per_split, seconds = {}, 0.0
    for task in tasks:
        for index in range(len(task.splits))[:splits_per_task]:
            X_tr, X_te, y_tr, y_te = task.split(index)
            classifier = make_classifier()
            start = time.perf_counter()
            classifier.fit(X_tr, y_tr)
            probabilities = np.asarray(classifier.predict_proba(X_te))
            seconds += time.perf_counter() - start
            per_split[f"{task.name}#{index}"] = float(roc_auc_score(y_te, probabilities[:, 1]))
    return summarize(per_split, seconds)


def summarize(per_split: dict, seconds: float = 0.0) -> dict:
    """{"roc_auc": mean of task means, "per_task", "per_split", "seconds", "splits"} from {"task#i": auc}."""
    per_task = {}
    for key, auc in per_split.items():
        per_task.setdefault(key.rsplit("#", 1)[0], []).append(auc)
    per_task = {name: float(np.mean(values)) for name, values in per_task.items()}
    return {"roc_auc": float(np.mean(list(per_task.values()))), "per_task": per_task, "per_split": per_split,
            "seconds": seconds, "splits": len(per_split)}


def baseline_scores(tasks, path: str = BASELINES_PATH, splits_per_task=None) -> dict:
    """{baseline: evaluate_suite result}, cached in `path` under a hash of the tasks, settings and versions."""
    import sklearn
    from importlib.metadata import PackageNotFoundError, version
    lightgbm = None   # when missing, the lightgbm baseline fails when it runs, with its own message
    with contextlib.suppress(PackageNotFoundError):
        lightgbm = version("lightgbm")
    digest = hashlib.sha256()
    for t in tasks:
        for part in (t.name.encode(), np.ascontiguousarray(t.X).tobytes(), np.ascontiguousarray(t.splits[0][0])):
            digest.update(part)
    digest.update(json.dumps([BASELINE_SETTINGS, sklearn.__version__, lightgbm]).encode())
    key, cached = digest.hexdigest()[:16], {}
    with contextlib.suppress(OSError, ValueError, KeyError), open(path) as f:   # a missing or stale cache: {}
        stored = json.load(f)
        cached = stored["results"] if stored.get("fingerprint") == key else {}
    suffix = "" if splits_per_task is None else f"@{splits_per_task}"
    missing = [n for n in BASELINE_SETTINGS if n + suffix not in cached]
    for name in missing:
        cached[name + suffix] = evaluate_suite(lambda: make_baseline(name), tasks, splits_per_task)
    if missing:
        write_json_atomic(path, {"fingerprint": key, "settings": BASELINE_SETTINGS, "results": cached},
                          "baseline scores")
    return {n: cached[n + suffix] for n in BASELINE_SETTINGS}


def compare(results: dict, ours: str) -> dict:
    """Mean ROC AUC, mean rank (1 = best on a task, ties share the average) and wins/ties/losses vs `ours` of
    {method: evaluate_suite result}, all on the splits common to every method."""
    from scipy.stats import rankdata
    common = set.intersection(*(set(r["per_split"]) for r in results.values()))
    keys = [k for k in results[ours]["per_split"] if k in common]
    cut = {m: summarize({k: r["per_split"][k] for k in keys}, r.get("seconds", 0.0)) for m, r in results.items()}
    scores = np.array([[r["per_task"][t] for r in cut.values()] for t in cut[ours]["per_task"]])
    ranks = np.vstack([rankdata(-row) for row in scores])                    # (tasks, methods)
    summary = {"methods": {}, "ours": ours, "splits": len(keys)}
    for i, (method, r) in enumerate(cut.items()):
        seconds = results[method]["seconds"]
        entry = {"roc_auc": r["roc_auc"], "mean_rank": float(ranks[:, i].mean()), "seconds": seconds,
                 "seconds_per_split": seconds / max(1, results[method]["splits"])}
        if method != ours:
            diff = np.array([cut[ours]["per_task"][t] - r["per_task"][t] for t in r["per_task"]])
            entry.update(wins=int((diff > 0).sum()), ties=int((diff == 0).sum()), losses=int((diff < 0).sum()))
        summary["methods"][method] = entry
    summary["per_task"] = {m: r["per_task"] for m, r in cut.items()}
    return summary


def suite_eval(classifier, tasks, baselines, splits_per_task: int = 1) -> dict:
    """{"roc_auc", "per_task", "seconds", "rank"} and the baselines' same-split "baselines_roc_auc" and
    "baselines_rank" (mean ranks among us and them, 1 = best)."""
    ours = evaluate_suite(lambda: classifier, tasks, splits_per_task)
    methods = compare({"ours": ours, **baselines}, "ours")["methods"]
    return {"roc_auc": ours["roc_auc"], "per_task": ours["per_task"], "seconds": ours["seconds"],
            "rank": methods["ours"]["mean_rank"], "baselines_roc_auc": {n: methods[n]["roc_auc"] for n in baselines},
            "baselines_rank": {n: methods[n]["mean_rank"] for n in baselines}}


def make_suite_eval(tasks=None, splits_per_task: int = 1, baselines_path: str = BASELINES_PATH):
    """classifier -> suite_eval scores, for train.py --eval-every; suite and baselines (.baselines) load once."""
    if tasks is None:
        import real_data
        tasks = real_data.load_suite()
    baselines = baseline_scores(tasks, baselines_path, splits_per_task)
    run = functools.partial(suite_eval, tasks=tasks, baselines=baselines, splits_per_task=splits_per_task)
    run.baselines = baselines
    return run


def first_time_passing(eval_history, baselines) -> dict:
    """{baseline: {"step", "train_seconds", "bar"} of the first entry of eval_history reaching it, or None}; the
    bar is the entry's same-split "baselines_roc_auc" when present, else the baseline's "roc_auc"."""
    def first(name, roc_auc):
        for entry in eval_history or []:
            bar = entry["scores"].get("baselines_roc_auc", {}).get(name, roc_auc)
            if entry["scores"]["roc_auc"] >= bar:
                return {"step": entry["step"], "train_seconds": entry["train_seconds"], "bar": bar}
    return {name: first(name, result["roc_auc"]) for name, result in baselines.items()}
