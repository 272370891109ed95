"""Converts a nanoTabPFN HDF5 prior dump to raw .bin records for kvikio / GPUDirect Storage.

Writes `<dump>.X.bin`, `<dump>.y.bin` and the JSON sidecar `<dump>.bin.json` in the format defined
in loaders.py (one float32 record per dataset, padded to 4 KiB, so a batch of consecutive datasets is
one aligned span that cuFile can DMA straight into GPU memory).

    python convert_h5.py data/prior.h5                # next to the dump; skipped when up to date
    python convert_h5.py data/prior.h5 --verify       # re-read every record and compare with HDF5
    python convert_h5.py data/prior.h5 --out-dir /nvme --force

The conversion streams in bounded chunks (about 64 MB), so a dump larger than RAM converts. It is
atomic: temp names in the output folder, os.replace, the sidecar last; an interrupted or failed run
removes its partial files and leaves nothing a loader would accept. The source is opened read-only.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
import time

import h5py
import numpy as np

import loaders
from profile_utils import fsync_dir
from loaders import BinFormatError, DumpError, DumpInfo

CHUNK_BYTES = 64 << 20  # bytes of padded X records per chunk (bounded memory)


class ConvertError(RuntimeError):
    """The conversion failed (output folder, disk full, verify mismatch); the message is one line."""

    def __init__(self, message):
        super().__init__(loaders._one_line(message))


def _write_all(handle, data: memoryview) -> None:
    """Writes every byte of `data` (one place, so tests can simulate a full disk here)."""
    handle.write(data)


def _progress_bar(total: int, desc: str, enabled: bool):
    """A tqdm bar (lazy import) or None."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="ds", desc=desc, leave=False, dynamic_ncols=True)


def _chunk_size(info: DumpInfo, chunk_datasets: int | None) -> int:
    if chunk_datasets is not None:
        if int(chunk_datasets) != chunk_datasets or chunk_datasets < 1:
            raise ConvertError(f"chunk_datasets must be an integer >= 1, got {chunk_datasets!r}")
        return int(chunk_datasets)
    return max(1, CHUNK_BYTES // loaders.record_stride_bytes(info.rows, info.features))


def _compare_records(info: DumpInfo, x_path: str, y_path: str, chunk: int, progress: bool) -> None:
    """Re-reads every record of the .bin files and compares it bit for bit with the HDF5 (chunked).

    Raises:
        ConvertError: first dataset that differs (data or non-zero padding).
    """
    N, R, F = info.num_datasets, info.rows, info.features
    sx = loaders.record_stride_bytes(R, F) // 4
    sy = loaders.record_stride_bytes(R, 1) // 4
    mx = np.memmap(x_path, dtype=loaders.BIN_DTYPE, mode="r", shape=(N, sx))
    my = np.memmap(y_path, dtype=loaders.BIN_DTYPE, mode="r", shape=(N, sy))
    bar = _progress_bar(N, f"verify {os.path.basename(info.path)}", progress)
    try:
        with h5py.File(info.path, "r") as f:
            for first in range(0, N, chunk):
                count = min(chunk, N - first)
                x = f["X"][first:first + count].astype(np.float32, copy=False).reshape(count, -1)
                y = f["y"][first:first + count].astype(np.float32, copy=False)
                bx = np.asarray(mx[first:first + count])
                by = np.asarray(my[first:first + count])
                # Compare bits (uint32 views), so -0.0 vs 0.0 or a changed NaN payload would show.
                same_x = (bx[:, :R * F].view(np.uint32) == x.view(np.uint32)).all(axis=1) \
                    & (bx[:, R * F:] == 0).all(axis=1)
                same_y = (by[:, :R].view(np.uint32) == y.view(np.uint32)).all(axis=1) \
                    & (by[:, R:] == 0).all(axis=1)
                same = same_x & same_y
                if not same.all():
                    bad = first + int(np.argmin(same))
                    raise ConvertError(f"verify: dataset {bad} of {x_path} / {y_path} differs from "
                                       f"{info.path}")
                if bar is not None:
                    bar.update(count)
    finally:
        if bar is not None:
            bar.close()
        del mx, my


def convert(dump_path, *, out_dir=None, chunk_datasets: int | None = None, verify: bool = False,
            progress: bool = True) -> dict:
    """Converts a dump to `<dump>.X.bin`, `<dump>.y.bin` and `<dump>.bin.json` (always rewrites).

    Args:
        dump_path: the HDF5 dump (opened read-only, never modified).
        out_dir: output folder (default: next to the dump; created if missing).
        chunk_datasets: datasets per chunk (default: about 64 MB of records).
        verify: re-read every record of the new files and compare with the HDF5 before publishing.
        progress: tqdm progress bar and a final MB/s line.

    Returns:
        dict with x_bin, y_bin, sidecar, num_datasets, bytes_read, bytes_written, seconds, mb_per_s,
        verified.

    Raises:
        DumpError: the dump is missing, not HDF5, truncated, or has bad keys/values.
        ConvertError: unwritable output folder, disk full, verify mismatch, source changed.
        KeyboardInterrupt: re-raised after the partial files were removed.
    """
    t0 = time.perf_counter()
    info = loaders.open_dump(dump_path, scan_values=False)  # values are checked chunk by chunk below
    x_bin, y_bin, sidecar = loaders.bin_paths(info.path, out_dir)
    folder = os.path.dirname(x_bin)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise ConvertError(f"cannot create output folder {folder} ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConvertError(f"output folder {folder} is not writable")
    N, R, F = info.num_datasets, info.rows, info.features
    sx = loaders.record_stride_bytes(R, F)
    sy = loaders.record_stride_bytes(R, 1)
    chunk = _chunk_size(info, chunk_datasets)
    tmp_x, tmp_y = f"{x_bin}.{os.getpid()}.tmp", f"{y_bin}.{os.getpid()}.tmp"
    published: list[str] = []
    written = 0
    bar = None
    try:
        # Drop an old conversion, sidecar FIRST: from now until the new sidecar lands, the folder
        # holds nothing a loader accepts (it trusts .bin files only through a matching sidecar),
        # and the old files' disk space is free for the new ones.
        for old in (sidecar, x_bin, y_bin):
            if os.path.exists(old):
                os.unlink(old)
        bar = _progress_bar(N, f"convert {os.path.basename(info.path)}", progress)
        # Buffers allocated once per conversion: padded records (zeros stay in the padding) and
        # contiguous staging arrays that h5py reads into directly.
        padded_x = np.zeros((chunk, sx // 4), np.float32)
        padded_y = np.zeros((chunk, sy // 4), np.float32)
        stage_x = np.empty((chunk, R, F), np.float32)
        stage_y = np.empty((chunk, R), np.float32)
        with open(tmp_x, "wb") as fx, open(tmp_y, "wb") as fy, h5py.File(info.path, "r") as f:
            X, Y = f["X"], f["y"]
            for first in range(0, N, chunk):
                count = min(chunk, N - first)
                xs, ys = stage_x[:count], stage_y[:count]
                try:
                    X.read_direct(xs, source_sel=np.s_[first:first + count])
                    Y.read_direct(ys, source_sel=np.s_[first:first + count])
                except OSError as exc:  # the source failed, not the output folder: say which
                    raise ConvertError(f"{info.path}: reading datasets {first}..{first + count - 1} failed "
                                       f"({str(exc).splitlines()[0]}); partial files removed") from None
                x_problem, y_problem = loaders._scan_values_problems(xs, ys, first,
                                                                     info.max_num_classes)
                if x_problem or y_problem:
                    raise DumpError(f"{info.path}: {x_problem or y_problem}")
                padded_x[:count, :R * F] = xs.reshape(count, R * F)
                padded_y[:count, :R] = ys
                _write_all(fx, memoryview(padded_x[:count]).cast("B"))
                written += count * sx
                _write_all(fy, memoryview(padded_y[:count]).cast("B"))
                written += count * sy
                if bar is not None:
                    bar.update(count)
            for handle in (fx, fy):
                handle.flush()
                os.fsync(handle.fileno())  # bytes on disk before the files get their final names
        if bar is not None:
            bar.close()
            bar = None
        if verify:
            _compare_records(info, tmp_x, tmp_y, chunk, progress)
        stat = os.stat(info.path)
        if stat.st_size != info.size_bytes or stat.st_mtime_ns != info.mtime_ns:
            raise ConvertError(f"{info.path} changed during the conversion; run it again")
        os.replace(tmp_x, x_bin)
        published.append(x_bin)
        os.replace(tmp_y, y_bin)
        published.append(y_bin)
        loaders.write_sidecar(sidecar, info, x_bin, y_bin)  # LAST: makes the conversion valid
        published.append(sidecar)
        fsync_dir(folder)
        if verify:
            loaders.read_sidecar(sidecar, info)  # the loader's own acceptance check
    except BaseException as exc:
        if bar is not None:
            bar.close()
        # Nothing partial survives: the sidecar first (so no moment has a sidecar without its
        # files), then final names already published, then the temp files.
        for path in (*reversed(published), tmp_x, tmp_y):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        if isinstance(exc, OSError) and not isinstance(exc, ConvertError):
            if exc.errno == errno.ENOSPC:
                raise ConvertError(f"{folder}: no space left on device after writing "
                                   f"{written / 1e6:.1f} MB; partial files removed") from None
            raise ConvertError(f"{folder}: {exc.strerror or exc} while writing the .bin files; "
                               f"partial files removed") from None
        raise
    seconds = time.perf_counter() - t0
    bytes_read = info.x_bytes + info.y_bytes
    stats = {"dump": info.path, "x_bin": x_bin, "y_bin": y_bin, "sidecar": sidecar,
             "num_datasets": N, "bytes_read": bytes_read, "bytes_written": written,
             "seconds": seconds, "mb_per_s": written / 1e6 / max(seconds, 1e-9), "verified": verify}
    if progress:
        print(f"convert_h5: {N} datasets, {written / 1e6:.1f} MB written in {seconds:.2f} s "
              f"({stats['mb_per_s']:.0f} MB/s){', verified' if verify else ''} -> {x_bin}",
              flush=True)
    return stats


def verify(dump_path, *, out_dir=None, chunk_datasets: int | None = None,
           progress: bool = True) -> dict:
    """Checks an existing conversion: sidecar assertions, then every record against the HDF5.

    Args:
        dump_path: the HDF5 dump.
        out_dir: folder of the conversion (default next to the dump).
        chunk_datasets: datasets per chunk (default about 64 MB).
        progress: tqdm progress bar.

    Returns:
        the sidecar dictionary.

    Raises:
        BinFormatError, DumpError, ConvertError: one line.
    """
    info = loaders.open_dump(dump_path, scan_values=False)
    _, _, sidecar = loaders.bin_paths(info.path, out_dir)
    meta = loaders.read_sidecar(sidecar, info)
    _compare_records(info, meta["x_path"], meta["y_path"], _chunk_size(info, chunk_datasets),
                     progress)
    return meta


def main(argv=None) -> int:
    """Command line; returns the exit code (0 ok, 2 bad input / failure, 130 interrupted)."""
    parser = argparse.ArgumentParser(
        description="Convert a nanoTabPFN HDF5 dump to 4 KiB-aligned .bin records for kvikio/GDS "
                    "(format defined in loaders.py).")
    parser.add_argument("dump", help="the HDF5 prior dump to convert (read-only)")
    parser.add_argument("--out-dir", default=None,
                        help="folder for <dump>.X.bin, <dump>.y.bin, <dump>.bin.json "
                             "(default: next to the dump)")
    parser.add_argument("--chunk-datasets", type=int, default=None,
                        help="datasets per streamed chunk (default: about 64 MB of records)")
    parser.add_argument("--verify", action="store_true",
                        help="re-read every record and compare it with the HDF5 (bounded memory)")
    parser.add_argument("--force", action="store_true",
                        help="convert even when an up-to-date conversion exists (or a newer "
                             "format version's)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar or MB/s line")
    args = parser.parse_args(argv)
    progress = not args.no_progress
    try:
        if args.chunk_datasets is not None and args.chunk_datasets < 1:
            raise ConvertError(f"--chunk-datasets must be >= 1, got {args.chunk_datasets}")
        if not args.force:
            info = loaders.open_dump(args.dump, scan_values=False)
            _, _, sidecar = loaders.bin_paths(info.path, args.out_dir)
            try:
                loaders.read_sidecar(sidecar, info)
            except BinFormatError as exc:
                if exc.reason == "newer":
                    raise BinFormatError(f"{exc}; pass --force to overwrite", exc.reason) from None
                if exc.reason != "missing":
                    print(f"convert_h5: {exc.reason} conversion ({exc}); converting again",
                          flush=True)
            else:
                if args.verify:
                    verify(args.dump, out_dir=args.out_dir, chunk_datasets=args.chunk_datasets,
                           progress=progress)
                    print(f"convert_h5: {sidecar} is up to date and verified", flush=True)
                else:
                    print(f"convert_h5: {sidecar} is up to date (--force converts again)",
                          flush=True)
                return 0
        convert(args.dump, out_dir=args.out_dir, chunk_datasets=args.chunk_datasets,
                verify=args.verify, progress=progress)
    except (DumpError, ConvertError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {loaders._one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; partial files removed", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
