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
import loaders
from conftest import write_tiny_dump

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
    x_bin, y_bin, sidecar = loaders.bin_paths(dump)
    assert (stats["x_bin"], stats["y_bin"], stats["sidecar"]) == (x_bin, y_bin, sidecar)
    sx, sy = loaders.record_stride_bytes(ROWS, FEATURES), loaders.record_stride_bytes(ROWS)
    assert sx % 4096 == 0 and sy % 4096 == 0 and sx >= ROWS * FEATURES * 4
    assert os.path.getsize(x_bin) == N * sx and os.path.getsize(y_bin) == N * sy
    assert stats["bytes_written"] == N * (sx + sy) and stats["mb_per_s"] > 0
    meta = loaders.read_sidecar(sidecar, loaders.open_dump(dump))
    assert meta["format_version"] == loaders.BIN_FORMAT_VERSION and meta["alignment"] == 4096
    assert meta["num_features"] == loaders.open_dump(dump).num_features.tolist()
    with loaders.make_loader(dump, B, "cpu", start=2) as h5, \
            loaders.make_loader(dump, B, "cpu", kind="bin", start=2, no_convert=True) as binl:
        assert binl.notes == ["bin: path memmap (no CUDA device: numpy memmap of the .bin, read "
                              "ahead by one thread (CPU: no copies))"]
        assert _same(_take(binl, 16), _take(h5, 16))  # 16 steps of 4 from 2 over 29: wraps twice


def test_record_layout_is_aligned_and_zero_padded(dump):
    convert_h5.convert(dump, progress=False)
    info = loaders.open_dump(dump)
    x_bin, y_bin, _ = loaders.bin_paths(dump)
    sx = loaders.record_stride_bytes(ROWS, FEATURES)
    raw = np.fromfile(x_bin, dtype="<f4").reshape(N, sx // 4)
    import h5py
    with h5py.File(dump, "r") as f:
        X = f["X"][()]
    assert np.array_equal(raw[:, :ROWS * FEATURES].reshape(N, ROWS, FEATURES), X)
    assert not raw[:, ROWS * FEATURES:].any()
    assert info.num_datasets == N


def test_loader_converts_missing_conversion_and_no_convert_refuses(dump):
    with pytest.raises(loaders.BinFormatError, match=r"no \.bin conversion .*no_convert") as err:
        loaders.make_loader(dump, B, "cpu", kind="bin", no_convert=True)
    assert "\n" not in str(err.value)
    with loaders.make_loader(dump, B, "cpu", kind="bin") as loader:
        assert any(n.startswith("bin: missing conversion") for n in loader.notes)
        next(loader)
    with loaders.make_loader(dump, B, "cpu", kind="bin", no_convert=True) as loader:
        assert not any("conversion" in n for n in loader.notes)


def test_newer_format_version_is_an_error(dump):
    convert_h5.convert(dump, progress=False)
    _, _, sidecar = loaders.bin_paths(dump)
    meta = json.load(open(sidecar))
    meta["format_version"] = loaders.BIN_FORMAT_VERSION + 1
    json.dump(meta, open(sidecar, "w"))
    msg = f"written by a newer format version {loaders.BIN_FORMAT_VERSION + 1}"
    with pytest.raises(loaders.BinFormatError, match=msg):
        loaders.read_sidecar(sidecar, loaders.open_dump(dump))
    with pytest.raises(loaders.DumpError, match=msg):  # never overwritten by a reconversion
        loaders.make_loader(dump, B, "cpu", kind="bin")
    assert json.load(open(sidecar))["format_version"] == loaders.BIN_FORMAT_VERSION + 1


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
    x_bin, y_bin, sidecar = loaders.bin_paths(dump)
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
    info = loaders.open_dump(dump)
    with pytest.raises(loaders.BinFormatError, match=re.escape(fragment)) as err:
        loaders.read_sidecar(sidecar, info)
    assert err.value.reason == reason and "\n" not in str(err.value)
    with pytest.raises(loaders.DumpError, match=re.escape(fragment)):
        loaders.make_loader(info, B, "cpu", kind="bin", no_convert=True)
    with loaders.make_loader(info, B, "cpu", kind="bin") as loader:
        notes = loader.describe()["notes"]
        got = _take(loader, 10)
    assert any(n.startswith(f"bin: {reason} conversion") and "converting" in n for n in notes), notes
    with loaders.make_loader(info, B, "cpu") as h5:
        assert _same(got, _take(h5, 10))
    loaders.read_sidecar(sidecar, info)  # valid again


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
    with pytest.raises(loaders.BinFormatError, match="no .bin conversion"):
        loaders.make_loader(dump, B, "cpu", kind="bin", no_convert=True)


def test_disk_full_is_one_line_and_leaves_no_partial_files(dump, monkeypatch, capsys):
    before = _fingerprint(dump)
    full = _Interrupt(100_000, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    monkeypatch.setattr(convert_h5, "_write_all", full)
    with pytest.raises(convert_h5.ConvertError, match="no space left on device") as err:
        convert_h5.convert(dump, progress=False, chunk_datasets=2)
    assert "\n" not in str(err.value) and full.written > 0
    assert _leftovers(os.path.dirname(dump), dump) == []
    full.written = 0
    assert convert_h5.main([dump, "--no-progress", "--chunk-datasets", "2"]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("error: ") and "no space left" in err_lines[0]
    assert _leftovers(os.path.dirname(dump), dump) == []
    assert _fingerprint(dump) == before


def test_disk_full_while_writing_the_sidecar(dump, monkeypatch):
    """The last step can fail too: the already renamed .bin files are removed again."""
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(loaders, "write_sidecar", no_space)
    with pytest.raises(convert_h5.ConvertError, match="no space left"):
        convert_h5.convert(dump, progress=False)
    assert _leftovers(os.path.dirname(dump), dump) == []


def test_read_only_output_folder(dump, tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    os.chmod(out, 0o555)
    try:
        if os.access(out, os.W_OK):
            pytest.skip("running as root: chmod does not make the folder read-only")
        with pytest.raises(convert_h5.ConvertError, match="not writable"):
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
    assert err.count("\n") == 1 and err.startswith("error: output folder") and "not writable" in err
    assert os.listdir(out) == []


def test_verify_passes_and_catches_a_bad_write(dump, monkeypatch):
    stats = convert_h5.convert(dump, progress=False, verify=True, chunk_datasets=4)
    assert stats["verified"]
    meta = convert_h5.verify(dump, progress=False, chunk_datasets=7)
    assert meta["num_datasets"] == N
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
    with pytest.raises(loaders.DumpError, match="NaN or Inf values .first in dataset 20"):
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
    assert os.path.exists(loaders.bin_paths(dump, tmp_path / "other")[2])
    with loaders.make_loader(dump, B, "cpu", kind="bin", bin_dir=tmp_path / "other",
                             no_convert=True) as loader:
        next(loader)


def test_cli_in_process_up_to_date_force_and_newer(dump, capsys):
    assert convert_h5.main([dump, "--no-progress"]) == 0
    assert convert_h5.main([dump, "--no-progress"]) == 0
    assert "is up to date" in capsys.readouterr().out
    assert convert_h5.main([dump, "--verify", "--no-progress"]) == 0
    assert "up to date and verified" in capsys.readouterr().out
    _, _, sidecar = loaders.bin_paths(dump)
    meta = json.load(open(sidecar))
    meta["format_version"] = 99
    json.dump(meta, open(sidecar, "w"))
    assert convert_h5.main([dump, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "newer format version 99" in err and "--force" in err and err.count("\n") == 1
    assert convert_h5.main([dump, "--no-progress", "--force"]) == 0
    assert json.load(open(sidecar))["format_version"] == loaders.BIN_FORMAT_VERSION
    assert convert_h5.main([dump, "--chunk-datasets", "0"]) == 2


def test_concurrent_conversions_of_one_dump_do_not_break_each_other(tmp_path):
    """torchrun ranks asking for the same missing .bin at once: one converts, the others wait and reuse it."""
    import multiprocessing as mp
    from conftest import write_tiny_dump
    dump = write_tiny_dump(tmp_path / "race.h5", num_datasets=400, rows=40, features=5, seed=11)
    ctx = mp.get_context("fork")
    with ctx.Pool(3) as pool:
        for _ in range(8):  # the race is a timing window: several fresh rounds make it show reliably
            for path in loaders.bin_paths(dump):
                if os.path.exists(path):
                    os.remove(path)
            results = pool.map(_make_bin_loader_and_read, [dump] * 3)
            assert all(r == "ok" for r in results), results


def _make_bin_loader_and_read(dump):
    import torch
    import loaders
    try:
        with loaders.make_loader(dump, 4, torch.device("cpu"), kind="bin") as loader:
            next(iter(loader))
        return "ok"
    except Exception as e:  # report, do not raise across the pool
        return f"{type(e).__name__}: {e}"


def test_float64_values_that_overflow_float32_are_rejected(tmp_path):
    import h5py
    import loaders
    from conftest import write_tiny_dump
    path = write_tiny_dump(tmp_path / "big.h5", num_datasets=8, rows=20, features=3)
    with h5py.File(path, "r+") as f:
        X = f["X"][:].astype(np.float64)
        X[3, 0, 0] = 1e39
        del f["X"]
        f.create_dataset("X", data=X)
    with pytest.raises(loaders.DumpError, match="NaN or Inf"):
        loaders.open_dump(path)
