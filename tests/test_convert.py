"""convert_h5.py: round trip, sidecar assertions, atomicity, full disk, read-only folder, CLI."""
import errno
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import convert_h5
import dump_format
import safe_io
from conftest import write_tiny_dump
from test_loaders import make

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, ROWS, FEATURES, B = 29, 48, 6, 4


@pytest.fixture
def dump(tmp_path):
    return write_tiny_dump(tmp_path / "d.h5", num_datasets=N, rows=ROWS, features=FEATURES,
                           num_classes=3, seed=11)


def _fingerprint(path):
    with open(path, "rb") as f:
        return f.read(), os.stat(path).st_mtime_ns


def _take(loader, steps):
    return [(b.x, b.y, b.split, b.wrapped) for b in (next(loader) for _ in range(steps))]


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, bx) and torch.equal(y, by) and (s, w) == (bs, bw)
                                    for (x, y, s, w), (bx, by, bs, bw) in zip(a, b))


def test_round_trip_bin_equals_h5(dump):
    before = _fingerprint(dump)
    stats = convert_h5.convert(dump, progress=False, chunk_datasets=5)  # several chunks, ragged tail
    assert _fingerprint(dump) == before, "the source dump must not change"
    x_bin, y_bin, sidecar = dump_format.bin_paths(dump)
    assert (stats["x_bin"], stats["y_bin"], stats["sidecar"]) == (x_bin, y_bin, sidecar)
    sx, sy = dump_format.record_stride_bytes(ROWS, FEATURES), dump_format.record_stride_bytes(ROWS)
    assert sx % 4096 == 0 and sy % 4096 == 0 and sx >= ROWS * FEATURES * 4
    assert os.path.getsize(x_bin) == N * sx and os.path.getsize(y_bin) == N * sy
    assert stats["bytes_written"] == N * (sx + sy) and stats["mb_per_s"] > 0
    meta = dump_format.read_sidecar(sidecar, dump_format.open_dump(dump))
    assert meta["format_version"] == dump_format.BIN_FORMAT_VERSION and meta["alignment"] == 4096
    assert meta["num_features"] == dump_format.open_dump(dump).num_features.tolist()
    with make(dump, B, "cpu", start=2) as h5, \
            make(dump, B, "cpu", kind="bin", start=2, no_convert=True) as binl:
        assert re.fullmatch(r"bin: crc32 of 0\.00 GB verified in \d+\.\d\d s", binl.notes[0]), binl.notes
        assert binl.notes[1:] == ["bin: path pread (no CUDA device: length-checked preads of the .bin, read "
                                  "ahead by one thread (CPU: no copies))"]
        assert _same(_take(binl, 16), _take(h5, 16))  # 16 steps of 4 from 2 over 29: wraps twice


def test_record_layout_is_aligned_and_zero_padded(dump):
    convert_h5.convert(dump, progress=False)
    info = dump_format.open_dump(dump)
    x_bin, y_bin, _ = dump_format.bin_paths(dump)
    sx = dump_format.record_stride_bytes(ROWS, FEATURES)
    raw = np.fromfile(x_bin, dtype="<f4").reshape(N, sx // 4)
    import h5py
    with h5py.File(dump, "r") as f:
        X = f["X"][()]
    assert np.array_equal(raw[:, :ROWS * FEATURES].reshape(N, ROWS, FEATURES), X)
    assert not raw[:, ROWS * FEATURES:].any()
    assert info.num_datasets == N


def test_loader_converts_missing_conversion_and_no_convert_refuses(dump):
    with pytest.raises(dump_format.BinFormatError, match=r"no \.bin conversion .*no_convert") as err:
        make(dump, B, "cpu", kind="bin", no_convert=True)
    assert "\n" not in str(err.value)
    with make(dump, B, "cpu", kind="bin") as loader:
        assert any(n.startswith("bin: missing conversion") for n in loader.notes)
        next(loader)
    with make(dump, B, "cpu", kind="bin", no_convert=True) as loader:
        assert not any("conversion" in n for n in loader.notes)


def test_newer_format_version_is_an_error(dump):
    convert_h5.convert(dump, progress=False)
    _, _, sidecar = dump_format.bin_paths(dump)
    meta = json.load(open(sidecar))
    meta["format_version"] = dump_format.BIN_FORMAT_VERSION + 1
    json.dump(meta, open(sidecar, "w"))
    msg = f"written by a newer format version {dump_format.BIN_FORMAT_VERSION + 1}"
    with pytest.raises(dump_format.BinFormatError, match=msg):
        dump_format.read_sidecar(sidecar, dump_format.open_dump(dump))
    with pytest.raises(dump_format.DumpError, match=msg):  # never overwritten by a reconversion
        make(dump, B, "cpu", kind="bin")
    assert json.load(open(sidecar))["format_version"] == dump_format.BIN_FORMAT_VERSION + 1


@pytest.mark.parametrize("damage,reason,fragment", [
    ("truncate_x", "partial", "expected N*stride"),
    ("delete_y", "partial", "is missing (partial conversion)"),
    ("touch_source", "stale", "stale: the source"),
    ("modify_source", "stale", "stale"),
    ("edit_sidecar_metadata", "corrupt", "checksum mismatch"),
    ("garbage_sidecar", "corrupt", "not readable JSON"),
    ("wrong_stride", "corrupt", "x_stride_bytes"),
])
def test_damaged_conversion_reconverts_or_errors(dump, damage, reason, fragment):
    convert_h5.convert(dump, progress=False)
    x_bin, y_bin, sidecar = dump_format.bin_paths(dump)
    if damage == "truncate_x":
        with open(x_bin, "r+b") as f:
            f.truncate(os.path.getsize(x_bin) - 4096)
    elif damage == "delete_y":
        os.unlink(y_bin)
    elif damage == "touch_source":
        st = os.stat(dump)
        os.utime(dump, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    elif damage == "modify_source":
        import h5py
        with h5py.File(dump, "a") as f:
            nf = f["num_features"][()]
            nf[0] = 1 if nf[0] != 1 else 2
            f["num_features"][...] = nf
    elif damage == "edit_sidecar_metadata":
        meta = json.load(open(sidecar))
        meta["splits"][3] += 1
        json.dump(meta, open(sidecar, "w"))
    elif damage == "garbage_sidecar":
        open(sidecar, "w").write('{"magic": "nanotabpfn-dump-bin", "format_')
    elif damage == "wrong_stride":
        meta = json.load(open(sidecar))
        meta["x_stride_bytes"] += 4
        json.dump(meta, open(sidecar, "w"))
    info = dump_format.open_dump(dump)
    with pytest.raises(dump_format.BinFormatError, match=re.escape(fragment)) as err:
        dump_format.read_sidecar(sidecar, info)
    assert err.value.reason == reason and "\n" not in str(err.value)
    with pytest.raises(dump_format.DumpError, match=re.escape(fragment)):
        make(info, B, "cpu", kind="bin", no_convert=True)
    with make(info, B, "cpu", kind="bin") as loader:
        notes = loader.describe()["notes"]
        got = _take(loader, 10)
    assert any(n.startswith(f"bin: {reason} conversion") and "converting" in n for n in notes), notes
    with make(info, B, "cpu") as h5:
        assert _same(got, _take(h5, 10))
    dump_format.read_sidecar(sidecar, info)  # valid again


def _leftovers(folder, dump):
    return sorted(n for n in os.listdir(folder) if n != os.path.basename(dump))


class _Interrupt:
    """Replaces convert_h5._write_all: writes `limit` bytes, then raises `exc`."""

    def __init__(self, limit, exc):
        self.limit, self.exc, self.written = limit, exc, 0

    def __call__(self, handle, data):
        if self.written + len(data) > self.limit:
            raise self.exc
        handle.write(data)
        self.written += len(data)


@pytest.mark.parametrize("existing", [False, True], ids=["fresh", "over-a-valid-conversion"])
def test_interrupted_conversion_leaves_nothing_a_loader_accepts(dump, monkeypatch, existing):
    if existing:
        convert_h5.convert(dump, progress=False)
    before = _fingerprint(dump)
    monkeypatch.setattr(convert_h5, "_write_all", _Interrupt(200_000, KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        convert_h5.convert(dump, progress=False, chunk_datasets=3)
    assert _leftovers(os.path.dirname(dump), dump) == []
    assert _fingerprint(dump) == before
    with pytest.raises(dump_format.BinFormatError, match="no .bin conversion"):
        make(dump, B, "cpu", kind="bin", no_convert=True)


def test_disk_full_is_one_line_and_leaves_no_partial_files(dump, monkeypatch, capsys):
    before = _fingerprint(dump)
    full = _Interrupt(100_000, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    monkeypatch.setattr(convert_h5, "_write_all", full)
    with pytest.raises(safe_io.OutputError, match="disk full or file-size limit reached") as err:
        convert_h5.convert(dump, progress=False, chunk_datasets=2)
    assert "\n" not in str(err.value) and full.written > 0
    assert _leftovers(os.path.dirname(dump), dump) == []
    full.written = 0
    assert convert_h5.main([dump, "--no-progress", "--chunk-datasets", "2"]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("error: ") and "disk full" in err_lines[0]
    assert _leftovers(os.path.dirname(dump), dump) == []
    assert _fingerprint(dump) == before


def test_disk_full_while_writing_the_sidecar(dump, monkeypatch):
    """The last step can fail too: the already renamed .bin files are removed again."""
    def no_space(*args, **kwargs):
        raise safe_io.OutputError("cannot write sidecar: disk full or file-size limit reached")
    monkeypatch.setattr(dump_format, "write_sidecar", no_space)
    with pytest.raises(safe_io.OutputError, match="disk full"):
        convert_h5.convert(dump, progress=False)
    assert _leftovers(os.path.dirname(dump), dump) == []


def test_read_only_output_folder(dump, tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    os.chmod(out, 0o555)
    try:
        if os.access(out, os.W_OK):
            pytest.skip("running as root: chmod does not make the folder read-only")
        with pytest.raises(safe_io.OutputError, match="not writable"):
            convert_h5.convert(dump, out_dir=out, progress=False)
        assert os.listdir(out) == []
    finally:
        os.chmod(out, 0o755)


def test_unwritable_output_folder_simulated(dump, tmp_path, monkeypatch, capsys):
    """Works as root too: the access check reports a read-only folder."""
    out = tmp_path / "ro"
    out.mkdir()
    real_access = os.access
    monkeypatch.setattr(convert_h5.os, "access",
                        lambda p, mode: False if os.fspath(p) == str(out) else real_access(p, mode))
    assert convert_h5.main([dump, "--out-dir", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: output {out}") and f"folder {out} is not writable" in err
    assert os.listdir(out) == []


def test_verify_passes_and_catches_a_bad_write(dump, monkeypatch):
    stats = convert_h5.convert(dump, progress=False, verify=True, chunk_datasets=4)
    assert stats["verified"]
    # an up-to-date conversion, checked record by record against the HDF5
    stats = convert_h5.convert(dump, progress=False, verify=True, force=False, chunk_datasets=7)
    assert stats["skipped"] and stats["verified"] and stats["num_datasets"] == N
    # corrupt one record's bytes on the way to disk: verify must refuse to publish the files
    state = {"calls": 0}

    def corrupting(handle, data):
        state["calls"] += 1
        if state["calls"] == 3:  # the second X chunk
            data = bytearray(data)
            data[100] ^= 0xFF
        handle.write(data)

    monkeypatch.setattr(convert_h5, "_write_all", corrupting)
    with pytest.raises(convert_h5.ConvertError, match="verify: dataset 4 .* differs"):
        convert_h5.convert(dump, progress=False, verify=True, chunk_datasets=4)
    assert _leftovers(os.path.dirname(dump), dump) == []


def test_nan_in_source_aborts_conversion(tmp_path):
    import h5py
    path = write_tiny_dump(tmp_path / "nan.h5", num_datasets=N, rows=ROWS, features=FEATURES)
    with h5py.File(path, "a") as f:
        X = f["X"][()]
        X[20, 1, 1] = np.nan
        f["X"][...] = X
    with pytest.raises(dump_format.DumpError, match="NaN or Inf values .first in dataset 20"):
        convert_h5.convert(path, progress=False, chunk_datasets=8)
    assert _leftovers(tmp_path, path) == []


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, os.path.join(ROOT, "convert_h5.py"), *args],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


def test_cli_exit_codes_and_one_line_errors(dump, tmp_path):
    (tmp_path / "notes.txt").write_text("not a dump")
    for bad, fragment in ((str(tmp_path / "missing.h5"), "no such file"),
                          (str(tmp_path / "notes.txt"), "not an HDF5 file")):
        r = _cli(bad)
        assert r.returncode == 2, r
        assert "Traceback" not in r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and fragment in r.stderr
    r = _cli(dump, "--verify", "--out-dir", str(tmp_path / "other"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "MB/s" in r.stdout and "verified" in r.stdout
    assert os.path.exists(dump_format.bin_paths(dump, tmp_path / "other")[2])
    with make(dump, B, "cpu", kind="bin", bin_dir=tmp_path / "other",
                             no_convert=True) as loader:
        next(loader)


def test_cli_in_process_up_to_date_force_and_newer(dump, capsys):
    assert convert_h5.main([dump, "--no-progress"]) == 0
    assert convert_h5.main([dump, "--no-progress"]) == 0
    assert "is up to date" in capsys.readouterr().out
    assert convert_h5.main([dump, "--verify", "--no-progress"]) == 0
    assert "up to date and verified" in capsys.readouterr().out
    _, _, sidecar = dump_format.bin_paths(dump)
    meta = json.load(open(sidecar))
    meta["format_version"] = 99
    json.dump(meta, open(sidecar, "w"))
    assert convert_h5.main([dump, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "newer format version 99" in err and "--force" in err and err.count("\n") == 1
    assert convert_h5.main([dump, "--no-progress", "--force"]) == 0
    assert json.load(open(sidecar))["format_version"] == dump_format.BIN_FORMAT_VERSION
    assert convert_h5.main([dump, "--chunk-datasets", "0"]) == 2


def test_concurrent_conversions_of_one_dump_do_not_break_each_other(tmp_path):
    """torchrun ranks asking for the same missing .bin at once: one converts, the others wait and reuse it."""
    import multiprocessing as mp
    dump = write_tiny_dump(tmp_path / "race.h5", num_datasets=400, rows=40, features=5, seed=11)
    ctx = mp.get_context("fork")
    with ctx.Pool(3) as pool:
        for _ in range(8):  # the race is a timing window: several fresh rounds make it show reliably
            for path in dump_format.bin_paths(dump):
                if os.path.exists(path):
                    os.remove(path)
            results = pool.map(_make_bin_loader_and_read, [dump] * 3)
            assert all(r == "ok" for r in results), results


def _make_bin_loader_and_read(dump):
    try:
        with make(dump, 4, torch.device("cpu"), kind="bin") as loader:
            next(iter(loader))
        return "ok"
    except Exception as e:  # report, do not raise across the pool
        return f"{type(e).__name__}: {e}"


def test_float64_values_that_overflow_float32_are_rejected(tmp_path):
    import h5py
    path = write_tiny_dump(tmp_path / "big.h5", num_datasets=8, rows=20, features=3)
    with h5py.File(path, "r+") as f:
        X = f["X"][:].astype(np.float64)
        X[3, 0, 0] = 1e39
        del f["X"]
        f.create_dataset("X", data=X)
    with pytest.raises(dump_format.DumpError, match="NaN or Inf"):
        dump_format.open_dump(path)


# --------------------------------------------------------------------------------------------------
# fault injection: content checksums, SIGKILL, file-size limit, free space, stale litter
# --------------------------------------------------------------------------------------------------

def _poke(path, offset, data):
    """Overwrites bytes in place: same size, same name (what a stray writer or a bad disk does)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_same_size_overwrite_is_caught_by_the_checksum(dump, capsys):
    convert_h5.convert(dump, progress=False)
    info = dump_format.open_dump(dump)
    x_bin, _, sidecar = dump_format.bin_paths(dump)
    meta = dump_format.read_sidecar(sidecar, info)
    assert meta["checksum"]["algorithm"] == "crc32" and len(meta["checksum"]["x"]) >= 1
    assert dump_format.verify_bin_checksums(meta) >= 0
    stride = dump_format.record_stride_bytes(ROWS, FEATURES)
    _poke(x_bin, 12 * stride + 8, np.float32([1.5, -2.0]).tobytes())  # finite, plausible values
    assert os.path.getsize(x_bin) == N * stride
    dump_format.read_sidecar(sidecar, info)  # size, mtime-free checks still pass: only content differs
    with pytest.raises(dump_format.BinFormatError, match=r"d\.h5\.X\.bin: content of datasets 0\.\.28 differs "
                                                         r"from the conversion \(crc32 mismatch in block 0\)$") as err:
        dump_format.verify_bin_checksums(meta)
    assert err.value.reason == "corrupt"
    with pytest.raises(dump_format.BinFormatError, match="crc32 mismatch"):
        make(dump, B, "cpu", kind="bin", no_convert=True)
    with make(dump, B, "cpu", kind="bin") as loader:  # default: reconverted, with a note
        assert any(n.startswith("bin: corrupt conversion") and "crc32 mismatch" in n for n in loader.notes)
        got = _take(loader, 10)
    with make(dump, B, "cpu") as h5:
        assert _same(got, _take(h5, 10))
    _poke(x_bin, 3 * stride, b"\x00\x00\x80\x7f")  # +inf: the CLI notices too and converts again
    capsys.readouterr()
    assert convert_h5.main([dump, "--no-progress"]) == 0
    assert "corrupt conversion" not in capsys.readouterr().out  # --no-progress: silent
    assert dump_format.verify_bin_checksums(dump_format.read_sidecar(sidecar, info)) >= 0
    _poke(x_bin, 3 * stride, b"\x00\x00\x80\x7f")
    assert convert_h5.main([dump]) == 0
    out = capsys.readouterr().out
    assert "corrupt conversion" in out and "(first in dataset 3)" in out and "converting again" in out
    assert convert_h5.main([dump]) == 0
    assert "is up to date" in capsys.readouterr().out
    dump_format.verify_bin_checksums(dump_format.read_sidecar(sidecar, info))


@pytest.mark.parametrize("which,offset,value,fragment", [
    ("x", (7, 3), np.nan, "'X' contains NaN or Inf values (first in dataset 7)"),
    ("y", (9, 0), 5.0, "dataset 9 row 0 has 5.0"),
])
def test_invalid_values_in_bin_are_refused_with_the_dataset(dump, which, offset, value, fragment):
    convert_h5.convert(dump, progress=False)
    x_bin, y_bin, _ = dump_format.bin_paths(dump)
    stride = dump_format.record_stride_bytes(ROWS, FEATURES if which == "x" else 1)
    i, element = offset
    _poke(x_bin if which == "x" else y_bin, i * stride + 4 * element, np.float32([value]).tobytes())
    with pytest.raises(dump_format.BinFormatError, match=re.escape(fragment)):  # start-up verification
        make(dump, B, "cpu", kind="bin", no_convert=True)
    # without the checksum pass, the batch holding the dataset is refused when it is read
    with make(dump, B, "cpu", kind="bin", no_convert=True, verify_bin=False) as loader:
        assert not any("crc32" in n for n in loader.notes)
        _take(loader, i // B)
        with pytest.raises(dump_format.DumpError, match=re.escape(fragment)) as err:
            next(loader)
    assert "\n" not in str(err.value)


_SLOW_CONVERT = """
import sys, time, convert_h5
real = convert_h5._write_all
def slow(handle, data):
    real(handle, data)
    handle.flush()
    time.sleep(0.05)
convert_h5._write_all = slow
convert_h5.convert(sys.argv[1], chunk_datasets=2, progress=False)
"""


def test_sigkill_mid_conversion_leaves_no_partial_file_and_the_next_run_cleans_up(dump):
    import signal
    import time
    folder = os.path.dirname(dump)
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_CONVERT, dump], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT})
    deadline = time.time() + 60
    while not any(n.endswith(".tmp") and os.path.getsize(os.path.join(folder, n)) > 0
                  for n in os.listdir(folder)):
        assert proc.poll() is None and time.time() < deadline, "converter ended before it was killed"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = _leftovers(folder, dump)
    assert any(n.endswith(".tmp") for n in left) and any(n.endswith(".lock") for n in left), left
    for final in dump_format.bin_paths(dump):  # the final names never hold a partial file
        assert not os.path.exists(final)
    with pytest.raises(dump_format.BinFormatError, match="no .bin conversion"):
        make(dump, B, "cpu", kind="bin", no_convert=True)
    assert convert_h5.main([dump, "--no-progress"]) == 0  # the next run removes the dead run's litter
    assert _leftovers(folder, dump) == sorted(os.path.basename(p) for p in dump_format.bin_paths(dump))
    assert convert_h5.convert(dump, progress=False, verify=True, force=False)["skipped"]


def _limited(args, limit_bytes, cwd=ROOT):
    """Runs a CLI with RLIMIT_FSIZE (writes past the limit fail with EFBIG, as on a full disk)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=120,
                          preexec_fn=limit)


def test_file_size_limit_during_conversion_is_one_line(dump):
    before = _fingerprint(dump)
    r = _limited([os.path.join(ROOT, "convert_h5.py"), dump, "--no-progress"], 64 << 10)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: cannot write .bin file")
    assert "disk full or file-size limit reached" in r.stderr
    assert _leftovers(os.path.dirname(dump), dump) == [] and _fingerprint(dump) == before


def test_too_little_free_space_is_refused_before_writing(dump, monkeypatch, capsys):
    import shutil
    usage = shutil.disk_usage(os.path.dirname(dump))
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=4096))
    assert convert_h5.main([dump, "--no-progress"]) == 2
    err = capsys.readouterr().err
    need = dump_format.bin_size_bytes(dump_format.open_dump(dump))
    assert err.count("\n") == 1 and "needs" in err and "has 4.0 KiB free" in err
    assert need == N * (dump_format.record_stride_bytes(ROWS, FEATURES) + dump_format.record_stride_bytes(ROWS))
    assert _leftovers(os.path.dirname(dump), dump) == []


def test_plan_line_names_outputs_size_and_eta(dump, capsys):
    convert_h5.convert(dump, progress=True)
    first = capsys.readouterr().out.splitlines()[0]
    x_bin, y_bin, _ = dump_format.bin_paths(dump)
    assert first.startswith(f"convert_h5: writing {x_bin} and {y_bin} (")
    assert "ETA ~" in first and "MB/s" in first


def test_dump_content_digest_is_cheap_and_sees_sampled_changes(dump):
    import h5py
    info = dump_format.open_dump(dump)
    digest = dump_format.dump_content_digest(info)
    assert len(digest) == 64 and digest == dump_format.dump_content_digest(info)
    with h5py.File(dump, "a") as f:
        f["X"][N - 1, 0, 0] = f["X"][N - 1, 0, 0] + 1.0  # the last dataset is always sampled
    assert dump_format.dump_content_digest(dump_format.open_dump(dump)) != digest
