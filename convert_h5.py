"""Converts a nanoTabPFN HDF5 dump to the .bin records of dump_format (for kvikio / GPUDirect Storage):
`python convert_h5.py data/prior.h5 [--verify] [--out-dir /nvme] [--force]`. Streams ~64 MB chunks; atomic
(temp names, rename, sidecar last); one converter per dump (a lock file)."""
import contextlib
import os
import sys
import time

import h5py
import numpy as np

import dump_format as fmt
import safe_io
from dump_format import BinFormatError, DumpError, DumpInfo

CHUNK_BYTES = 64 << 20  # bytes of padded X records per chunk (bounded memory)
EXPECTED_MB_PER_S = 150  # for the ETA printed before writing: 160 MB/s measured on a 2-core VM


class ConvertError(RuntimeError):
    """The conversion failed (verify mismatch, source changed, unreadable source); one line."""

    def __init__(self, message):
        super().__init__(fmt.one_line(message))


def _write_all(handle, data: memoryview) -> None:
    """Writes every byte of `data` (one place, so tests can simulate a failing disk here)."""
    handle.write(data)


def _chunks(info: DumpInfo, chunk: int, desc: str, progress: bool):
    """Yields (first, count) over the dump, `chunk` datasets at a time, with a progress bar."""
    from tqdm import tqdm  # lazy: only the converter draws a bar
    with tqdm(total=info.num_datasets, unit="ds", desc=f"{desc} {os.path.basename(info.path)}", leave=False,
              dynamic_ncols=True, disable=not progress) as bar:
        for first in range(0, info.num_datasets, chunk):
            count = min(chunk, info.num_datasets - first)
            yield first, count
            bar.update(count)


def _compare_records(info: DumpInfo, x_path: str, y_path: str, chunk: int, progress: bool) -> None:
    """Compares every .bin record's bits (and zero padding) with the HDF5; ConvertError names the first that differs."""
    R, F = info.rows, info.features
    mx, my = (fmt.BinRecords(p, fmt.record_stride_bytes(R, w)) for p, w in ((x_path, F), (y_path, 1)))
    with h5py.File(info.path, "r") as f, contextlib.closing(mx), contextlib.closing(my):
        for first, count in _chunks(info, chunk, "verify", progress):
            x = f["X"][first:first + count].astype(np.float32, copy=False).reshape(count, -1)
            y = f["y"][first:first + count].astype(np.float32, copy=False)
            bx, by = mx.read(first, count), my.read(first, count)   # preads: a shrinking file is one line
            # Bits (uint32 views), so -0.0 vs 0.0 or a changed NaN payload would show.
            same = ((bx[:, :R * F].view(np.uint32) == x.view(np.uint32)).all(axis=1)
                    & (bx[:, R * F:] == 0).all(axis=1)
                    & (by[:, :R].view(np.uint32) == y.view(np.uint32)).all(axis=1) & (by[:, R:] == 0).all(axis=1))
            if not same.all():
                bad = first + int(np.argmin(same))
                raise ConvertError(f"verify: dataset {bad} of {x_path} / {y_path} differs from {info.path}")


def _write_records(info: DumpInfo, tmp_x: str, tmp_y: str, chunk: int, progress: bool) -> dict:
    """Streams padded X and y records into the temp files; returns {"x": crcs, "y": crcs}."""
    R, F = info.rows, info.features
    # Allocated once: padded records (zeros stay in the padding) and staging h5py reads into.
    padded_x = np.zeros((chunk, fmt.record_stride_bytes(R, F) // 4), np.float32)
    padded_y = np.zeros((chunk, fmt.record_stride_bytes(R, 1) // 4), np.float32)
    stage_x, stage_y = np.empty((chunk, R, F), np.float32), np.empty((chunk, R), np.float32)
    crc = {"x": fmt.BlockChecksum(), "y": fmt.BlockChecksum()}
    with open(tmp_x, "wb") as fx, open(tmp_y, "wb") as fy, h5py.File(info.path, "r") as f:
        for first, count in _chunks(info, chunk, "convert", progress):
            xs, ys = stage_x[:count], stage_y[:count]
            try:
                f["X"].read_direct(xs, source_sel=np.s_[first:first + count])
                f["y"].read_direct(ys, source_sel=np.s_[first:first + count])
            except OSError as exc:  # the source failed, not the output folder: say which
                raise ConvertError(f"{info.path}: reading datasets {first}..{first + count - 1} failed "
                                   f"({str(exc).splitlines()[0]}); partial files removed") from None
            fmt.check_values(info.path, xs, ys, first, info.max_num_classes)
            padded_x[:count, :R * F] = xs.reshape(count, R * F)
            padded_y[:count, :R] = ys
            for which, handle, data in (("x", fx, padded_x), ("y", fy, padded_y)):
                view = memoryview(data[:count]).cast("B")
                crc[which].update(view)  # checksum of the bytes as written, computed on the way
                _write_all(handle, view)
    return {k: c.blocks for k, c in crc.items()}


def convert(dump_path, *, out_dir=None, chunk_datasets: int | None = None, verify: bool = False,
            progress: bool = True, force: bool = True) -> dict:
    """Converts a dump to `<dump>.X.bin`, `<dump>.y.bin`, `<dump>.bin.json` (in out_dir, default beside it) under
    the conversion lock; force=False keeps a valid conversion. Returns stats (x_bin, bytes_written, skipped, ...)."""
    t0 = time.perf_counter()
    info = fmt.open_dump(dump_path, scan_values=False)  # values are checked chunk by chunk below
    x_bin, y_bin, sidecar = fmt.bin_paths(info.path, out_dir)
    if chunk_datasets is not None and (int(chunk_datasets) != chunk_datasets or chunk_datasets < 1):
        raise ConvertError(f"chunk_datasets must be an integer >= 1, got {chunk_datasets!r}")
    chunk = int(chunk_datasets or max(1, CHUNK_BYTES // fmt.record_stride_bytes(info.rows, info.features)))
    total = fmt.bin_size_bytes(info)
    reclaimed = sum(os.path.getsize(p) for p in (x_bin, y_bin) if os.path.isfile(p))  # removed first
    safe_io.check_outputs({"output": x_bin, "sidecar": sidecar}, inputs=[info.path],
                          need_bytes={"output": max(0, total + 40 * info.num_datasets + (1 << 16) - reclaimed)})
    os.makedirs(os.path.dirname(x_bin), exist_ok=True)
    safe_io.clean_stale(os.path.dirname(x_bin))  # temp and lock files of killed conversions
    stats = {"dump": info.path, "x_bin": x_bin, "y_bin": y_bin, "sidecar": sidecar, "num_datasets": info.num_datasets,
             "bytes_written": 0, "verified": verify, "skipped": False}
    with safe_io.file_lock(sidecar + ".lock"):
        content = fmt.dump_content_digest(info)   # under the lock: the sidecar will remember what was converted
        if not force:
            try:
                meta = fmt.read_sidecar(sidecar, info)
                fmt.verify_bin_checksums(meta)
                if verify:
                    _compare_records(info, meta["x_path"], meta["y_path"], chunk, progress)
                return {**stats, "skipped": True, "seconds": time.perf_counter() - t0, "mb_per_s": 0.0}
            except BinFormatError as exc:   # no valid conversion: convert again, never over a newer format
                if exc.reason == "newer":
                    raise BinFormatError(f"{exc}; pass --force to overwrite", exc.reason) from None
                if exc.reason != "missing" and progress:
                    print(f"convert_h5: {exc.reason} conversion ({exc}); converting again", flush=True)
        if progress:
            print(f"convert_h5: writing {x_bin} and {y_bin} ({safe_io.format_bytes(total)}, {info.num_datasets} "
                  f"datasets) from {info.path}; ETA ~{total / 1e6 / EXPECTED_MB_PER_S:.0f} s at "
                  f"~{EXPECTED_MB_PER_S} MB/s", flush=True)
        _publish(info, (x_bin, y_bin, sidecar), chunk, verify, progress, content)
    seconds = time.perf_counter() - t0
    stats.update(bytes_written=total, seconds=seconds, mb_per_s=total / 1e6 / max(seconds, 1e-9))
    if progress:
        print(f"convert_h5: {info.num_datasets} datasets, {total / 1e6:.1f} MB written in {seconds:.2f} s "
              f"({stats['mb_per_s']:.0f} MB/s){', verified' if verify else ''} -> {x_bin}", flush=True)
    return stats


def _publish(info: DumpInfo, paths, chunk: int, verify: bool, progress: bool, content: str) -> None:
    """Writes the temp files, renames them, writes the sidecar last; nothing partial survives a failure."""
    x_bin, y_bin, sidecar = paths
    # Sidecar FIRST: from now until the new one lands, nothing here is accepted by a loader.
    for old in (sidecar, x_bin, y_bin):
        if os.path.exists(old):
            os.unlink(old)
    try:
        with safe_io.atomic_output(x_bin, ".bin file") as tmp_x, safe_io.atomic_output(y_bin, ".bin file") as tmp_y:
            checksums = _write_records(info, tmp_x, tmp_y, chunk, progress)
            if verify:
                _compare_records(info, tmp_x, tmp_y, chunk, progress)
            stat = os.stat(info.path)
            if (stat.st_size != info.size_bytes or stat.st_mtime_ns != info.mtime_ns
                    or fmt.dump_content_digest(info) != content):
                raise ConvertError(f"{info.path} changed during the conversion; run it again")
        fmt.write_sidecar(sidecar, info, x_bin, y_bin, checksums, content)  # LAST: makes the conversion valid
    except BaseException:  # renamed .bin files without their sidecar are litter: remove them
        for path in (x_bin, y_bin):
            if os.path.exists(path):
                os.unlink(path)
        raise
    if verify:
        fmt.read_sidecar(sidecar, info)  # the loader's own acceptance check


def main(argv=None) -> int:
    """Command line; returns the exit code (0 ok, 2 bad input / failure, 130 interrupted)."""
    from runtime import ArgumentParser, fail
    parser = ArgumentParser(description="Convert a nanoTabPFN HDF5 dump to 4 KiB-aligned .bin records for "
                                        "kvikio/GDS (format in dump_format.py).")
    parser.add_argument("dump", help="the HDF5 prior dump to convert (read-only)")
    parser.add_argument("--out-dir", help="folder for the .bin files and sidecar (default: next to the dump)")
    parser.add_argument("--chunk-datasets", type=int, help="datasets per streamed chunk (default: ~64 MB)")
    parser.add_argument("--verify", action="store_true", help="re-read every record and compare it with the HDF5")
    parser.add_argument("--force", action="store_true", help="convert even when an up-to-date conversion exists")
    parser.add_argument("--no-progress", action="store_true", help="no plan line, progress bar or MB/s line")
    args = parser.parse_args(argv)
    try:
        stats = convert(args.dump, out_dir=args.out_dir, chunk_datasets=args.chunk_datasets, verify=args.verify,
                        progress=not args.no_progress, force=args.force)
        if stats["skipped"]:
            state = "and verified" if args.verify else "(--force converts again)"
            print(f"convert_h5: {stats['sidecar']} is up to date {state}", flush=True)
    except (DumpError, ConvertError, OSError, MemoryError) as exc:
        return fail(exc)
    except KeyboardInterrupt:
        return fail("interrupted; partial files removed", 130)
    return 0


if __name__ == "__main__":
    sys.exit(main())
