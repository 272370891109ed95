"""The synthetic SCM prior (prior_scm.py: MLP SCMs 70%, sums of random trees 30%) as nanoTabPFN's HDF5 dump.

    python prior_dump.py --preset nano --num-datasets 20000 --out data/nano_20k.h5
    python prior_dump.py --check data/nano_20k.h5      # one line per problem, exit 1 if any

Data depend only on (seed, shape, classes, original_batch_size, PriorMix, device type); N datasets are a
prefix of M > N.
"""
import collections
import contextlib
import functools
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import h5py
import numpy as np
import torch

import prior_scm
import safe_io
from runtime import ArgumentParser, fail, resolve_device

PRESETS = {
    "nano": dict(num_datasets=300_000, rows=150, features=5, classes=2),   # like 300k_150x5_2.h5
    "blog": dict(num_datasets=30_000, rows=5000, features=5, classes=2),   # like 30k_5000x5_2.h5
    # Real tables' shapes (--recipe real-tables): 2-10 classes, 2-32 features drawn log-uniform per aligned block of
    # datasets (a batch has no all-zero columns), train share 10-90% of 512 rows (up to 460 training rows: real
    # tasks train on up to 500; 256-row tables scored 0.0025 lower at 10 minutes, results/nvidia-h100/real-rows).
    "real": dict(num_datasets=200_000, rows=512, features=32, classes=10, feature_law="block-log"),
}
FEATURE_LAWS = ("uniform", "block-log")   # num_features: U{1..F} per dataset, or log-uniform per aligned block
TRAIN_LAWS = ("uniform", "log", "mixed", "tasks")   # PriorMix.train_law; the tasks' training rows: ~log-uniform 50-500
TASK_TRAIN_ROWS = (50, 500)   # "tasks": real_data's rule 8 trains on min(500, rows // 2) of 100-5,000 rows
DEFAULT_DUMP_DATASETS = 20_000   # train.py's dump without --data: seconds on a few CPU cores
FORMAT_VERSION = 1               # attrs["prior_version"]; bump whenever the prior's output changes
FEATURE_CLIP = 6.0               # standardised features are clipped to [-6, 6]
CPU_ROWS_PER_S_PER_THREAD = 70_000   # the plan line's ETA, calibrated on a 16-core host ...
CUDA_ROWS_PER_S = 2_000_000          # ... and on an H200


class PriorMix(NamedTuple):
    """What the prior draws beyond its shapes; the defaults are the prior as it was (nothing more is drawn)."""
    grouped_rows: float = 0.0    # share of datasets whose rows are repeated measures of entities
    tree_share: float = 0.3      # share drawn from sums of random trees; the rest from MLP SCMs
    tree_depth: int = 4          # trees are U{2..tree_depth} levels deep
    noise_scale: float = 1.0     # multiplies every dataset's noise std (MLP nodes 0.01-0.3, tree targets 0.02-0.5)
    proxy_share: float = 0.0     # share of datasets with one column a noisy copy of the target
    binary_share: float = 0.0    # share of datasets with 2 classes outright; the rest draw 2..C
    train_law: str = "uniform"   # training rows per aligned block: share U(0.1, 0.9) of R, "log": log-uniform, "mixed",
                                 # "tasks": log-uniform 50-500 rows whatever R
    dag_share: float = 0.0       # share drawn from random DAGs of mixed mechanisms (prior_scm.dag_scm), the rest as
                                 # tree_share splits them


class DumpGroup(NamedTuple):
    """Datasets [start, start + len(X)) of a dump as numpy arrays in the dump's dtypes."""
    start: int
    X: np.ndarray                # (G, R, F) float32, zero beyond num_features
    y: np.ndarray                # (G, R) float32 class indices
    num_features: np.ndarray     # (G,) int32
    num_datapoints: np.ndarray   # (G,) int32, = R
    single_eval_pos: np.ndarray  # (G,) int32




def _cut_into_classes(gen, target, num_classes, classes, min_count):
    """Cuts target (num, R) into num_classes[i] classes of >= min_count rows; labels (num, R) long."""
    num, rows = target.shape
    device = target.device
    rank = target.argsort(dim=1, stable=True).argsort(1)               # (num, R) in 0..R-1
    # class boundaries in rank space: random quantiles, or random values of the standardised target
    by_rank = (0.1 + 0.8 * torch.rand(num, classes - 1, generator=gen, device=device)) * rows
    thresholds = 0.7 * torch.randn(num, 1, classes - 1, generator=gen, device=device)
    by_value = (prior_scm.standardize(target)[:, :, None] < thresholds).sum(1).float()
    use_rank = torch.rand(num, 1, generator=gen, device=device) < 0.5
    boundary = torch.where(use_rank, by_rank, by_value).sort(1).values.long()     # (num, C-1)
    # unused boundaries sit at R (no rank reaches); used ones are clamped to keep >= min_count rows a class
    unused = torch.arange(classes - 1, device=device) >= (num_classes[:, None] - 1)
    boundary = torch.where(unused, rows, boundary)
    previous = torch.zeros(num, dtype=torch.long, device=device)
    for j in range(classes - 1):
        boundary[:, j] = torch.maximum(boundary[:, j], previous + min_count)
        previous = boundary[:, j]
    upper = torch.full((num,), rows, dtype=torch.long, device=device)
    for j in range(classes - 2, -1, -1):
        clamped = torch.minimum(boundary[:, j], upper - min_count)
        boundary[:, j] = torch.where(unused[:, j], boundary[:, j], clamped)
        upper = torch.where(unused[:, j], upper, boundary[:, j])
    labels = (rank[:, :, None] >= boundary[:, None, :]).sum(2)       # (num, R) in [0, num_classes)
    # permute labels so that class 1 is not always "the larger target"; unused labels sort last
    key = torch.rand(num, classes, generator=gen, device=device)
    key = key + 2.0 * (torch.arange(classes, device=device) >= num_classes[:, None])
    return key.argsort(1).gather(1, labels)


def _cover_classes_on_both_sides(labels, splits, num_classes, classes):
    """Swaps i.i.d. rows so every class has a row on both sides of the split (one pass suffices: pigeonhole).
    Returns (labels, order), order (num, R) for X."""
    num, rows = labels.shape
    device = labels.device
    is_test = torch.arange(rows, device=device)[None, :] >= splits[:, None]     # (num, R)
    order = torch.arange(rows, device=device).repeat(num, 1)
    class_index = torch.arange(classes, device=device)
    for c in range(classes):
        for on_side in (~is_test, is_test):
            count = ((labels[:, :, None] == class_index) & on_side[:, :, None]).sum(1)  # (num, C)
            missing = (count[:, c] == 0) & (c < num_classes)
            incoming = ((labels == c) & ~on_side).int().argmax(1)   # first row of c across the split
            outgoing = (on_side & (count.gather(1, labels) >= 2)).int().argmax(1)  # a row to spare
            incoming = torch.where(missing, incoming, outgoing)[:, None]   # a no-op swap elsewhere
            outgoing = outgoing[:, None]
            for t in (labels, order):
                a, b = t.gather(1, incoming), t.gather(1, outgoing)
                t.scatter_(1, incoming, b)
                t.scatter_(1, outgoing, a)
    return labels, order


def _postprocess_features(gen, x, num_features):
    """Random skew / quantisation per feature, then standardise, clip, zero-pad. x (num, R, F)."""
    num, _, features = x.shape
    device = x.device
    x = prior_scm.standardize(x)
    skew = prior_scm.uniform(gen, (num, 1, features), 0.3, 1.0, device)
    skewed = torch.rand(num, 1, features, generator=gen, device=device) < 0.15    # log-normal-like
    x = torch.where(skewed, torch.exp(skew * x), x)
    levels = prior_scm.uniform(gen, (num, 1, features), 0.5, 3.0, device)
    ordinal = torch.rand(num, 1, features, generator=gen, device=device) < 0.15   # few integer levels
    x = torch.where(ordinal, torch.floor(x * levels), x)
    active = torch.arange(features, device=device) < num_features[:, None, None]
    return torch.where(active, prior_scm.standardize(x).clamp(-FEATURE_CLIP, FEATURE_CLIP), 0.0)


def _draw_num_features(rng, num, features, feature_law, block):
    """(num,) feature counts in 1..F: uniform per dataset, or log-uniform per block of `block` datasets."""
    if feature_law == "uniform":
        return rng.integers(1, features + 1, num)
    draws = rng.uniform(math.log(2), math.log(features + 1), -(-num // block))
    counts = np.exp(draws).astype(np.int64).clip(1, features)
    return np.repeat(counts, block)[:num]


def _chunk_seeds(seed: int, chunk_index: int) -> np.random.SeedSequence:
    """The seeds of chunk `chunk_index`: its host draws (the first: its feature counts) and its torch generator."""
    return np.random.SeedSequence([seed, 1, chunk_index])


def _generate_chunk(seed, chunk_index, num, rows, features, classes, splits, device, feature_law="uniform", block=32,
                    mix=PriorMix()):
    """Chunk `chunk_index` of `num` datasets (splits: the dump's single_eval_pos, numpy):
    X (num, R, F) float32, y (num, R) float32, num_features (num,)."""
    splits = torch.from_numpy(splits[chunk_index * num:(chunk_index + 1) * num]).to(device, torch.long)
    seeds = _chunk_seeds(seed, chunk_index)
    rng = np.random.default_rng(seeds)   # host draws that decide shapes or subsets: no device sync
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seeds.generate_state(1, np.uint64)[0]))
    num_features = torch.from_numpy(_draw_num_features(rng, num, features, feature_law, block)).to(device)
    num_classes = rng.integers(2, classes + 1, num)
    if mix.binary_share > 0:   # no draw at 0: the prior as it was
        num_classes = np.where(rng.random(num) < mix.binary_share, 2, num_classes)
    num_classes = torch.from_numpy(num_classes).to(device)
    is_tree = rng.random(num) < mix.tree_share
    is_dag = rng.random(num) < mix.dag_share if mix.dag_share > 0 else np.zeros(num, bool)   # no draw at 0
    groups = (prior_scm.row_groups(gen, rng, num, rows, mix.grouped_rows, device)
              if mix.grouped_rows > 0 else None)   # 0: no draw
    x = torch.empty(num, rows, features, device=device)
    target = torch.empty(num, rows, device=device)
    tree_scm = functools.partial(prior_scm.tree_scm, max_depth=mix.tree_depth, noise_scale=mix.noise_scale)
    mlp_scm = functools.partial(prior_scm.mlp_scm, noise_scale=mix.noise_scale)
    dag_scm = functools.partial(prior_scm.dag_scm, noise_scale=mix.noise_scale)
    for scm, subset in ((mlp_scm, np.flatnonzero(~is_tree & ~is_dag)), (tree_scm, np.flatnonzero(is_tree & ~is_dag)),
                        (dag_scm, np.flatnonzero(is_dag))):
        if len(subset):
            subset = torch.from_numpy(subset).to(device)
            x[subset], target[subset] = scm(gen, rng, len(subset), rows, features, num_features[subset], device,
                                            None if groups is None else groups[subset])
    if groups is not None:
        x, target = prior_scm.entity_columns(gen, x, target, groups, num_features)
    if mix.proxy_share > 0:   # no draw at 0: the prior as it was
        x = prior_scm.proxy_column(gen, x, target, num_features, mix.proxy_share)
    labels = _cut_into_classes(gen, target, num_classes, classes, max(2, int(0.1 * rows / classes)))
    labels, order = _cover_classes_on_both_sides(labels, splits, num_classes, classes)
    x = _postprocess_features(gen, x.gather(1, order[:, :, None].expand(num, rows, features)), num_features)
    return x, labels.float(), num_features.int()


def _check_sizes(num_datasets, rows, features, classes, seed, original_batch_size, group_size, mix=PriorMix()):
    """Raises ValueError with a one-line message for sizes the prior cannot honour (group_size None: default)."""
    for name, share in (("grouped_rows", mix.grouped_rows), ("tree_share", mix.tree_share),
                        ("proxy_share", mix.proxy_share), ("binary_share", mix.binary_share),
                        ("dag_share", mix.dag_share)):
        if not 0.0 <= share <= 1.0:   # also rejects NaN
            raise ValueError(f"{name} must be in [0, 1], got {share!r}")
    if not isinstance(mix.tree_depth, (int, np.integer)) or not 2 <= mix.tree_depth <= 10:
        raise ValueError(f"tree_depth must be an integer in 2..10, got {mix.tree_depth!r}")
    if not 0.0 <= mix.noise_scale <= 10.0:   # also rejects NaN
        raise ValueError(f"noise_scale must be in [0, 10], got {mix.noise_scale!r}")
    _check_train_law(mix.train_law)
    if mix.binary_share > 0 and classes == 2:
        raise ValueError(f"binary_share {mix.binary_share} has no effect with classes 2 (every table is binary)")
    if mix.tree_share == 0 and mix.tree_depth != PriorMix().tree_depth:
        raise ValueError(f"tree_depth {mix.tree_depth} has no effect with tree_share 0 (no tables from trees)")
    for name, value, low in (("num_datasets", num_datasets, 1), ("rows", rows, 4),
                             ("features", features, 1), ("classes", classes, 2), ("seed", seed, 0),
                             ("original_batch_size", original_batch_size, 1),
                             ("group_size", 1 if group_size is None else group_size, 1)):
        if not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if rows < 2 * classes:
        raise ValueError(f"rows ({rows}) must be >= 2 * classes ({2 * classes}): every class needs "
                         "a row in the train part and one in the test part")


def _check_train_law(train_law: str) -> None:
    if train_law not in TRAIN_LAWS:
        raise ValueError(f"train_law must be one of {', '.join(TRAIN_LAWS)}, got {train_law!r}")


def draw_splits(seed, num_datasets, rows, classes, original_batch_size, train_law="uniform"):
    """single_eval_pos (N,) int32: int(R * share) per aligned original batch, the share U(0.1, 0.9), ("log")
    log-uniform on [0.1, 0.9] or ("mixed") either with even odds per block; ("tasks") log-uniform on TASK_TRAIN_ROWS
    rows; clamped to [classes, R - classes] so each side can hold a row of every class."""
    _check_train_law(train_law)
    num_blocks = -(-num_datasets // original_batch_size)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    low, high = 0.1, 0.9   # as rng.uniform(low, high) computes it from a draw r in [0, 1), bit for bit
    uniform = lambda r: low + (high - low) * r
    log_uniform = lambda a, b, r: np.exp(math.log(a) + (math.log(b) - math.log(a)) * r)   # each doubling as likely
    if train_law == "tasks":   # 50-500 training rows whatever R (R >= 1000 leaves >= 500 test rows)
        train_rows = log_uniform(*TASK_TRAIN_ROWS, rng.random(num_blocks))
    elif train_law == "mixed":   # the log law's short tables beside the uniform law's long ones; three draws a
        log_draw, uniform_draw, coin = rng.random((num_blocks, 3)).T   # block, so N datasets stay a prefix of M > N
        train_rows = rows * np.where(coin < 0.5, uniform(uniform_draw), log_uniform(low, high, log_draw))
    else:
        draw = rng.random(num_blocks)
        train_rows = rows * (uniform(draw) if train_law == "uniform" else log_uniform(low, high, draw))
    split = np.clip(train_rows.astype(np.int64), classes, rows - classes)
    return np.repeat(split, original_batch_size)[:num_datasets].astype(np.int32)


def _in_order(build_chunk, num_chunks, device):
    """Yields build_chunk(0), build_chunk(1), ... in order; on CPU whole chunks are built in parallel by
    single-threaded workers (a chunk's ops are too small for intra-op threads; seeds are per chunk)."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield from map(build_chunk, range(num_chunks))
        return

    def build_single_threaded(chunk_index):
        torch.set_num_threads(1)   # OpenMP's thread count is per thread: the caller keeps its own
        return build_chunk(chunk_index)

    pool, pending = ThreadPoolExecutor(min(threads, num_chunks)), collections.deque()
    try:
        for chunk_index in range(num_chunks):
            pending.append(pool.submit(build_single_threaded, chunk_index))
            if len(pending) > 2 * threads:   # chunks in flight: bounds memory, keeps every worker busy
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(cancel_futures=True)
        torch.set_num_threads(threads)   # torch's default for threads created later, as before


def chunk_size(rows: int) -> int:
    """Datasets per chunk, the unit of generation and seeding: a power of two <= 256, about 32k rows."""
    return min(256, 2 ** max(0, int(math.log2(max(1, 32_768 // rows)))))


def generate(num_datasets, rows, features, classes, seed, device="cpu", group_size=None,
             original_batch_size=32, feature_law="uniform", mix=PriorMix()):
    """Yields the dump's datasets in order as DumpGroups of group_size (whole chunks; default ~32 MB of X)."""
    _check_sizes(num_datasets, rows, features, classes, seed, original_batch_size, group_size, mix)
    device = resolve_device(device or "auto")
    per_chunk = chunk_size(rows)
    group_size = group_size or max(1, (32 << 20) // (rows * features * 4))
    chunks_per_group = -(-int(group_size) // per_chunk)
    num_chunks = -(-num_datasets // per_chunk)
    # splits for whole chunks: the last, truncated chunk is built exactly as in a larger dump
    splits = draw_splits(seed, num_chunks * per_chunk, rows, classes, original_batch_size, mix.train_law)
    if feature_law not in FEATURE_LAWS:
        raise ValueError(f"feature_law must be one of {FEATURE_LAWS}, got {feature_law!r}")
    chunks = _in_order(lambda index: _generate_chunk(seed, index, per_chunk, rows, features, classes, splits, device,
                                                     feature_law, original_batch_size, mix),
                       num_chunks, device)
    try:
        for first_chunk in range(0, num_chunks, chunks_per_group):
            parts = [next(chunks) for _ in range(min(chunks_per_group, num_chunks - first_chunk))]
            start = first_chunk * per_chunk
            count = min(num_datasets - start, len(parts) * per_chunk)
            # one device-to-host copy per group (a sync point on CUDA), not one per chunk
            x, y, num_features = (torch.cat(part)[:count].cpu().numpy() for part in zip(*parts))
            yield DumpGroup(start, x, y, num_features, np.full(count, rows, np.int32),
                            splits[start:start + count].copy())
    finally:
        chunks.close()   # a consumer that stops early also stops the CPU workers


def _real_tables(real, rows, original_batch_size):
    """The pool's tables for write_dump's `real` (None: no real tables); ValueError in one line for a bad share."""
    if real is None or real[1] == 0:
        return None
    import real_pool   # lazily: only a dump with real tables reads the pool
    if not 0.0 < real[1] <= 1.0:   # also rejects NaN
        raise ValueError(f"real share must be in (0, 1], got {real[1]!r}")
    if chunk_size(rows) % original_batch_size:
        raise ValueError(f"real tables fill whole blocks of --original-batch-size {original_batch_size} datasets, "
                         f"which must divide the {chunk_size(rows)} datasets generated at a time")
    return real_pool.read_pool(real[0])


def _mix_real(group, tables, seed, share, block, classes):
    """Overwrites, in place, the blocks of `group` that real_pool.real_blocks picks with real tables."""
    import real_pool
    first = group.start // block
    for index in real_pool.real_blocks(seed, first, -(-len(group.X) // block), share):
        part = slice((index - first) * block, (index - first + 1) * block)
        real_pool.fill_block(index, seed, tables, group.X[part], group.y[part], group.num_features[part],
                             group.num_datapoints[part], group.single_eval_pos[part], classes)


SPEC_PREFIX = "prior:"   # --data prior:PRESET[:N][:OPTION=VALUE,...]: a preset's N datasets (seed 0) made on the fly


def _spec_mix(spec: str, options: str) -> PriorMix:
    """The PriorMix of a spec's `KEY=VALUE,...` part (PriorMix's fields, as prior_dump.py's flags set them)."""
    fields, chosen = PriorMix()._asdict(), {}
    for option in filter(None, options.split(",")):
        key, _, value = option.partition("=")
        if key not in fields or not value:
            raise ValueError(f"--data {spec}: expected OPTION=VALUE with OPTION one of {', '.join(fields)}, got "
                             f"{option!r}")
        try:
            chosen[key] = type(fields[key])(value)
        except ValueError:
            kind = "an integer" if isinstance(fields[key], int) else "a number"
            raise ValueError(f"--data {spec}: {key} must be {kind}, got {value!r}") from None
    return PriorMix(**chosen)


def spec_info(spec: str, device):
    """The DumpInfo of `prior:PRESET[:N][:KEY=VALUE,...]`: the dump `prior_dump.py --preset PRESET --num-datasets N
    [--key value ...]` would write on `device`'s type, with its metadata drawn here (the host draws of each chunk) and
    its datasets generated when read (`generated`: its Regenerator). ValueError (one line) for a bad spec."""
    from dump_format import DumpInfo   # lazily: only a dump made on the fly needs it
    preset, _, rest = spec[len(SPEC_PREFIX):].partition(":")
    count, _, options = rest.partition(":")
    if preset not in PRESETS or not (count == "" or count.isdigit() and int(count) > 0):
        raise ValueError(f"--data {spec}: expected prior:PRESET[:N][:OPTION=VALUE,...] with PRESET in "
                         f"{', '.join(sorted(PRESETS))} and N a positive number of datasets")
    p, device, block = PRESETS[preset], resolve_device(device), 32   # block: write_dump's original_batch_size
    settings = dict(num_datasets=int(count or p["num_datasets"]), rows=p["rows"], features=p["features"],
                    classes=p["classes"], seed=0, original_batch_size=block, made_on=device.type,
                    feature_law=p.get("feature_law", "uniform"), mix=_spec_mix(spec, options))
    try:
        _check_sizes(settings["num_datasets"], p["rows"], p["features"], p["classes"], 0, block, None, settings["mix"])
    except ValueError as exc:
        raise ValueError(f"--data {spec}: {exc}") from None
    regenerator, per_chunk, n = Regenerator(settings, device), chunk_size(p["rows"]), settings["num_datasets"]
    num_features = np.concatenate([   # the first host draw of every chunk, as _generate_chunk makes it
        _draw_num_features(np.random.default_rng(_chunk_seeds(settings["seed"], chunk)), per_chunk, p["features"],
                           settings["feature_law"], block) for chunk in range(-(-n // per_chunk))])[:n]
    name = f"{SPEC_PREFIX}{preset}:{n}" + (f":{options}" if options else "")
    return DumpInfo(name, n, p["rows"], p["features"], num_features.astype(np.int64),
                    np.full(n, p["rows"], np.int64), regenerator.splits[:n].astype(np.int64), p["classes"], block,
                    "single_eval_pos", 0, 0, generated=regenerator)


def file_settings(path) -> dict:
    """The prior settings write_dump stored in a dump, as spec_info gives them; ValueError (one line) for a dump
    this code cannot generate again."""
    with h5py.File(path, "r") as f:
        attrs, shape = dict(f.attrs), f["X"].shape
        classes, batch = (int(np.asarray(f[key]).reshape(-1)[0]) for key in ("max_num_classes", "original_batch_size"))
    if "prior_version" not in attrs:
        raise ValueError("not written by prior_dump.py (no seed or prior recorded), so it cannot be regenerated")
    if attrs["prior_version"] != FORMAT_VERSION:
        raise ValueError(f"written by prior version {attrs['prior_version']}, this code generates version "
                         f"{FORMAT_VERSION}")
    if attrs.get("real_share", 0) > 0:
        raise ValueError(f"holds real tables (share {attrs['real_share']}, real_pool.py), which are not generated "
                         "again")
    mix = PriorMix(**{key: type(value)(attrs.get(key, value)) for key, value in PriorMix()._asdict().items()})
    return dict(num_datasets=shape[0], rows=shape[1], features=shape[2], classes=classes, seed=int(attrs["seed"]),
                original_batch_size=batch, made_on=str(attrs.get("device_type", "cpu")),
                feature_law=str(attrs.get("feature_law", "uniform")), mix=mix)


class Regenerator:
    """A dump's datasets made on `device`, chunk by chunk, from its prior settings (spec_info, file_settings): the
    on-the-fly prior of `--loader prior`; the dump's own values where the device type is the one that wrote it."""

    def __init__(self, settings: dict, device):
        self.settings, self.device = settings, torch.device(device)
        self.per_chunk = chunk_size(settings["rows"])
        num_chunks = -(-settings["num_datasets"] // self.per_chunk)
        self.splits = draw_splits(settings["seed"], num_chunks * self.per_chunk, settings["rows"], settings["classes"],
                                  settings["original_batch_size"], settings["mix"].train_law)
        self._chunks = {}   # the chunks the last call used: a batch reads its chunk per_chunk / B times

    def datasets(self, first: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Datasets [first, first + count) as X (count, R, F) and y (count, R) float32 on the device."""
        indices = range(first // self.per_chunk, (first + count - 1) // self.per_chunk + 1)
        self._chunks = {i: self._chunks.get(i) or self._chunk(i) for i in indices}
        offset = first - indices[0] * self.per_chunk
        x, y = (torch.cat([self._chunks[i][k] for i in indices])[offset:offset + count] for k in (0, 1))
        return x, y

    def dataset(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Dataset `index` as numpy X (R, F) and y (R,), made outside the cache (start-up checks and digests, on a
        thread other than a loader's)."""
        x, y = self._chunk(index // self.per_chunk)
        return x[index % self.per_chunk].cpu().numpy(), y[index % self.per_chunk].cpu().numpy()

    def _chunk(self, index):
        s = self.settings
        x, y, _ = _generate_chunk(s["seed"], index, self.per_chunk, s["rows"], s["features"], s["classes"],
                                  self.splits, self.device, s["feature_law"], s["original_batch_size"], s["mix"])
        return x, y


def estimate(num_datasets, rows, features, device) -> tuple[int, float]:
    """(bytes of the dump, seconds to build it) before writing: sizes exactly, time from calibration."""
    size = num_datasets * (rows * features * 4 + rows * 4 + 3 * 4) + (64 << 10)
    threads = torch.get_num_threads() if torch.device(device).type == "cpu" else 0
    return size, num_datasets * rows / (CPU_ROWS_PER_S_PER_THREAD * threads if threads else CUDA_ROWS_PER_S)


@contextlib.contextmanager
def _disk_errors(path):
    """h5py hides EFBIG/ENOSPC behind RuntimeError or an errno-less OSError: one line instead."""
    try:
        yield
    except safe_io.OutputError:
        raise
    except (RuntimeError, OSError) as exc:
        raise safe_io.OutputError(f"cannot write dump {path}: write failed (disk full or file-size limit?): "
                                  f"{' '.join(str(exc).split())[:160]}") from None


def write_dump(path, num_datasets, rows, features, classes, seed, device="cpu", progress=True,
               original_batch_size=32, group_size=None, feature_law="uniform", mix=PriorMix(), real=None):
    """Generates a dump (arguments as in generate()) and streams it atomically into pre-created contiguous datasets;
    real: (pool path, share) puts real tables in that share of the aligned blocks (real_pool.py); progress: plan line
    and bar. Returns dict: path, num_datasets, seconds, datasets_per_s, bytes, device."""
    from tqdm import tqdm
    _check_sizes(num_datasets, rows, features, classes, seed, original_batch_size, group_size, mix)
    tables = _real_tables(real, rows, original_batch_size)
    device = resolve_device(device or "auto")
    size, seconds = estimate(num_datasets, rows, features, device)
    safe_io.check_outputs({"--out": path}, need_bytes={"--out": size})
    if progress:
        print(f"prior: writing {path}: {num_datasets} datasets x {rows} rows x {features} features, "
              f"<= {classes} classes, {safe_io.format_bytes(size)}; ETA ~{seconds:,.0f} s on {device} "
              f"(calibrated estimate; the bar shows the measured rate)", flush=True)
    bar = tqdm(total=num_datasets, unit="ds", delay=2, desc=f"prior {os.path.basename(path)}", leave=False,
               disable=not progress)
    shape = (num_datasets, rows, features)
    start_time = time.perf_counter()
    with bar, safe_io.atomic_output(path, "dump") as temp:
        with _disk_errors(path):
            f = h5py.File(temp, "w")
        try:
            with _disk_errors(path):
                datasets = {key: f.create_dataset(key, shape[:ndim], dtype=dtype) for key, ndim, dtype in (
                    ("X", 3, "f4"), ("y", 2, "f4"), ("num_features", 1, "i4"), ("num_datapoints", 1, "i4"),
                    ("single_eval_pos", 1, "i4"))}
            for group in generate(*shape, classes, seed, device, group_size, original_batch_size, feature_law, mix):
                if tables:
                    _mix_real(group, tables, seed, real[1], original_batch_size, classes)
                with _disk_errors(path):
                    for key, dataset in datasets.items():
                        dataset[group.start:group.start + len(group.X)] = getattr(group, key)
                bar.update(len(group.X))
            with _disk_errors(path):
                f.create_dataset("max_num_classes", data=np.array([classes], np.int64))
                f.create_dataset("original_batch_size", data=np.array([original_batch_size], np.int64))
                f.create_dataset("problem_type", data="classification", dtype=h5py.string_dtype())
                f.attrs.update(prior="prior_dump.py SCM prior (MLP + trees)", prior_version=FORMAT_VERSION,
                               seed=seed, device_type=device.type, feature_law=feature_law,
                               **mix._asdict())
                if tables:
                    f.attrs.update(real_pool=os.path.basename(real[0]), real_share=real[1],
                                   real_tables=len(tables))
        finally:
            with _disk_errors(path):
                f.close()   # flushes: a full disk often shows here first
    seconds = time.perf_counter() - start_time
    return dict(path=str(path), num_datasets=num_datasets, seconds=seconds,
                datasets_per_s=num_datasets / seconds, bytes=os.path.getsize(path), device=str(device))


def default_dump_path(preset: str = "nano", num_datasets: int | None = None, device: str = "cpu"):
    """data/<preset>_default_<N>_seed0.h5 next to this file (a CUDA dump: ..._cuda.h5, its data differ)."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    suffix, num_datasets = "_cuda" if device == "cuda" else "", num_datasets or DEFAULT_DUMP_DATASETS
    return os.path.join(folder, f"{preset}_default_{num_datasets}_seed0{suffix}.h5")


def _default_dump_valid(path, shape) -> bool:
    """A cheap structural check of a default dump (keys, shapes, prior version, the default mix), without scanning
    the values."""
    try:
        with h5py.File(path, "r") as f:
            return (f["X"].shape == shape and f["y"].shape == shape[:2]
                    and all(f[key].shape == shape[:1] for key in ("num_features", "num_datapoints", "single_eval_pos"))
                    and f.attrs.get("prior_version") == FORMAT_VERSION
                    and all(f.attrs.get(key, value) == value for key, value in PriorMix()._asdict().items()))
    except (OSError, KeyError, ValueError):
        return False


def ensure_default_dump(path=None, preset: str = "nano", num_datasets: int | None = None, device: str = "cpu"):
    """A preset's dump (seed 0), generated first on `device` when missing or invalid: train.py's dump when it gets
    no --data (nano, CPU: the same file everywhere)."""
    num_datasets = num_datasets or DEFAULT_DUMP_DATASETS
    path = path or default_dump_path(preset, num_datasets, device)
    shape = (num_datasets, PRESETS[preset]["rows"], PRESETS[preset]["features"])
    using = f"prior: no --data given, using the {preset} dump {path}"
    if _default_dump_valid(path, shape):   # before the lock: a read-only folder's dump needs none
        print(using)
        return path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # One writer: another run making the same file (torchrun's ranks, two runs started at once) is waited for, as
    # a second rename would replace the file under a run already reading it, whose check would then stop it.
    with safe_io.file_lock(path + ".lock"):
        if _default_dump_valid(path, shape):
            print(using)
            return path
        classes, law = PRESETS[preset]["classes"], PRESETS[preset].get("feature_law", "uniform")
        stats = write_dump(path, *shape, classes, seed=0, device=device, progress=sys.stderr.isatty(), feature_law=law)
    print(f"prior: no --data given, generated {path} ({num_datasets} datasets of {shape[1]}x{shape[2]}, "
          f"{classes} classes, seed 0, {device}) in {stats['seconds']:.1f} s")
    return path


def _check_file(path):
    """--check: one line per problem (exit 1), or a one-line summary (exit 0)."""
    from dump_format import check_dump
    if not os.path.isfile(path):
        return fail(f"--check: no such file: {path}")
    problems = check_dump(path)
    if problems:
        print("\n".join(problems))
        return 1
    with h5py.File(path, "r") as f:
        num, rows, features = f["X"].shape
        classes = int(f["max_num_classes"][0]) if "max_num_classes" in f else "?"
    print(f"ok: {path}: {num} datasets x {rows} rows x {features} features, <= {classes} classes")
    return 0


def _real_flags(pool, share):
    """write_dump's `real` from --real-pool / --real-share; ValueError for a pool without a share."""
    if pool and not share:
        raise ValueError("--real-pool without --real-share puts no real table in the dump")
    if not share:
        return None
    import real_pool   # lazily: its default path
    return (pool or real_pool.POOL_PATH, share)


def main(argv=None):
    parser = ArgumentParser(description="Write a synthetic SCM prior dump in nanoTabPFN's HDF5 format.")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="nano",
                        help="nano = 300k datasets x 150 rows x 5 features x 2 classes, blog = 30k x 5000 x 5 x 2, "
                             "real = 200k x 512 x 2-32 (log-uniform per block) x 2-10")
    parser.add_argument("--num-datasets", type=int, help="number of datasets N (default: the preset's)")
    parser.add_argument("--rows", type=int, help="rows per dataset R, >= 4 (default: the preset's)")
    parser.add_argument("--features", type=int, help="max features F per dataset (default: the preset's)")
    parser.add_argument("--classes", type=int, help="max classes C; each dataset has 2..C (default: the preset's)")
    parser.add_argument("--feature-law", choices=FEATURE_LAWS,
                        help="features per dataset: uniform in 1..F, or block-log: log-uniform, one count per aligned "
                             "block of --original-batch-size datasets (default: the preset's)")
    parser.add_argument("--grouped-rows", type=float, default=PriorMix().grouped_rows, metavar="SHARE",
                        help="share of datasets whose rows are repeated measures of entities: causes shared within "
                             f"groups of 2-8 rows, half with a per-entity label, half with an id column "
                             f"(default {PriorMix().grouped_rows})")
    parser.add_argument("--tree-share", type=float, default=PriorMix().tree_share, metavar="SHARE",
                        help=f"share of datasets drawn from sums of random trees, the rest from MLP SCMs "
                             f"(default {PriorMix().tree_share})")
    parser.add_argument("--tree-depth", type=int, default=PriorMix().tree_depth, metavar="D",
                        help=f"trees are 2..D levels deep, D in 2..10 (default {PriorMix().tree_depth})")
    parser.add_argument("--noise-scale", type=float, default=PriorMix().noise_scale, metavar="S",
                        help="multiplies every dataset's noise std, S in [0, 10]; below 1 more tables are nearly "
                             f"noise-free (default {PriorMix().noise_scale})")
    parser.add_argument("--proxy-share", type=float, default=PriorMix().proxy_share, metavar="SHARE",
                        help="share of datasets where one column is the target plus noise, as real tables often "
                             f"have a column that nearly decides the label (default {PriorMix().proxy_share})")
    parser.add_argument("--binary-share", type=float, default=PriorMix().binary_share, metavar="SHARE",
                        help="share of datasets with 2 classes outright, the rest 2..C (real tables are mostly "
                             f"binary; default {PriorMix().binary_share})")
    parser.add_argument("--train-law", choices=TRAIN_LAWS, default=PriorMix().train_law,
                        help="training rows per block: a share U(0.1, 0.9) of R, log-uniform on [0.1 R, 0.9 R] (each "
                             "doubling of the rows as likely, as in real tables), mixed (either, even odds per block), "
                             "or tasks: log-uniform on 50-500 rows whatever R, as the real-data tasks train "
                             f"(default {PriorMix().train_law})")
    parser.add_argument("--dag-share", type=float, default=PriorMix().dag_share, metavar="SHARE",
                        help="share of datasets drawn from random DAGs whose nodes mix smooth, tree and categorical "
                             f"mechanisms, the rest as --tree-share splits them (default {PriorMix().dag_share})")
    parser.add_argument("--real-share", type=float, default=0.0, metavar="SHARE",
                        help="share of the aligned blocks holding real tables of --real-pool in place of the "
                             "prior's (real_pool.py; default 0: none)")
    parser.add_argument("--real-pool", default=None, metavar="NPZ",
                        help="the real tables to draw from (default data/real_pool.npz, made by real_pool.py)")
    parser.add_argument("--seed", type=int, default=0, help="base random seed, >= 0 (default 0)")
    parser.add_argument("--out", help="output .h5 (default data/prior_<N>_<R>x<F>_<C>_seed<S>.h5)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (CPU and CUDA dumps differ)")
    parser.add_argument("--original-batch-size", type=int, default=32,
                        help="datasets per aligned block sharing one single_eval_pos (default 32)")
    parser.add_argument("--group-size", type=int,
                        help="datasets generated per write (default ~32 MB of X); does not change the data")
    parser.add_argument("--no-progress", action="store_true", help="hide the plan line and the progress bar")
    parser.add_argument("--check", metavar="FILE", help="validate an existing dump instead of writing one")
    args = parser.parse_args(argv)
    if args.check:
        return _check_file(args.check)
    shape = {"feature_law": "uniform", **{key: value if getattr(args, key) is None else getattr(args, key)
                                          for key, value in PRESETS[args.preset].items()}}
    out = args.out or os.path.join(
        "data", "prior_{num_datasets}_{rows}x{features}_{classes}".format(**shape) + f"_seed{args.seed}.h5")
    try:   # write_dump checks the sizes, the device and the output before it writes anything
        stats = write_dump(out, seed=args.seed, device=args.device, progress=not args.no_progress,
                           original_batch_size=args.original_batch_size, group_size=args.group_size,
                           mix=PriorMix(**{field: getattr(args, field) for field in PriorMix._fields}),
                           real=_real_flags(args.real_pool, args.real_share), **shape)
    except (ValueError, OSError) as exc:
        return fail(exc)
    except MemoryError:
        return fail(f"out of memory for {shape['num_datasets']} datasets; use a smaller --num-datasets")
    except KeyboardInterrupt:
        return fail(f"interrupted, nothing written to {out}", 130)
    print(f"wrote {out}: {shape['num_datasets']} datasets x {shape['rows']} rows x "
          f"{shape['features']} features, <= {shape['classes']} classes, {stats['bytes'] / 1e6:,.1f} MB "
          f"in {stats['seconds']:.1f} s = {stats['datasets_per_s']:,.0f} datasets/s on {stats['device']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
