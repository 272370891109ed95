"""GPU data paths: bit-identical to the baseline, honest path strings, and no races (CUDA only).

Run on the GPU machine: python -m pytest tests/test_gpu_loaders.py -q -s
(-s shows the printed note when kvikio is not importable and the bin loader runs memmap+pinned).
"""
import re
import threading

import numpy as np
import pytest
import torch

from conftest import write_tiny_dump

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

import dump_format  # noqa: E402
import gds  # noqa: E402
import loaders  # noqa: E402
from test_loaders import make  # noqa: E402

N, ROWS, FEATURES, B = 37, 64, 7, 5   # awkward sizes: 37 datasets -> 7 batches a pass, wraps often
STEPS = 20                              # > 2 passes over the dump
START = 6


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    return write_tiny_dump(tmp_path_factory.mktemp("gpu") / "gpu.h5", num_datasets=N, rows=ROWS,
                           features=FEATURES, num_classes=3, seed=7, original_batch_size=5)


def _kvikio_or_none():
    kvikio, _reason = gds.import_kvikio()
    return kvikio


def _take(loader, steps=STEPS, clone=True):
    out = []
    for _ in range(steps):
        batch = next(loader)
        assert batch.x.is_cuda and batch.y.is_cuda
        assert batch.x.dtype == torch.float32 and batch.x.is_contiguous()
        out.append((batch.x.clone() if clone else batch.x, batch.y.clone() if clone else batch.y,
                    batch.split, batch.wrapped))
    torch.cuda.synchronize()
    return out


def _baseline(dump, steps=STEPS, **kw):
    with make(dump, B, "cuda", start=kw.pop("start", START), **kw) as loader:
        assert loader.describe()["path"] == "h5py+sync-copy"
        return _take(loader, steps)


def _assert_same(got, want):
    assert len(got) == len(want)
    wraps = 0
    for i, ((x, y, split, wrapped), (bx, by, bsplit, bwrapped)) in enumerate(zip(got, want)):
        assert torch.equal(x, bx), f"x differs at step {i}"
        assert torch.equal(y, by), f"y differs at step {i}"
        assert (split, wrapped) == (bsplit, bwrapped), f"split/wrapped differ at step {i}"
        wraps += wrapped
    assert wraps >= 2, "the test must wrap around the dump"


CONFIGS = (
    [("pinned", dict(pinned=True, prefetch=p), "h5py+pinned") for p in (1, 2, 3)]
    + [("streams", dict(streams=True, prefetch=p), "h5py+pageable+streams") for p in (1, 2, 3)]
    + [("pinned+streams", dict(pinned=True, streams=True, prefetch=p), "h5py+pinned+streams")
       for p in (1, 2, 3)]
    + [("resident", dict(kind="resident"), "resident-cuda")]
)


@pytest.mark.parametrize("name,kw,path", CONFIGS,
                         ids=[f"{c[0]}-p{c[1].get('prefetch', 0)}" for c in CONFIGS])
def test_gpu_paths_match_baseline(dump, name, kw, path):
    want = _baseline(dump)
    with make(dump, B, "cuda", start=START, **kw) as loader:
        assert loader.describe()["path"] == path
        got = _take(loader)
    _assert_same(got, want)


@pytest.mark.parametrize("prefetch", [1, 2, 3])
def test_bin_loader_matches_baseline_and_names_its_path(dump, prefetch, capsys):
    want = _baseline(dump)
    kvikio = _kvikio_or_none()
    with make(dump, B, "cuda", kind="bin", start=START, prefetch=prefetch) as loader:
        desc = loader.describe()
        got = _take(loader)
    _assert_same(got, want)
    if kvikio is None:
        with capsys.disabled():
            print(f"\nNOTE: kvikio not importable here; the bin loader ran {desc['path']}")
        assert desc["path"] == "pread+pinned"
    else:
        # outside GDS kvikio runs its compat (POSIX) path, into CUDA slots by default
        assert desc["path"] in ("gds", "kvikio-posix", "cufile-compat")
        assert gds.read_target(desc["path"]) == "device"
        assert gds.read_target(desc["path"], "host") == ("device" if desc["path"] == "gds" else "host")
        with capsys.disabled():
            print(f"\nbin loader path: {desc['path']} | notes: {desc['notes']}")
    if desc["path"] != "gds":
        assert "GDS" not in repr(desc), "never say GDS for a path that is not GPUDirect Storage"


def test_require_gds_matches_driver(dump):
    kvikio = _kvikio_or_none()
    with make(dump, B, "cuda", kind="bin") as probe:
        path = probe.describe()["path"]
    if kvikio is not None:
        io_path, _ = gds.kvikio_io_path(kvikio)
        available = gds.cufile_property("is_gds_available") is True
        assert (io_path == "gds") == (available and not kvikio.defaults.is_compat_mode_preferred())
    if path == "gds":
        with make(dump, B, "cuda", kind="bin", require_gds=True) as loader:
            assert loader.describe()["path"] == "gds"
    else:
        with pytest.raises(dump_format.GdsUnavailable, match=re.escape(path)):
            make(dump, B, "cuda", kind="bin", require_gds=True)


def _host_buffers(loader):
    """The loader's page-locked ring (empty for the GDS path, whose slots live on the GPU)."""
    buffers = [t for slot in loader.ring.slots for t in slot]
    if isinstance(loader, loaders._KvikioLoader) and loader.target == "device":
        assert all(t.is_cuda for t in buffers)
        return []
    return buffers


@pytest.mark.parametrize("kw", [dict(pinned=True), dict(pinned=True, streams=True),
                                dict(kind="bin", kvikio_target="host")],
                         ids=["pinned", "pinned+streams", "bin-host"])
def test_pinned_buffers_are_pinned_and_allocated_once(dump, kw, monkeypatch):
    with make(dump, B, "cuda", start=START, **kw) as loader:
        buffers = _host_buffers(loader)
        # a kvikio loader reading into CUDA slots (GDS, or --kvikio-target device) has no host ring
        assert buffers or getattr(loader, "target", None) == "device"
        assert all(t.is_pinned() for t in buffers)
        _take(loader, 3)  # warm-up: the ring exists, the reader thread is running
        calls = []
        real_empty, real_zeros, real_pin = torch.empty, torch.zeros, torch.Tensor.pin_memory

        def counting(real):
            def wrapper(*args, **kwargs):
                if kwargs.get("pin_memory"):
                    calls.append(real.__name__)
                return real(*args, **kwargs)
            return wrapper

        def counting_pin(self, *args, **kwargs):
            calls.append("Tensor.pin_memory")
            return real_pin(self, *args, **kwargs)

        monkeypatch.setattr(torch, "empty", counting(real_empty))
        monkeypatch.setattr(torch, "zeros", counting(real_zeros))
        monkeypatch.setattr(torch.Tensor, "pin_memory", counting_pin)
        _take(loader, 12)
        monkeypatch.undo()
    assert calls == [], f"pinned memory allocated per batch: {calls}"


@pytest.fixture(params=["kvikio", "memmap", "host-slots"])
def bin_variant(request, monkeypatch):
    """The bin loader's three GPU implementations: kvikio into CUDA slot buffers (default; GDS or
    compat), memmap (kvikio hidden), and kvikio into pinned host slots (--kvikio-target host)."""
    kvikio = _kvikio_or_none()
    if request.param != "memmap" and kvikio is None:
        pytest.skip("kvikio not importable")
    if request.param == "memmap":
        monkeypatch.setattr(gds, "import_kvikio", lambda: (None, "kvikio hidden by the test"))
    if request.param == "host-slots":
        monkeypatch.setattr(gds, "read_target",
                            lambda io_path, requested="device": "device" if io_path == "gds" else "host")
    return request.param


def test_bin_variants_match_baseline(dump, bin_variant):
    want = _baseline(dump)
    with make(dump, B, "cuda", kind="bin", start=START, prefetch=2) as loader:
        path = loader.describe()["path"]
        got = _take(loader)
    _assert_same(got, want)
    if bin_variant == "memmap":
        assert path == "pread+pinned"
    elif bin_variant == "kvikio":
        assert path in ("gds", "kvikio-posix")
    else:
        assert path in ("gds", "cufile-compat", "kvikio-posix")


def _slow_consumer(dump, kw, steps=STEPS):
    """Runs the loader while the compute stream is kept busy (torch.cuda._sleep) before each batch
    is read, and drops each batch right after queueing that read."""
    got = []
    with make(dump, B, "cuda", start=START, **kw) as loader:
        for _ in range(steps):
            batch = next(loader)
            torch.cuda._sleep(20_000_000)          # ~10 ms of GPU time on the compute stream
            got.append((batch.x.clone(), batch.y.clone(), batch.split, batch.wrapped))  # queued behind it
            del batch                                # memory returns to the allocator now
        torch.cuda.synchronize()
    return got


@pytest.mark.parametrize("kw", [dict(streams=True, pinned=True, prefetch=2),
                                dict(streams=True, prefetch=3),
                                dict(pinned=True, prefetch=2),
                                dict(kind="resident")],
                         ids=["pinned+streams", "streams", "pinned", "resident"])
def test_slow_consumer_sees_correct_batches(dump, kw):
    """Race detector: a missing record_stream (or pinned-buffer event) lets the next copy reuse
    memory that the queued compute work still has to read."""
    _assert_same(_slow_consumer(dump, kw), _baseline(dump))


@pytest.mark.parametrize("compute_stream", ["default", "side"])
def test_slow_consumer_bin(dump, bin_variant, compute_stream):
    """The same race detector for every bin implementation, with the training loop on the default
    stream and on a non-default one (kvikio's own CUDA streams are blocking, so only a non-default
    compute stream exposes a missing slot event in the device-slot ring)."""
    want = _baseline(dump)
    if compute_stream == "side":
        with torch.cuda.stream(torch.cuda.Stream()):
            got = _slow_consumer(dump, dict(kind="bin", prefetch=2))
    else:
        got = _slow_consumer(dump, dict(kind="bin", prefetch=2))
    _assert_same(got, want)


@pytest.fixture
def slow_side_copies(monkeypatch):
    """Delays every non_blocking .to() issued off the main thread (the reader thread's side-stream
    copies) by ~5 ms of GPU time on that stream: a consumer that does not wait for the copy's event,
    or a reader that refills a pinned slot before its copy ran, then sees wrong bytes."""
    real_to = torch.Tensor.to

    def delayed_to(self, *args, **kwargs):
        if kwargs.get("non_blocking") and threading.current_thread() is not threading.main_thread():
            torch.cuda._sleep(10_000_000)  # on the current (side) stream, before the copy
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", delayed_to)


@pytest.mark.parametrize("kw", [dict(streams=True, pinned=True, prefetch=1),
                                dict(streams=True, pinned=True, prefetch=2),
                                dict(streams=True, prefetch=2)],
                         ids=["pinned+streams-p1", "pinned+streams-p2", "streams"])
def test_consumer_waits_for_slow_side_stream(dump, kw, slow_side_copies):
    want = _baseline(dump)
    with make(dump, B, "cuda", start=START, **kw) as loader:
        got = _take(loader)
    _assert_same(got, want)


def test_bin_consumer_waits_for_slow_side_stream(dump, bin_variant, slow_side_copies):
    want = _baseline(dump)
    with make(dump, B, "cuda", kind="bin", start=START, prefetch=2) as loader:
        got = _take(loader)
    _assert_same(got, want)


@pytest.mark.parametrize("kw", [dict(streams=True, pinned=True), dict(kind="bin"),
                                dict(kind="resident"), dict(pinned=True)],
                         ids=["pinned+streams", "bin", "resident", "pinned"])
def test_resume_and_ranks_on_gpu(dump, kw):
    k = 9
    want = _baseline(dump, steps=k + 6)[k:]
    with make(dump, B, "cuda", start=START, consumed=k, **kw) as loader:
        got = _take(loader, 6)
    for (x, y, s, w), (bx, by, bs, bw) in zip(got, want):
        assert torch.equal(x, bx) and torch.equal(y, by) and (s, w) == (bs, bw)
    want_r1 = None
    with make(dump, B, "cuda", start=0, rank=1, world_size=2) as base:
        want_r1 = _take(base, 8)
    with make(dump, B, "cuda", start=0, rank=1, world_size=2, **kw) as loader:
        got_r1 = _take(loader, 8)
    for (x, y, s, w), (bx, by, bs, bw) in zip(got_r1, want_r1):
        assert torch.equal(x, bx) and torch.equal(y, by) and (s, w) == (bs, bw)


def test_resident_makes_no_host_to_device_copies(dump):
    with make(dump, B, "cuda", kind="resident") as loader:
        _take(loader, 2)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            _take(loader, 6, clone=False)
    names = [e.name for e in prof.events()]
    assert not [n for n in names if "HtoD" in n], "resident loader copied host -> device per step"


def test_resident_falls_back_to_streams_when_it_does_not_fit(dump, monkeypatch):
    monkeypatch.setattr(loaders, "_free_memory_bytes", lambda device: 1024)
    want = _baseline(dump)
    with make(dump, B, "cuda", kind="resident", start=START) as loader:
        desc = loader.describe()
        got = _take(loader)
    assert desc["path"] == "h5py+pinned+streams"
    assert any("falling back" in n for n in desc["notes"])
    _assert_same(got, want)


def test_close_stops_reader_threads(dump):
    before = {t.ident for t in threading.enumerate()}
    for kw in (dict(streams=True, pinned=True), dict(kind="bin")):
        loader = make(dump, B, "cuda", **kw)
        next(loader)
        loader.close()
        assert getattr(loader, "_prefetcher", None) is None
    leftover = [t for t in threading.enumerate()
                if t.ident not in before and t.name.startswith("loader-reader")]
    assert leftover == []


def test_pinned_ring_refill_waits_for_copy(dump):
    """Big batches + prefetch=1: the single pinned buffer is refilled every step, so the event
    wait before read_direct is what keeps each in-flight copy intact."""
    big = write_tiny_dump(str(dump).replace("gpu.h5", "big.h5"), num_datasets=64, rows=2048,
                          features=16, seed=3, original_batch_size=8)
    want = _baseline(big, steps=12, start=0)
    with make(big, B, "cuda", pinned=True, prefetch=1) as loader:
        got = _take(loader, 12)
    for (x, y, *_), (bx, by, *_) in zip(got, want):
        assert torch.equal(x, bx) and torch.equal(y, by)
    np.testing.assert_equal(len(got), 12)


@pytest.mark.parametrize("variant", ["memmap", "host-slots"])
def test_invalid_bin_values_are_refused_on_gpu(tmp_path, monkeypatch, variant):
    """NaN in x.bin: refused by the start-up checksum pass, and (without it) by the host-side batch check."""
    import convert_h5
    path = write_tiny_dump(tmp_path / "v.h5", num_datasets=N, rows=ROWS, features=FEATURES, num_classes=3,
                           seed=7, original_batch_size=5)
    convert_h5.convert(path, progress=False)
    with open(dump_format.bin_paths(path)[0], "r+b") as f:
        f.seek(12 * dump_format.record_stride_bytes(ROWS, FEATURES) + 8)
        f.write(np.float32([np.nan]).tobytes())
    if variant == "memmap":
        monkeypatch.setattr(gds, "import_kvikio", lambda: (None, "kvikio hidden by the test"))
    elif _kvikio_or_none() is None:
        pytest.skip("kvikio not importable")
    with pytest.raises(dump_format.BinFormatError, match=r"crc32 mismatch .*first in dataset 12\)"):
        make(path, B, "cuda", kind="bin", no_convert=True)
    with make(path, B, "cuda", kind="bin", no_convert=True, verify_bin=False, kvikio_target="host") as loader:
        assert loader.describe()["path"] == ("pread+pinned" if variant == "memmap" else "kvikio-posix")
        _take(loader, 2)                                   # datasets 0..9 are fine
        with pytest.raises(dump_format.DumpError, match=r"'X' contains NaN or Inf values \(first in dataset 12\)"):
            next(loader)


@pytest.mark.parametrize("streams", [False, True])
def test_prior_loader_on_cuda_regenerates_a_cuda_dump(tmp_path, streams):
    import prior_dump
    path = str(tmp_path / "cuda.h5")
    prior_dump.write_dump(path, 37, 64, 9, 5, seed=2, device="cuda", progress=False, original_batch_size=5)
    with make(path, B, "cuda", start=START, kind="resident") as base:
        want = _take(base)
    with make(path, B, "cuda", start=START, kind="prior", streams=streams, prefetch=3) as loader:
        assert loader.describe()["path"] == "prior-cuda" + ("+side-stream" if streams else "")
        assert "dataset 0 equals the file's bit for bit" in loader.describe()["notes"][0]
        _assert_same(_take(loader, clone=False), want)


def test_the_recipes_prior_on_the_fly_is_its_cuda_dump(tmp_path):
    """prior:real:N on CUDA: the digest and the batches of the dump `prior_dump.py --preset real` writes on CUDA."""
    import prior_dump
    path = str(tmp_path / "real.h5")
    prior_dump.write_dump(path, 150, 512, 32, 10, seed=0, device="cuda", progress=False, feature_law="block-log")
    info = loaders.open_data("prior:real:150", "cuda")
    assert dump_format.dump_content_digest(info) == dump_format.dump_content_digest(dump_format.open_dump(path))
    with make(path, 16, "cuda", kind="resident") as base:
        want = _take(base, 30)
    with make(info, 16, "cuda", kind="prior", streams=True) as loader:
        got = _take(loader, 30, clone=False)
    _assert_same(got, want)
