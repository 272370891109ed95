"""Which kvikio path the .bin loader really runs: gds, cufile-compat, kvikio-posix, or preads without kvikio.
kvikio is optional (kvikio-cu13==26.10 on the GPU machine only) and imported lazily; loaders.py asks here."""
from __future__ import annotations

from dump_format import one_line


def import_kvikio():
    """Returns (kvikio module or None, one-line reason when missing)."""
    try:
        import kvikio
        import kvikio.defaults  # noqa: F401
        return kvikio, ""
    except Exception as exc:  # ImportError, or OSError/RuntimeError from a broken libkvikio
        return None, f"kvikio not importable ({type(exc).__name__}: {one_line(exc)})"


def cufile_property(name: str):
    """A cuFile driver property (is_gds_available, allow_compat_mode), or None if unreadable."""
    try:
        from kvikio import cufile_driver
        return cufile_driver.get(name)
    except Exception:  # no cuFile library, or a property this driver lacks
        return None


def kvikio_io_path(kvikio) -> tuple[str, str]:
    """("gds" | "cufile-compat" | "kvikio-posix", why) for reads into CUDA memory: gds only when kvikio is not
    in compat mode and the cuFile driver reports GPUDirect Storage; `why` never says "GDS" for another path."""
    mode = kvikio.defaults.get("compat_mode").name  # ON / OFF / AUTO
    if kvikio.defaults.is_compat_mode_preferred():
        return "kvikio-posix", f"kvikio compat mode {mode}: cuFile not in use"
    if cufile_property("is_gds_available") is True:
        return "gds", "cuFile driver reports GPUDirect Storage available: disk -> GPU DMA"
    if cufile_property("allow_compat_mode") is False:
        # cuFile refuses its compat mode, so kvikio (in AUTO) falls back to its own POSIX reads.
        return "kvikio-posix", (f"kvikio compat mode {mode}; no GPUDirect Storage driver and "
                                f"cuFile compat mode disallowed")
    return "cufile-compat", "cuFile in its own compat mode (no GPUDirect Storage driver)"


def read_target(io_path: str, requested: str = "device") -> str:
    """Where kvikio reads to: "device" (CUDA slots; always for gds) or "host" (pinned slots) when asked."""
    return "device" if io_path == "gds" else requested


def choose_io_path(cuda: bool, threads: int, target: str):
    """Returns (kvikio or None, io path, one-line why) for the .bin loader before any file is opened."""
    kvikio, missing = (None, "no CUDA device") if not cuda else import_kvikio()
    if kvikio is None:
        how = ("pinned staging + non_blocking copies on a side stream" if cuda
               else "read ahead by one thread (CPU: no copies)")
        return None, "pread+pinned" if cuda else "pread", f"{missing}: length-checked preads of the .bin, {how}"
    kvikio.defaults.set({"num_threads": int(threads)})
    io_path, why = kvikio_io_path(kvikio)
    if read_target(io_path, target) == "host" and io_path != "kvikio-posix":
        # Host buffers never go through cuFile: kvikio reads them with POSIX preads.
        io_path, why = "kvikio-posix", f"{why}; host-buffer reads bypass cuFile"
    return kvikio, io_path, why


def check_direct_io(kvikio, path: str, io_path: str, why: str) -> tuple[str, str]:
    """kvikio in AUTO mode quietly reads a file that O_DIRECT cannot open (tmpfs, overlay...) through POSIX:
    checks the real file so the reported path is honest."""
    handle = kvikio.CuFile(path, "r")
    try:
        if handle.is_direct_io_supported():
            return io_path, why
    finally:
        handle.close()
    return "kvikio-posix", f"{path} cannot be opened with O_DIRECT (file system), so kvikio reads it through POSIX"
