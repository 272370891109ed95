"""loaders.py and dump_format.py on CPU: every path bit-identical to the baseline, positions, resume,
ranks, bad input, .bin value checks."""
import os
import threading

import h5py
import numpy as np
import pytest
import torch

import dump_format
import loaders
from conftest import write_tiny_dump

N, ROWS, FEATURES, B = 23, 40, 5, 4   # 23 datasets, batch 4: 5 batches a pass, 3 datasets left over
START, STEPS = 3, 13                  # 13 steps from dataset 3 wrap around the dump twice


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    return write_tiny_dump(tmp_path_factory.mktemp("loaders") / "tiny.h5", num_datasets=N,
                           rows=ROWS, features=FEATURES, num_classes=3, seed=1)


def make(dump, batch_size, device, *, start=0, rank=0, world_size=1, consumed=0, **config):
    """make_loader with the LoaderConfig fields as keywords (the tests' shorthand)."""
    return loaders.make_loader(dump, batch_size, device, loaders.LoaderConfig(**config), start=start,
                               rank=rank, world_size=world_size, consumed=consumed)


def _arrays(path):
    with h5py.File(path, "r") as f:
        X, y = f["X"][()], f["y"][()]
        key = "single_eval_pos" if "single_eval_pos" in f else "train_test_split_index"
        nf = np.broadcast_to(f["num_features"][()], (len(X),))
        nd = (np.broadcast_to(f["num_datapoints"][()], (len(X),)) if "num_datapoints" in f
              else np.full(len(X), X.shape[1]))
        sp = np.broadcast_to(f[key][()], (len(X),))
    return X, y, nf, nd, sp


def _naive_positions(steps, start, G, N):
    """Reference for batch_position: the loop the closed form replaces."""
    out, p = [], start if start + G <= N else 0
    for _ in range(steps):
        out.append(p)
        p = p + G if p + 2 * G <= N else 0
    return out


def _reference(path, steps, batch_size, start=0, rank=0, world_size=1):
    """Independent reference batches straight from numpy (positions from the naive loop)."""
    X, y, nf, nd, sp = _arrays(path)
    G = batch_size * world_size
    out = []
    for k, p in enumerate(_naive_positions(steps, start, G, len(X))):
        a = p + rank * batch_size
        rows, feats = nd[a:a + batch_size].max(), nf[a:a + batch_size].max()
        wrapped = p == 0 and (k > 0 or start + G > len(X))
        out.append((torch.from_numpy(X[a:a + batch_size, :rows, :feats].astype(np.float32)),
                    torch.from_numpy(y[a:a + batch_size, :rows].astype(np.float32)),
                    int(sp[p]), wrapped))   # every rank: the split of the global batch's first dataset
    return out


def _take(loader, steps):
    out = []
    for _ in range(steps):
        batch = next(loader)
        assert isinstance(batch, loaders.Batch)
        assert batch.x.dtype == torch.float32 and batch.y.dtype == torch.float32
        assert batch.x.is_contiguous() and batch.y.is_contiguous()
        out.append((batch.x, batch.y, batch.split, batch.wrapped))
    return out


def _assert_same(got, want, min_wraps=1):
    assert len(got) == len(want)
    for i, ((x, y, s, w), (bx, by, bs, bw)) in enumerate(zip(got, want)):
        assert x.shape == bx.shape and torch.equal(x, bx), f"x differs at step {i}"
        assert torch.equal(y, by), f"y differs at step {i}"
        assert (s, w) == (bs, bw), f"split/wrapped differ at step {i}: {(s, w)} vs {(bs, bw)}"
    assert sum(w for *_, w in want) >= min_wraps, "test must wrap around the dump"


LOADERS = {
    "h5": dict(),
    "h5+pinned": dict(pinned=True),
    "h5+streams": dict(streams=True),
    "h5+pinned+streams": dict(pinned=True, streams=True, prefetch=3),
    "bin": dict(kind="bin"),
    "bin-prefetch1": dict(kind="bin", prefetch=1),
    "resident": dict(kind="resident"),
}


@pytest.mark.parametrize("name", list(LOADERS))
def test_every_loader_matches_baseline(dump, name, capsys):
    want = _reference(dump, STEPS, B, START)
    with make(dump, B, "cpu", start=START) as base:
        baseline = _take(base, STEPS)
    _assert_same(baseline, want, min_wraps=2)
    with make(dump, B, "cpu", start=START, **LOADERS[name]) as loader:
        got = _take(loader, STEPS)
        assert loader.consumed == STEPS
    _assert_same(got, baseline, min_wraps=2)
    # one line per wrap, printed by the loader
    wraps = capsys.readouterr().out.count("loader: end of dump (23 datasets) reached, wrapping to dataset 0")
    assert wraps == 2 * 2  # baseline + this loader, two wraps each


def test_describe_paths_and_cpu_notes(dump):
    expected = {"h5": "h5py+sync-copy", "h5+pinned": "h5py+sync-copy", "h5+streams": "h5py+sync-copy",
                "h5+pinned+streams": "h5py+sync-copy", "bin": "pread", "bin-prefetch1": "pread",
                "resident": "resident-host"}
    for name, kw in LOADERS.items():
        with make(dump, B, "cpu", **kw) as loader:
            desc = loader.describe()
            assert set(desc) == {"loader", "path", "notes"}
            assert desc["path"] == expected[name], name
            assert desc["notes"] == loader.notes
            assert all("\n" not in n for n in desc["notes"])
            assert "GDS" not in repr(desc)
    with make(dump, B, "cpu", pinned=True, streams=True) as loader:
        notes = loader.describe()["notes"]
    assert "--pinned: no effect without CUDA (no page-locked copies on CPU); running the baseline path" in notes
    assert any(n.startswith("--streams: no effect without CUDA") for n in notes)
    with make(dump, B, "cpu") as loader:
        assert loader.describe()["notes"] == []


def test_loader_config_defaults_are_the_baseline(dump):
    assert loaders.LoaderConfig() == loaders.LoaderConfig(
        kind="h5", pinned=False, streams=False, prefetch=2, require_gds=False, no_convert=False,
        kvikio_threads=8, kvikio_target="device", bin_dir=None, verify_bin=True)
    with loaders.make_loader(dump, B, "cpu") as plain, \
            loaders.make_loader(dump, B, torch.device("cpu"), loaders.LoaderConfig(), consumed=0) as named:
        assert plain.data_path == named.data_path == named.describe()["path"] == "h5py+sync-copy"
        _assert_same(_take(named, STEPS), _take(plain, STEPS))
    with pytest.raises(ValueError, match="kvikio target"):
        make(dump, B, "cpu", kind="bin", kvikio_target="gpu")


def test_batch_position_closed_form_matches_loop():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        g = int(rng.integers(1, n + 1))
        start = int(rng.integers(0, n))
        steps = int(rng.integers(1, 50))
        want = _naive_positions(steps, start, g, n)
        got = [dump_format.batch_position(k, start, g, n) for k in range(steps)]
        assert got == want, (n, g, start)
        assert all(p + g <= n for p in got)  # every batch is full
    # large steps stay O(1)
    assert dump_format.batch_position(10**12, 5, 7, 100) == ((10**12 - 13) % 14) * 7
    with pytest.raises(ValueError):
        dump_format.batch_position(0, 0, 11, 10)


@pytest.mark.parametrize("name", ["h5", "h5+streams", "bin", "resident"])
def test_two_ranks_are_disjoint_and_cover_the_global_batch(dump, name):
    kw = LOADERS[name]
    steps = 9
    with make(dump, 2 * B, "cpu", start=1) as glob:
        global_batches = _take(glob, steps)
    ranks = []
    for rank in (0, 1):
        with make(dump, B, "cpu", start=1, rank=rank, world_size=2, **kw) as loader:
            ranks.append(_take(loader, steps))
        _assert_same(ranks[rank], _reference(dump, steps, B, 1, rank, 2))
    X, *_ = _arrays(dump)
    for (gx, gy, gs, gw), (x0, y0, s0, w0), (x1, y1, s1, w1) in zip(global_batches, *ranks):
        assert w0 == w1 == gw and s0 == s1 == gs   # one split per global batch, as one process takes
        for part, (x, y) in enumerate(((x0, y0), (x1, y1))):
            rows, feats = x.shape[1:]
            block = gx[part * B:(part + 1) * B]
            assert torch.equal(block[:, :rows, :feats], x)  # rank r = datasets [p+rB, p+(r+1)B)
            assert not block[:, rows:].any() and not block[:, :, feats:].any()  # beyond: padding
            assert torch.equal(gy[part * B:(part + 1) * B, :rows], y)
        # disjoint: no dataset of rank 0 equals one of rank 1 (the rows are random floats)
        assert not any(torch.equal(x0[i, :2, :1], x1[j, :2, :1]) for i in range(B) for j in range(B))


@pytest.mark.parametrize("name", list(LOADERS))
def test_resume_continues_exactly(dump, name):
    kw = LOADERS[name]
    k = 7
    with make(dump, B, "cpu", start=START, **kw) as loader:
        full = _take(loader, k + 6)
        state = loader.state_dict()
    assert state == {"start": START, "consumed": k + 6, "batch_size": B, "rank": 0, "world_size": 1,
                     "num_datasets": N}
    with make(dump, B, "cpu", start=START, consumed=k, **kw) as resumed:
        assert resumed.consumed == k
        _assert_same(_take(resumed, 6), full[k:], min_wraps=0)
    # load_state_dict on a running loader restarts its prefetchers at the saved step
    with make(dump, B, "cpu", **kw) as loader:
        _take(loader, 2)
        loader.load_state_dict({**state, "consumed": k})
        _assert_same(_take(loader, 6), full[k:], min_wraps=0)
        with pytest.raises(ValueError, match="batch_size"):
            loader.load_state_dict({**state, "batch_size": B + 1})


# --------------------------------------------------------------------------------------------------
# upstream variants
# --------------------------------------------------------------------------------------------------

def _rewrite(path, drop=(), replace=None):
    """Edits a dump in place: delete keys, replace keys with new arrays."""
    with h5py.File(path, "a") as f:
        for key in drop:
            del f[key]
        for key, value in (replace or {}).items():
            if key in f:
                del f[key]
            f.create_dataset(key, data=value)
    return path


VARIANTS = {
    "train_test_split_index": lambda p: write_tiny_dump(p, N, ROWS, FEATURES, seed=2,
                                                        split_key="train_test_split_index"),
    "gzip": lambda p: write_tiny_dump(p, N, ROWS, FEATURES, seed=3, compression="gzip"),
    "lzf": lambda p: write_tiny_dump(p, N, ROWS, FEATURES, seed=4, compression="lzf"),
    "length1-split": lambda p: _rewrite(write_tiny_dump(p, N, ROWS, FEATURES, seed=5, ragged=False),
                                        replace={"single_eval_pos": np.array([17], np.int32),
                                                 "num_datapoints": np.array([ROWS], np.int32)}),
    "no-num_datapoints": lambda p: _rewrite(write_tiny_dump(p, N, ROWS, FEATURES, seed=6, ragged=False),
                                            drop=["num_datapoints"]),
    "no-max_classes-no-batch-size": lambda p: _rewrite(write_tiny_dump(p, N, ROWS, FEATURES, seed=7),
                                                       drop=["max_num_classes", "original_batch_size"]),
    "int-y-float64-x": lambda p: _retype(write_tiny_dump(p, N, ROWS, FEATURES, seed=8)),
}


def _retype(path):
    """int64 class labels and float64 features (other writers' dtypes); values unchanged."""
    with h5py.File(path, "r") as f:
        X, y = f["X"][()], f["y"][()]
    return _rewrite(path, replace={"X": X.astype(np.float64), "y": y.astype(np.int64)})


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_upstream_variants_load(tmp_path, variant):
    path = VARIANTS[variant](tmp_path / f"{variant}.h5")
    assert dump_format.check_dump(path) == []
    info = dump_format.open_dump(path)
    assert info.num_features.shape == info.num_datapoints.shape == info.splits.shape == (N,)
    if variant == "train_test_split_index":
        assert info.split_key == "train_test_split_index"
    if variant == "length1-split":
        assert (info.splits == 17).all()
    if variant == "no-num_datapoints":
        assert (info.num_datapoints == ROWS).all()
    if variant == "no-max_classes-no-batch-size":
        assert info.max_num_classes == 2 and info.original_batch_size == 1
    want = _reference(path, 8, B, 0)
    for kw in (dict(), dict(kind="bin"), dict(kind="resident")):
        with make(info, B, "cpu", **kw) as loader:
            _assert_same(_take(loader, 8), want)


# --------------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------------

def _good(tmp_path, name="bad.h5", **kw):
    return write_tiny_dump(tmp_path / name, N, ROWS, FEATURES, num_classes=3, seed=9, **kw)


def _with_x(tmp_path, fn):
    p = _good(tmp_path)
    with h5py.File(p, "r") as f:
        X = f["X"][()]
    fn(X)
    return _rewrite(p, replace={"X": X})


BAD = {
    "missing file": (lambda t: str(t / "nope.h5"), "no such file"),
    "not hdf5": (lambda t: (t / "text.h5").write_text("hello, not HDF5\n" * 100) and str(t / "text.h5"),
                 "not an HDF5 file"),
    "truncated": (lambda t: _truncate(_good(t), 0.5), "truncated or corrupt HDF5"),
    "missing X": (lambda t: _rewrite(_good(t), drop=["X"]), "missing key 'X'"),
    "missing y": (lambda t: _rewrite(_good(t), drop=["y"]), "missing key 'y'"),
    "missing num_features": (lambda t: _rewrite(_good(t), drop=["num_features"]),
                             "missing key 'num_features'"),
    "missing split": (lambda t: _rewrite(_good(t), drop=["single_eval_pos"]),
                      "missing key 'single_eval_pos'"),
    "X 2-D": (lambda t: _rewrite(_good(t), replace={"X": np.zeros((N, ROWS), np.float32)}),
              "'X' must be a 3-D float array"),
    "X int": (lambda t: _rewrite(_good(t), replace={"X": np.zeros((N, ROWS, FEATURES), np.int32)}),
              "dtype int32"),
    "y shape": (lambda t: _rewrite(_good(t), replace={"y": np.zeros((N, ROWS - 1), np.float32)}),
                "'y' must be a numeric (N, rows)"),
    "num_features length": (lambda t: _rewrite(_good(t), replace={"num_features": np.ones(N - 1, np.int32)}),
                            "'num_features' has length 22, expected 23"),
    "splits length": (lambda t: _rewrite(_good(t), replace={"single_eval_pos": np.full(5, 3, np.int32)}),
                      "'single_eval_pos' has length 5"),
    "NaN in X": (lambda t: _with_x(t, lambda X: X.__setitem__((7, 3, 1), np.nan)),
                 "'X' contains NaN or Inf values (first in dataset 7)"),
    "Inf in X": (lambda t: _with_x(t, lambda X: X.__setitem__((19, 0, 0), np.inf)),
                 "'X' contains NaN or Inf values (first in dataset 19)"),
    "y negative": (lambda t: _set_y(_good(t), 4, 2, -1.0), "dataset 4 row 2 has -1.0"),
    "y fractional": (lambda t: _set_y(_good(t), 5, 1, 0.5), "dataset 5 row 1 has 0.5"),
    "y too large": (lambda t: _set_y(_good(t), 6, 0, 3.0), "< max_num_classes=3"),
    "y NaN": (lambda t: _set_y(_good(t), 2, 0, np.nan), "dataset 2 row 0 has nan"),
    "num_features too wide": (lambda t: _set_meta(_good(t), "num_features", 3, FEATURES + 1),
                              "'num_features' must be in 1..5 (the stored width); dataset 3 has 6"),
    "num_features zero": (lambda t: _set_meta(_good(t), "num_features", 0, 0),
                          "dataset 0 has 0"),
    "num_datapoints too many": (lambda t: _set_meta(_good(t), "num_datapoints", 8, ROWS + 1),
                                "'num_datapoints' must be in 2..40"),
    "num_datapoints one": (lambda t: _set_meta(_good(t), "num_datapoints", 8, 1),
                           "dataset 8 has 1"),
    "split zero": (lambda t: _set_meta(_good(t), "single_eval_pos", 10, 0),
                   "'single_eval_pos' must be in 1..num_datapoints-1; dataset 10 has split 0"),
    "split past datapoints": (lambda t: _set_meta(_set_meta(_good(t), "num_datapoints", 11, 30),
                                                  "single_eval_pos", 11, 30),
                              "dataset 11 has split 30 with 30 datapoints"),
}


def _truncate(path, fraction):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(size * fraction))
    return path


def _set_y(path, i, r, value):
    with h5py.File(path, "a") as f:
        y = f["y"][()]
        y[i, r] = value
        f["y"][...] = y
    return path


def _set_meta(path, key, i, value):
    with h5py.File(path, "a") as f:
        a = f[key][()]
        a[i] = value
        f[key][...] = a
    return path


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_gives_one_line_dump_error(tmp_path, case):
    build, fragment = BAD[case]
    path = build(tmp_path)
    with pytest.raises(dump_format.DumpError) as err:
        dump_format.open_dump(path)
    message = str(err.value)
    assert fragment in message, message
    assert "\n" not in message and message.startswith(str(path))
    problems = dump_format.check_dump(path)
    assert problems and all("\n" not in p for p in problems)
    assert any(fragment in p for p in problems), problems
    with pytest.raises(dump_format.DumpError) as err2:
        make(path, B, "cpu")
    assert fragment in str(err2.value)


def test_check_dump_lists_every_problem(tmp_path):
    path = _with_x(tmp_path, lambda X: X.__setitem__((1, 1, 1), np.nan))
    _set_meta(path, "num_features", 2, 99)
    _rewrite(path, drop=["y"])
    problems = dump_format.check_dump(path)
    assert any("missing key 'y'" in p for p in problems)
    assert any("'num_features' must be in 1..5" in p for p in problems)
    assert any("NaN or Inf" in p for p in problems)
    assert dump_format.check_dump(_good(tmp_path, "fine.h5")) == []


def test_truncated_tail_is_reported(tmp_path):
    # Cut only the last bytes (where X's data lives): either open or the value scan must notice.
    path = _truncate(_good(tmp_path), 0.97)
    with pytest.raises(dump_format.DumpError, match="truncated or corrupt HDF5"):
        dump_format.open_dump(path)


def test_batch_larger_than_dump(dump):
    with pytest.raises(dump_format.DumpError, match=r"batch size 24 x world size 1 = 24 datasets is larger "
                                                r"than the dump \(23 datasets\)"):
        make(dump, 24, "cpu")
    with pytest.raises(dump_format.DumpError, match="= 24 datasets"):
        make(dump, 12, "cpu", world_size=2, rank=1)
    for bad in (dict(kind="tape"), dict(prefetch=0), dict(rank=2, world_size=2), dict(start=N)):
        with pytest.raises(ValueError):
            make(dump, B, "cpu", **bad)


def test_require_gds_on_cpu_raises(dump, tmp_path):
    with pytest.raises(dump_format.GdsUnavailable, match="would run 'pread', not GPUDirect Storage") as err:
        make(dump, B, "cpu", kind="bin", require_gds=True, bin_dir=tmp_path)
    assert "\n" not in str(err.value) and isinstance(err.value, dump_format.DumpError)
    assert os.listdir(tmp_path) == []  # raised before converting anything


def test_resident_falls_back_when_it_does_not_fit(dump, monkeypatch):
    monkeypatch.setattr(loaders, "_free_memory_bytes", lambda device: 1000)
    with make(dump, B, "cpu", kind="resident", start=START) as loader:
        desc = loader.describe()
        got = _take(loader, STEPS)
    assert desc["path"] == "h5py+sync-copy"
    assert any("does not fit" in n or "falling back to the baseline path" in n for n in desc["notes"])
    _assert_same(got, _reference(dump, STEPS, B, START))


def test_reader_thread_errors_reach_the_consumer_and_close_is_clean(dump, monkeypatch):
    calls = {"n": 0}
    real = loaders._PreadSource.read

    def flaky(self, *args):
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError("simulated disk error on batch 4")
        return real(self, *args)

    with make(dump, B, "cpu", kind="bin") as warm:  # converts once
        next(warm)
    monkeypatch.setattr(loaders._PreadSource, "read", flaky)
    loader = make(dump, B, "cpu", kind="bin", prefetch=1)
    _take(loader, 3)
    with pytest.raises(OSError, match="simulated disk error on batch 4"):
        next(loader)
    with pytest.raises(OSError, match="simulated disk error"):  # stays failed, same message
        next(loader)
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(loader)


def test_close_stops_a_blocked_reader(dump):
    before = set(threading.enumerate())
    loader = make(dump, B, "cpu", kind="bin", prefetch=2)
    next(loader)  # the reader now blocks on the full queue
    thread = loader._prefetcher._thread
    assert thread.daemon and thread.is_alive()
    loader.close()
    assert not thread.is_alive()
    assert [t for t in threading.enumerate() if t not in before] == []
    loader.close()  # idempotent


def test_open_dump_reads_metadata_once(dump):
    info = dump_format.open_dump(dump)
    X, y, nf, nd, sp = _arrays(dump)
    assert (info.num_datasets, info.rows, info.features) == X.shape
    assert np.array_equal(info.num_features, nf) and np.array_equal(info.splits, sp)
    assert info.num_features.dtype == np.int64 and info.max_num_classes == 3
    assert info.size_bytes == os.path.getsize(dump) and info.mtime_ns == os.stat(dump).st_mtime_ns
    # a DumpInfo skips re-validation: make_loader accepts it directly
    with make(info, B, "cpu") as loader:
        assert next(loader).x.shape[0] == B


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_read_into_a_reused_flat_buffer_equals_a_plain_read(tmp_path, compression):
    """The --pinned path's read (h5py read_direct into a contiguous view of one big reused buffer) gives
    the bytes of a plain h5py slice, for ragged shapes: CPU CI covers it even though pinning needs CUDA."""
    from conftest import write_tiny_dump
    path = write_tiny_dump(tmp_path / "r.h5", num_datasets=30, rows=40, features=5, seed=8, compression=compression)
    info = dump_format.open_dump(path)
    source = loaders._H5Source(info)
    flat_x = np.full(6 * info.rows * info.features, np.nan, np.float32)   # poisoned: every element must be written
    flat_y = np.full(6 * info.rows, np.nan, np.float32)
    try:
        for first, count, rows, feats in ((0, 6, 40, 5), (7, 4, 23, 2), (24, 6, 31, 5), (3, 1, 40, 1)):
            want_x, want_y = source.read(first, count, rows, feats)
            x_out = flat_x[:count * rows * feats].reshape(count, rows, feats)
            y_out = flat_y[:count * rows].reshape(count, rows)
            source.read_into(x_out, y_out, first, rows, feats)
            assert np.array_equal(x_out, want_x) and np.array_equal(y_out, want_y), (first, count, rows, feats)
    finally:
        source.close()


@pytest.fixture(scope="module")
def prior_file(tmp_path_factory):
    """A prior_dump.py dump with a non-default mix: --loader prior must regenerate it from its attributes."""
    import prior_dump
    path = tmp_path_factory.mktemp("prior") / "prior.h5"
    prior_dump.write_dump(path, 150, 48, 6, 4, seed=5, device="cpu", progress=False, original_batch_size=4,
                          feature_law="block-log", mix=prior_dump.PriorMix(tree_share=0.5, noise_scale=0.5))
    return str(path)


def test_prior_loader_generates_the_dumps_batches(prior_file):
    # Batch 7 over 64-dataset chunks: batches straddle chunks; 30 steps from dataset 9 wrap the dump.
    with make(prior_file, 7, "cpu", start=9) as base, make(prior_file, 7, "cpu", start=9, kind="prior") as loader:
        assert loader.describe()["path"] == "prior-cpu"
        assert "dataset 0 equals the file's bit for bit" in loader.describe()["notes"][0]
        _assert_same(_take(loader, 30), _take(base, 30))
    for rank in (0, 1):   # a rank's slice, and a resumed position
        with make(prior_file, 3, "cpu", start=2, rank=rank, world_size=2, consumed=11) as base, \
                make(prior_file, 3, "cpu", start=2, rank=rank, world_size=2, consumed=11, kind="prior") as loader:
            _assert_same(_take(loader, 25), _take(base, 25))


def test_prior_loader_refuses_a_dump_it_cannot_regenerate(dump, prior_file, tmp_path):
    with pytest.raises(dump_format.DumpError, match=r"--loader prior: not written by prior_dump.py") as error:
        make(dump, B, "cpu", kind="prior")
    assert "\n" not in str(error.value)
    other = tmp_path / "other.h5"
    other.write_bytes(open(prior_file, "rb").read())
    with h5py.File(other, "a") as f:
        f.attrs["prior_version"] = 99
    with pytest.raises(dump_format.DumpError, match=r"written by prior version 99, this code generates version"):
        make(str(other), B, "cpu", kind="prior")


def test_a_dump_made_on_the_fly_is_its_file(tmp_path):
    """prior:PRESET:N has the metadata, the content digest and the batches of the file prior_dump.py writes for it."""
    import prior_dump
    path = str(tmp_path / "nano.h5")
    prior_dump.write_dump(path, 300, 150, 5, 2, seed=0, device="cpu", progress=False)
    info, file = loaders.open_data("prior:nano:300"), dump_format.open_dump(path)
    assert info.path == "prior:nano:300" and info.generated and not file.generated
    for key in ("num_datasets", "rows", "features", "num_features", "num_datapoints", "splits", "max_num_classes",
                "original_batch_size"):
        assert np.array_equal(getattr(info, key), getattr(file, key)), key
    assert dump_format.dump_content_digest(info) == dump_format.dump_content_digest(file)
    with make(info, 9, "cpu", start=4, kind="prior", pinned=True) as loader, make(path, 9, "cpu", start=4) as base:
        notes = loader.describe()["notes"]
        assert notes[0].endswith("(seed 0, no file)") and notes[1].startswith("--pinned: no effect with --loader prior")
        _assert_same(_take(loader, 40), _take(base, 40))
    with pytest.raises(dump_format.DumpError, match=r"^prior:nano:300 is made on the fly: only --loader prior"):
        make(info, 9, "cpu", kind="resident")
    for spec in ("prior:nanoo", "prior:nano:0", "prior:nano:1e5"):
        with pytest.raises(dump_format.DumpError, match=r"expected prior:PRESET\[:N\]"):
            loaders.open_data(spec)


def test_a_dump_made_on_the_fly_takes_the_prior_options_of_its_file(tmp_path):
    """prior:PRESET:N:KEY=VALUE,... is the file prior_dump.py writes with those options (PriorMix's fields); a bad
    option is one line naming it."""
    import prior_dump
    path = str(tmp_path / "trees.h5")
    prior_dump.write_dump(path, 300, 150, 5, 2, seed=0, device="cpu", progress=False,
                          mix=prior_dump.PriorMix(tree_share=1.0, train_law="log", dag_share=0.25))
    spec = "prior:nano:300:tree_share=1.0,train_law=log,dag_share=0.25"
    info, file = loaders.open_data(spec), dump_format.open_dump(path)
    assert info.path == spec and np.array_equal(info.splits, file.splits)
    assert dump_format.dump_content_digest(info) == dump_format.dump_content_digest(file)
    assert dump_format.dump_content_digest(info) != dump_format.dump_content_digest(loaders.open_data("prior:nano:300"))
    with make(info, 9, "cpu", start=4, kind="prior") as loader, make(path, 9, "cpu", start=4) as base:
        _assert_same(_take(loader, 40), _take(base, 40))
    for option, message in (("foo=1", "OPTION one of grouped_rows"), ("tree_share", "OPTION one of"),
                            ("tree_depth=3.5", "tree_depth must be an integer"), ("dag_share=2", r"dag_share must be in"),
                            ("binary_share=0.5", "no effect with classes 2")):
        with pytest.raises(dump_format.DumpError, match=rf"^--data prior:nano:300:{option}: .*{message}"):
            loaders.open_data(f"prior:nano:300:{option}")
