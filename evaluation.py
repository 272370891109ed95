"""Evaluation: the sklearn toy suite (a smoke check) and the real-data suite with its baselines.

Every function takes any object with fit(X, y) / predict_proba(X) (it never imports the model).
  toy suite:  eval_splits(), evaluate(classifier, splits) -> {"roc_auc", "acc", "balanced_acc", ...}
  real suite: evaluate_suite(make_classifier, tasks) -> per-(task, split) ROC AUC, per-task and mean;
              baseline_scores(tasks) (cached under data/), compare(...), write_comparison(...);
              suite_eval(classifier, tasks, baselines) for training-time evaluation; first_time_passing.

Importing this module has no side effects.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np

# ---------------------------------------------------------------------------------------------
# The toy suite: real datasets shipped with scikit-learn, with a Random Forest for reference.

EVAL_TASKS = ("breast_cancer", "wine_0_vs_1", "iris_versicolor_vs_virginica", "digits_3_vs_8")


def eval_splits(max_train_rows: int = 200, num_splits: int = 5):
    """Binary tasks from sklearn's bundled datasets, each cut into `num_splits` stratified splits
    with at most `max_train_rows` training rows. Returns [(task, X_train, X_test, y_train, y_test)]."""
    from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
    from sklearn.model_selection import train_test_split

    def binary(X, y, a, b):
        keep = (y == a) | (y == b)
        return X[keep], (y[keep] == b).astype(np.int64)

    tasks = {
        "breast_cancer": load_breast_cancer(return_X_y=True),
        "wine_0_vs_1": binary(*load_wine(return_X_y=True), 0, 1),
        "iris_versicolor_vs_virginica": binary(*load_iris(return_X_y=True), 1, 2),
        "digits_3_vs_8": binary(*load_digits(return_X_y=True), 3, 8),
    }
    splits = []
    for name in EVAL_TASKS:
        X, y = tasks[name]
        train_size = min(max_train_rows, len(y) // 2)
        for seed in range(num_splits):
            X_tr, X_te, y_tr, y_te = train_test_split(X.astype(np.float32), y, train_size=train_size,
                                                      stratify=y, random_state=seed)
            splits.append((name, X_tr, X_te, y_tr, y_te))
    return splits


def evaluate(classifier, splits=None) -> dict:
    """Mean ROC AUC / accuracy / balanced accuracy over every (task, split); per-task ROC AUC too."""
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, roc_auc_score
    splits = eval_splits() if splits is None else splits
    rows = []
    for name, X_tr, X_te, y_tr, y_te in splits:
        classifier.fit(X_tr, y_tr)
        prob = classifier.predict_proba(X_te)
        pred = prob.argmax(axis=1)
        rows.append((name, roc_auc_score(y_te, prob[:, 1]), accuracy_score(y_te, pred),
                     balanced_accuracy_score(y_te, pred)))
    scores = {"roc_auc": float(np.mean([r[1] for r in rows])), "acc": float(np.mean([r[2] for r in rows])),
              "balanced_acc": float(np.mean([r[3] for r in rows]))}
    names = list(dict.fromkeys(r[0] for r in rows))
    scores["per_task_roc_auc"] = {n: float(np.mean([r[1] for r in rows if r[0] == n])) for n in names}
    return scores


class RandomForestReference:
    """sklearn's RandomForestClassifier on the same splits, fixed seed: the bar to reach."""

    def __init__(self, seed: int = 0):
        from sklearn.ensemble import RandomForestClassifier
        self.model = RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=-1)

    def fit(self, X, y):
        self.model.fit(X, y)
        return self

    def predict_proba(self, X):
        return self.model.predict_proba(X)


def format_scores(name: str, scores: dict) -> str:
    """One log line: mean ROC AUC / acc / balanced acc and the first task's ROC AUC (toy suite), or mean ROC
    AUC and mean rank among the baselines (real suite)."""
    if "acc" not in scores:
        rank = f" | mean rank {scores['rank']:.2f} of {len(scores.get('baselines_roc_auc', {})) + 1}" \
            if scores.get("rank") is not None else ""
        return f"{name:>14s} | real-suite roc_auc {scores['roc_auc']:.4f}{rank}"
    first = "".join(f" | {task} roc_auc {value:.4f}" for task, value in
                    list(scores.get("per_task_roc_auc", {}).items())[:1])
    return (f"{name:>14s} | roc_auc {scores['roc_auc']:.4f} | acc {scores['acc']:.4f} | "
            f"balanced_acc {scores['balanced_acc']:.4f}{first}")


# ---------------------------------------------------------------------------------------------
# The real suite (real_data.py): baselines, scores, ranks, reports.

BASELINE_SETTINGS = {
    "random_forest": "RandomForestClassifier(n_estimators=200), NaN handled natively",
    "lightgbm": "LGBMClassifier(n_estimators=300, learning_rate=0.05, num_leaves=15, min_child_samples=5, "
                "subsample=0.8, subsample_freq=1, colsample_bytree=0.8, reg_lambda=1.0), NaN native",
    "hist_gradient_boosting": "HistGradientBoostingClassifier() at sklearn's defaults, NaN native",
    "logistic_regression": "mean imputation + missing indicators, StandardScaler, LogisticRegression(C=1.0)",
    "knn": "mean imputation + missing indicators, StandardScaler, KNeighborsClassifier(15, distance-weighted)",
}
BASELINES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "real_baselines.json")


def make_baseline(name: str, seed: int = 0, n_jobs: int = -1):
    """A fresh sklearn-style estimator for a name of BASELINE_SETTINGS (its settings are stated there)."""
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    if name == "random_forest":
        from sklearn.ensemble import RandomForestClassifier
        return RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=n_jobs)
    if name == "lightgbm":
        from lightgbm import LGBMClassifier
        return LGBMClassifier(n_estimators=300, learning_rate=0.05, num_leaves=15, min_child_samples=5,
                              subsample=0.8, subsample_freq=1, colsample_bytree=0.8, reg_lambda=1.0,
                              random_state=seed, n_jobs=n_jobs, verbose=-1)
    if name == "hist_gradient_boosting":
        from sklearn.ensemble import HistGradientBoostingClassifier
        return HistGradientBoostingClassifier(random_state=seed)
    if name == "logistic_regression":
        from sklearn.linear_model import LogisticRegression
        return make_pipeline(SimpleImputer(add_indicator=True), StandardScaler(),
                             LogisticRegression(C=1.0, max_iter=2000))
    if name == "knn":
        from sklearn.neighbors import KNeighborsClassifier
        return make_pipeline(SimpleImputer(add_indicator=True), StandardScaler(),
                             KNeighborsClassifier(n_neighbors=15, weights="distance"))
    raise ValueError(f"unknown baseline {name!r}; known: {sorted(BASELINE_SETTINGS)}")


def _suite_items(tasks, splits_per_task=None):
    """[(task, split index)] over the tasks, the first splits_per_task splits of each (None: all)."""
    return [(t, s) for t in tasks for s in range(len(t.splits) if splits_per_task is None
                                                   else min(splits_per_task, len(t.splits)))]


def evaluate_suite(make_classifier, tasks, splits_per_task=None) -> dict:
    """ROC AUC of fresh classifiers on the suite's fixed splits.

    Args:
        make_classifier: () -> object with fit(X, y) and predict_proba(X) (may return the same object).
        tasks: real_data.Task list.
        splits_per_task: use the first N splits of each task (None: all).
    Returns:
        {"roc_auc": mean over tasks, "per_task": {task: mean over its splits},
         "per_split": {"task#i": auc}, "seconds": fit+predict time summed, "splits": count}.
    """
    from sklearn.metrics import roc_auc_score
    per_split, seconds = {}, 0.0
    for task, index in _suite_items(tasks, splits_per_task):
        X_tr, X_te, y_tr, y_te = task.split(index)
        classifier = make_classifier()
        start = time.perf_counter()
        classifier.fit(X_tr, y_tr)
        probabilities = np.asarray(classifier.predict_proba(X_te))
        seconds += time.perf_counter() - start
        per_split[f"{task.name}#{index}"] = float(roc_auc_score(y_te, probabilities[:, 1]))
    return summarize(per_split, seconds)


def summarize(per_split: dict, seconds: float = 0.0) -> dict:
    """Per-task means and the suite mean from {"task#i": auc}."""
    per_task = {}
    for key, auc in per_split.items():
        per_task.setdefault(key.rsplit("#", 1)[0], []).append(auc)
    per_task = {name: float(np.mean(values)) for name, values in per_task.items()}
    return {"roc_auc": float(np.mean(list(per_task.values()))), "per_task": per_task, "per_split": per_split,
            "seconds": seconds, "splits": len(per_split)}


def _restrict(result: dict, keys) -> dict:
    """A result cut to the (task, split) keys given (so that methods are compared on the same splits)."""
    return summarize({k: result["per_split"][k] for k in keys}, result.get("seconds", 0.0))


def _fingerprint(tasks) -> str:
    import sklearn
    digest = hashlib.sha256()
    for t in tasks:
        digest.update(t.name.encode())
        digest.update(np.ascontiguousarray(t.X).tobytes())
        digest.update(np.ascontiguousarray(t.splits[0][0]).tobytes())
    digest.update(json.dumps([BASELINE_SETTINGS, sklearn.__version__, _lightgbm_version()]).encode())
    return digest.hexdigest()[:16]


def _lightgbm_version():
    try:
        from importlib.metadata import version
        return version("lightgbm")
    except Exception:   # not installed: the lightgbm baseline then fails when it runs, with its own message
        return None


def baseline_scores(tasks, path: str = BASELINES_PATH, names=None, splits_per_task=None) -> dict:
    """{baseline: evaluate_suite result}, computed once and cached in `path` (JSON).

    The cache is keyed by the tasks' content, the baselines' settings and the library versions.
    Args:
        splits_per_task: the first N splits of each task only (None: all; training-time evaluation needs 1).
    """
    from safe_io import write_json_atomic
    names = list(BASELINE_SETTINGS) if names is None else list(names)
    key = _fingerprint(tasks)
    cached = {}
    if os.path.exists(path):
        try:
            with open(path) as f:
                stored = json.load(f)
            cached = stored["results"] if stored.get("fingerprint") == key else {}
        except (OSError, ValueError, KeyError):
            cached = {}
    entry = lambda name: name if splits_per_task is None else f"{name}@{splits_per_task}"
    missing = [n for n in names if entry(n) not in cached]
    for name in missing:
        cached[entry(name)] = evaluate_suite(lambda: make_baseline(name), tasks, splits_per_task)
    if missing:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_json_atomic(path, {"fingerprint": key, "settings": BASELINE_SETTINGS, "results": cached},
                          "baseline scores")
    return {n: cached[entry(n)] for n in names}


def _ranks(per_task_by_method: dict) -> dict:
    """Mean rank per method (1 = best ROC AUC on a task, ties share the average rank)."""
    from scipy.stats import rankdata
    methods = list(per_task_by_method)
    tasks = list(next(iter(per_task_by_method.values())))
    scores = np.array([[per_task_by_method[m][t] for m in methods] for t in tasks])   # (tasks, methods)
    ranks = np.vstack([rankdata(-row) for row in scores])
    return {m: float(ranks[:, i].mean()) for i, m in enumerate(methods)}


def compare(results: dict, ours: str) -> dict:
    """Mean ROC AUC, mean rank, and wins/ties/losses of `ours` vs every other method, on their common splits.

    Args:
        results: {method: evaluate_suite result}.
        ours: the method compared against the others.
    """
    common = set.intersection(*(set(r["per_split"]) for r in results.values()))
    keys = [k for k in results[ours]["per_split"] if k in common]
    cut = {m: _restrict(r, keys) for m, r in results.items()}
    ranks = _ranks({m: r["per_task"] for m, r in cut.items()})
    summary = {"methods": {}, "ours": ours, "splits": len(keys)}
    for method, r in cut.items():
        entry = {"roc_auc": r["roc_auc"], "mean_rank": ranks[method], "seconds": results[method]["seconds"],
                 "seconds_per_split": results[method]["seconds"] / max(1, results[method]["splits"])}
        if method != ours:
            diff = np.array([cut[ours]["per_task"][t] - r["per_task"][t] for t in r["per_task"]])
            entry.update(wins=int((diff > 0).sum()), ties=int((diff == 0).sum()), losses=int((diff < 0).sum()))
        summary["methods"][method] = entry
    summary["per_task"] = {m: r["per_task"] for m, r in cut.items()}
    return summary


def suite_eval(classifier, tasks, baselines=None, splits_per_task: int = 1) -> dict:
    """A quick evaluation for training-time use: {"roc_auc", "rank", "per_task", "seconds"}.

    Args:
        classifier: fitted anew on each split.
        tasks: real_data.Task list.
        baselines: baseline_scores(tasks) or None; with them, "rank" is our mean rank among them.
        splits_per_task: splits of each task (1: one split per task).
    """
    ours = evaluate_suite(lambda: classifier, tasks, splits_per_task)
    out = {"roc_auc": ours["roc_auc"], "per_task": ours["per_task"], "seconds": ours["seconds"], "rank": None}
    if baselines:
        out["rank"] = compare({"ours": ours, **baselines}, "ours")["methods"]["ours"]["mean_rank"]
        out["baselines_roc_auc"] = {n: _restrict(r, ours["per_split"])["roc_auc"] for n, r in baselines.items()}
    return out


def make_suite_eval(tasks=None, splits_per_task: int = 1, with_baselines: bool = True,
                    baselines_path: str = BASELINES_PATH):
    """classifier -> suite_eval scores, for train.py --eval-every: the suite (and the cached baselines on
    the same splits) are loaded once, so each call only runs the classifier.

    Args:
        tasks: real_data.Task list (None: real_data.load_suite(), built under data/ on first use).
        splits_per_task: splits of each task per evaluation (1: one fit per task).
        with_baselines: also report the mean rank among the baselines (computed once, cached).
    """
    if tasks is None:
        import real_data
        tasks = real_data.load_suite()
    baselines = baseline_scores(tasks, baselines_path, splits_per_task=splits_per_task) if with_baselines else None

    def run(classifier):
        return suite_eval(classifier, tasks, baselines, splits_per_task)
    run.baselines = baselines
    return run


def best_baseline(suite_run) -> tuple:
    """(name, scores) of the baseline with the highest mean ROC AUC on a make_suite_eval run's splits."""
    name = max(suite_run.baselines, key=lambda n: suite_run.baselines[n]["roc_auc"])
    return name, suite_run.baselines[name]


def first_time_passing(eval_history, baselines) -> dict:
    """The first evaluation at or above each baseline's mean ROC AUC.

    Args:
        eval_history: [{"step", "train_seconds", "scores": {"roc_auc", "baselines_roc_auc"?}}] in order.
        baselines: {name: {"roc_auc": float}} (baseline_scores output, or plain numbers as {"roc_auc": x}).
    Returns:
        {name: {"step", "train_seconds", "bar"} or None when never reached}; the bar is the baseline's ROC
        AUC on the same splits when the history carries it, else its suite mean.
    """
    out = {}
    for name, result in baselines.items():
        out[name] = None
        for entry in eval_history or []:
            scores = entry["scores"]
            bar = scores.get("baselines_roc_auc", {}).get(name, result["roc_auc"])
            if scores["roc_auc"] >= bar:
                out[name] = {"step": entry["step"], "train_seconds": entry["train_seconds"], "bar": bar}
                break
    return out


def comparison_markdown(summary: dict, title: str = "Real-data suite: ROC AUC", note: str = "") -> str:
    """Markdown: the summary table (mean ROC AUC, mean rank, wins/ties/losses, time) and the per-task table."""
    from profile_utils import markdown_table
    ours = summary["ours"]
    methods = sorted(summary["methods"], key=lambda m: summary["methods"][m]["mean_rank"])
    rows = []
    for m in methods:
        e = summary["methods"][m]
        wtl = "—" if m == ours else f"{e['wins']}/{e['ties']}/{e['losses']}"
        rows.append([m, f"{e['roc_auc']:.4f}", f"{e['mean_rank']:.2f}", wtl, f"{1000 * e['seconds_per_split']:.0f}"])
    head = markdown_table(["method", "mean ROC AUC", "mean rank", f"{ours} wins/ties/losses",
                           "fit+predict ms/split"], rows)
    tasks = list(summary["per_task"][ours])
    per_task = markdown_table(["task", *methods],
                              [[t, *[f"{summary['per_task'][m][t]:.3f}" for m in methods]] for t in tasks])
    note = f"{note}\n\n" if note else ""
    return (f"## {title}\n\n{note}{len(tasks)} tasks, {summary['splits']} splits; mean rank over tasks "
            f"(1 = best).\n\n{head}\n### Per task (mean ROC AUC over splits)\n\n{per_task}")


def variants_table(results: dict) -> str:
    """Markdown: mean ROC AUC of classifier variants ({name: evaluate_suite result}) and their mean rank
    among themselves, best first."""
    from profile_utils import markdown_table
    ranks = _ranks({name: r["per_task"] for name, r in results.items()})
    rows = [[name, f"{r['roc_auc']:.4f}", f"{ranks[name]:.2f}", f"{r['seconds']:.1f}"]
            for name, r in sorted(results.items(), key=lambda item: -item[1]["roc_auc"])]
    return markdown_table(["variant", "mean ROC AUC", "mean rank among variants", "suite seconds"], rows)


def write_comparison(summary: dict, md_path: str, json_path: str, title: str = "Real-data suite: ROC AUC",
                     note: str = ""):
    """Writes comparison_markdown and the summary as JSON, both atomically. Returns (md_path, json_path)."""
    from safe_io import write_json_atomic, write_text_atomic
    for path in (md_path, json_path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_text_atomic(md_path, comparison_markdown(summary, title, note), "comparison table")
    write_json_atomic(json_path, summary, "comparison record")
    return md_path, json_path
