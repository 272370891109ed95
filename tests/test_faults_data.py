"""Fault injection on the data side (issue #37): a dump edited with its mtime restored makes its .bin stale, files
shrinking under a reader are one line (never SIGBUS, never zeros), absurd class counts and pd.NA."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import convert_h5
import dump_format
import loaders
import safe_io
from conftest import write_tiny_dump

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def converted(tmp_path):
    path = write_tiny_dump(tmp_path / "d.h5", num_datasets=24, rows=30, features=4, seed=5, ragged=False)
    convert_h5.convert(path, progress=False)
    return path


def _edit_in_place_keeping_mtime(path, dataset):
    """Changes X[dataset] in place and restores the file's mtime, as `touch -r` does."""
    before = os.stat(path)
    with h5py.File(path, "r+") as f:
        f["X"][dataset] = f["X"][dataset] + 1.0
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_dump_edited_with_its_mtime_restored_makes_the_bin_stale(converted, capsys):
    _edit_in_place_keeping_mtime(converted, 0)   # dataset 0 is always among the sampled ones
    info = dump_format.open_dump(converted)
    sidecar = dump_format.bin_paths(converted)[2]
    with pytest.raises(dump_format.BinFormatError, match="content of .* changed since the conversion") as err:
        dump_format.read_sidecar(sidecar, info)
    assert err.value.reason == "stale"
    with pytest.raises(dump_format.BinFormatError, match="changed since the conversion .*no_convert"):
        loaders.make_loader(info, 4, "cpu", loaders.LoaderConfig(kind="bin", no_convert=True))
    assert convert_h5.main([converted]) == 0   # not "up to date": converted again
    out = capsys.readouterr().out
    assert "stale conversion" in out and "up to date" not in out
    meta = dump_format.read_sidecar(sidecar, info)
    convert_h5._compare_records(info, meta["x_path"], meta["y_path"], 8, progress=False)   # the new content
    assert convert_h5.main([converted]) == 0 and "up to date" in capsys.readouterr().out


def test_a_sidecar_without_a_content_digest_is_stale(converted):
    sidecar = dump_format.bin_paths(converted)[2]
    meta = json.load(open(sidecar))
    del meta["source"]["content_sha256"]   # as converted before the digest was kept
    open(sidecar, "w").write(json.dumps(meta))
    with pytest.raises(dump_format.BinFormatError, match="converted before sidecars kept") as err:
        dump_format.read_sidecar(sidecar, dump_format.open_dump(converted))
    assert err.value.reason == "stale"


def test_a_bin_truncated_under_a_reader_is_one_line_not_sigbus(converted):
    info = dump_format.open_dump(converted)
    meta = dump_format.read_sidecar(dump_format.bin_paths(converted)[2], info)
    x_bin = meta["x_path"]
    loader = loaders.make_loader(info, 4, "cpu", loaders.LoaderConfig(kind="bin", no_convert=True))
    with loader:
        next(loader)
        os.truncate(x_bin, meta["x_size_bytes"] // 3)
        with pytest.raises(dump_format.DumpError, match=f"{x_bin}: a read of .* ends first|{x_bin} changed on disk"):
            for _ in range(6):   # the reader thread is ahead: the batch it reads past the end fails
                next(loader)
    records = dump_format.BinRecords(x_bin, meta["x_stride_bytes"])
    with pytest.raises(dump_format.DumpError, match="got only .*the file ends first"):
        records.read(info.num_datasets - 2, 2)
    records.close()
    with pytest.raises(dump_format.DumpError, match="the file ends first|changed on disk"):   # verified, shorter now
        dump_format.verify_bin_checksums(meta)


def test_an_h5_dump_rewritten_under_the_loader_stops_it(tmp_path):
    path = write_tiny_dump(tmp_path / "d.h5", num_datasets=24, rows=30, features=4, seed=5)
    with loaders.make_loader(path, 4, "cpu") as loader:
        next(loader)
        with open(path, "r+b") as f:   # the same size, new bytes at the end: only the mtime says so
            f.seek(-8, os.SEEK_END)
            f.write(b"\0" * 8)
        with pytest.raises(dump_format.DumpError, match="changed on disk while this run read it"):
            next(loader)


def test_absurd_class_counts_are_refused(tmp_path):
    path = write_tiny_dump(tmp_path / "d.h5", num_datasets=8, rows=20, features=3)
    with h5py.File(path, "r+") as f:
        del f["max_num_classes"]   # inferred from the labels, the largest of which is 1000
        f["y"][2, 5] = 1000.0
    with pytest.raises(dump_format.DumpError, match="'y' holds class 1000; at most 100 classes"):
        dump_format.open_dump(path)
    with h5py.File(path, "r+") as f:
        f["y"][2, 5] = 99.0
    assert dump_format.open_dump(path).max_num_classes == 100   # the limit itself is a dump like any other
    with h5py.File(path, "r+") as f:
        f["max_num_classes"] = np.array([101])
    assert any("at most 100 classes" in p for p in dump_format.check_dump(path))


def test_hold_lock_names_the_live_holder_and_outlives_a_dead_one(tmp_path):
    target = tmp_path / "c.pt"
    child = subprocess.run([sys.executable, "-c", "import os, safe_io, sys; lock = safe_io.hold_lock(sys.argv[1], "
                            "'x'); os._exit(0)", str(target)], cwd=ROOT)   # dies holding it: its lock file stays
    assert child.returncode == 0 and os.path.exists(f"{target}.lock")
    lock = safe_io.hold_lock(target, "--ckpt")   # a dead process's lock is no lock
    assert open(f"{target}.lock").read() == str(os.getpid())
    with pytest.raises(safe_io.OutputError, match=f"--ckpt {target} is in use by another run .pid {os.getpid()}"):
        safe_io.hold_lock(target, "--ckpt")
    lock.release()
    assert not os.path.exists(f"{target}.lock")
    with safe_io.file_lock(f"{target}.lock"):   # the conversion's blocking lock is the same layer
        with pytest.raises(safe_io.OutputError, match="in use"):
            safe_io.hold_lock(target, "--ckpt")


def test_the_classifier_reads_pd_na_as_a_missing_value():
    pd = pytest.importorskip("pandas")
    import torch

    from classifier import NanoTabPFNClassifier
    from model import ModelConfig, NanoTabPFNModel
    torch.manual_seed(0)
    model = NanoTabPFNModel(ModelConfig(embedding_size=16, num_attention_heads=4, mlp_hidden_size=24, num_layers=1,
                                        num_outputs=2))
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    X[rng.random(X.shape) < 0.2] = np.nan
    y = (np.nan_to_num(X[:, 0]) > 0).astype(int)
    frame = pd.DataFrame({f"c{i}": pd.array(list(X[:, i]), dtype="Float64") for i in range(3)})
    frame.iloc[0, 1] = pd.NA
    plain = X.copy()
    plain[0, 1] = np.nan
    assert frame.isna().to_numpy().sum() == np.isnan(plain).sum()   # NaN entered as pd.NA in a Float64 frame
    got = NanoTabPFNClassifier(model).fit(frame[:30], y[:30]).predict_proba(frame[30:])
    want = NanoTabPFNClassifier(model).fit(plain[:30], y[:30]).predict_proba(plain[30:])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    labels = pd.Series(pd.array([0, 1] * 14 + [pd.NA, 1], dtype="Int64"))
    with pytest.raises(ValueError, match="y_train contains"):
        NanoTabPFNClassifier(model).fit(plain[:30], labels)
