"""The one I/O safety layer: atomic writes (to `.<name>.<pid>.tmp` beside the target, fsynced, renamed over it;
a failure is a one-line OutputError and leaves no temp file), output-path checks, dead processes' temp/locks."""
import contextlib
import dataclasses
import errno
import fcntl
import itertools
import json
import math
import os
import re
import shutil

_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")


class OutputError(OSError):
    """An output that cannot be written: one line for the user, nothing half-written left behind."""


_WHY = {**dict.fromkeys((errno.ENOSPC, errno.EFBIG, errno.EDQUOT), "disk full or file-size limit reached"),
        **dict.fromkeys((errno.EACCES, errno.EPERM, errno.EROFS), "permission denied")}


def _why(exc: OSError) -> str:
    return _WHY.get(exc.errno) or exc.strerror or str(exc)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, but another user's
        pass
    return True


def _lock_pid(path) -> int:
    """The pid written in a lock file, or 0 when unreadable."""
    with contextlib.suppress(OSError, ValueError), open(path) as f:
        return int(f.read())   # int() strips whitespace; an empty file is a ValueError, so 0
    return 0


def _locked(path) -> bool:
    """True when another process holds an flock on `path` (a live lock whose pid was reused is kept)."""
    try:
        with open(path) as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)   # closing f releases it again
    except OSError as exc:
        return isinstance(exc, BlockingIOError)
    return False


def clean_stale(folder) -> None:
    """Removes temp files (`.<name>.<pid>.tmp`) and lock files (`*.lock` holding a pid) of dead processes;
    files of live processes, and files that are not ours, are left alone."""
    folder = os.fspath(folder) or "."
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        temp = _TEMP.match(name)
        pid = int(temp["pid"]) if temp else _lock_pid(path) if name.endswith(".lock") else 0
        if pid > 0 and pid != os.getpid() and not _pid_alive(pid) and (temp or not _locked(path)):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _open_lock(path, blocking: bool):
    """An open lock file holding our pid under an exclusive flock, or None (non-blocking: held by another)."""
    while True:
        try:
            handle = open(path, "a+")
        except OSError as exc:
            raise OutputError(f"cannot create lock {path}: {_why(exc)}") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            return None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                handle.seek(0)
                handle.truncate()
                handle.write(str(os.getpid()))
                handle.flush()
                return handle
        # The holder released (unlinked) or replaced the name meanwhile: a lock on that old inode guards nothing.
        handle.close()


def _release(handle, path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)   # released: nothing left for the next run to clean
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


class HeldLock:
    """An exclusive lock held until release() (or until this process ends: the kernel drops an flock with it)."""

    def __init__(self, handle, path):
        self._handle, self.path = handle, path

    def release(self) -> None:
        if self._handle is not None:
            _release(self._handle, self.path)
            self._handle = None

    def __del__(self):
        self.release()


def hold_lock(path, what: str) -> HeldLock:
    """Takes `<path>.lock` without waiting; OutputError (one line, naming the holder's pid) when another live
    process holds it. The same lock layer as file_lock, for a run that owns an output for its whole length."""
    lock = os.fspath(path) + ".lock"
    handle = _open_lock(lock, blocking=False)
    if handle is None:
        pid = _lock_pid(lock)
        raise OutputError(f"{what} {os.fspath(path)} is in use by another run (pid {pid or 'unknown'}, lock {lock}); "
                          "wait for it to end or choose another path")
    return HeldLock(handle, lock)


@contextlib.contextmanager
def file_lock(path):
    """Exclusive flock on `path` (created holding our pid); blocks until the holder releases it."""
    handle = _open_lock(path, blocking=True)
    try:
        yield
    finally:
        _release(handle, path)


@contextlib.contextmanager
def atomic_output(path, what: str = "output"):
    """Yields a temp path beside `path`; on a clean exit it is fsynced and renamed over `path`. On any exception
    the temp file is removed and `path` keeps its old content; OSErrors become one-line OutputErrors."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        os.makedirs(folder, exist_ok=True)
        clean_stale(folder)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())      # the bytes are on disk before the name points at them
        umask = os.umask(0)
        os.umask(umask)               # (reading the umask means setting it)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)         # atomic: readers see the old file or the new one, never half
        with contextlib.suppress(OSError):   # best effort: some file systems refuse to open a directory
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)          # and the rename itself survives a crash
            finally:
                os.close(fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(f"cannot write {what} {path}: {_why(exc)}; "
                              "the previous file (if any) is intact") from None
        raise


def write_bytes_atomic(path, data: bytes, what: str = "output") -> str:
    with atomic_output(path, what) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return os.fspath(path)


def write_text_atomic(path, text: str, what: str = "output") -> str:
    return write_bytes_atomic(path, text.encode("utf-8"), what)


def to_jsonable(obj):
    """Plain JSON types from numpy/torch values, containers, paths, dataclasses, torch dtypes and devices;
    non-finite floats become "NaN" / "Infinity" / "-Infinity" (a NaN loss must stay visible in a record)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, (str, int, float)) or obj is None:   # bool is an int
        return obj
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if type(obj).__module__.startswith("torch") and type(obj).__name__ in ("dtype", "device"):
        return str(obj)
    if hasattr(obj, "tolist"):   # numpy / torch scalars and arrays
        return to_jsonable(obj.tolist())
    raise TypeError(f"cannot write {type(obj).__name__} to JSON: {obj!r:.80}")


# A list of numbers as json.dumps(indent=2) lays it out, one number a line (JSON strings hold no raw newline).
_NUMBER_LIST = re.compile(r"\[\n\s*(-?[\d.eE+-]+(?:,\n\s*-?[\d.eE+-]+)*)\n\s*\]")


def write_json_atomic(path, obj, what: str = "record") -> str:
    """JSON of `obj` written atomically, indented, with each list of numbers on one line (a record's thousands of
    losses and step times); raises TypeError before touching the disk if it has no JSON form."""
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False)
    text = _NUMBER_LIST.sub(lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text)
    return write_text_atomic(path, text + "\n", what)


def _same_file(a: str, b: str) -> bool:
    with contextlib.suppress(OSError):
        return os.path.samefile(a, b)
    return os.path.abspath(a) == os.path.abspath(b)


def check_outputs(outputs: dict, inputs=(), need_bytes: dict | None = None) -> None:
    """Checks every output before any work; OutputError (one line) on the first problem. outputs: {label: path}
    (falsy paths skipped); inputs: paths no output may be; need_bytes: {label: bytes} free in its folder."""
    outputs = {k: os.fspath(v) for k, v in outputs.items() if v}
    for (a, path_a), (b, path_b) in itertools.combinations(outputs.items(), 2):
        if _same_file(path_a, path_b):
            raise OutputError(f"{a} and {b} name the same file ({path_a}); one would overwrite the other")
    for label, path in outputs.items():
        for src in inputs:
            if src and _same_file(path, os.fspath(src)):
                raise OutputError(f"{label} {path} is a file this run reads; refusing to overwrite it")
        if os.path.isdir(path) and not label.endswith("dir"):
            raise OutputError(f"{label} {path} is a directory")
        probe = path if label.endswith("dir") else os.path.dirname(os.path.abspath(path))
        while not os.path.exists(probe):
            probe = os.path.dirname(probe) or "."
        if not os.path.isdir(probe):
            raise OutputError(f"{label} {path}: {probe} is a file, not a folder")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise OutputError(f"{label} {path}: folder {probe} is not writable")
        need = (need_bytes or {}).get(label, 0)
        free = shutil.disk_usage(probe).free if need else 0
        if need > free:
            raise OutputError(f"{label} {path} needs {format_bytes(need)} and {probe} has {format_bytes(free)} free")


def format_bytes(n: float) -> str:
    if abs(n) < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}"
