"""Evaluation of any object with fit(X, y) / predict_proba(X): the sklearn toy suite (a smoke check) and the
real-data suite and held-out tasks (real_data.py), scored by ROC AUC (binary: class 1's column; multiclass:
one-vs-rest macro) and log loss, with cached baselines and ranks. No import side effects; the baselines' optional
libraries (lightgbm, xgboost, catboost) are imported only in make_baseline."""
import contextlib
import functools
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
    "xgboost": "XGBClassifier() at xgboost's defaults (n_jobs = CPU count), NaN native",
    "catboost": "CatBoostClassifier() at catboost's defaults (thread_count=-1, no files written), NaN native",
}
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
BASELINES_PATHS = {"suite": os.path.join(DATA, "baselines-suite.json"),
                   "heldout": os.path.join(DATA, "baselines-heldout.json")}
BASELINES_PATH = BASELINES_PATHS["suite"]
BASELINE_PACKAGES = ("scikit-learn", "lightgbm", "xgboost-cpu", "xgboost", "catboost", "numpy", "scipy")
EVAL_SUITES = ("toy", "real", "real-all")   # train.py --eval-suite: sklearn toy tables, the real suite (1 or all splits)
MIN_PROBABILITY = 1e-15     # log loss clips a predicted probability of the true class here


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
        rank = "" if scores.get("rank") is None else f" | mean rank {scores['rank']:.2f} of {scores['methods']}"
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
    if name == "xgboost":
        from xgboost import XGBClassifier
        return XGBClassifier(n_jobs=os.cpu_count(), random_state=seed)
    if name == "catboost":
        from catboost import CatBoostClassifier
        return CatBoostClassifier(verbose=0, random_seed=seed, thread_count=-1, allow_writing_files=False)
    if name == "random_forest":
        return RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=-1)
    if name == "hist_gradient_boosting":
        return HistGradientBoostingClassifier(random_state=seed)
    if name in ("logistic_regression", "knn"):
        model = LogisticRegression(C=1.0, max_iter=2000) if name == "logistic_regression" else \
            KNeighborsClassifier(n_neighbors=15, weights="distance")
        return make_pipeline(SimpleImputer(add_indicator=True), StandardScaler(), model)
    raise ValueError(f"unknown baseline {name!r}; known: {sorted(BASELINE_SETTINGS)}")


def split_scores(y_test, probabilities, classes, num_classes: int):
    """(ROC AUC, log loss) of (m, len(classes)) probabilities over the task's labels 0..num_classes-1.

    Binary: ROC AUC of class 1's column. Multiclass: one-vs-rest macro ROC AUC (sklearn's multi_class="ovr")
    over the classes present in y_test. Log loss: mean -log p(true class), rows renormalised, p clipped at
    MIN_PROBABILITY; a class the classifier never saw has probability 0."""
    from sklearn.metrics import roc_auc_score
    full = np.zeros((len(y_test), num_classes))
    full[:, np.asarray(classes, dtype=np.int64)] = np.asarray(probabilities, dtype=np.float64)
    if num_classes == 2:
        roc_auc = roc_auc_score(y_test, full[:, 1])
    elif len(np.unique(y_test)) == num_classes:
        roc_auc = roc_auc_score(y_test, full, multi_class="ovr", average="macro", labels=np.arange(num_classes))
    else:   # a class missing from the test rows has no ROC AUC of its own: the mean over the present ones
        roc_auc = np.mean([roc_auc_score(y_test == c, full[:, c]) for c in np.unique(y_test)])
    total = full.sum(axis=1, keepdims=True)
    full = np.divide(full, total, out=np.full_like(full, 1.0 / num_classes), where=total > 0)
    log_loss = -np.mean(np.log(np.maximum(full[np.arange(len(y_test)), y_test], MIN_PROBABILITY)))
    return float(roc_auc), float(log_loss)


def evaluate_suite(make_classifier, tasks, splits_per_task=None) -> dict:
    """summarize() of make_classifier()'s ROC AUC and log loss on each task's first splits_per_task splits
    (None: all); fit + predict_proba seconds summed."""
    per_split, log_loss, seconds = {}, {}, 0.0
    for task in tasks:
        num_classes = int(task.y.max()) + 1
        for index in range(len(task.splits))[:splits_per_task]:
            X_tr, X_te, y_tr, y_te = task.split(index)
            classifier = make_classifier()
            start = time.perf_counter()
            classifier.fit(X_tr, y_tr)
            probabilities = np.asarray(classifier.predict_proba(X_te))
            seconds += time.perf_counter() - start
            classes = getattr(classifier, "classes_", np.unique(y_tr))
            key = f"{task.name}#{index}"
            per_split[key], log_loss[key] = split_scores(y_te, probabilities, classes, num_classes)
    return summarize(per_split, seconds, log_loss)


def summarize(per_split: dict, seconds: float = 0.0, per_split_log_loss: dict | None = None) -> dict:
    """{"roc_auc": mean of task means, "per_task", "per_split", "seconds", "splits"} from {"task#i": auc}, and
    "log_loss", "per_task_log_loss", "per_split_log_loss" the same way when per_split_log_loss is given."""
    def by_task(values):
        return {name: float(np.mean(v)) for name, v in _per_task(values).items()}
    per_task = by_task(per_split)
    out = {"roc_auc": float(np.mean(list(per_task.values()))), "per_task": per_task, "per_split": per_split,
           "seconds": seconds, "splits": len(per_split)}
    if per_split_log_loss is not None:
        per_task_log_loss = by_task(per_split_log_loss)
        out.update(log_loss=float(np.mean(list(per_task_log_loss.values()))), per_task_log_loss=per_task_log_loss,
                   per_split_log_loss=per_split_log_loss)
    return out


def _per_task(values: dict) -> dict:
    """{task: [values in key order]} of {"task#i": value}."""
    grouped = {}
    for key, value in values.items():
        grouped.setdefault(key.rsplit("#", 1)[0], []).append(value)
    return grouped


def _per_split(lists: dict) -> dict:
    """{"task#i": value} of {task: [value of split 0, 1, ...]}: _per_task's inverse for splits kept in order."""
    return {f"{name}#{index}": value for name, values in lists.items() for index, value in enumerate(values)}


def stored(result: dict) -> dict:
    """An evaluate_suite result as a score record keeps it: each task's split scores in split order, per metric; the
    means, which summarize derives, left out."""
    def lists(values):
        grouped = _per_task(values)
        if _per_split(grouped) != values:
            raise ValueError("splits out of order: a stored result holds each task's first splits in order")
        return grouped
    out = {"seconds": result["seconds"], "roc_auc_per_split": lists(result["per_split"])}
    if "per_split_log_loss" in result:
        out["log_loss_per_split"] = lists(result["per_split_log_loss"])
    return out


def from_stored(kept: dict) -> dict:
    """The evaluate_suite result that stored() kept; a record written before it (with per_split) is one already."""
    if "per_split" in kept:
        return kept
    loss = kept.get("log_loss_per_split")
    return summarize(_per_split(kept["roc_auc_per_split"]), kept["seconds"], None if loss is None else _per_split(loss))


def library_versions(names=BASELINE_PACKAGES) -> dict:
    """{distribution: version or None} without importing the libraries."""
    from importlib.metadata import PackageNotFoundError, version
    versions = {}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def read_baselines(tasks, path: str = BASELINES_PATH) -> dict:
    """The cache file's {name(@splits): result} whose settings are today's, if it was computed on these tasks
    (same real_data.tasks_digest); {} when the file is missing, unreadable or of other tasks."""
    from real_data import tasks_digest
    try:
        with open(path) as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return {}
    if stored.get("tasks_digest") != tasks_digest(tasks):
        return {}
    settings = stored.get("settings", {})
    return {key: result for key, result in stored.get("results", {}).items()
            if settings.get(key.split("@")[0]) == BASELINE_SETTINGS.get(key.split("@")[0])}


def baseline_scores(tasks, path: str = BASELINES_PATH, splits_per_task=None, names=None, compute: bool = True) -> dict:
    """{baseline: evaluate_suite result} for `names` (None: all of BASELINE_SETTINGS), cached in `path` under the
    tasks' content digest (library versions and the machine are recorded beside, not keyed on). A missing entry
    is computed, or with compute=False a one-line ValueError."""
    from real_data import tasks_digest
    names = list(BASELINE_SETTINGS) if names is None else list(names)
    unknown = sorted(set(names) - set(BASELINE_SETTINGS))
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}; known: {sorted(BASELINE_SETTINGS)}")
    cached = read_baselines(tasks, path)
    suffix = "" if splits_per_task is None else f"@{splits_per_task}"
    for name in names:   # the first splits of a cached result on more splits: the same fits, the same scores
        more = [key for key in cached if key.split("@")[0] == name and (key == name or splits_per_task is not None
                and int(key.split("@")[1]) > splits_per_task)]
        if name + suffix not in cached and more and splits_per_task is not None:
            cached[name + suffix] = first_splits(cached[more[0]], tasks, splits_per_task)
    missing = [n for n in names if n + suffix not in cached]
    if missing and not compute:
        raise ValueError(f"{path} lacks baseline(s) {missing} for these tasks (missing, or of other tasks or "
                         f"settings): python quality.py baselines")
    for name in missing:
        cached[name + suffix] = evaluate_suite(lambda: make_baseline(name), tasks, splits_per_task)
        write_json_atomic(path, {"tasks_digest": tasks_digest(tasks), "settings": BASELINE_SETTINGS,
                                 "versions": library_versions(), "cpu": cpu_name(), "cpu_count": os.cpu_count(),
                                 "results": cached}, "baseline scores")   # after each: a long run keeps its work
    return {n: cached[n + suffix] for n in names}


def first_splits(result: dict, tasks, splits_per_task: int) -> dict:
    """An evaluate_suite result cut to each task's first splits_per_task splits (seconds in proportion)."""
    keys = [f"{t.name}#{i}" for t in tasks for i in range(len(t.splits))[:splits_per_task]]
    loss = result.get("per_split_log_loss")
    return summarize({k: result["per_split"][k] for k in keys}, result["seconds"] * len(keys) / result["splits"],
                     None if loss is None else {k: loss[k] for k in keys})


def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else platform.processor()."""
    import platform
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def compare(results: dict, ours: str, task_names=None) -> dict:
    """Mean ROC AUC (and log loss where every method has it), mean rank (1 = best ROC AUC on a task, ties share
    the average) and wins/ties/losses vs `ours` of {method: evaluate_suite result}, all on the splits common to
    every method (of the tasks in task_names when given)."""
    from scipy.stats import rankdata
    common = set.intersection(*(set(r["per_split"]) for r in results.values()))
    keys = [k for k in results[ours]["per_split"] if k in common
            and (task_names is None or k.rsplit("#", 1)[0] in task_names)]
    if not keys:
        raise ValueError(f"no split common to {sorted(results)} (among the tasks asked for)")
    with_loss = all("per_split_log_loss" in r for r in results.values())
    cut = {m: summarize({k: r["per_split"][k] for k in keys}, r.get("seconds", 0.0),
                        {k: r["per_split_log_loss"][k] for k in keys} if with_loss else None)
           for m, r in results.items()}
    scores = np.array([[r["per_task"][t] for r in cut.values()] for t in cut[ours]["per_task"]])
    ranks = np.vstack([rankdata(-row) for row in scores])                    # (tasks, methods)
    summary = {"methods": {}, "ours": ours, "splits": len(keys), "tasks": len(scores)}
    for i, (method, r) in enumerate(cut.items()):
        seconds = results[method]["seconds"]
        entry = {"roc_auc": r["roc_auc"], "log_loss": r.get("log_loss"), "mean_rank": float(ranks[:, i].mean()),
                 "seconds": seconds, "seconds_per_split": seconds / max(1, results[method]["splits"])}
        if method != ours:
            diff = np.array([cut[ours]["per_task"][t] - r["per_task"][t] for t in r["per_task"]])
            entry.update(wins=int((diff > 0).sum()), ties=int((diff == 0).sum()), losses=int((diff < 0).sum()))
        summary["methods"][method] = entry
    summary["per_task"] = {m: r["per_task"] for m, r in cut.items()}
    return summary


def usable_tasks(tasks, num_outputs: int | None) -> list:
    """The tasks with at most num_outputs classes (all when None): those a model of that many outputs can take."""
    return [t for t in tasks if num_outputs is None or t.num_classes <= num_outputs]


def suite_eval(classifier, tasks, baselines, splits_per_task: int = 1) -> dict:
    """{"roc_auc", "log_loss", "per_task", "seconds", "rank" of "methods"} and the baselines' same-split
    "baselines_roc_auc" and "baselines_rank" (mean ranks among us and them, 1 = best), on the tasks with at most as
    many classes as the classifier's model predicts ("skipped_tasks" counts the others)."""
    model = getattr(classifier, "model", None)
    usable = usable_tasks(tasks, model.config.num_outputs if hasattr(model, "config") else None)
    ours = evaluate_suite(lambda: classifier, usable, splits_per_task)
    methods = compare({"ours": ours, **baselines}, "ours")["methods"]
    return {"roc_auc": ours["roc_auc"], "log_loss": ours["log_loss"], "per_task": ours["per_task"],
            "seconds": ours["seconds"], "rank": methods["ours"]["mean_rank"], "methods": len(methods),
            "skipped_tasks": len(tasks) - len(usable),
            "baselines_roc_auc": {n: methods[n]["roc_auc"] for n in baselines},
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


def suite_by_name(name: str):
    """classifier -> scores on an EVAL_SUITES suite, loaded before the clock starts; .reference(scores) gives
    (name, scores) of the suite's reference baseline (toy: the Random Forest; real: the best on ours' splits)."""
    if name in ("real", "real-all"):
        run = make_suite_eval(splits_per_task=1 if name == "real" else None)
        run.reference = lambda scores: max(((n, {"roc_auc": v, "rank": scores["baselines_rank"][n],
                                                 "methods": scores["methods"]}) for n, v in
                                            scores["baselines_roc_auc"].items()), key=lambda item: item[1]["roc_auc"])
        return run
    splits = eval_splits()
    run = functools.partial(evaluate, splits=splits)
    run.reference = lambda _: ("random forest", evaluate(RandomForestReference(), splits))
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
