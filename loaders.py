"""Every data path of the training loop behind one interface: make_loader(..., LoaderConfig) -> Loader.

kinds: "h5" (baseline; +pinned ring, +streams reader thread), "bin" (.bin records read by kvikio, or
length-checked preads), "resident" (the whole dump in device memory). All yield the same Batch bit for bit, so
the training loop never changes; describe()["path"] says what really runs. Close loaders: they hold files and
threads. A file that changes under a reader (size or mtime) stops it with a DumpError naming the file.
"""
from __future__ import annotations

import contextlib
import os
import queue
import threading
from dataclasses import dataclass, replace
from typing import NamedTuple

import h5py
import numpy as np
import torch

import convert_h5
import gds
import prior_dump
from dump_format import (BIN_ALIGNMENT, SCAN_CHUNK_BYTES, BinFormatError, BinRecords, DumpError, DumpInfo,
                         GdsUnavailable, batch_position, bin_paths, check_unchanged, check_values, open_dump,
                         read_sidecar, verify_bin_checksums)

LOADER_KINDS = ("h5", "bin", "resident", "prior")


@dataclass
class LoaderConfig:
    """The data path, as train_optimized.py's flags name it; the defaults are the baseline."""
    kind: str = "h5"               # "h5" | "bin" | "resident" | "prior" (the dump's datasets generated again)
    pinned: bool = False           # h5: read into a pinned ring, non_blocking copies
    streams: bool = False          # h5: a reader thread copies on a side CUDA stream; prior: generates on one
    prefetch: int = 2              # ring depth, batches read ahead (>= 1)
    require_gds: bool = False      # bin: refuse any path but GPUDirect Storage
    no_convert: bool = False       # bin: refuse instead of (re)converting
    kvikio_threads: int = 8        # bin: kvikio's thread pool
    kvikio_target: str = "device"  # bin: kvikio reads into "device" (CUDA) or "host" (pinned) slots
    bin_dir: str | None = None     # folder of the .bin files (default: next to the dump)
    verify_bin: bool = True        # bin: check the .bin crc32 checksums at start-up


class Batch(NamedTuple):
    """x (B, rows, feats) and y (B, rows) float32 on the device; split of the global batch's first dataset;
    wrapped: first batch after a wrap to dataset 0."""
    x: torch.Tensor
    y: torch.Tensor
    split: int
    wrapped: bool


class _Slice(NamedTuple):
    first: int  # first dataset of this rank's slice
    rows: int
    feats: int
    split: int
    wrapped: bool


class _Ring:
    """`depth` slots of flat buffers (pinned host or CUDA) allocated once (page-locking is slow), one event per slot:
    a slot is rewritten only after the last copy out of it ran (the allocator guards frees, not our rewrites)."""

    def __init__(self, depth: int, numels, dtype=torch.float32, device="cpu"):
        host = torch.device(device).type == "cpu"
        self.slots = [tuple(torch.empty(n, dtype=dtype, device=device, pin_memory=host) for n in numels)
                      for _ in range(depth)]
        self._free = [torch.cuda.Event() for _ in range(depth)]

    def acquire(self, k: int):
        self._free[k].synchronize()  # blocks this thread until the copy last issued from slot k has run
        return self.slots[k]

    def release(self, k: int, stream=None) -> None:
        self._free[k].record(stream)  # slot k is reusable once the work queued so far on `stream` has run

    def close(self) -> None:
        for event in self._free:  # the buffers must outlive the DMAs reading or writing them
            event.synchronize()


def _views(x_flat: torch.Tensor, y_flat: torch.Tensor, batch: int, rows: int, feats: int):
    """Contiguous (B, rows, feats) / (B, rows) views over the start of two flat ring buffers."""
    return x_flat[:batch * rows * feats].view(batch, rows, feats), y_flat[:batch * rows].view(batch, rows)


class _H5Source:
    """h5py reads of [first, first+B) x [:rows] x [:feats]: one hyperslab read per array per batch, each followed
    by a check that the dump kept the size and mtime it was validated with (h5py reads zeros past a truncation)."""

    def __init__(self, info: DumpInfo):
        self.path, self.expected = info.path, (info.size_bytes, info.mtime_ns)
        self.file = h5py.File(info.path, "r")
        self.X, self.y = self.file["X"], self.file["y"]

    def read(self, first: int, count: int, rows: int, feats: int) -> tuple[np.ndarray, np.ndarray]:
        """Fresh arrays, exactly upstream's slice: X[p:p+B, :rows, :feats], y[p:p+B, :rows]."""
        try:
            x, y = self.X[first:first + count, :rows, :feats], self.y[first:first + count, :rows]
        except OSError as exc:
            raise self._failed(first, count, exc) from exc
        check_unchanged(self.path, self.expected)   # one stat: the bytes just read are the validated ones
        return x.astype(np.float32, copy=False), y.astype(np.float32, copy=False)

    def read_into(self, x_out: np.ndarray, y_out: np.ndarray, first: int, rows: int, feats: int):
        """HDF5 writes the hyperslab straight into C-contiguous x_out (B, rows, feats) / y_out (B, rows)."""
        count = x_out.shape[0]
        try:
            self.X.read_direct(x_out, source_sel=np.s_[first:first + count, :rows, :feats])
            self.y.read_direct(y_out, source_sel=np.s_[first:first + count, :rows])
        except OSError as exc:
            raise self._failed(first, count, exc) from exc
        check_unchanged(self.path, self.expected)

    def _failed(self, first, count, exc):
        check_unchanged(self.path, self.expected)   # a truncated dump: say so rather than quote h5py
        return DumpError(f"{self.path}: read of datasets {first}..{first + count - 1} failed ({exc})")

    def close(self):
        self.file.close()


class _PreadSource:
    """The .bin records of a batch read whole with preads (BinRecords: a short read or a changed file is one line,
    where a memmap of a truncated file dies of SIGBUS), then sliced, copied and value-checked."""

    def __init__(self, info: DumpInfo, meta: dict):
        self.info, self.path, self.y_path = info, meta["x_path"], meta["y_path"]
        self.X, self.y = (BinRecords(meta[f"{a}_path"], meta[f"{a}_stride_bytes"], meta.get(f"{a}_stat"))
                          for a in "xy")

    def read(self, first: int, count: int, rows: int, feats: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = np.empty((count, rows, feats), np.float32), np.empty((count, rows), np.float32)
        self.read_into(x, y, first, rows, feats)
        return x, y

    def read_into(self, x_out: np.ndarray, y_out: np.ndarray, first: int, rows: int, feats: int):
        count, R, F = x_out.shape[0], self.info.rows, self.info.features
        # (B, stride/4) -> drop padding -> (B, R, F) (a view: only the last axis is split) -> slice.
        x = self.X.read(first, count)[:, :R * F].reshape(count, R, F)
        np.copyto(x_out, x[:, :rows, :feats])
        np.copyto(y_out, self.y.read(first, count)[:, :rows])
        check_values(self.path, x_out, y_out, first, self.info.max_num_classes, self.y_path)

    def close(self):
        self.X.close()
        self.y.close()


class _Prefetcher:
    """One daemon thread runs the generator `produce(first_step, stop)` into a bounded queue (one: h5py serialises
    every call behind a lock; the bound caps memory). A reader's exception is queued as the item."""

    def __init__(self, produce, first_step: int, depth: int, name: str):
        self._queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._failure = None
        self._thread = threading.Thread(target=self._run, args=(produce(first_step, self._stop),), name=name,
                                        daemon=True)
        self._thread.start()

    def _run(self, items):
        try:
            for item in items:
                if not self._put(item):
                    return
        except BaseException as exc:  # re-raised in the consumer, with its message
            self._put(exc)
        finally:
            items.close()  # runs the producer's finally (the kvikio loader closes its files)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=0.05)
                return True
        return False

    def get(self):
        """Next item; re-raises the reader thread's exception (again on every later call)."""
        while self._failure is None:
            try:
                item = self._queue.get(timeout=0.5)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("loader reader thread stopped without a result")
                continue
            if not isinstance(item, BaseException):
                return item
            self._failure = item
        raise self._failure

    def close(self):
        self._stop.set()
        with contextlib.suppress(queue.Empty):
            while True:  # unblock a put() waiting on a full queue
                self._queue.get_nowait()
        self._thread.join(30.0)


class Loader:
    """Base of every loader: an infinite iterator of Batch with a resumable position. Subclasses implement
    `_fetch(step)`; threaded ones also `_produce(first_step, stop)`, a generator of (step, ...) items."""

    source = ring = _prefetcher = None  # closed by close(), after the reader thread stopped
    threaded = False

    def __init__(self, info: DumpInfo, batch_size: int, device: torch.device, *, loader_name: str,
                 data_path: str = "", start: int = 0, rank: int = 0, world_size: int = 1, consumed: int = 0):
        self.info, self.batch_size, self.device = info, int(batch_size), device
        self.cuda = device.type == "cuda"
        self.loader_name = loader_name
        self.data_path = data_path  # what really runs ("h5py+sync-copy", "gds", ...): describe()["path"]
        self.start, self.rank, self.world_size = int(start), int(rank), int(world_size)
        self.consumed = int(consumed)
        self.notes: list[str] = []
        self._closed = False

    def _slice(self, step: int) -> _Slice:
        """This rank's datasets at `step` and the batch shape (max rows/features of the slice)."""
        B = self.batch_size
        position = batch_position(step, self.start, B * self.world_size, self.info.num_datasets)
        first = position + self.rank * B
        rows = int(self.info.num_datapoints[first:first + B].max())
        feats = int(self.info.num_features[first:first + B].max())
        # Dataset 0 after step 0, or at step 0 from a later start, is the first batch after a wrap.
        wrapped = position == 0 and (step > 0 or self.start > 0)
        # Every rank takes the split of the global batch's first dataset, as one process on the global batch does:
        # ranks on different splits wait for the slowest at each all-reduce (1.73x instead of 2x on the blog's shape).
        return _Slice(first, rows, feats, int(self.info.splits[position]), wrapped)

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        if self._closed:
            raise RuntimeError("loader is closed")
        batch = self._fetch(self.consumed)
        self.consumed += 1
        if batch.wrapped and self.rank == 0:
            print(f"loader: end of dump ({self.info.num_datasets} datasets) reached, wrapping to dataset 0",
                  flush=True)
        return batch

    def describe(self) -> dict:
        """{"loader": requested kind and flags, "path": what really runs, "notes": one-line notices}."""
        return {"loader": self.loader_name, "path": self.data_path, "notes": list(self.notes)}

    def state_dict(self) -> dict:
        """Position of the loader; a new loader with consumed=state["consumed"] continues exactly."""
        return {"start": self.start, "consumed": self.consumed, "batch_size": self.batch_size,
                "rank": self.rank, "world_size": self.world_size, "num_datasets": self.info.num_datasets}

    def load_state_dict(self, state: dict) -> None:
        """Continues at batch state["consumed"]; ValueError for another batch, world or dump size."""
        for key in ("batch_size", "world_size", "num_datasets"):
            mine = self.state_dict()[key]
            if int(state[key]) != mine:
                raise ValueError(f"loader state has {key}={state[key]}, this loader has {mine}")
        self._stop_workers()
        self.start, self.consumed = int(state["start"]), int(state["consumed"])
        self._start_workers()

    def _start_workers(self) -> None:
        if self.threaded:
            self._prefetcher = _Prefetcher(self._produce, self.consumed, self.depth,
                                           name=f"loader-reader-{self.data_path}")

    def _stop_workers(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def _next_item(self, step: int):
        item = self._prefetcher.get()
        assert item[0] == step, f"reader thread is at step {item[0]}, consumer at {step}"
        return item[1:]

    def close(self) -> None:
        """Stops background threads and closes files; the loader cannot be iterated afterwards."""
        if self._closed:
            return
        self._closed = True
        self._stop_workers()
        for resource in (self.ring, self.source):
            if resource is not None:
                resource.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _wait_for_side_copy(device, ready, *tensors) -> None:
    """Makes the compute stream wait (on the GPU, the host does not block) for a side-stream copy."""
    compute = torch.cuda.current_stream(device)
    compute.wait_event(ready)
    # Allocated on the side stream, read on this one: without record_stream the allocator could hand
    # their memory to the next side-stream copy while queued compute kernels still read them.
    for t in tensors:
        t.record_stream(compute)


class _StepReader(Loader):
    """A loader whose `_read(step)` gives (x, y, ready event or None, split, wrapped): run at each fetch, or
    (threaded) `depth` batches ahead on a reader thread."""

    _side = None  # the reader thread's CUDA stream

    def _produce(self, first_step: int, stop: threading.Event):
        """Reader thread: make batch `step` ready (its copy or generation queued on the side stream), hand it over."""
        if self.cuda:
            torch.cuda.set_device(self.device)  # the thread's current device for events/allocations
        step = first_step
        while not stop.is_set():
            yield (step, *self._read(step))
            step += 1

    def _fetch(self, step: int) -> Batch:
        x, y, ready, split, wrapped = self._next_item(step) if self.threaded else self._read(step)
        if ready is not None:
            _wait_for_side_copy(self.device, ready, x, y)
        return Batch(x, y, split, wrapped)


class _SourceLoader(_StepReader):
    """Reads of `source` (h5py or preads), then copies: baseline (fresh arrays, synchronous .to), pinned (CUDA only:
    ring, non_blocking copies), threaded (a reader thread `prefetch` batches ahead, side-stream copies; CPU: reads)."""

    def __init__(self, info, batch_size, device, *, source, pinned, threaded, prefetch, **kw):
        super().__init__(info, batch_size, device, **kw)
        self.source, self.pinned, self.threaded, self.depth = source, pinned, threaded, int(prefetch)
        if threaded and self.cuda:
            self._side = torch.cuda.Stream(device=device)  # copies overlap the compute stream's kernels
        if pinned:
            self.ring = _Ring(self.depth, (self.batch_size * info.rows * info.features, self.batch_size * info.rows))
        self._start_workers()

    def _read(self, step: int):
        """Reads batch `step` and starts its copy to the device, on the reader thread's side stream if any, else
        the current stream; returns (x, y, ready: the side copy's event or None, split, wrapped)."""
        s, k, side = self._slice(step), step % self.depth, self._side
        if self.pinned:
            # Blocks the reading thread until the copy issued from slot k `depth` steps ago has run.
            x, y = _views(*self.ring.acquire(k), self.batch_size, s.rows, s.feats)
            self.source.read_into(x.numpy(), y.numpy(), s.first, s.rows, s.feats)
        else:
            x, y = (torch.from_numpy(a) for a in self.source.read(s.first, self.batch_size, s.rows, s.feats))
        ready = None
        if self.cuda:
            with torch.cuda.stream(side):  # side is None: the current (compute) stream
                # Page-locked source: an asynchronous DMA, queued on this stream, so kernels using x/y run after
                # it lands. Pageable + non_blocking: the driver stages it; the baseline copies synchronously.
                x = x.to(self.device, non_blocking=self.pinned or self.threaded)
                y = y.to(self.device, non_blocking=self.pinned or self.threaded)
                if side is not None:
                    ready = torch.cuda.Event()
                    ready.record(side)  # the consumer's compute stream waits on this
            if self.pinned:
                self.ring.release(k, side)
        return x, y, ready, s.split, s.wrapped


class _KvikioLoader(Loader):
    """A reader thread has kvikio read whole batch spans of the .bin files (one pread per array) into slot k of:
    target="device": CUDA slots; the consumer copies the batch out, releases the slot behind that copy, returns a token;
    target="host": pinned slots, value-checked, copied whole on a side stream, sliced after waiting for that copy."""

    threaded = True

    def __init__(self, info, batch_size, device, *, meta, kvikio, target, prefetch, threads, **kw):
        super().__init__(info, batch_size, device, **kw)
        self.meta, self.target, self._kvikio = meta, target, kvikio
        self.depth, self.threads = int(prefetch), int(threads)
        self._x_stride, self._y_stride = meta["x_stride_bytes"], meta["y_stride_bytes"]
        on_host = target == "host"
        # B whole records per slot: kvikio writes straight into these buffers.
        self.ring = _Ring(self.depth, (self.batch_size * self._x_stride, self.batch_size * self._y_stride),
                          torch.uint8, "cpu" if on_host else device)
        # kvikio takes host memory through the buffer protocol, which CPU tensors lack: numpy views.
        self._io = [tuple(t.numpy() if on_host else t for t in slot) for slot in self.ring.slots]
        if on_host:
            self._side = torch.cuda.Stream(device=device)  # copies overlap the compute stream
        self._start_workers()

    def _start_workers(self):
        # Device target: one token per slot, returned once the consumer released the slot behind its copy-out.
        self._tokens = threading.Semaphore(self.depth)
        super()._start_workers()

    def _records(self, flat: torch.Tensor, stride: int, width: int) -> torch.Tensor:
        """(B * stride) bytes -> (B, width) float32 view without the padding of each record."""
        return flat.view(torch.float32).view(self.batch_size, stride // 4)[:, :width]

    def _read_span(self, files, k: int, s: _Slice) -> None:
        nx, ny = self.batch_size * self._x_stride, self.batch_size * self._y_stride
        io_x, io_y = self._io[k]
        # Both arrays in flight at once, in page-aligned tasks of >= 1 MiB so several kvikio threads share one array.
        task_x, task_y = (max(1 << 20, -(-n // self.threads // BIN_ALIGNMENT) * BIN_ALIGNMENT) for n in (nx, ny))
        fut_x = files[0].pread(io_x, nx, s.first * self._x_stride, task_x)
        fut_y = files[1].pread(io_y, ny, s.first * self._y_stride, task_y)
        got_x, got_y = fut_x.get(), fut_y.get()  # blocks this thread until the bytes landed
        for which, got, n in (("x", got_x, nx), ("y", got_y, ny)):
            if got != n:
                raise DumpError(f"{self.meta[f'{which}_path']}: short read at dataset {s.first} ({got}/{n} "
                                "bytes): truncated while in use?")
            if f"{which}_stat" in self.meta:   # the bytes just read are the verified ones
                check_unchanged(self.meta[f"{which}_path"], self.meta[f"{which}_stat"])
        if self.target == "host":
            B, R, F = self.batch_size, self.info.rows, self.info.features
            x = io_x.view(np.float32).reshape(B, -1)[:, :R * F].reshape(B, R, F)[:, :s.rows, :s.feats]
            y = io_y.view(np.float32).reshape(B, -1)[:, :s.rows]
            check_values(self.meta["x_path"], x, y, s.first, self.info.max_num_classes, self.meta["y_path"])

    def _produce(self, first_step: int, stop: threading.Event):
        torch.cuda.set_device(self.device)  # the thread's current device for events/allocations
        files = (self._kvikio.CuFile(self.meta["x_path"], "r"), self._kvikio.CuFile(self.meta["y_path"], "r"))
        try:
            step = first_step
            while not stop.is_set():
                if self.target == "device" and not self._tokens.acquire(timeout=0.05):
                    continue  # no token: every slot still holds a batch the consumer has not copied out
                if stop.is_set():
                    return
                s, k = self._slice(step), step % self.depth
                # The last copy out of slot k must have run before kvikio overwrites it (GDS writes
                # outside any stream, so wait here, on the host).
                self.ring.acquire(k)
                self._read_span(files, k, s)
                if self.target == "host":
                    with torch.cuda.stream(self._side):
                        # Whole spans from pinned memory (one contiguous async DMA each).
                        span_x, span_y = (t.to(self.device, non_blocking=True) for t in self.ring.slots[k])
                        ready = torch.cuda.Event()
                        ready.record(self._side)  # the compute stream waits on this
                        self.ring.release(k, self._side)
                else:
                    (span_x, span_y), ready = self.ring.slots[k], None  # the consumer copies out of slot k
                yield step, s, k, span_x, span_y, ready
                step += 1
        finally:
            for f in files:
                f.close()

    def _fetch(self, step: int) -> Batch:
        s, k, span_x, span_y, ready = self._next_item(step)
        B, R, F = self.batch_size, self.info.rows, self.info.features
        if self.target == "host":
            _wait_for_side_copy(self.device, ready, span_x, span_y)
        # A contiguous copy on the compute stream: the batch owns its memory, the slot can be reused.
        x = self._records(span_x, self._x_stride, R * F).view(B, R, F)[:, :s.rows, :s.feats].clone(
            memory_format=torch.contiguous_format)
        y = self._records(span_y, self._y_stride, R)[:, :s.rows].clone(memory_format=torch.contiguous_format)
        if self.target == "device":
            self.ring.release(k)  # slot reusable once this copy has run; the token lets the reader on
            self._tokens.release()
        return Batch(x, y, s.split, s.wrapped)


class _ResidentLoader(Loader):
    """The whole dump held in device memory (GPU, or host RAM on CPU); batches are sliced there."""

    def __init__(self, info, batch_size, device, **kw):
        super().__init__(info, batch_size, device, **kw)
        self.data_path = "resident-cuda" if self.cuda else "resident-host"
        self.X, self.y = _load_whole_dump(info, device)

    def _fetch(self, step: int) -> Batch:
        s, B = self._slice(step), self.batch_size
        # A contiguous copy (device to device): the batch never aliases the resident dump.
        x = self.X[s.first:s.first + B, :s.rows, :s.feats].clone(memory_format=torch.contiguous_format)
        y = self.y[s.first:s.first + B, :s.rows].clone(memory_format=torch.contiguous_format)
        return Batch(x, y, s.split, s.wrapped)

    def close(self):
        super().close()
        self.X = self.y = None


class _PriorLoader(_StepReader):
    """kind="prior": each batch generated on the device when it is due (prior_dump.Regenerator), nothing read from
    the file but its metadata; threaded (CUDA): a thread generates `prefetch` batches ahead on a side stream."""

    def __init__(self, info, batch_size, device, *, regenerator, threaded, prefetch, **kw):
        super().__init__(info, batch_size, device, **kw)
        self.regenerator, self.threaded, self.depth = regenerator, threaded, int(prefetch)
        if threaded:
            self._side = torch.cuda.Stream(device=device)  # generation overlaps the compute stream's kernels
        self._start_workers()

    def _read(self, step: int):
        s = self._slice(step)
        with torch.cuda.stream(self._side) if self._side is not None else contextlib.nullcontext():
            x, y = self.regenerator.datasets(s.first, self.batch_size)
            # A contiguous copy: the batch never aliases the generator's cached chunk.
            x = x[:, :s.rows, :s.feats].clone(memory_format=torch.contiguous_format)
            y = y[:, :s.rows].clone(memory_format=torch.contiguous_format)
            ready = None
            if self._side is not None:
                ready = torch.cuda.Event()
                ready.record(self._side)  # the consumer's compute stream waits on this
        return x, y, ready, s.split, s.wrapped


def _load_whole_dump(info: DumpInfo, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Reads X (N, R, F) and y (N, R) into `device` memory in bounded chunks."""
    N, R, F = info.num_datasets, info.rows, info.features
    X = torch.empty((N, R, F), dtype=torch.float32, device=device)
    y = torch.empty((N, R), dtype=torch.float32, device=device)
    chunk = max(1, SCAN_CHUNK_BYTES // (R * F * 4))
    with h5py.File(info.path, "r") as f:
        if device.type != "cuda":
            for first in range(0, N, chunk):
                sel = np.s_[first:first + chunk]
                f["X"].read_direct(X.numpy(), source_sel=sel, dest_sel=sel)
                f["y"].read_direct(y.numpy(), source_sel=sel, dest_sel=sel)
            check_unchanged(info.path, (info.size_bytes, info.mtime_ns))   # h5py reads zeros past a truncation
            return X, y
        # Two pinned slots: chunk i+1 is read from disk while chunk i's copy is in flight.
        ring = _Ring(2, (chunk * R * F, chunk * R))
        for i, first in enumerate(range(0, N, chunk)):
            k, count = i % 2, min(chunk, N - first)
            xs, ys = _views(*ring.acquire(k), count, R, F)
            f["X"].read_direct(xs.numpy(), source_sel=np.s_[first:first + count])
            f["y"].read_direct(ys.numpy(), source_sel=np.s_[first:first + count])
            X[first:first + count].copy_(xs, non_blocking=True)  # async DMA from pinned memory
            y[first:first + count].copy_(ys, non_blocking=True)
            ring.release(k)
        ring.close()
    check_unchanged(info.path, (info.size_bytes, info.mtime_ns))
    return X, y


def _free_memory_bytes(device: torch.device) -> int:
    """Free memory where a resident dump would live: GPU free memory, or available host RAM."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as handle:
            return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def open_data(path, device="cpu", scan_values: bool = True) -> DumpInfo:
    """A dump file (open_dump), or `prior:PRESET[:N][:OPTION=VALUE,...]`: a preset's datasets made on the fly on
    `device`."""
    if str(path).startswith(prior_dump.SPEC_PREFIX):
        try:
            return prior_dump.spec_info(str(path), device)
        except ValueError as exc:
            raise DumpError(str(exc)) from None
    return open_dump(path, scan_values=scan_values)


def make_loader(info_or_path, batch_size: int, device, config: LoaderConfig | None = None, *,
                rank: int = 0, world_size: int = 1, consumed: int = 0, start: int = 0) -> Loader:
    """The loader of `config`'s data path (default: the baseline) for a dump path or DumpInfo; B = batch_size
    per rank, this rank's slice of each global batch of world_size*B datasets, `consumed` batches already
    read, `start` the dataset of step 0. Raises DumpError, GdsUnavailable, ValueError (bad arguments)."""
    config = config or LoaderConfig()
    info = info_or_path if isinstance(info_or_path, DumpInfo) else open_data(info_or_path, device)
    if config.kind not in LOADER_KINDS:
        raise ValueError(f"unknown loader kind {config.kind!r} (expected one of {', '.join(LOADER_KINDS)})")
    if info.generated and config.kind != "prior":
        raise DumpError(f"{info.path} is made on the fly: only --loader prior generates it (not --loader {config.kind})")
    if config.kvikio_target not in ("device", "host"):
        raise ValueError(f"kvikio target must be 'device' or 'host', got {config.kvikio_target!r}")
    for name, value, low in (("batch_size", batch_size, 1), ("world_size", world_size, 1),
                             ("prefetch", config.prefetch, 1), ("consumed", consumed, 0),
                             ("kvikio_threads", config.kvikio_threads, 1)):
        if int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} must be in 0..{world_size - 1}")
    N = info.num_datasets
    if batch_size * world_size > N:
        raise DumpError(f"{info.path}: batch size {batch_size} x world size {world_size} = "
                        f"{batch_size * world_size} datasets is larger than the dump ({N} datasets)")
    if not 0 <= start < N:
        raise ValueError(f"start {start} must be in 0..{N - 1}")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device} requested but CUDA is not available here")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    position = dict(start=start, rank=rank, world_size=world_size, consumed=consumed)
    build = {"h5": _make_h5_loader, "bin": _make_bin_loader, "resident": _make_resident_loader,
             "prior": _make_prior_loader}[config.kind]
    return build(info, batch_size, device, config, position)


def _make_h5_loader(info, batch_size, device, config: LoaderConfig, position) -> Loader:
    cuda, pinned, streams = device.type == "cuda", config.pinned, config.streams
    name = "h5" + ("+pinned" if pinned else "") + ("+streams" if streams else "")
    name += f"(prefetch={config.prefetch})" if (pinned or streams) else ""
    path = ("h5py+sync-copy" if not cuda or not (pinned or streams) else "h5py+pinned" if not streams
            else "h5py+pinned+streams" if pinned else "h5py+pageable+streams")
    loader = _SourceLoader(info, batch_size, device, source=_H5Source(info), loader_name=name, data_path=path,
                           pinned=pinned and cuda, threaded=streams and cuda, prefetch=config.prefetch, **position)
    for flag, on, missing in (("pinned", pinned, "no page-locked copies"), ("streams", streams, "no CUDA streams")):
        if on and not cuda:
            loader.notes.append(f"--{flag}: no effect without CUDA ({missing} on CPU); running the baseline path")
    if cuda and streams and not pinned:
        loader.notes.append("--streams without --pinned: pageable host memory, so the driver stages "
                            "each side-stream copy synchronously (less overlap); add --pinned for "
                            "asynchronous copies")
    return loader


def _make_resident_loader(info, batch_size, device, config: LoaderConfig, position) -> Loader:
    cuda = device.type == "cuda"
    need, free = info.num_datasets * info.rows * (info.features + 1) * 4, _free_memory_bytes(device)  # X and y
    if need < 0.5 * free:  # headroom: activations, gradients and optimizer state need the rest
        loader = _ResidentLoader(info, batch_size, device, loader_name="resident", **position)
        loader.notes.append(
            f"resident: dump ({need / 2**30:.2f} GiB) held in GPU memory ({free / 2**30:.1f} GiB were free); "
            f"batches are sliced on the GPU, no host-to-device copies per step" if cuda else
            f"resident: dump ({need / 2**30:.2f} GiB) held in host memory (CPU device: there are no "
            f"host-to-device copies to save)")
        return loader
    # Too big: the pinned+streams h5 path on CUDA, the baseline on CPU.
    loader = _make_h5_loader(info, batch_size, device, replace(config, pinned=cuda, streams=cuda), position)
    loader.loader_name = "resident"
    loader.notes.append(f"resident: dump needs {need / 2**30:.2f} GiB but only {free / 2**30:.2f} GiB of "
                        f"{'GPU' if cuda else 'host'} memory is free (keeping 50% headroom); falling back "
                        f"to the {'pinned+streams' if cuda else 'baseline'} path")
    return loader


def _make_prior_loader(info, batch_size, device, config: LoaderConfig, position) -> Loader:
    try:
        settings = info.generated.settings if info.generated else prior_dump.file_settings(info.path)
    except ValueError as exc:
        raise DumpError(f"{info.path}: --loader prior: {exc}") from None
    regenerator = prior_dump.Regenerator(settings, device)
    threaded = config.streams and device.type == "cuda"
    loader = _PriorLoader(info, batch_size, device, loader_name="prior" + ("+streams" if threaded else ""),
                          data_path=f"prior-{device.type}" + ("+side-stream" if threaded else ""),
                          regenerator=regenerator, threaded=threaded, prefetch=config.prefetch, **position)
    source = ("no file" if info.generated else
              f"{_regenerated_match(info, regenerator, device)}; only the dump's metadata read")
    loader.notes.append(f"prior: each batch generated on {device.type} when due (seed {settings['seed']}, {source})")
    if config.streams and not threaded:
        loader.notes.append("--streams: no effect without CUDA; the prior is generated in the training thread")
    if config.pinned:
        loader.notes.append("--pinned: no effect with --loader prior (batches are made on the device: no host copies)")
    return loader


def _regenerated_match(info: DumpInfo, regenerator, device: torch.device) -> str:
    """How dataset 0 made again compares with the file's: equal, or how far apart (another device type draws other
    numbers: the loader then trains on the same prior, not on the file's tables)."""
    x, y = regenerator.dataset(0)
    with h5py.File(info.path, "r") as f:
        fx, fy = f["X"][0], f["y"][0]
    if np.array_equal(x, fx) and np.array_equal(y, fy):
        return "dataset 0 equals the file's bit for bit"
    return (f"dataset 0 is not the file's: made on {regenerator.settings['made_on']}, generated on {device.type}, "
            f"max |dX| {float(np.abs(x - fx).max()):.2g}, labels {'equal' if np.array_equal(y, fy) else 'differ'}")


def _ensure_bin(info: DumpInfo, config: LoaderConfig, notes: list, progress: bool) -> dict:
    """The sidecar of a valid .bin conversion (crc32-checked if config.verify_bin), (re)converting a missing or
    damaged one unless config.no_convert (never a newer version). Raises BinFormatError / DumpError (one line)."""
    sidecar = bin_paths(info.path, config.bin_dir)[2]
    try:
        meta = read_sidecar(sidecar, info)
        if config.verify_bin:
            seconds = verify_bin_checksums(meta)
            size = (meta["x_size_bytes"] + meta["y_size_bytes"]) / 1e9
            notes.append(f"bin: crc32 of {size:.2f} GB verified in {seconds:.2f} s")
        return meta
    except BinFormatError as exc:
        if exc.reason == "newer":
            raise
        if config.no_convert:
            raise BinFormatError(f"{exc} (no_convert: run `python convert_h5.py {info.path}`)", exc.reason) from None
        notes.append(f"bin: {exc.reason} conversion ({exc}); converting {info.path} now")
    try:
        # Under the conversion lock: ranks asking at once convert once; the others reuse the result.
        convert_h5.convert(info.path, out_dir=config.bin_dir, progress=progress, force=False)
    except convert_h5.ConvertError as exc:
        raise DumpError(f"conversion of {info.path} to .bin failed: {exc}") from None
    return read_sidecar(sidecar, info)


def _make_bin_loader(info, batch_size, device, config: LoaderConfig, position) -> Loader:
    """kind="bin": kvikio (gds / kvikio-posix / cufile-compat) or preads, and says which really runs."""
    cuda = device.type == "cuda"
    name = f"bin(prefetch={config.prefetch})"
    notes: list[str] = []
    kvikio, io_path, why = gds.choose_io_path(cuda, config.kvikio_threads, config.kvikio_target)

    def refuse_unless_gds():
        if config.require_gds and io_path != "gds":
            raise GdsUnavailable(f"--require-gds: the bin loader would run '{io_path}', not GPUDirect "
                                 f"Storage ({why})")

    refuse_unless_gds()  # before a possibly long conversion
    meta = _ensure_bin(info, config, notes, progress=position["rank"] == 0)
    if kvikio is not None and io_path == "gds":
        io_path, why = gds.check_direct_io(kvikio, meta["x_path"], io_path, why)
        refuse_unless_gds()
    if kvikio is not None:
        target = gds.read_target(io_path, config.kvikio_target)
        loader = _KvikioLoader(info, batch_size, device, loader_name=name, data_path=io_path, meta=meta,
                               kvikio=kvikio, target=target, prefetch=config.prefetch,
                               threads=config.kvikio_threads, **position)
        where = ("straight into CUDA slot buffers" if target == "device" else
                 "with POSIX preads into pinned host slots, then async copies on a side stream")
        notes.append(f"bin: path {io_path} ({why}); {config.kvikio_threads} kvikio threads read whole "
                     f"batch spans {where}, {config.prefetch} deep")
    else:
        loader = _SourceLoader(info, batch_size, device, source=_PreadSource(info, meta), loader_name=name,
                               data_path=io_path, pinned=cuda, threaded=True, prefetch=config.prefetch, **position)
        notes.append(f"bin: path {io_path} ({why})")
    if config.pinned or config.streams:
        notes.append("bin: --pinned/--streams are built into this path (reader thread + ring buffers); "
                     "nothing more to switch on")
    loader.notes.extend(notes)
    return loader
