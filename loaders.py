"""Every data path of the nanoTabPFN training loop behind one interface.

All loaders read a nanoTabPFN prior dump (HDF5, written by prior_dump.py or upstream tools) and yield
the same `Batch(x, y, split, wrapped)` for the same dump, batch size, start position and rank, bit for
bit, so the training loop never changes when the data path does:

    kind="h5"                       baseline: h5py slice per step, then a synchronous .to(device)
    kind="h5", pinned=True          page-locked ring buffers filled by h5py read_direct, async copies
    kind="h5", streams=True         one reader thread + a side CUDA stream, `prefetch` batches deep
    kind="h5", pinned+streams       the blog's double buffering (pinned ring + side-stream copies)
    kind="bin"                      raw .bin records (convert_h5.py) read by kvikio: straight into
                                    CUDA memory with GPUDirect Storage ("gds"), else POSIX reads into
                                    pinned host slots + side-stream copies ("kvikio-posix"); numpy
                                    memmap when kvikio or CUDA is missing ("memmap+pinned", "memmap")
    kind="resident"                 the whole dump held in GPU memory; batches are sliced there

Every loader says what really runs in describe()["path"] and explains fallbacks in .notes (one line
each). Loaders with a reader thread must be closed (close() or a with block).

The .bin format (one fixed-stride record per dataset, 4 KiB aligned, JSON sidecar) is defined once,
here; convert_h5.py writes it with the helpers below.

Importing this module has no side effects: no CUDA calls, no file I/O, no prints. kvikio (and the
converter) are imported lazily by the path that needs them.
"""
from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import h5py
import numpy as np
import torch

# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


def _one_line(text) -> str:
    """Collapses a message (an h5py error can span lines) into one line."""
    return " ".join(str(text).split())


class DumpError(ValueError):
    """A dump (or its .bin conversion) cannot be used; the message is one line naming the problem."""

    def __init__(self, message):
        super().__init__(_one_line(message))


class GdsUnavailable(DumpError):
    """require_gds=True but the .bin loader would run another path (memmap, kvikio-posix, ...).

    A DumpError subclass so that a command line catching DumpError reports it in one line too.
    """


class BinFormatError(DumpError):
    """The .bin conversion is missing, partial, stale, corrupt or from another format version.

    Attributes:
        reason: one of "missing", "partial", "stale", "corrupt", "older", "newer".
    """

    def __init__(self, message, reason: str):
        super().__init__(message)
        self.reason = reason


# --------------------------------------------------------------------------------------------------
# Dump metadata and validation
# --------------------------------------------------------------------------------------------------

SPLIT_KEYS = ("single_eval_pos", "train_test_split_index")  # ours first, upstream's newer name second
SCAN_CHUNK_BYTES = 64 << 20  # value scans and chunked loads read at most this much of X at a time


@dataclass
class DumpInfo:
    """What open_dump() learned about a dump; metadata arrays are read once into numpy (N,) int64."""

    path: str
    num_datasets: int
    rows: int
    features: int
    num_features: np.ndarray
    num_datapoints: np.ndarray
    splits: np.ndarray
    max_num_classes: int
    original_batch_size: int
    split_key: str
    size_bytes: int
    mtime_ns: int

    @property
    def x_bytes(self) -> int:
        """Bytes of X as float32 (N, R, F)."""
        return self.num_datasets * self.rows * self.features * 4

    @property
    def y_bytes(self) -> int:
        """Bytes of y as float32 (N, R)."""
        return self.num_datasets * self.rows * 4


def _scan_values_problems(x: np.ndarray | None, y: np.ndarray | None, first: int,
                          max_num_classes: int | None) -> tuple[str | None, str | None]:
    """Checks one chunk of X (c, R, F) and y (c, R) starting at dataset `first`.

    Returns:
        (problem with X or None, problem with y or None), each one line.
    """
    x_problem = y_problem = None
    if x is not None:
        # Checked as float32, the dtype every loader yields: a float64 1e39 is finite on disk but inf
        # once cast, and all loaders must agree on whether a dump is valid.
        with np.errstate(over="ignore"):
            finite = np.isfinite(x.astype(np.float32, copy=False)).reshape(len(x), -1).all(axis=1)
        if not finite.all():
            bad = first + int(np.argmin(finite))
            x_problem = f"'X' contains NaN or Inf values (first in dataset {bad})"
    if y is not None:
        yy = np.asarray(y, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            bad_mask = ~np.isfinite(yy) | (yy < 0) | (yy != np.floor(yy))
            if max_num_classes is not None:
                bad_mask |= yy >= max_num_classes
        if bad_mask.any():
            flat = int(np.argmax(bad_mask.reshape(-1)))
            i, r = divmod(flat, yy.shape[1])
            limit = f" < max_num_classes={max_num_classes}" if max_num_classes is not None else ""
            y_problem = (f"'y' must hold class indices (finite integers >= 0{limit}); "
                         f"dataset {first + i} row {r} has {float(yy[i, r])!r}")
    return x_problem, y_problem


def _inspect_dump(path, scan_values: bool, collect: bool) -> tuple[DumpInfo | None, list[str]]:
    """Validates a dump. With collect=False the first problem raises DumpError; otherwise all are listed."""
    path = os.fspath(path)
    problems: list[str] = []

    def problem(message: str) -> None:
        line = _one_line(f"{path}: {message}")
        if not collect:
            raise DumpError(line)
        problems.append(line)

    if not os.path.exists(path):
        problem("no such file")
        return None, problems
    if os.path.isdir(path):
        problem("is a directory, not an HDF5 dump")
        return None, problems
    try:
        is_hdf5 = h5py.is_hdf5(path)
    except OSError as exc:
        problem(f"cannot be read ({exc})")
        return None, problems
    if not is_hdf5:
        problem("not an HDF5 file (no HDF5 signature)")
        return None, problems
    stat = os.stat(path)
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:  # h5py raises OSError for a truncated file (stored EOF beyond the real end)
        problem(f"truncated or corrupt HDF5 file (h5py: {exc})")
        return None, problems
    with handle:
        try:
            info = _inspect_open(handle, path, stat, scan_values, problem)
        except (OSError, RuntimeError) as exc:  # a read beyond a truncated end surfaces here
            problem(f"truncated or corrupt HDF5 file (h5py: {exc})")
            return None, problems
    return (info if not problems else None), problems


def _inspect_open(f: h5py.File, path: str, stat: os.stat_result, scan_values: bool,
                  problem: Callable[[str], None]) -> DumpInfo | None:
    """Checks keys, dtypes, shapes, metadata ranges and (optionally) values of an open dump."""
    for key in ("X", "y", "num_features"):
        if key not in f:
            problem(f"missing key '{key}'")
    split_key = next((k for k in SPLIT_KEYS if k in f), None)
    if split_key is None:
        problem("missing key 'single_eval_pos' (or upstream's 'train_test_split_index')")
    if "X" not in f:
        return None
    X = f["X"]
    if not isinstance(X, h5py.Dataset) or X.ndim != 3 or X.dtype.kind != "f":
        shape = getattr(X, "shape", None)
        dtype = getattr(X, "dtype", "group")
        problem(f"'X' must be a 3-D float array (N, rows, features); found shape {shape} dtype {dtype}")
        return None
    N, R, F = (int(d) for d in X.shape)
    if N < 1 or R < 2 or F < 1:
        problem(f"'X' has shape {X.shape}; need at least 1 dataset, 2 rows and 1 feature")
        return None
    Y = None
    if "y" in f:
        Y = f["y"]
        if not isinstance(Y, h5py.Dataset) or Y.dtype.kind not in "fiu" or Y.shape != (N, R):
            problem(f"'y' must be a numeric (N, rows) = {(N, R)} array like X's first two dims; "
                    f"found shape {getattr(Y, 'shape', None)} dtype {getattr(Y, 'dtype', 'group')}")
            Y = None

    def metadata(key: str) -> np.ndarray | None:
        d = f[key]
        if not isinstance(d, h5py.Dataset) or d.dtype.kind not in "fiu" or d.ndim > 1:
            problem(f"'{key}' must be a numeric (N,) array; found shape {getattr(d, 'shape', None)} "
                    f"dtype {getattr(d, 'dtype', 'group')}")
            return None
        a = np.asarray(d[()]).reshape(-1)
        if a.size == 1:
            a = np.full(N, a[0])  # upstream variant: one value for every dataset
        elif a.size != N:
            problem(f"'{key}' has length {a.size}, expected {N} (one per dataset) or 1")
            return None
        if a.dtype.kind == "f" and (not np.isfinite(a).all() or (a != np.round(a)).any()):
            problem(f"'{key}' must hold integers")
            return None
        return a.astype(np.int64)

    num_features = metadata("num_features") if "num_features" in f else None
    num_datapoints = metadata("num_datapoints") if "num_datapoints" in f else np.full(N, R, np.int64)
    splits = metadata(split_key) if split_key is not None else None

    def first_outside(values, low, high):
        """Index of the first value outside [low, high] (high may be per dataset), or None."""
        bad = (values < low) | (values > high)
        return int(np.argmax(bad)) if bad.any() else None

    if num_features is not None and (i := first_outside(num_features, 1, F)) is not None:
        problem(f"'num_features' must be in 1..{F} (the stored width); dataset {i} has {num_features[i]}")
        num_features = None
    if num_datapoints is not None and (i := first_outside(num_datapoints, 2, R)) is not None:
        problem(f"'num_datapoints' must be in 2..{R} (the stored rows); dataset {i} has {num_datapoints[i]}")
        num_datapoints = None
    limit = num_datapoints if num_datapoints is not None else np.full(N, R, np.int64)
    if splits is not None and (i := first_outside(splits, 1, limit - 1)) is not None:
        problem(f"'{split_key}' must be in 1..num_datapoints-1; dataset {i} has split "
                f"{splits[i]} with {limit[i]} datapoints")
        splits = None

    max_num_classes = None
    if "max_num_classes" in f:
        m = np.asarray(f["max_num_classes"][()]).reshape(-1)
        if m.size < 1 or m.dtype.kind not in "fiu" or not np.isfinite(m[0]) or m[0] < 1 \
                or m[0] != np.round(m[0]):
            problem(f"'max_num_classes' must be a positive integer; found {m.tolist()}")
        else:
            max_num_classes = int(m[0])
    original_batch_size = 1  # upstream dumps without the key: every dataset is its own block
    if "original_batch_size" in f:
        o = np.asarray(f["original_batch_size"][()]).reshape(-1)
        if o.size < 1 or o.dtype.kind not in "fiu" or not np.isfinite(o[0]) or o[0] < 1:
            problem(f"'original_batch_size' must be a positive integer; found {o.tolist()}")
        else:
            original_batch_size = int(o[0])

    # Values: X must be finite, y must be class indices. Read in bounded chunks (a 3 GB dump never
    # sits in memory at once). y is always scanned when max_num_classes must be inferred from it.
    scan_x = scan_values
    scan_y = Y is not None and (scan_values or max_num_classes is None)
    y_max = -1.0
    if scan_x or scan_y:
        chunk = max(1, SCAN_CHUNK_BYTES // (R * F * 4))
        for first in range(0, N, chunk):
            if not (scan_x or scan_y):
                break
            x = X[first:first + chunk] if scan_x else None
            y = Y[first:first + chunk] if scan_y else None
            x_problem, y_problem = _scan_values_problems(x, y, first, max_num_classes)
            if x_problem:
                problem(x_problem)
                scan_x = False
            if y_problem:
                problem(y_problem)
                scan_y = False
            elif y is not None and y.size:
                y_max = max(y_max, float(np.max(y)))
    if max_num_classes is None:
        max_num_classes = max(1, int(y_max) + 1)

    if num_features is None or num_datapoints is None or splits is None or Y is None:
        return None
    return DumpInfo(path=path, num_datasets=N, rows=R, features=F, num_features=num_features,
                    num_datapoints=num_datapoints, splits=splits, max_num_classes=max_num_classes,
                    original_batch_size=original_batch_size, split_key=split_key,
                    size_bytes=int(stat.st_size), mtime_ns=int(stat.st_mtime_ns))


def open_dump(path, scan_values: bool = True) -> DumpInfo:
    """Opens and validates a nanoTabPFN dump.

    Args:
        path: the HDF5 dump.
        scan_values: also scan X for NaN/Inf and y for class indices (chunked, bounded memory).

    Returns:
        DumpInfo with the metadata arrays as numpy (N,) int64 (length-1 arrays broadcast).

    Raises:
        DumpError: one line naming the first problem (missing file, not HDF5, truncated, missing
            key, wrong dtype/shape, NaN/Inf, out-of-range metadata).
    """
    info, _ = _inspect_dump(path, scan_values=scan_values, collect=False)
    assert info is not None
    return info


def check_dump(path) -> list[str]:
    """Lists every problem of a dump, one line each; an empty list means the dump is fine.

    Args:
        path: the HDF5 dump.

    Returns:
        list of one-line problem descriptions (used by prior_dump.py --check).
    """
    _, problems = _inspect_dump(path, scan_values=True, collect=True)
    return problems


# --------------------------------------------------------------------------------------------------
# Batch positions
# --------------------------------------------------------------------------------------------------


def batch_position(step: int, start: int, global_batch: int, num_datasets: int) -> int:
    """First dataset of the global batch at `step` (closed form, so resume and DDP ranks agree).

    Positions go start, start+G, start+2G, ...; whenever the next global batch would run past the end
    of the dump the position wraps to 0, so every batch is full. No loop over steps.

    Args:
        step: 0-based step (batches already consumed).
        start: position of step 0 (0 <= start < num_datasets); wraps at once if start+G > N.
        global_batch: G = batch_size * world_size (<= num_datasets).
        num_datasets: N.

    Returns:
        int position p; rank r of W reads datasets [p + r*B, p + (r+1)*B).
    """
    G, N = int(global_batch), int(num_datasets)
    if not 1 <= G <= N:
        raise ValueError(f"global batch {G} must be in 1..{N} (the number of datasets)")
    if not 0 <= start < N:
        raise ValueError(f"start {start} must be in 0..{N - 1}")
    if step < 0:
        raise ValueError(f"step {step} must be >= 0")
    first_run = (N - start) // G  # full batches from `start` before the first wrap
    if step < first_run:
        return start + step * G
    return ((step - first_run) % (N // G)) * G


def _batch_wrapped(step: int, start: int, global_batch: int, num_datasets: int) -> bool:
    """True for the first batch after a wrap to dataset 0."""
    first_run = (num_datasets - start) // global_batch
    return step >= first_run and (step - first_run) % (num_datasets // global_batch) == 0


class Batch(NamedTuple):
    """One training batch.

    x: (B, rows, feats) float32 on the device (rows/feats = the slice's max num_datapoints/features).
    y: (B, rows) float32 class indices on the device.
    split: the train/test split index of the slice's first dataset.
    wrapped: True for the first batch after the loader wrapped to dataset 0.
    """

    x: torch.Tensor
    y: torch.Tensor
    split: int
    wrapped: bool


class _Slice(NamedTuple):
    step: int
    first: int  # first dataset of this rank's slice
    rows: int
    feats: int
    split: int
    wrapped: bool


# --------------------------------------------------------------------------------------------------
# The .bin format (defined once; convert_h5.py writes it, the bin loader reads it)
# --------------------------------------------------------------------------------------------------

BIN_MAGIC = "nanotabpfn-dump-bin"
BIN_FORMAT_VERSION = 1
BIN_ALIGNMENT = 4096  # the GPU page size: cuFile can only DMA page-aligned spans straight to the GPU
BIN_DTYPE = "<f4"     # X and y records are little-endian float32


def bin_paths(dump_path, out_dir=None) -> tuple[str, str, str]:
    """Names of a dump's .bin conversion: (`<dump>.X.bin`, `<dump>.y.bin`, `<dump>.bin.json`).

    Args:
        dump_path: the HDF5 dump.
        out_dir: folder of the conversion (default: next to the dump).

    Returns:
        (x_bin, y_bin, sidecar_json) paths.
    """
    dump_path = os.fspath(dump_path)
    folder = os.fspath(out_dir) if out_dir is not None else os.path.dirname(os.path.abspath(dump_path))
    base = os.path.join(folder, os.path.basename(dump_path))
    return base + ".X.bin", base + ".y.bin", base + ".bin.json"


def record_stride_bytes(rows: int, features: int = 1, itemsize: int = 4,
                        alignment: int = BIN_ALIGNMENT) -> int:
    """Bytes between consecutive dataset records: rows*features*itemsize rounded up to `alignment`.

    Args:
        rows, features: record shape (features=1 for y).
        itemsize: bytes per value (4 for float32).
        alignment: 4096 (the page size GDS needs).

    Returns:
        int stride in bytes (a multiple of alignment).
    """
    raw = int(rows) * int(features) * int(itemsize)
    return -(-raw // alignment) * alignment


def metadata_sha256(num_features, num_datapoints, splits) -> str:
    """sha256 of the per-dataset metadata (as little-endian int64), the sidecar's checksum."""
    digest = hashlib.sha256()
    for a in (num_features, num_datapoints, splits):
        digest.update(np.ascontiguousarray(np.asarray(a, dtype="<i8")).tobytes())
    return digest.hexdigest()


def _bin_meta(info: DumpInfo, x_bin: str, y_bin: str) -> dict:
    """The sidecar dictionary for a dump (written by write_sidecar, asserted by read_sidecar)."""
    N, R, F = info.num_datasets, info.rows, info.features
    x_stride, y_stride = record_stride_bytes(R, F), record_stride_bytes(R, 1)
    return {
        "magic": BIN_MAGIC,
        "format_version": BIN_FORMAT_VERSION,
        "alignment": BIN_ALIGNMENT,
        "dtype": BIN_DTYPE,
        "layout": "record i of X.bin at i*x_stride_bytes: (rows, features) row-major float32, "
                  "zero padded; record i of y.bin at i*y_stride_bytes: (rows,) float32",
        "num_datasets": N, "rows": R, "features": F,
        "x_record_bytes": R * F * 4, "x_stride_bytes": x_stride,
        "y_record_bytes": R * 4, "y_stride_bytes": y_stride,
        "x_file": os.path.basename(x_bin), "y_file": os.path.basename(y_bin),
        "x_size_bytes": N * x_stride, "y_size_bytes": N * y_stride,
        "split_key": info.split_key,
        "max_num_classes": int(info.max_num_classes),
        "original_batch_size": int(info.original_batch_size),
        "source": {"path": os.path.abspath(info.path), "size_bytes": int(info.size_bytes),
                   "mtime_ns": int(info.mtime_ns)},
        "metadata_sha256": metadata_sha256(info.num_features, info.num_datapoints, info.splits),
        "num_features": [int(v) for v in info.num_features],
        "num_datapoints": [int(v) for v in info.num_datapoints],
        "splits": [int(v) for v in info.splits],
    }


def write_sidecar(sidecar_path, info: DumpInfo, x_bin, y_bin) -> dict:
    """Writes the JSON sidecar atomically (temp name in the same folder, fsync, os.replace).

    Write it LAST, after both .bin files are in place: a loader accepts a conversion only through it.

    Args:
        sidecar_path: `<dump>.bin.json`.
        info: the source dump's DumpInfo.
        x_bin, y_bin: the .bin files (stored by base name, next to the sidecar).

    Returns:
        the sidecar dictionary.
    """
    meta = _bin_meta(info, os.fspath(x_bin), os.fspath(y_bin))
    sidecar_path = os.fspath(sidecar_path)
    tmp = f"{sidecar_path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as out:
            json.dump(meta, out, separators=(",", ":"))
            out.flush()
            os.fsync(out.fileno())  # the sidecar must not reach its final name before its bytes do
        os.replace(tmp, sidecar_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return meta


def read_sidecar(sidecar_path, dump_info: DumpInfo) -> dict:
    """Reads a sidecar and asserts that it and its .bin files match the dump.

    Checks the magic and format version, dtype and alignment, shapes, strides, both .bin sizes
    (== N * stride), the source file's size and mtime_ns, the per-dataset metadata arrays and their
    sha256.

    Args:
        sidecar_path: `<dump>.bin.json`.
        dump_info: DumpInfo of the source dump.

    Returns:
        the sidecar dictionary, plus "x_path" and "y_path" (absolute .bin paths).

    Raises:
        BinFormatError: one line; `.reason` says missing / partial / stale / corrupt / older / newer.
    """
    sidecar_path = os.fspath(sidecar_path)

    def fail(message: str, reason: str):
        raise BinFormatError(f"{sidecar_path}: {message}", reason)

    if not os.path.exists(sidecar_path):
        fail("no .bin conversion (sidecar missing)", "missing")
    try:
        with open(sidecar_path) as handle:
            meta = json.load(handle)
    except (OSError, ValueError) as exc:
        fail(f"sidecar is not readable JSON ({_one_line(exc)})", "corrupt")
    if not isinstance(meta, dict) or meta.get("magic") != BIN_MAGIC:
        fail(f"not a {BIN_MAGIC} sidecar (magic {meta.get('magic') if isinstance(meta, dict) else None!r})",
             "corrupt")
    version = meta.get("format_version")
    if not isinstance(version, int):
        fail(f"format_version {version!r} is not an integer", "corrupt")
    if version > BIN_FORMAT_VERSION:
        fail(f"written by a newer format version {version} (this loaders.py reads version "
             f"{BIN_FORMAT_VERSION}); update loaders.py or delete the .bin files", "newer")
    if version < BIN_FORMAT_VERSION:
        fail(f"written by an older format version {version} (expected {BIN_FORMAT_VERSION})", "older")
    expected = _bin_meta(dump_info, meta.get("x_file", ""), meta.get("y_file", ""))
    for key in ("dtype", "alignment", "num_datasets", "rows", "features", "x_record_bytes",
                "x_stride_bytes", "y_record_bytes", "y_stride_bytes", "x_size_bytes", "y_size_bytes"):
        if meta.get(key) != expected[key]:
            reason = "stale" if key in ("num_datasets", "rows", "features") else "corrupt"
            fail(f"{key} is {meta.get(key)!r}, expected {expected[key]!r} for {dump_info.path}", reason)
    folder = os.path.dirname(os.path.abspath(sidecar_path))
    paths = {}
    for which in ("x", "y"):
        name = meta.get(f"{which}_file")
        if not isinstance(name, str) or not name or os.path.basename(name) != name:
            fail(f"{which}_file {name!r} is not a file name", "corrupt")
        p = os.path.join(folder, name)
        if not os.path.exists(p):
            fail(f"{name} is missing (partial conversion)", "partial")
        size = os.path.getsize(p)
        if size != expected[f"{which}_size_bytes"]:
            fail(f"{name} is {size} bytes, expected N*stride = {expected[f'{which}_size_bytes']} "
                 f"(partial or foreign file)", "partial")
        paths[f"{which}_path"] = p
    source = meta.get("source") or {}
    if source.get("size_bytes") != dump_info.size_bytes or source.get("mtime_ns") != dump_info.mtime_ns:
        fail(f"stale: the source {dump_info.path} changed since the conversion (size/mtime "
             f"{source.get('size_bytes')}/{source.get('mtime_ns')} -> "
             f"{dump_info.size_bytes}/{dump_info.mtime_ns})", "stale")
    arrays = [meta.get(k) for k in ("num_features", "num_datapoints", "splits")]
    if any(not isinstance(a, list) or len(a) != dump_info.num_datasets for a in arrays):
        fail("per-dataset metadata arrays missing or of the wrong length", "corrupt")
    if metadata_sha256(*arrays) != meta.get("metadata_sha256"):
        fail("metadata checksum mismatch (sidecar edited or damaged)", "corrupt")
    if meta.get("metadata_sha256") != expected["metadata_sha256"]:
        fail(f"stale: per-dataset metadata differs from {dump_info.path}", "stale")
    meta.update(paths)
    return meta


# --------------------------------------------------------------------------------------------------
# Sources: one batch slice of the dump, read with one call per array
# --------------------------------------------------------------------------------------------------


def _as_float32(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.float32 else a.astype(np.float32)


class _H5Source:
    """h5py reads of [first, first+B) x [:rows] x [:feats]: one hyperslab read per array per batch."""

    name = "h5py"

    def __init__(self, info: DumpInfo):
        self.path = info.path
        self.file = h5py.File(info.path, "r")
        self.X = self.file["X"]
        self.y = self.file["y"]

    def read(self, first: int, count: int, rows: int, feats: int) -> tuple[np.ndarray, np.ndarray]:
        """Fresh arrays, exactly upstream's slice: X[p:p+B, :rows, :feats], y[p:p+B, :rows]."""
        try:
            x = self.X[first:first + count, :rows, :feats]
            y = self.y[first:first + count, :rows]
        except OSError as exc:
            raise DumpError(f"{self.path}: read of datasets {first}..{first + count - 1} failed "
                            f"({exc})") from exc
        return _as_float32(x), _as_float32(y)

    def read_into(self, x_out: np.ndarray, y_out: np.ndarray, first: int, rows: int, feats: int):
        """HDF5 writes the hyperslab straight into x_out (B, rows, feats) / y_out (B, rows): no copy.

        read_direct needs a C-contiguous destination of the selection's shape, so the caller passes
        a contiguous view over the first B*rows*feats elements of a larger (pinned) buffer.
        """
        count = x_out.shape[0]
        try:
            self.X.read_direct(x_out, source_sel=np.s_[first:first + count, :rows, :feats])
            self.y.read_direct(y_out, source_sel=np.s_[first:first + count, :rows])
        except OSError as exc:
            raise DumpError(f"{self.path}: read of datasets {first}..{first + count - 1} failed "
                            f"({exc})") from exc

    def close(self):
        self.file.close()


class _MemmapSource:
    """numpy memmap of the .bin records; a batch is one strided view, copied in one numpy call."""

    name = "memmap"

    def __init__(self, info: DumpInfo, meta: dict):
        N, self.R, self.F = info.num_datasets, info.rows, info.features
        self.X = np.memmap(meta["x_path"], dtype=BIN_DTYPE, mode="r",
                           shape=(N, meta["x_stride_bytes"] // 4))
        self.y = np.memmap(meta["y_path"], dtype=BIN_DTYPE, mode="r",
                           shape=(N, meta["y_stride_bytes"] // 4))

    def _views(self, first: int, count: int, rows: int, feats: int):
        # (B, stride/4) -> drop padding -> (B, R, F) (a view: only the last axis is split) -> slice.
        x = self.X[first:first + count, :self.R * self.F].reshape(count, self.R, self.F)
        return x[:, :rows, :feats], self.y[first:first + count, :rows]

    def read(self, first: int, count: int, rows: int, feats: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = self._views(first, count, rows, feats)
        return np.array(x, dtype=np.float32), np.array(y, dtype=np.float32)  # copies off the mapping

    def read_into(self, x_out: np.ndarray, y_out: np.ndarray, first: int, rows: int, feats: int):
        x, y = self._views(first, x_out.shape[0], rows, feats)
        np.copyto(x_out, x)
        np.copyto(y_out, y)

    def close(self):
        # np.memmap has no close(); dropping the references unmaps once nothing else views them.
        self.X = self.y = None


# --------------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------------


class Loader:
    """Base of every loader: an infinite iterator of Batch with resumable position.

    Subclasses implement `_fetch(step)`; prefetching ones also `_start_workers()` / `_stop_workers()`.
    """

    def __init__(self, info: DumpInfo, batch_size: int, device: torch.device, *, loader_name: str,
                 start: int = 0, rank: int = 0, world_size: int = 1, consumed: int = 0):
        self.info = info
        self.batch_size = int(batch_size)
        self.device = device
        self.cuda = device.type == "cuda"
        self.loader_name = loader_name
        self.path = ""
        self.start = int(start)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.consumed = int(consumed)
        self.notes: list[str] = []
        self._closed = False
        self._global_batch = self.batch_size * self.world_size

    # positions ----------------------------------------------------------------------------------
    def _slice(self, step: int) -> _Slice:
        """This rank's datasets at `step` and the batch shape (max rows/features of the slice)."""
        G, N, B = self._global_batch, self.info.num_datasets, self.batch_size
        first = batch_position(step, self.start, G, N) + self.rank * B
        rows = int(self.info.num_datapoints[first:first + B].max())
        feats = int(self.info.num_features[first:first + B].max())
        return _Slice(step, first, rows, feats, int(self.info.splits[first]),
                      _batch_wrapped(step, self.start, G, N))

    # iteration ----------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if self._closed:
            raise RuntimeError("loader is closed")
        batch = self._fetch(self.consumed)
        self.consumed += 1
        if batch.wrapped and self.rank == 0:
            print(f"loader: end of dump ({self.info.num_datasets} datasets) reached, wrapping to "
                  f"dataset 0", flush=True)
        return batch

    def _fetch(self, step: int) -> Batch:
        raise NotImplementedError

    # bookkeeping --------------------------------------------------------------------------------
    def describe(self) -> dict:
        """{"loader": requested kind and flags, "path": what really runs, "notes": one-line notices}."""
        return {"loader": self.loader_name, "path": self.path, "notes": list(self.notes)}

    def state_dict(self) -> dict:
        """Position of the loader; a new loader with consumed=state["consumed"] continues exactly."""
        return {"start": self.start, "consumed": self.consumed, "batch_size": self.batch_size,
                "rank": self.rank, "world_size": self.world_size,
                "num_datasets": self.info.num_datasets}

    def load_state_dict(self, state: dict) -> None:
        """Continues at batch state["consumed"] from state["start"] (prefetchers restart there).

        Raises:
            ValueError: the state was saved with another batch size, world size or dump size.
        """
        for key in ("batch_size", "world_size", "num_datasets"):
            mine = self.state_dict()[key]
            if int(state[key]) != mine:
                raise ValueError(f"loader state has {key}={state[key]}, this loader has {mine}")
        self._stop_workers()
        self.start, self.consumed = int(state["start"]), int(state["consumed"])
        self._start_workers()

    def _start_workers(self) -> None:
        pass

    def _stop_workers(self) -> None:
        pass

    def close(self) -> None:
        """Stops background threads and closes files; the loader cannot be iterated afterwards."""
        if self._closed:
            return
        self._closed = True
        self._stop_workers()
        self._close_resources()

    def _close_resources(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _SyncLoader(Loader):
    """Reads a batch on the calling thread, then a synchronous .to(device) (the baseline).

    Upstream reopens the HDF5 file every step; this keeps one handle open, the read itself (one
    hyperslab per array) is the same.
    """

    def __init__(self, info, batch_size, device, *, source_factory, path, **kw):
        super().__init__(info, batch_size, device, **kw)
        self.source = source_factory()
        self.path = path

    def _fetch(self, step: int) -> Batch:
        s = self._slice(step)
        x, y = self.source.read(s.first, self.batch_size, s.rows, s.feats)
        # Synchronous copies from pageable memory: the host waits for each transfer (the blog's
        # baseline; on CPU .to() returns the same tensor).
        return Batch(torch.from_numpy(x).to(self.device), torch.from_numpy(y).to(self.device),
                     s.split, s.wrapped)

    def _close_resources(self):
        self.source.close()


class _PinnedLoader(Loader):
    """h5py read_direct into a ring of page-locked buffers, then non_blocking copies (CUDA only)."""

    def __init__(self, info, batch_size, device, *, prefetch, **kw):
        super().__init__(info, batch_size, device, **kw)
        self.path = "h5py+pinned"
        self.source = _H5Source(info)
        B, R, F = self.batch_size, info.rows, info.features
        self.depth = max(1, int(prefetch))
        # Allocated ONCE at the maximum batch shape: pinning is a slow driver call (page-locking),
        # far too slow for every step. Each batch uses a contiguous view over the first
        # B*rows*feats elements, which is the layout read_direct and the copy need.
        self._pinned_x = [torch.empty(B * R * F, dtype=torch.float32, pin_memory=True)
                          for _ in range(self.depth)]
        self._pinned_y = [torch.empty(B * R, dtype=torch.float32, pin_memory=True)
                          for _ in range(self.depth)]
        # One event per buffer, recorded after its async copies: the buffer is refilled only once
        # its DMA has finished (torch's host allocator only guards frees, not our own rewrites).
        self._copy_done = [torch.cuda.Event() for _ in range(self.depth)]

    def _fetch(self, step: int) -> Batch:
        s = self._slice(step)
        B, k = self.batch_size, step % self.depth
        # Host waits here only if the copy issued from this buffer `depth` steps ago is still in
        # flight (rare with depth >= 2: that copy had a whole step of compute to finish).
        self._copy_done[k].synchronize()
        x_host = self._pinned_x[k][:B * s.rows * s.feats].view(B, s.rows, s.feats)
        y_host = self._pinned_y[k][:B * s.rows].view(B, s.rows)
        self.source.read_into(x_host.numpy(), y_host.numpy(), s.first, s.rows, s.feats)
        # Page-locked source: the DMA runs asynchronously and .to() returns at once; the copies are
        # queued on the current (compute) stream, so kernels using x/y run after they land.
        x = x_host.to(self.device, non_blocking=True)
        y = y_host.to(self.device, non_blocking=True)
        self._copy_done[k].record()
        return Batch(x, y, s.split, s.wrapped)

    def _close_resources(self):
        for event in self._copy_done:  # pinned buffers must outlive the DMAs reading them
            event.synchronize()
        self.source.close()


class _Failure:
    """An exception raised in a reader thread, carried to the consumer."""

    def __init__(self, exc: BaseException):
        self.exc = exc


class _Prefetcher:
    """One daemon reader thread running `produce(first_step, stop)` into a bounded queue.

    One thread, because h5py serialises every call behind a global lock: more readers would only
    queue on it; large reads from one thread are the fast way. The queue bound caps memory and
    lets close() stop a thread blocked on a full queue.
    """

    def __init__(self, produce, first_step: int, depth: int, name: str):
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(produce, first_step), name=name,
                                        daemon=True)
        self._thread.start()

    def _run(self, produce, first_step):
        items = None
        try:
            items = produce(first_step, self._stop)
            for item in items:
                if not self._put(item):
                    return
        except BaseException as exc:  # re-raised in the consumer, with its message
            self._put(_Failure(exc))
        finally:
            if items is not None:
                items.close()  # runs the producer's finally: closes its files

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def get(self):
        """Next item; re-raises the reader thread's exception (again on every later call)."""
        if self._failure is not None:
            raise self._failure
        while True:
            try:
                item = self._queue.get(timeout=0.5)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("loader reader thread stopped without a result")
        if isinstance(item, _Failure):
            self._failure = item.exc
            raise item.exc
        return item

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout: float = 30.0):
        self._stop.set()
        while True:  # unblock a put() waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout)


class _StreamLoader(Loader):
    """A reader thread fills host buffers; copies run on a side CUDA stream, `prefetch` batches ahead.

    pinned=True: the thread reads into a ring of page-locked buffers (read_direct), issues the
    non_blocking copy on the side stream and records an event; the consumer makes the compute stream
    wait on that event (the blog's double buffering). pinned=False: pageable arrays, so the driver
    stages each copy synchronously. On CPU (memmap source only) the thread just reads ahead.
    """

    def __init__(self, info, batch_size, device, *, source_factory, pinned, prefetch, path, **kw):
        super().__init__(info, batch_size, device, **kw)
        self.path = path
        self.pinned = bool(pinned) and self.cuda
        self.depth = max(1, int(prefetch))
        self._source_factory = source_factory
        self._prefetcher: _Prefetcher | None = None
        B, R, F = self.batch_size, info.rows, info.features
        if self.cuda:
            # A side stream for the copies, so they overlap the compute stream's kernels.
            self._side = torch.cuda.Stream(device=device)
        if self.pinned:
            # Allocated ONCE at max shape (page-locking is slow); each batch views a prefix.
            self._pinned_x = [torch.empty(B * R * F, dtype=torch.float32, pin_memory=True)
                              for _ in range(self.depth)]
            self._pinned_y = [torch.empty(B * R, dtype=torch.float32, pin_memory=True)
                              for _ in range(self.depth)]
            # Recorded on the side stream after the copies out of buffer k: the reader refills
            # buffer k only after that DMA finished.
            self._host_free = [torch.cuda.Event() for _ in range(self.depth)]
        self._start_workers()

    def _start_workers(self):
        self._prefetcher = _Prefetcher(self._produce, self.consumed, self.depth,
                                       name=f"loader-reader-{self.path}")

    def _stop_workers(self):
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def _produce(self, first_step: int, stop: threading.Event):
        """Reader thread: read batch `step` from disk, start its copy to the GPU, hand it over."""
        if self.cuda:
            torch.cuda.set_device(self.device)  # the thread's current device for events/allocations
        source = self._source_factory()
        try:
            step = first_step
            B = self.batch_size
            while not stop.is_set():
                s = self._slice(step)
                if self.pinned:
                    k = step % self.depth
                    # Blocks this thread (not the training loop) until the side-stream copy that
                    # last read buffer k has finished; only then may read_direct overwrite it.
                    self._host_free[k].synchronize()
                    x_host = self._pinned_x[k][:B * s.rows * s.feats].view(B, s.rows, s.feats)
                    y_host = self._pinned_y[k][:B * s.rows].view(B, s.rows)
                    source.read_into(x_host.numpy(), y_host.numpy(), s.first, s.rows, s.feats)
                else:
                    x_np, y_np = source.read(s.first, B, s.rows, s.feats)
                    x_host, y_host = torch.from_numpy(x_np), torch.from_numpy(y_np)
                if self.cuda:
                    with torch.cuda.stream(self._side):
                        # Allocated on and copied by the side stream. From pinned memory the DMA is
                        # asynchronous; from pageable memory the driver stages it synchronously.
                        x = x_host.to(self.device, non_blocking=True)
                        y = y_host.to(self.device, non_blocking=True)
                        ready = torch.cuda.Event()
                        ready.record(self._side)  # the consumer's compute stream waits on this
                    if self.pinned:
                        self._host_free[k].record(self._side)
                else:
                    x, y, ready = x_host, y_host, None
                yield step, x, y, ready, s.split, s.wrapped
                step += 1
        finally:
            source.close()

    def _fetch(self, step: int) -> Batch:
        item_step, x, y, ready, split, wrapped = self._prefetcher.get()
        assert item_step == step, f"reader thread is at step {item_step}, consumer at {step}"
        if self.cuda:
            compute = torch.cuda.current_stream(self.device)
            # GPU-side wait, the host does not block: kernels queued on the compute stream after
            # this point start only once the side-stream copy of this batch has landed.
            compute.wait_event(ready)
            # x/y were allocated on the side stream. Without record_stream, freeing them after the
            # step would let the caching allocator hand their memory to the next side-stream copy
            # while compute kernels queued on this stream may still read them.
            x.record_stream(compute)
            y.record_stream(compute)
        return Batch(x, y, split, wrapped)

    def _close_resources(self):
        if self.pinned:
            for event in self._host_free:  # pinned buffers must outlive the DMAs reading them
                event.synchronize()


class _KvikioLoader(Loader):
    """kvikio reads whole batch spans of the .bin files (one pread per array per batch).

    Records [first, first+B) of X.bin / y.bin are one contiguous, 4 KiB-aligned span each, read by
    a reader thread with kvikio's thread pool. Two targets:

    target="device" (the gds path): the span lands in a ring of preallocated CUDA slot buffers by
        DMA from disk. The consumer copies the (B, rows, feats) batch out of slot k on the compute
        stream, records `slot_free[k]` and returns the slot's token; the reader takes a token and
        waits for that event before refilling slot k.
    target="host" (every other path): the span lands in a ring of page-locked host slots (kvikio's
        POSIX reads, no CUDA call), is copied whole to the GPU on a side stream, and the consumer
        slices the batch out of it on the compute stream after waiting for the copy's event.
        Why not read into CUDA memory here too: outside GPUDirect Storage kvikio stages through a
        bounce buffer and copies on its own per-thread CUDA streams, created blocking
        (CU_STREAM_DEFAULT), so each read queues behind the training loop's kernels on the legacy
        default stream and nothing overlaps (measured on an H200: 0.45 ms read + 1.0 ms compute
        = 1.45 ms per step).
    """

    def __init__(self, info, batch_size, device, *, meta, kvikio, io_path, target, prefetch,
                 threads, **kw):
        super().__init__(info, batch_size, device, **kw)
        self.path = io_path
        self.meta = meta
        self.target = target
        self._kvikio = kvikio
        self.depth = max(1, int(prefetch))
        self.threads = int(threads)
        B = self.batch_size
        self._x_stride, self._y_stride = meta["x_stride_bytes"], meta["y_stride_bytes"]
        # Preallocated once, B whole records each: kvikio writes straight into these buffers.
        on_host = target == "host"
        self._slot_x = [torch.empty(B * self._x_stride, dtype=torch.uint8,
                                    device="cpu" if on_host else device, pin_memory=on_host)
                        for _ in range(self.depth)]
        self._slot_y = [torch.empty(B * self._y_stride, dtype=torch.uint8,
                                    device="cpu" if on_host else device, pin_memory=on_host)
                        for _ in range(self.depth)]
        # kvikio takes CUDA memory through __cuda_array_interface__ and host memory through the
        # buffer protocol, which CPU tensors lack: hand it numpy views of the pinned host slots.
        self._io_x = [t.numpy() if on_host else t for t in self._slot_x]
        self._io_y = [t.numpy() if on_host else t for t in self._slot_y]
        # device: recorded by the consumer on the compute stream after its copy out of slot k.
        # host: recorded on the side stream after the copy out of host slot k.
        self._slot_free = [torch.cuda.Event() for _ in range(self.depth)]
        if on_host:
            self._side = torch.cuda.Stream(device=device)  # copies overlap the compute stream
        self._prefetcher: _Prefetcher | None = None
        self._start_workers()

    def _start_workers(self):
        # One token per slot (device target): the consumer returns it after it recorded
        # slot_free[k] behind its copy, so the reader never refills a slot whose batch has not
        # been copied out yet. The host target needs none: only the side-stream copy reads a host
        # slot, and slot_free[k] follows that copy.
        self._tokens = threading.Semaphore(self.depth)
        self._prefetcher = _Prefetcher(self._produce, self.consumed, self.depth,
                                       name=f"loader-reader-{self.path}")

    def _stop_workers(self):
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def _records(self, flat: torch.Tensor, stride: int, width: int) -> torch.Tensor:
        """(B * stride) bytes -> (B, width) float32 view without the padding of each record."""
        return flat.view(torch.float32).view(self.batch_size, stride // 4)[:, :width]

    def _produce(self, first_step: int, stop: threading.Event):
        """Reader thread: one pread per array per batch into slot step % depth."""
        torch.cuda.set_device(self.device)
        kvikio = self._kvikio
        fx = kvikio.CuFile(self.meta["x_path"], "r")
        fy = kvikio.CuFile(self.meta["y_path"], "r")
        B, on_host = self.batch_size, self.target == "host"
        nx, ny = B * self._x_stride, B * self._y_stride
        try:
            step = first_step
            while True:
                if not on_host:
                    while not self._tokens.acquire(timeout=0.05):
                        if stop.is_set():
                            return
                if stop.is_set():
                    return
                s = self._slice(step)
                k = step % self.depth
                # device: the consumer's copy out of slot k is queued on the compute stream behind
                # this event; GDS writes outside any stream, so wait for it here, on the host.
                # host: the side-stream copy out of host slot k must be done before kvikio
                # overwrites it.
                self._slot_free[k].synchronize()
                # Both arrays in flight at once on kvikio's thread pool; each is one whole-batch
                # span, split into tasks of >= 1 MiB so several kvikio threads share it.
                fut_x = fx.pread(self._io_x[k], nx, s.first * self._x_stride, self._task_size(nx))
                fut_y = fy.pread(self._io_y[k], ny, s.first * self._y_stride, self._task_size(ny))
                got_x, got_y = fut_x.get(), fut_y.get()  # blocks this thread until the bytes landed
                if got_x != nx or got_y != ny:
                    raise DumpError(f"{self.meta['x_path']}: short read at dataset {s.first} "
                                    f"({got_x}/{nx} and {got_y}/{ny} bytes): truncated .bin?")
                if on_host:
                    with torch.cuda.stream(self._side):
                        # Whole spans (padding included: one contiguous DMA each) from page-locked
                        # memory, so the copy is asynchronous; allocated on the side stream.
                        span_x = self._slot_x[k].to(self.device, non_blocking=True)
                        span_y = self._slot_y[k].to(self.device, non_blocking=True)
                        ready = torch.cuda.Event()
                        ready.record(self._side)  # the compute stream waits on this
                        self._slot_free[k].record(self._side)
                    yield step, s, span_x, span_y, ready
                else:
                    yield step, s, k, None, None
                step += 1
        finally:
            fx.close()
            fy.close()

    def _task_size(self, nbytes: int) -> int:
        per_thread = -(-nbytes // max(1, self.threads))
        return max(1 << 20, record_stride_bytes(per_thread, 1, 1))

    def _fetch(self, step: int) -> Batch:
        item_step, s, a, b, ready = self._prefetcher.get()
        assert item_step == step, f"reader thread is at step {item_step}, consumer at {step}"
        compute = torch.cuda.current_stream(self.device)
        B, R, F = self.batch_size, self.info.rows, self.info.features
        if self.target == "host":
            span_x, span_y = a, b
            # GPU-side wait (the host does not block): the slicing copy below reads the spans
            # only after their side-stream copy landed.
            compute.wait_event(ready)
            # The spans were allocated on the side stream and are read here by the compute stream:
            # without record_stream their memory could go to the next side-stream copy while this
            # copy is still queued.
            span_x.record_stream(compute)
            span_y.record_stream(compute)
        else:
            span_x, span_y = self._slot_x[a], self._slot_y[a]
        # A contiguous (B, rows, feats) copy on the compute stream: the batch owns its memory, so
        # the span or slot can be reused once this copy has run.
        x = torch.empty((B, s.rows, s.feats), dtype=torch.float32, device=self.device)
        y = torch.empty((B, s.rows), dtype=torch.float32, device=self.device)
        x.copy_(self._records(span_x, self._x_stride, R * F).view(B, R, F)[:, :s.rows, :s.feats])
        y.copy_(self._records(span_y, self._y_stride, R)[:, :s.rows])
        if self.target == "device":
            # kvikio finished writing slot a before the item was queued (future.get() returned);
            # this event marks when our copy out of it has run, the token lets the reader go on.
            self._slot_free[a].record(compute)
            self._tokens.release()
        return Batch(x, y, s.split, s.wrapped)

    def _close_resources(self):
        for event in self._slot_free:  # no DMA may still read or write the slot buffers
            event.synchronize()


class _ResidentLoader(Loader):
    """The whole dump held in device memory (GPU, or host RAM on CPU); batches are sliced there."""

    def __init__(self, info, batch_size, device, **kw):
        super().__init__(info, batch_size, device, **kw)
        self.path = "resident-cuda" if self.cuda else "resident-host"
        self.X, self.y = _load_whole_dump(info, device)

    def _fetch(self, step: int) -> Batch:
        s = self._slice(step)
        B = self.batch_size
        # A contiguous copy (device to device on the GPU): the batch never aliases the resident
        # dump, so in-place work on x cannot corrupt it; no host-to-device transfer per step.
        x = self.X[s.first:s.first + B, :s.rows, :s.feats].clone(memory_format=torch.contiguous_format)
        y = self.y[s.first:s.first + B, :s.rows].clone(memory_format=torch.contiguous_format)
        return Batch(x, y, s.split, s.wrapped)

    def _close_resources(self):
        self.X = self.y = None


def _load_whole_dump(info: DumpInfo, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Reads X (N, R, F) and y (N, R) into `device` memory in bounded chunks."""
    N, R, F = info.num_datasets, info.rows, info.features
    X = torch.empty((N, R, F), dtype=torch.float32, device=device)
    y = torch.empty((N, R), dtype=torch.float32, device=device)
    chunk = max(1, SCAN_CHUNK_BYTES // (R * F * 4))
    with h5py.File(info.path, "r") as f:
        if device.type != "cuda":
            for first in range(0, N, chunk):
                sel = np.s_[first:first + chunk]
                f["X"].read_direct(X.numpy(), source_sel=sel, dest_sel=sel)
                f["y"].read_direct(y.numpy(), source_sel=sel, dest_sel=sel)
            return X, y
        # Two pinned staging buffers: chunk i+1 is read from disk while chunk i's copy is in flight.
        staging_x = [torch.empty(chunk * R * F, dtype=torch.float32, pin_memory=True) for _ in range(2)]
        staging_y = [torch.empty(chunk * R, dtype=torch.float32, pin_memory=True) for _ in range(2)]
        done = [torch.cuda.Event() for _ in range(2)]
        for i, first in enumerate(range(0, N, chunk)):
            k, count = i % 2, min(chunk, N - first)
            done[k].synchronize()  # the copy out of staging buffer k (two chunks ago) has finished
            xs = staging_x[k][:count * R * F].view(count, R, F)
            ys = staging_y[k][:count * R].view(count, R)
            f["X"].read_direct(xs.numpy(), source_sel=np.s_[first:first + count])
            f["y"].read_direct(ys.numpy(), source_sel=np.s_[first:first + count])
            X[first:first + count].copy_(xs, non_blocking=True)  # async DMA from pinned memory
            y[first:first + count].copy_(ys, non_blocking=True)
            done[k].record()
        for event in done:  # staging buffers are freed on return: their DMAs must be finished
            event.synchronize()
    return X, y


def _free_memory_bytes(device: torch.device) -> int:
    """Free memory where a resident dump would live: GPU free memory, or available host RAM."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


# --------------------------------------------------------------------------------------------------
# kvikio path detection
# --------------------------------------------------------------------------------------------------


def _import_kvikio():
    """Returns (kvikio module or None, one-line reason when missing)."""
    try:
        import kvikio  # noqa: F401  (optional: kvikio-cu13 on the GPU machine only)
        import kvikio.defaults  # noqa: F401
        return kvikio, ""
    except Exception as exc:  # ImportError, or OSError/RuntimeError from a broken libkvikio
        return None, f"kvikio not importable ({type(exc).__name__}: {_one_line(exc)})"


def _kvikio_set_threads(kvikio, threads: int) -> None:
    """Sets kvikio's thread pool size: new API defaults.set, old API defaults.num_threads_reset."""
    defaults = kvikio.defaults
    if hasattr(defaults, "set"):
        defaults.set({"num_threads": int(threads)})
    else:
        defaults.num_threads_reset(int(threads))


def _kvikio_compat_mode(kvikio):
    """kvikio's compat mode setting (CompatMode.ON/OFF/AUTO on new versions, bool on old ones)."""
    defaults = kvikio.defaults
    if hasattr(defaults, "get"):
        return defaults.get("compat_mode")
    return defaults.compat_mode()


def _cufile_property(kvikio, name: str):
    """A cuFile driver property (is_gds_available, allow_compat_mode), or None if unreadable."""
    try:
        import kvikio.cufile_driver as driver
        if hasattr(driver, "get"):
            return driver.get(name)
        return getattr(driver.properties, name)
    except Exception:
        pass
    try:
        return getattr(kvikio.DriverProperties(), name)  # older kvikio
    except Exception:
        return None


def kvikio_io_path(kvikio) -> tuple[str, str]:
    """The path kvikio takes for reads into CUDA memory: ("gds" | "cufile-compat" | "kvikio-posix", why).

    gds only when kvikio is not in compat mode and the cuFile driver reports GPUDirect Storage
    available; cufile-compat when kvikio uses cuFile but cuFile itself runs its compat mode;
    kvikio-posix when kvikio runs its own POSIX path (pread into a bounce buffer, then cudaMemcpy).
    (The bin loader reads into pinned host memory unless the path is gds; such reads are always
    kvikio's POSIX reads, and the loader reports "kvikio-posix" for them.)

    Args:
        kvikio: the imported kvikio module.

    Returns:
        (path, one-line reason). The reason never says "GDS" for a path that is not gds.
    """
    mode = _kvikio_compat_mode(kvikio)
    mode_name = getattr(mode, "name", str(mode))
    try:
        preferred = bool(kvikio.defaults.is_compat_mode_preferred())
    except Exception:
        preferred = mode is True or mode_name.upper().endswith("ON")
    if preferred:
        return "kvikio-posix", f"kvikio compat mode {mode_name}: cuFile not in use"
    if _cufile_property(kvikio, "is_gds_available") is True:
        return "gds", "cuFile driver reports GPUDirect Storage available: disk -> GPU DMA"
    if _cufile_property(kvikio, "allow_compat_mode") is False:
        # cuFile refuses its compat mode, so kvikio (in AUTO) falls back to its own POSIX reads.
        return "kvikio-posix", (f"kvikio compat mode {mode_name}; no GPUDirect Storage driver and "
                                f"cuFile compat mode disallowed")
    return "cufile-compat", "cuFile in its own compat mode (no GPUDirect Storage driver)"


# --------------------------------------------------------------------------------------------------
# Conversion check for the bin loader
# --------------------------------------------------------------------------------------------------


def ensure_bin(info: DumpInfo, *, bin_dir=None, no_convert: bool = False, notes: list | None = None,
               progress: bool = True) -> dict:
    """Returns a valid sidecar for the dump's .bin conversion, converting when needed.

    A missing, partial, stale or corrupt conversion is reported in one line (appended to `notes`)
    and redone with convert_h5.convert; with no_convert=True it raises instead. A sidecar from a
    newer format version always raises (never overwrite a newer tool's files).

    Args:
        info: the dump.
        bin_dir: folder of the conversion (default next to the dump).
        no_convert: raise instead of converting.
        notes: list receiving the one-line notice.
        progress: show the converter's progress bar.

    Returns:
        the sidecar dictionary from read_sidecar (with x_path / y_path).

    Raises:
        BinFormatError / DumpError: one line.
    """
    _, _, sidecar = bin_paths(info.path, bin_dir)
    try:
        return read_sidecar(sidecar, info)
    except BinFormatError as exc:
        if exc.reason == "newer":
            raise
        if no_convert:
            raise BinFormatError(f"{exc} (no_convert: run `python convert_h5.py {info.path}`)",
                                 exc.reason) from None
        if notes is not None:
            notes.append(f"bin: {exc.reason} conversion ({exc}); converting {info.path} now")
    import fcntl
    import convert_h5  # lazy: convert_h5 imports this module for the format

    try:
        lock = open(sidecar + ".lock", "a")
    except OSError as exc:
        raise DumpError(f"cannot convert {info.path} to .bin next to it: {exc.strerror} "
                        f"({os.path.dirname(sidecar) or '.'})") from None
    with lock:
        # One converter at a time: torchrun ranks (or two runs) asking for the same dump queue here and
        # the later ones find the finished conversion instead of converting over it (which would
        # delete the files another rank is about to read).
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return read_sidecar(sidecar, info)
        except BinFormatError as exc:
            if exc.reason == "newer":
                raise
        try:
            convert_h5.convert(info.path, out_dir=bin_dir, progress=progress)
        except convert_h5.ConvertError as exc:
            raise DumpError(f"conversion of {info.path} to .bin failed: {exc}") from None
        return read_sidecar(sidecar, info)


# --------------------------------------------------------------------------------------------------
# make_loader
# --------------------------------------------------------------------------------------------------

LOADER_KINDS = ("h5", "bin", "resident")


def make_loader(dump_path_or_info, batch_size: int, device, *, kind: str = "h5", pinned: bool = False,
                streams: bool = False, prefetch: int = 2, start: int = 0, rank: int = 0,
                world_size: int = 1, require_gds: bool = False, no_convert: bool = False,
                kvikio_threads: int = 8, consumed: int = 0, bin_dir=None, kvikio_target: str = "device") -> Loader:
    """Builds the loader for a data path; every path yields the baseline's batches bit for bit.

    Args:
        dump_path_or_info: dump path (validated with open_dump) or a DumpInfo.
        batch_size: B datasets per rank per step.
        device: training device ("cpu", "cuda", "cuda:1", torch.device).
        kind: "h5" (baseline / pinned / streams), "bin" (kvikio or memmap on .bin files) or
            "resident" (whole dump in device memory).
        pinned: page-locked ring buffers + non_blocking copies (CUDA only; else a note).
        streams: reader thread + side CUDA stream copies, `prefetch` deep (CUDA only; else a note).
        prefetch: ring depth / batches prepared ahead (>= 1).
        start: dataset position of step 0.
        rank, world_size: this process's slice of each global batch of world_size*B datasets.
        require_gds: kind="bin" raises GdsUnavailable unless the path is GPUDirect Storage.
        no_convert: kind="bin" raises instead of (re)converting a missing or stale .bin.
        kvikio_threads: kvikio thread pool size.
        consumed: batches already consumed (resume: continues at exactly batch `consumed`).
        bin_dir: folder of the .bin conversion (default next to the dump).

    Returns:
        Loader: iterator of Batch with .describe(), .notes, .state_dict(), .close().

    Raises:
        DumpError: bad dump, or batch_size*world_size larger than the dump.
        GdsUnavailable: require_gds and no GPUDirect Storage.
        ValueError: bad arguments.
    """
    info = dump_path_or_info if isinstance(dump_path_or_info, DumpInfo) else open_dump(dump_path_or_info)
    if kind not in LOADER_KINDS:
        raise ValueError(f"unknown loader kind {kind!r} (expected one of {', '.join(LOADER_KINDS)})")
    for name, value, low in (("batch_size", batch_size, 1), ("world_size", world_size, 1),
                             ("prefetch", prefetch, 1), ("consumed", consumed, 0),
                             ("kvikio_threads", kvikio_threads, 1)):
        if int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} must be in 0..{world_size - 1}")
    N = info.num_datasets
    if batch_size * world_size > N:
        raise DumpError(f"{info.path}: batch size {batch_size} x world size {world_size} = "
                        f"{batch_size * world_size} datasets is larger than the dump ({N} datasets)")
    if not 0 <= start < N:
        raise ValueError(f"start {start} must be in 0..{N - 1}")
    device = torch.device(device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise ValueError(f"device {device} requested but CUDA is not available here")
    if cuda and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    common = dict(start=start, rank=rank, world_size=world_size, consumed=consumed)

    if kind == "h5":
        name = "h5" + ("+pinned" if pinned else "") + ("+streams" if streams else "")
        if streams or pinned:
            name += f"(prefetch={prefetch})"
        if not cuda and (pinned or streams):
            loader = _SyncLoader(info, batch_size, device, loader_name=name, path="h5py+sync-copy",
                                 source_factory=lambda: _H5Source(info), **common)
            if pinned:
                loader.notes.append("--pinned: no effect without CUDA (no page-locked copies on "
                                    "CPU); running the baseline path")
            if streams:
                loader.notes.append("--streams: no effect without CUDA (no CUDA streams on CPU); "
                                    "running the baseline path")
            return loader
        if streams:
            loader = _StreamLoader(info, batch_size, device, loader_name=name, pinned=pinned,
                                   prefetch=prefetch, source_factory=lambda: _H5Source(info),
                                   path="h5py+pinned+streams" if pinned else "h5py+pageable+streams",
                                   **common)
            if not pinned:
                loader.notes.append("--streams without --pinned: pageable host memory, so the "
                                    "driver stages each side-stream copy synchronously (less "
                                    "overlap); add --pinned for asynchronous copies")
            return loader
        if pinned:
            return _PinnedLoader(info, batch_size, device, loader_name=name, prefetch=prefetch,
                                 **common)
        return _SyncLoader(info, batch_size, device, loader_name=name, path="h5py+sync-copy",
                           source_factory=lambda: _H5Source(info), **common)

    if kind == "bin":
        return _make_bin_loader(info, batch_size, device, prefetch=prefetch, require_gds=require_gds,
                                no_convert=no_convert, kvikio_threads=kvikio_threads,
                                bin_dir=bin_dir, flags_given=pinned or streams, common=common,
                                kvikio_target=kvikio_target)

    # kind == "resident"
    need = info.x_bytes + info.y_bytes
    free = _free_memory_bytes(device)
    where = "GPU" if cuda else "host"
    if need < 0.5 * free:  # headroom: activations, gradients and optimizer state need the rest
        loader = _ResidentLoader(info, batch_size, device, loader_name="resident", **common)
        if cuda:
            loader.notes.append(f"resident: dump ({need / 2**30:.2f} GiB) held in GPU memory "
                                f"({free / 2**30:.1f} GiB were free); batches are sliced on the "
                                f"GPU, no host-to-device copies per step")
        else:
            loader.notes.append(f"resident: dump ({need / 2**30:.2f} GiB) held in host memory (CPU "
                                f"device: there are no host-to-device copies to save)")
    else:
        fallback = "pinned+streams path" if cuda else "baseline path"
        reason = (f"resident: dump needs {need / 2**30:.2f} GiB but only {free / 2**30:.2f} GiB of "
                  f"{where} memory is free (keeping 50% headroom); falling back to the {fallback}")
        if cuda:
            loader = _StreamLoader(info, batch_size, device, loader_name="resident", pinned=True,
                                   prefetch=prefetch, source_factory=lambda: _H5Source(info),
                                   path="h5py+pinned+streams", **common)
        else:
            loader = _SyncLoader(info, batch_size, device, loader_name="resident",
                                 path="h5py+sync-copy", source_factory=lambda: _H5Source(info),
                                 **common)
        loader.notes.append(reason)
    return loader


def _bin_read_target(io_path: str, requested: str = "device") -> str:
    """Where kvikio reads to: "device" (CUDA slot buffers, the blog's design; the default) or "host".

    "host" (pinned host slots, then our own side-stream copy) exists because without GPUDirect
    Storage kvikio copies its bounce buffer to the GPU on blocking CUDA streams, which wait behind
    the training kernels on torch's legacy default stream; a development measurement on an H200 with
    a 1 ms GPU step (not in results/): device 1.45 ms/step, host 1.02 ms/step. True GDS always
    reads to the device. (A module function so GPU tests can force either.)
    """
    if requested not in ("device", "host"):
        raise ValueError(f"kvikio target must be 'device' or 'host', got {requested!r}")
    return "device" if io_path == "gds" else requested


def _make_bin_loader(info, batch_size, device, *, prefetch, require_gds, no_convert, kvikio_threads,
                     bin_dir, flags_given, common, kvikio_target="device") -> Loader:
    """kind="bin": picks kvikio (gds / kvikio-posix) or memmap, and says which really runs."""
    cuda = device.type == "cuda"
    name = f"bin(prefetch={prefetch})"
    notes: list[str] = []
    kvikio, missing = (None, "no CUDA device") if not cuda else _import_kvikio()
    if kvikio is not None:
        _kvikio_set_threads(kvikio, kvikio_threads)
        io_path, why = kvikio_io_path(kvikio)
        if _bin_read_target(io_path, kvikio_target) == "host" and io_path != "kvikio-posix":
            # Host buffers never go through cuFile: kvikio reads them with POSIX preads.
            io_path, why = "kvikio-posix", f"{why}; host-buffer reads bypass cuFile"
    else:
        io_path = "memmap+pinned" if cuda else "memmap"
        why = (f"{missing}: numpy memmap of the .bin, "
               + ("pinned staging + non_blocking copies on a side stream" if cuda
                  else "read ahead by one thread (CPU: no copies)"))
    # Fail before a possibly long conversion when the user demanded GPUDirect Storage.
    if require_gds and io_path != "gds":
        raise GdsUnavailable(f"--require-gds: the bin loader would run '{io_path}', not GPUDirect "
                             f"Storage ({why})")
    meta = ensure_bin(info, bin_dir=bin_dir, no_convert=no_convert, notes=notes,
                      progress=common["rank"] == 0)
    if kvikio is not None and io_path == "gds":
        # In AUTO mode kvikio quietly drops to its POSIX path for a file that cannot be opened
        # with O_DIRECT (tmpfs, overlay...): check the real file so the reported path is honest.
        handle = kvikio.CuFile(meta["x_path"], "r")
        try:
            direct = handle.is_direct_io_supported() if hasattr(handle, "is_direct_io_supported") \
                else True
        finally:
            handle.close()
        if not direct:
            io_path, why = "kvikio-posix", (f"{meta['x_path']} cannot be opened with O_DIRECT (file "
                                            f"system), so kvikio reads it through POSIX")
            if require_gds:
                raise GdsUnavailable(f"--require-gds: the bin loader would run '{io_path}', not "
                                     f"GPUDirect Storage ({why})")
    if kvikio is not None:
        target = _bin_read_target(io_path, kvikio_target)
        loader = _KvikioLoader(info, batch_size, device, loader_name=name, meta=meta, kvikio=kvikio,
                               io_path=io_path, target=target, prefetch=prefetch,
                               threads=kvikio_threads, **common)
        where = ("straight into CUDA slot buffers" if target == "device" else
                 "with POSIX preads into pinned host slots, then async copies on a side stream")
        notes.append(f"bin: path {io_path} ({why}); {kvikio_threads} kvikio threads read whole "
                     f"batch spans {where}, {prefetch} deep")
    else:
        loader = _StreamLoader(info, batch_size, device, loader_name=name, pinned=cuda,
                               prefetch=prefetch, source_factory=lambda: _MemmapSource(info, meta),
                               path=io_path, **common)
        notes.append(f"bin: path {io_path} ({why})")
    if flags_given:
        notes.append("bin: --pinned/--streams are built into this path (reader thread + ring "
                     "buffers); nothing more to switch on")
    loader.notes.extend(notes)
    return loader
