"""The nanoTabPFN dump format: HDF5 validation (open_dump / check_dump), batch positions, and the .bin layout
that convert_h5.py writes and the loaders read through its checked sidecar (version, shapes, per-block crc32).
"""
import hashlib
import json
import os
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import h5py
import numpy as np

import safe_io


def one_line(text) -> str:
    """Collapses a message (an h5py error can span lines) into one line."""
    return " ".join(str(text).split())


class DumpError(ValueError):
    """A dump (or its .bin conversion) cannot be used; the message is one line naming the problem."""

    def __init__(self, message):
        super().__init__(one_line(message))


class GdsUnavailable(DumpError):
    """require_gds=True but the .bin loader would run another path (pread, kvikio-posix, ...)."""


class BinFormatError(DumpError):
    """The .bin conversion is unusable; `.reason` is missing / partial / stale / corrupt / older / newer."""

    def __init__(self, message, reason: str):
        super().__init__(message)
        self.reason = reason


SPLIT_KEYS = ("single_eval_pos", "train_test_split_index")  # ours first, upstream's newer name second
SCAN_CHUNK_BYTES = 64 << 20  # value scans and chunked loads read at most this much of X at a time
# More classes than this is a damaged or foreign dump, not a task: the model would get one output per class.
MAX_CLASSES = 100


@dataclass
class DumpInfo:
    """What open_dump() learned about a dump; metadata arrays are numpy (N,) int64."""
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
    generated: object = None   # a dump made on the fly (prior_dump.spec_info): its prior_dump.Regenerator, no file


def value_problems(x, y, first: int, max_num_classes: int | None) -> tuple[str | None, str | None]:
    """(problem of X (c, R, F) or None, problem of y (c, R) or None), one line each; `first` = dataset of row 0."""
    x_problem = y_problem = None
    if x is not None and len(x):
        # As float32, the dtype every loader yields: a float64 1e39 is finite on disk, inf once cast.
        with np.errstate(over="ignore"):
            finite = np.isfinite(x.astype(np.float32, copy=False)).reshape(len(x), -1).all(axis=1)
        if not finite.all():
            x_problem = f"'X' contains NaN or Inf values (first in dataset {first + int(np.argmin(finite))})"
    if y is not None and len(y):
        yy = np.asarray(y, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(yy) | (yy < 0) | (yy != np.floor(yy))
            if max_num_classes is not None:
                bad |= yy >= max_num_classes
        if bad.any():
            i, r = divmod(int(np.argmax(bad.reshape(-1))), yy.shape[1])
            limit = f" < max_num_classes={max_num_classes}" if max_num_classes is not None else ""
            y_problem = (f"'y' must hold class indices (finite integers >= 0{limit}); "
                         f"dataset {first + i} row {r} has {float(yy[i, r])!r}")
    return x_problem, y_problem


def check_values(path: str, x, y, first: int, max_num_classes: int, y_path: str | None = None) -> None:
    """Raises DumpError naming the file (y_path for a label problem, when y lives apart) and the dataset of the
    first NaN/Inf feature or invalid label (see value_problems)."""
    x_problem, y_problem = value_problems(x, y, first, max_num_classes)
    if x_problem or y_problem:
        raise DumpError(f"{path if x_problem else y_path or path}: {x_problem or y_problem}")


def check_unchanged(path: str, expected: tuple, stat: os.stat_result | None = None) -> None:
    """DumpError unless `path` still has the (size, mtime_ns) it had when it was checked: a file truncated or
    rewritten under a running loader must stop the run, not feed it zeros (h5py fills reads past the end with
    them) or data its checks never saw."""
    try:
        stat = stat or os.stat(path)
        now = (int(stat.st_size), int(stat.st_mtime_ns))
    except OSError as exc:
        now = (None, one_line(exc.strerror or exc))
    if now != tuple(expected):
        raise DumpError(f"{path} changed on disk while this run read it (size, mtime_ns {tuple(expected)} -> "
                        f"{now}); stopped rather than train on changed or missing data")


def _inspect_dump(path, scan_values: bool, collect: bool) -> tuple[DumpInfo | None, list[str]]:
    """Validates a dump. With collect=False the first problem raises DumpError; otherwise all are listed."""
    path = os.fspath(path)
    problems: list[str] = []

    def problem(message: str) -> None:
        line = one_line(f"{path}: {message}")
        if not collect:
            raise DumpError(line)
        problems.append(line)

    if not os.path.isfile(path):
        problem("is a directory, not an HDF5 dump" if os.path.isdir(path) else "no such file")
        return None, problems
    try:
        if not h5py.is_hdf5(path):
            problem("not an HDF5 file (no HDF5 signature)")
            return None, problems
    except OSError as exc:
        problem(f"cannot be read ({exc})")
        return None, problems
    try:
        stat = os.stat(path)
        with h5py.File(path, "r") as handle:
            info = _inspect_open(handle, path, stat, scan_values, problem)
    except (OSError, RuntimeError) as exc:  # truncated: at open (stored EOF beyond the end) or at a read
        problem(f"truncated or corrupt HDF5 file (h5py: {exc})")
        return None, problems
    return (info if not problems else None), problems


def _found(d) -> str:
    return f"found shape {getattr(d, 'shape', None)} dtype {getattr(d, 'dtype', 'group')}"


def _metadata(f: h5py.File, key: str, n: int, problem) -> np.ndarray | None:
    """Per-dataset metadata as (N,) int64 (a length-1 array broadcasts), or None after a problem."""
    d = f[key]
    if not isinstance(d, h5py.Dataset) or d.dtype.kind not in "fiu" or d.ndim > 1:
        return problem(f"'{key}' must be a numeric (N,) array; {_found(d)}")
    a = np.asarray(d[()]).reshape(-1)
    if a.size == 1:
        a = np.full(n, a[0])  # upstream variant: one value for every dataset
    elif a.size != n:
        return problem(f"'{key}' has length {a.size}, expected {n} (one per dataset) or 1")
    if a.dtype.kind == "f" and (not np.isfinite(a).all() or (a != np.round(a)).any()):
        return problem(f"'{key}' must hold integers")
    return a.astype(np.int64)


def _positive_scalar(f: h5py.File, key: str, default, problem, integer: bool):
    """A positive (integer) scalar stored as a length-1 array, `default` when absent or invalid."""
    if key not in f:
        return default
    m = np.asarray(f[key][()]).reshape(-1)
    if m.size < 1 or m.dtype.kind not in "fiu" or not np.isfinite(m[0]) or m[0] < 1 \
            or (integer and m[0] != np.round(m[0])):
        problem(f"'{key}' must be a positive integer; found {m.tolist()}")
        return default
    return int(m[0])


def _check_range(values, low, high, problem, message):
    """`values` if all lie in [low, high] (high may be per dataset); else reports message(i) and returns None."""
    bad = None if values is None else (values < low) | (values > high)
    return values if bad is None or not bad.any() else problem(message(int(np.argmax(bad))))


def _scan(X, Y, scan_x: bool, scan_y: bool, max_num_classes, problem) -> float:
    """Chunked value scan (bounded memory) reporting the first problem of each array; returns the largest label."""
    N, R, F = X.shape
    y_max = -1.0
    chunk = max(1, SCAN_CHUNK_BYTES // (R * F * 4))
    for first in range(0, N, chunk):
        if not (scan_x or scan_y):
            break
        y = Y[first:first + chunk] if scan_y else None
        x_problem, y_problem = value_problems(X[first:first + chunk] if scan_x else None, y, first,
                                              max_num_classes)
        for p in filter(None, (x_problem, y_problem)):
            problem(p)
        scan_x, scan_y = scan_x and not x_problem, scan_y and not y_problem
        if scan_y and y.size:
            y_max = max(y_max, float(np.max(y)))
    return y_max


def _inspect_open(f: h5py.File, path: str, stat: os.stat_result, scan_values: bool, problem) -> DumpInfo | None:
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
        return problem(f"'X' must be a 3-D float array (N, rows, features); {_found(X)}")
    N, R, F = (int(d) for d in X.shape)
    if N < 1 or R < 2 or F < 1:
        return problem(f"'X' has shape {X.shape}; need at least 1 dataset, 2 rows and 1 feature")
    Y = f["y"] if "y" in f else None
    if Y is not None and (not isinstance(Y, h5py.Dataset) or Y.dtype.kind not in "fiu" or Y.shape != (N, R)):
        Y = problem(f"'y' must be a numeric (N, rows) = {(N, R)} array like X's first two dims; {_found(Y)}")
    num_features = _metadata(f, "num_features", N, problem) if "num_features" in f else None
    num_datapoints = _metadata(f, "num_datapoints", N, problem) if "num_datapoints" in f \
        else np.full(N, R, np.int64)
    splits = _metadata(f, split_key, N, problem) if split_key is not None else None
    num_features = _check_range(num_features, 1, F, problem, lambda i: (
        f"'num_features' must be in 1..{F} (the stored width); dataset {i} has {num_features[i]}"))
    num_datapoints = _check_range(num_datapoints, 2, R, problem, lambda i: (
        f"'num_datapoints' must be in 2..{R} (the stored rows); dataset {i} has {num_datapoints[i]}"))
    limit = num_datapoints if num_datapoints is not None else np.full(N, R, np.int64)
    splits = _check_range(splits, 1, limit - 1, problem, lambda i: (
        f"'{split_key}' must be in 1..num_datapoints-1; dataset {i} has split {splits[i]} with "
        f"{limit[i]} datapoints"))
    max_num_classes = _positive_scalar(f, "max_num_classes", None, problem, integer=True)
    if max_num_classes is not None and max_num_classes > MAX_CLASSES:
        problem(f"'max_num_classes' is {max_num_classes}; at most {MAX_CLASSES} classes are supported (the model "
                f"has one output per class)")
        max_num_classes = None
    original_batch_size = _positive_scalar(f, "original_batch_size", 1, problem, integer=False)
    # y is always scanned when max_num_classes must be inferred from it.
    y_max = _scan(X, Y, scan_values, Y is not None and (scan_values or max_num_classes is None),
                  max_num_classes, problem)
    if max_num_classes is None:
        max_num_classes = max(1, int(y_max) + 1)
        if max_num_classes > MAX_CLASSES:
            return problem(f"'y' holds class {int(y_max)}; at most {MAX_CLASSES} classes are supported")
    if num_features is None or num_datapoints is None or splits is None or Y is None:
        return None
    return DumpInfo(path, N, R, F, num_features, num_datapoints, splits, max_num_classes,
                    original_batch_size, split_key, int(stat.st_size), int(stat.st_mtime_ns))


def open_dump(path, scan_values: bool = True) -> DumpInfo:
    """Validates a dump (scan_values: also X for NaN/Inf and y for class indices); DumpError names the first problem."""
    return _inspect_dump(path, scan_values=scan_values, collect=False)[0]


def check_dump(path) -> list[str]:
    """Every problem of a dump, one line each; an empty list means the dump is fine."""
    return _inspect_dump(path, scan_values=True, collect=True)[1]


def dump_content_digest(info: DumpInfo, samples: int = 16) -> str:
    """Cheap content identity: sha256 hex of shape, metadata and `samples` evenly spaced datasets of X and y."""
    digest = hashlib.sha256(np.array([info.num_datasets, info.rows, info.features], "<i8").tobytes())
    digest.update(metadata_sha256(info.num_features, info.num_datapoints, info.splits).encode())
    picks = np.unique(np.linspace(0, info.num_datasets - 1, max(1, samples)).round().astype(np.int64))
    for x, y in _sampled_datasets(info, picks):
        digest.update(np.ascontiguousarray(x, "<f4").tobytes())
        digest.update(np.ascontiguousarray(y, "<f4").tobytes())
    return digest.hexdigest()


def _sampled_datasets(info: DumpInfo, picks):
    """(X, y) of each picked dataset, read from the file or, for a dump made on the fly, generated again (so a dump
    and its on-the-fly twin have one digest)."""
    if info.generated:
        yield from (info.generated.dataset(int(i)) for i in picks)
        return
    with h5py.File(info.path, "r") as f:
        for i in picks:
            yield f["X"][i], f["y"][i]


def batch_position(step: int, start: int, global_batch: int, num_datasets: int) -> int:
    """First dataset of the global batch at `step` >= 0: start (in 0..N-1), start+G, ..., wrapping to 0 before a
    batch would run past the end (closed form, so resume and DDP ranks agree). Rank r reads [p + r*B, p + (r+1)*B)."""
    G, N = int(global_batch), int(num_datasets)
    if not 1 <= G <= N:
        raise ValueError(f"global batch {G} must be in 1..{N} (the number of datasets)")
    first_run = (N - start) // G  # full batches from `start` before the first wrap
    if step < first_run:
        return start + step * G
    return ((step - first_run) % (N // G)) * G


# The .bin layout --------------------------------------------------------------------------------

BIN_MAGIC = "nanotabpfn-dump-bin"
BIN_FORMAT_VERSION = 2          # 2: per-block crc32 checksums in the sidecar
BIN_ALIGNMENT = 4096            # the GPU page size: cuFile DMAs only page-aligned spans to the GPU
BIN_DTYPE = "<f4"               # X and y records are little-endian float32
CHECKSUM_BLOCK_BYTES = 16 << 20  # one crc32 per 16 MiB block: verification runs blocks in parallel


def bin_paths(dump_path, out_dir=None) -> tuple[str, str, str]:
    """(`<dump>.X.bin`, `<dump>.y.bin`, `<dump>.bin.json`) in out_dir (default: next to the dump)."""
    folder = out_dir if out_dir is not None else os.path.dirname(os.path.abspath(dump_path))
    base = os.path.join(folder, os.path.basename(dump_path))
    return base + ".X.bin", base + ".y.bin", base + ".bin.json"


def record_stride_bytes(rows: int, features: int = 1) -> int:
    """Bytes between consecutive records: rows*features float32 values rounded up to BIN_ALIGNMENT."""
    return -(-int(rows) * int(features) * 4 // BIN_ALIGNMENT) * BIN_ALIGNMENT


def bin_size_bytes(info: DumpInfo) -> int:
    """Bytes of both .bin files of a dump (padded records)."""
    return info.num_datasets * (record_stride_bytes(info.rows, info.features) + record_stride_bytes(info.rows))


def metadata_sha256(num_features, num_datapoints, splits) -> str:
    """sha256 of the per-dataset metadata (as little-endian int64)."""
    digest = hashlib.sha256()
    for a in (num_features, num_datapoints, splits):
        digest.update(np.ascontiguousarray(a, dtype="<i8").tobytes())
    return digest.hexdigest()


class BlockChecksum:
    """`.blocks`: crc32 of each CHECKSUM_BLOCK_BYTES block of a byte stream fed in pieces (zlib: fast, releases
    the GIL; catches accidental damage, not forgery)."""

    def __init__(self):
        self.blocks: list[int] = []
        self._size = 0

    def update(self, data) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            filled = self._size % CHECKSUM_BLOCK_BYTES
            if filled == 0:
                self.blocks.append(0)  # a new block starts
            take = min(len(view), CHECKSUM_BLOCK_BYTES - filled)
            self.blocks[-1] = zlib.crc32(view[:take], self.blocks[-1])
            self._size += take
            view = view[take:]


def bin_meta(info: DumpInfo, x_bin: str, y_bin: str, checksums: dict | None = None, content: str = "") -> dict:
    """The sidecar dictionary of a dump's conversion; checksums = {"x": [crc...], "y": [crc...]}; content: the
    dump's dump_content_digest, so an edit that keeps its size and mtime still makes the conversion stale."""
    N, R, F = info.num_datasets, info.rows, info.features
    x_stride, y_stride = record_stride_bytes(R, F), record_stride_bytes(R, 1)
    return {
        "magic": BIN_MAGIC, "format_version": BIN_FORMAT_VERSION, "alignment": BIN_ALIGNMENT, "dtype": BIN_DTYPE,
        "layout": "record i of X.bin at i*x_stride_bytes: (rows, features) row-major float32, "
                  "zero padded; record i of y.bin at i*y_stride_bytes: (rows,) float32",
        "num_datasets": N, "rows": R, "features": F,
        "x_record_bytes": R * F * 4, "x_stride_bytes": x_stride, "y_record_bytes": R * 4, "y_stride_bytes": y_stride,
        "x_file": os.path.basename(x_bin), "y_file": os.path.basename(y_bin),
        "x_size_bytes": N * x_stride, "y_size_bytes": N * y_stride, "split_key": info.split_key,
        "max_num_classes": int(info.max_num_classes), "original_batch_size": int(info.original_batch_size),
        "source": {"path": os.path.abspath(info.path), "size_bytes": int(info.size_bytes),
                   "mtime_ns": int(info.mtime_ns), "content_sha256": content},
        "checksum": {"algorithm": "crc32", "block_bytes": CHECKSUM_BLOCK_BYTES,
                     **{k: list(v) for k, v in (checksums or {}).items()}},
        "metadata_sha256": metadata_sha256(info.num_features, info.num_datapoints, info.splits),
        **{key: getattr(info, key).tolist() for key in ("num_features", "num_datapoints", "splits")},
    }


def write_sidecar(sidecar_path, info: DumpInfo, x_bin, y_bin, checksums: dict, content: str) -> None:
    """Writes the JSON sidecar atomically; write it LAST, since a loader trusts .bin files only through it."""
    meta = bin_meta(info, x_bin, y_bin, checksums, content)
    safe_io.write_text_atomic(sidecar_path, json.dumps(meta, separators=(",", ":")), "sidecar")


def read_sidecar(sidecar_path, dump_info: DumpInfo) -> dict:
    """The sidecar plus "x_path" / "y_path", after checking it and the .bin sizes against the dump (no content
    read). Raises BinFormatError (one line; `.reason` missing / partial / stale / corrupt / older / newer)."""
    sidecar_path = os.fspath(sidecar_path)

    def fail(message: str, reason: str):
        raise BinFormatError(f"{sidecar_path}: {message}", reason)

    if not os.path.exists(sidecar_path):
        fail("no .bin conversion (sidecar missing)", "missing")
    try:
        with open(sidecar_path) as handle:
            meta = json.load(handle)
    except (OSError, ValueError) as exc:
        fail(f"sidecar is not readable JSON ({one_line(exc)})", "corrupt")
    if not isinstance(meta, dict) or meta.get("magic") != BIN_MAGIC:
        fail(f"not a {BIN_MAGIC} sidecar (magic {meta.get('magic') if isinstance(meta, dict) else None!r})",
             "corrupt")
    version = meta.get("format_version")
    if not isinstance(version, int):
        fail(f"format_version {version!r} is not an integer", "corrupt")
    if version > BIN_FORMAT_VERSION:
        fail(f"written by a newer format version {version} (this dump_format.py reads version "
             f"{BIN_FORMAT_VERSION}); update the code or delete the .bin files", "newer")
    if version < BIN_FORMAT_VERSION:
        fail(f"written by an older format version {version} (expected {BIN_FORMAT_VERSION})", "older")
    expected = bin_meta(dump_info, meta.get("x_file", ""), meta.get("y_file", ""))
    for key in ("dtype", "alignment", "num_datasets", "rows", "features", "x_record_bytes",
                "x_stride_bytes", "y_record_bytes", "y_stride_bytes", "x_size_bytes", "y_size_bytes"):
        if meta.get(key) != expected[key]:
            reason = "stale" if key in ("num_datasets", "rows", "features") else "corrupt"
            fail(f"{key} is {meta.get(key)!r}, expected {expected[key]!r} for {dump_info.path}", reason)
    checksum = meta.get("checksum") or {}
    if checksum.get("algorithm") != "crc32" or checksum.get("block_bytes") != CHECKSUM_BLOCK_BYTES:
        fail(f"checksum table {str(checksum)[:80]!r} is not crc32 per {CHECKSUM_BLOCK_BYTES} bytes", "corrupt")
    for which in ("x", "y"):
        name, size = meta.get(f"{which}_file"), expected[f"{which}_size_bytes"]
        if not isinstance(name, str) or not name or os.path.basename(name) != name:
            fail(f"{which}_file {name!r} is not a file name", "corrupt")
        p = os.path.join(os.path.dirname(os.path.abspath(sidecar_path)), name)
        if not os.path.exists(p):
            fail(f"{name} is missing (partial conversion)", "partial")
        stat = os.stat(p)
        if stat.st_size != size:
            fail(f"{name} is {stat.st_size} bytes, expected N*stride = {size} (partial or foreign file)", "partial")
        meta[f"{which}_stat"] = (int(stat.st_size), int(stat.st_mtime_ns))   # readers stop if this changes
        crcs = checksum.get(which)
        if not isinstance(crcs, list) or len(crcs) != -(-size // CHECKSUM_BLOCK_BYTES):
            fail(f"checksum list of {name} missing or of the wrong length", "corrupt")
        meta[f"{which}_path"] = p
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
    if not source.get("content_sha256"):
        fail("stale: converted before sidecars kept the dump's content digest", "stale")
    if source["content_sha256"] != dump_content_digest(dump_info):   # an edit with its mtime restored
        fail(f"stale: the content of {dump_info.path} changed since the conversion (sampled datasets differ; "
             "its size and mtime did not)", "stale")
    return meta


def read_exact(fd: int, buffer, offset: int, path: str) -> None:
    """Fills `buffer` from `offset` with preads; DumpError naming `path` when the file ends first. (Not mmap: a
    file truncated under a mapping kills the process with SIGBUS; a short read here is one line.)"""
    view, done = memoryview(buffer).cast("B"), 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise DumpError(f"{path}: a read of {len(view)} bytes at byte {offset} got only {done}: the file "
                            f"ends first (truncated while in use?)")
        done += got


class BinRecords:
    """Records [first, first+count) of one .bin file (`stride` bytes each) read with preads, each read followed by
    a check that the file kept the (size, mtime_ns) it was verified with (`expected`, default: at open)."""

    def __init__(self, path: str, stride_bytes: int, expected: tuple | None = None):
        self.path, self.stride = path, int(stride_bytes)
        self.fd = os.open(path, os.O_RDONLY)
        stat = os.fstat(self.fd)
        self.expected = tuple(expected or (stat.st_size, stat.st_mtime_ns))

    def read(self, first: int, count: int, out: np.ndarray | None = None) -> np.ndarray:
        """(count, stride/4) float32 records (into `out`, C-contiguous, when given)."""
        out = np.empty((count, self.stride // 4), np.float32) if out is None else out
        read_exact(self.fd, out, first * self.stride, self.path)
        check_unchanged(self.path, self.expected, os.fstat(self.fd))
        return out

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _block_crc(path: str, block: int) -> int:
    """crc32 of one block (zlib releases the GIL, so blocks run in parallel threads)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = min(CHECKSUM_BLOCK_BYTES, os.fstat(fd).st_size - block * CHECKSUM_BLOCK_BYTES)
        data = bytearray(max(0, size))
        read_exact(fd, data, block * CHECKSUM_BLOCK_BYTES, path)
        return zlib.crc32(data)
    finally:
        os.close(fd)


def verify_bin_checksums(meta: dict) -> float:
    """Compares each block's crc32 (up to 8 threads) with the sidecar's; returns the seconds spent. Raises
    BinFormatError ("corrupt") naming the datasets of the first damaged block (and its invalid value)."""
    start = time.perf_counter()
    jobs = [(which, b) for which in ("x", "y") for b in range(len(meta["checksum"][which]))]
    with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1, len(jobs)))) as pool:
        got = list(pool.map(lambda job: _block_crc(meta[f"{job[0]}_path"], job[1]), jobs))
    for (which, block), crc in zip(jobs, got):
        if crc == meta["checksum"][which][block]:
            continue
        stride = meta[f"{which}_stride_bytes"]
        first = block * CHECKSUM_BLOCK_BYTES // stride
        last = min(meta["num_datasets"], -(-(block + 1) * CHECKSUM_BLOCK_BYTES // stride)) - 1
        reader = BinRecords(meta[f"{which}_path"], stride)
        try:
            records = reader.read(first, last + 1 - first)[:, :meta[f"{which}_record_bytes"] // 4]
        finally:
            reader.close()
        found = value_problems(*((records, None) if which == "x" else (None, records)), first,
                               meta["max_num_classes"])
        detail = "".join(f"; {p}" for p in found if p)   # the first invalid value, if there is one
        raise BinFormatError(f"{meta[f'{which}_path']}: content of datasets {first}..{last} differs from the "
                             f"conversion (crc32 mismatch in block {block}){detail}", "corrupt")
    for which in ("x", "y"):   # what was verified is what the readers will check against
        if f"{which}_stat" in meta:
            check_unchanged(meta[f"{which}_path"], meta[f"{which}_stat"])
    return time.perf_counter() - start
