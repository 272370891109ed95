"""Step timing, torch.profiler tables, run records and plots for nanoTabPFN training.

The product of this repository is an honest attribution of every millisecond of a training step.
This module holds the measuring instruments; it imports neither the model nor the loaders, and
importing it has no side effects (no CUDA touch, no file I/O; matplotlib is imported inside the
plotting functions only).

Public API
----------
StepTimer(device, warmup_steps=0, phases=("data", "forward", "backward", "optimizer"), ...)
    Splits each step into phases (CUDA events on GPU, perf_counter on CPU); ``summary()``.
diagnose(summary) -> str
    One line: "input-bound", "launch/host-bound", "GPU-bound" (or "CPU-bound" on a CPU run),
    with the numbers behind the verdict.
environment_record(device) -> dict; write_json_atomic(path, obj);
make_run_record(config, flags, timer_summary, extra) -> dict; to_jsonable(obj)
TrainingProfiler(device, out_dir="runs/profile", wait=1, warmup=1, active=3, ...)
    torch.profiler with a schedule, a Chrome/Perfetto trace and the blog's four tables.
label(name, enabled=True)
    torch.profiler.record_function(name), or a no-op context when profiling is off.
plot_phase_bars, plot_speedup, plot_loss_curves, plot_scaling
    PNG plots for benchmark.py (matplotlib Agg, each PNG written atomically).
format_ms(x), markdown_table(headers, rows), percentiles(values)
"""
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from array import array
from collections import deque

import numpy as np
import torch

RUN_RECORD_SCHEMA_VERSION = 1
DEFAULT_PHASES = ("data", "forward", "backward", "optimizer")
# Phases that issue GPU compute; the launch-bound test compares their host and GPU times.
DEFAULT_COMPUTE_PHASES = ("forward", "backward", "optimizer")
# diagnose() thresholds (documented there).
INPUT_BOUND_SHARE = 0.05
LAUNCH_BOUND_RATIO = 0.8
GPU_BEHIND_SHARE = 0.5
GPU_BUSY_SHARE = 0.8


# ----------------------------------------------------------------------------------------------
# Formatting helpers
# ----------------------------------------------------------------------------------------------

def percentiles(values):
    """Order statistics of a sample, in the sample's unit.

    Args:
        values: iterable of numbers (a list, an ``array('d')``, a numpy array). NaN marks a
            missing value (a phase on a step the timer did not sample) and is left out.
    Returns:
        {"n", "median", "p10", "p90", "mean", "std", "min", "max"}: ``n`` is an int (values
        kept), the rest are floats (``std`` is the sample standard deviation, ddof=1, and 0.0 for
        one value); every statistic is None when no value is left. Percentiles use numpy's
        linear interpolation.
    """
    a = np.asarray(values, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    n = int(a.size)
    if n == 0:
        return {"n": 0, "median": None, "p10": None, "p90": None, "mean": None, "std": None,
                "min": None, "max": None}
    p10, median, p90 = np.percentile(a, [10.0, 50.0, 90.0])
    return {"n": n, "median": float(median), "p10": float(p10), "p90": float(p90),
            "mean": float(a.mean()), "std": float(a.std(ddof=1)) if n > 1 else 0.0,
            "min": float(a.min()), "max": float(a.max())}


def format_ms(x):
    """Formats a duration given in milliseconds with three significant digits.

    Args:
        x: milliseconds (float or int), or None.
    Returns:
        "180 ms", "41.2 ms", "3.14 ms", below 1 ms in microseconds ("78.0 µs", "0.120 µs");
        "n/a" for None or NaN.
    """
    if x is None:
        return "n/a"
    x = float(x)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return f"{x} ms"
    unit, v = ("ms", x) if abs(x) >= 1.0 or x == 0.0 else ("µs", x * 1000.0)
    a = abs(v)
    if a >= 100:
        s = f"{v:.0f}"
    elif a >= 10:
        s = f"{v:.1f}"
    elif a >= 1 or a == 0:
        s = f"{v:.2f}"
    else:
        s = f"{v:.3f}"
    return f"{s} {unit}"


def _cell(value):
    """Markdown cell text: None -> '—', floats to 4 significant digits, '|' escaped."""
    if value is None:
        return "—"
    if isinstance(value, float):
        value = f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers, rows, align=None):
    """A GitHub-flavoured markdown table.

    Args:
        headers: column titles.
        rows: sequences of cell values, one per row, each as long as ``headers``; None prints as
            '—', floats with 4 significant digits, '|' in text is escaped.
        align: optional string of 'l'/'r'/'c', one per column; default: first column left, the
            others right.
    Returns:
        The table as one string ending with a newline.
    """
    headers = list(headers)
    if align is None:
        align = "l" + "r" * (len(headers) - 1)
    if len(align) != len(headers):
        raise ValueError(f"align has {len(align)} letters for {len(headers)} columns")
    rule = {"l": ":---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |",
             "| " + " | ".join(rule[a] for a in align) + " |"]
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) != len(headers):
            raise ValueError(f"row {i} has {len(row)} cells for {len(headers)} columns")
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# StepTimer
# ----------------------------------------------------------------------------------------------

class _NullPhase:
    """The context returned by a disabled timer: does nothing."""
    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, exc_type, exc, tb):
        return False


_NULL_PHASE = _NullPhase()


class _Phase:
    """Reusable context manager for one phase of a StepTimer (one object per phase name, so the
    hot path allocates nothing)."""
    __slots__ = ("timer", "index", "name")

    def __init__(self, timer, index, name):
        self.timer = timer
        self.index = index
        self.name = name

    def __enter__(self):
        t = self.timer
        if not t._in_step:
            raise RuntimeError(f"timer.phase({self.name!r}) used outside start_step()/end_step()")
        if t._open_phase is not None:
            raise RuntimeError(f"timer.phase({self.name!r}) opened inside phase "
                               f"{t._open_phase!r}: phases do not nest (they would count twice)")
        t._open_phase = self.name
        # CUDA: no event here; on the GPU clock a phase starts at the previous boundary.
        t._phase_t0 = time.perf_counter()
        return None

    def __exit__(self, exc_type, exc, tb):
        t = self.timer
        t._cur_host[self.index] += (time.perf_counter() - t._phase_t0) * 1000.0
        if t._sampled:
            # Had the GPU reached this phase's start when the host finished issuing the phase?
            # If not, it had earlier work queued and was not waiting for this phase's launches.
            # (cudaEventQuery: never blocks.)
            if not t._query(t._cur_events[-1]):
                t._cur_behind[self.index] = True
            ev = t._pool.pop() if t._pool else t._new_event()
            t._record(ev, t._stream)   # no sync: the GPU timestamps it when it reaches this point
            t._cur_events.append(ev)
            t._cur_event_phase.append(self.index)
        t._open_phase = None
        return False


class StepTimer:
    """Splits every training step into phases and keeps per-step times as floats.

    Usage::

        timer = StepTimer(device, warmup_steps=5)
        for step in range(steps):
            timer.start_step()
            with timer.phase("data"):
                batch = next(loader)          # the data wait is inside the timed step
            with timer.phase("forward"):
                loss = criterion(model(...), target)
            with timer.phase("backward"):
                loss.backward()
            with timer.phase("optimizer"):
                optimizer.step(); optimizer.zero_grad(set_to_none=True)
            timer.end_step()
            if step % log_every == 0:         # where the loop reads the loss back anyway
                recent = timer.recent(log_every)   # flush(): one sync, at the log interval only
        stats = timer.summary()

    A phase may be entered several times per step (gradient accumulation): its times add up.
    Time inside the step but outside every phase is reported as the phase "other" (e.g. a
    ``loss.item()`` placed between phases). Phases do not nest. Evaluation, checkpointing and
    logging between ``end_step()`` and the next ``start_step()`` are not timed (the clock pauses).

    Clocks
        CPU: ``time.perf_counter`` at every boundary; nothing to synchronize.
        CUDA: a ``torch.cuda.Event(enable_timing=True)`` recorded at the step start, at the end of
        every phase and at the step end, on the current stream of ``device`` (taken once per step
        at ``start_step``, so keep the stream the same within a step; the loaders hand batches
        over to it with ``wait_stream``). On this GPU clock a phase runs from the previous
        boundary (the step start or the previous phase's end) to its own end: one event per
        phase instead of two halves the timer's host cost, and is exact when the phases follow
        each other as in the usage above; GPU work issued between two phases is billed to the
        next phase (the host clock still shows that gap as "other"), and "other" on the GPU clock
        is what runs after the last phase. Event times are GPU-timeline times: the data phase is
        how long the stream sat between the step start and "data ready", i.e. the GPU's real
        wait for input (zero when the host read the batch while the GPU was still busy with
        queued work). perf_counter is also read at every phase start and end: the host view
        (``host_step``, ``host_phases``).

    When the timer synchronizes (CUDA; counted in ``summary()["syncs"]``)
        Never on the fast path: recording an event is an asynchronous ``cudaEventRecord``. At each
        ``end_step`` the timer polls, without blocking (``cudaEventQuery``), the oldest unresolved
        steps and converts the ones the GPU has finished into floats (``elapsed_time``), returning
        their events to a pool of reusable events. It blocks only (1) in ``flush()``, which waits
        for the last recorded event once (call it at log intervals, where the loop reads the loss
        anyway, and at the end), (2) in ``summary()``, which flushes, and (3) when more than
        ``max_pending`` steps are unresolved, in which case it waits for the oldest one: the host
        is then ``max_pending`` steps ahead of the GPU, which only a loop with no sync at all can
        reach, and waiting for a step that old does not slow the GPU.

    How we checked the timer does not change what it measures
        CPU: a phase costs two perf_counter reads (~0.1 µs each) and a few attribute stores:
        about 5 µs per 4-phase step on the 2-core CI machine (``measure_overhead()``;
        tests/test_profile_utils.py fails above 50 µs), against steps of milliseconds.
        CUDA (the cuda tests of tests/test_profile_utils.py, run on an H200 with torch
        2.11+cu130): the fast path issues 6 ``cudaEventRecord`` and 5 ``cudaEventQuery`` calls
        per 4-phase step, none of which waits for the GPU; turning finished steps into floats
        (``elapsed_time``) happens in ``end_step`` after the end event, i.e. between steps,
        outside both clocks. (1) Event phase times agree within 1% with a clock that
        synchronizes before every read (data 5.16 vs 5.16 ms, forward 8.32 vs 8.30 ms,
        backward 16.42 vs 16.48 ms). (2) GPU-bound 25 ms step: 24.84 ms timer off, 24.94 ms on
        (0.4%). (3) The worst case, a launch-bound step of 300 tiny kernels (~2.1 ms, timer off,
        on, off... interleaved step by step): +19 to +51 µs per step with the timer on (0.9 to
        2.5%; the 6 event records alone cost 2 to 11 µs, the rest is Python bookkeeping, 28 µs
        per step on an idle GPU), +16 to +27 µs with ``phase_every=10``; the test fails above
        5% + 50 µs. The host cost shows only where the host is the bottleneck, so compare
        configurations with the timer on in all of them.

    Memory
        Per measured step the timer keeps ``2 * (len(phases) + 1)`` float64 values in
        ``array('d')`` buffers (80 bytes for 4 phases: 8 MB over 100k steps) and no Python objects;
        CUDA events live in a pool bounded by ``max_pending`` steps.

    Args:
        device: torch.device or string; CUDA events are used when its type is "cuda".
        warmup_steps: the first steps, excluded from the statistics and reported apart.
        phases: names of the phases ("other" is reserved).
        compute_phases: the phases that issue GPU compute, for the launch-bound test of
            ``diagnose``; default: forward, backward, optimizer (those present in ``phases``).
            A host sync inside one of them (upstream's ``loss.item()`` in "backward") makes
            that phase look host-paced; ``diagnose`` still sees a GPU-bound step through the
            sync-free ones, but a sync in a phase of its own (or after the last phase, where
            it counts as "other") keeps every phase readable.
        enabled: False makes every method a no-op (``phase()`` returns a shared empty context).
        max_pending: CUDA only, the most unresolved steps before the timer waits for the oldest
            (each holds ``len(phases) + 2`` pooled events).
        phase_every: CUDA only: record phase events on every k-th step (the step's start and
            end events are recorded on every step). 1 (default) times every phase of every
            step; a larger k cuts the timer's host cost on launch-bound loops from six event
            records per step to two, and the phase statistics come from the sampled steps
            (their "n" says how many).
    """

    def __init__(self, device="cpu", warmup_steps=0, phases=DEFAULT_PHASES, *, compute_phases=None,
                 enabled=True, max_pending=64, phase_every=1):
        self.device = torch.device(device)
        self.enabled = bool(enabled)
        self.warmup_steps = int(warmup_steps)
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.phases = tuple(phases)
        if not self.phases or len(set(self.phases)) != len(self.phases) or "other" in self.phases:
            raise ValueError(f"phases must be distinct non-empty names other than 'other', "
                             f"got {self.phases}")
        if compute_phases is None:
            compute_phases = [p for p in DEFAULT_COMPUTE_PHASES if p in self.phases]
        unknown = [p for p in compute_phases if p not in self.phases]
        if unknown:
            raise ValueError(f"compute_phases {unknown} are not among phases {self.phases}")
        self.compute_phases = tuple(compute_phases)
        self.max_pending = max(1, int(max_pending))
        self.phase_every = int(phase_every)
        if self.phase_every < 1:
            raise ValueError(f"phase_every must be >= 1, got {phase_every}")
        self._cuda = self.enabled and self.device.type == "cuda"
        self._device_index = None   # resolved at the first step: no CUDA call in __init__
        self._record = self._query = self._elapsed = None   # bound at the first CUDA step
        self._contexts = {name: _Phase(self, i, name) for i, name in enumerate(self.phases)}
        n = len(self.phases)
        # Measured steps: per-phase and per-step times in ms (float64 arrays, no Python objects).
        self._phase_ms = [array("d") for _ in range(n)]        # clock of record (events on CUDA)
        self._host_phase_ms = [array("d") for _ in range(n)]   # perf_counter
        self._step_ms = array("d")
        self._host_step_ms = array("d")
        self._warm_step_ms = array("d")
        self._warm_host_step_ms = array("d")
        self._steps_started = 0      # steps ended (measured + warm-up), fixes the warm-up split
        self._discarded = 0
        self._syncs = 0
        self._gpu_behind = 0   # measured steps the GPU had not started when the host ended them
        self._phase_behind = [0] * n   # measured steps where the GPU had not reached the phase's
        self._cur_behind = [False] * n  # start when the host left the phase (CUDA only)
        self._sampled = False          # CUDA: this step records phase events (phase_every)
        self._sampled_steps = 0        # measured steps with phase events
        self._in_step = False
        self._open_phase = None
        self._phase_t0 = 0.0
        self._step_t0 = 0.0
        self._cur_host = [0.0] * n
        # CUDA state: event pool, events of the open step, unresolved steps (FIFO).
        self._pool = []
        self._stream = None
        self._raw_stream = None
        self._cur_start = None
        self._cur_events = []      # boundaries of the open step: [start, end of 1st phase, ...]
        self._cur_event_phase = []
        self._pending = deque()

    # -- hot path ------------------------------------------------------------------------------

    def _new_event(self):
        return torch.cuda.Event(enable_timing=True)

    def _bind_event_methods(self):
        # The C methods of the event base class, without torch.cuda.Event's Python wrappers
        # (~0.5 µs a call, about 10 calls a step); the public methods where it is missing.
        base = getattr(torch._C, "_CudaEventBase", None)
        public = torch.cuda.Event
        self._record = getattr(base, "record", None) or public.record
        self._query = getattr(base, "query", None) or public.query
        self._elapsed = getattr(base, "elapsed_time", None) or public.elapsed_time

    def _refresh_stream(self):
        # torch.cuda.current_stream() costs ~5 µs; the raw handle ~0.3 µs, so build the Stream
        # object only when the current stream changed (private API, hence the fallback).
        if self._device_index is None:
            self._device_index = (self.device.index if self.device.index is not None
                                  else torch.cuda.current_device())
            self._bind_event_methods()
        raw_fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw_fn is None:
            self._stream = torch.cuda.current_stream(self.device)
            return
        raw = raw_fn(self._device_index)
        if raw != self._raw_stream or self._stream is None:
            self._stream = torch.cuda.current_stream(self.device)
            self._raw_stream = raw

    def start_step(self):
        """Starts the clock of a step (call it before fetching the batch)."""
        if not self.enabled:
            return
        if self._in_step:
            # The previous step never reached end_step (an exception, a `continue`): drop it.
            self._discard_open_step()
        self._in_step = True
        self._cur_host = [0.0] * len(self.phases)
        if self._cuda:
            self._refresh_stream()
            ev = self._pool.pop() if self._pool else self._new_event()
            self._record(ev, self._stream)   # no sync: see the class docstring
            self._cur_start = ev
            self._cur_events = [ev]
            self._cur_event_phase = []
            self._cur_behind = [False] * len(self.phases)
            self._sampled = self._steps_started % self.phase_every == 0
        self._step_t0 = time.perf_counter()

    def phase(self, name):
        """Context manager timing one phase of the current step.

        Args:
            name: one of ``self.phases``.
        Returns:
            A reusable context manager (a shared no-op when the timer is disabled).
        """
        if not self.enabled:
            return _NULL_PHASE
        try:
            return self._contexts[name]
        except KeyError:
            raise ValueError(f"unknown phase {name!r}; this timer has {self.phases}") from None

    def end_step(self):
        """Stops the clock of the current step and stores its times (lazily on CUDA)."""
        if not self.enabled:
            return
        host_step = (time.perf_counter() - self._step_t0) * 1000.0
        if not self._in_step:
            raise RuntimeError("end_step() without start_step()")
        if self._open_phase is not None:
            raise RuntimeError(f"end_step() inside phase {self._open_phase!r}")
        self._in_step = False
        warm = self._steps_started < self.warmup_steps
        self._steps_started += 1
        if not self._cuda:
            # CPU: the host clock is the clock of record; nothing is asynchronous.
            self._store(warm, host_step, self._cur_host, host_step, self._cur_host)
            return
        # Has the GPU begun this step while the host has issued all of it? If not, the GPU had
        # more than a step of work queued: it is not waiting for the host (non-blocking query).
        if not warm:
            if not self._query(self._cur_start):
                self._gpu_behind += 1
            if self._sampled:
                self._sampled_steps += 1
                for i, behind in enumerate(self._cur_behind):
                    if behind:
                        self._phase_behind[i] += 1
        end = self._pool.pop() if self._pool else self._new_event()
        self._record(end, self._stream)
        self._pending.append((warm, self._sampled, end, self._cur_events, self._cur_event_phase,
                              host_step, self._cur_host))
        self._cur_start, self._cur_events, self._cur_event_phase = None, [], []
        self._poll()

    # -- CUDA resolution ---------------------------------------------------------------------------

    def _poll(self):
        """Resolves finished steps without blocking; blocks on the oldest past max_pending."""
        pending = self._pending
        while pending and self._query(pending[0][2]):   # cudaEventQuery: never blocks
            self._resolve(pending.popleft())
        while len(pending) > self.max_pending:
            # Sync: the host is max_pending steps ahead of the GPU; wait for the oldest step only.
            pending[0][2].synchronize()
            self._syncs += 1
            self._resolve(pending.popleft())

    def _resolve(self, item):
        warm, sampled, end, events, event_phase, host_step, host_phases = item
        elapsed = self._elapsed
        step = elapsed(events[0], end)   # every event is complete: no wait here
        # NaN: an unsampled step has no GPU phase times (percentiles() leaves NaN out)
        phases = [0.0 if sampled else math.nan] * len(self.phases)
        for k, idx in enumerate(event_phase):
            # phase k runs from the previous boundary to its own end event
            phases[idx] += elapsed(events[k], events[k + 1])
        self._store(warm, step, phases, host_step, host_phases)
        self._pool.append(end)
        self._pool.extend(events)

    def _store(self, warm, step, phases, host_step, host_phases):
        if warm:
            self._warm_step_ms.append(step)
            self._warm_host_step_ms.append(host_step)
            return
        self._step_ms.append(step)
        self._host_step_ms.append(host_step)
        for i in range(len(phases)):
            self._phase_ms[i].append(phases[i])
            self._host_phase_ms[i].append(host_phases[i])

    def _discard_open_step(self):
        self._discarded += 1
        self._in_step = False
        self._open_phase = None
        if self._cuda:
            # These events may still be queued on the GPU; re-recording a queued event is allowed.
            self._pool.extend(self._cur_events)
            self._cur_start, self._cur_events, self._cur_event_phase = None, [], []

    def flush(self):
        """Resolves every finished step. On CUDA this waits once for the last recorded event
        unless the GPU is already past it (one ``cudaEventSynchronize``: a sync point, so call it
        at log intervals, not every step). A no-op on CPU and when disabled."""
        if not self._cuda or not self._pending:
            return
        last = self._pending[-1][2]
        if not self._query(last):
            # Sync: wait for the GPU to reach the end of the last finished step (counted only
            # when it really waits), then resolve all.
            last.synchronize()
            self._syncs += 1
        while self._pending:
            self._resolve(self._pending.popleft())

    # -- results -------------------------------------------------------------------------------

    @property
    def measured_steps(self):
        """Number of resolved steps after the warm-up."""
        return len(self._step_ms)

    def step_times_ms(self):
        """Every measured (post-warm-up) step time in ms, in order (resolves pending CUDA events)."""
        self.flush()
        return list(self._step_ms)

    def last_step_ms(self):
        """The latest resolved measured step time in ms (None before any); no sync."""
        return self._step_ms[-1] if len(self._step_ms) else None

    def summary(self):
        """Statistics of all measured steps, in milliseconds (flushes first: a sync on CUDA).

        Returns:
            dict with keys
              "device": str, "clock": "cuda-events" | "perf_counter" | "disabled",
              "enabled": bool, "warmup_steps": int, "measured_steps": int,
              "discarded_steps": int (steps started but never ended), "syncs": int,
              "phases": {name: stats} for each phase plus "other" (step minus the phases),
              "host_phases": {name: stats} (perf_counter; equal to "phases" on CPU),
              "step": stats (start_step -> end_step; data fetch included),
              "host_step": stats (perf_counter, start_step -> end_step),
              "warmup": stats of the warm-up steps' step time, "warmup_host": same on the host,
              "data_share": median data / median step (None without a "data" phase),
              "phase_shares": {name: median phase / median step},
              "compute_phases": [names], "gpu_compute_ms": stats of the per-step sum of the
              compute phases (clock of record), "host_compute_ms": the same on the host clock,
              "launch_ratio": median host_compute / median gpu_compute (CUDA only, else None),
              "phase_launch_ratios": {compute phase: host median / GPU median} (CUDA, else None),
              "gpu_behind_share": share of steps whose start event the GPU had not reached when
              the host ended the step (CUDA only, else None),
              "phase_gpu_behind": {compute phase: share of steps where the GPU had not reached
              the phase's start when the host left the phase} (CUDA only, else None),
            where stats = {"n", "median", "p10", "p90", "mean", "std", "min", "max"} (see
            ``percentiles``).
        """
        self.flush()
        clock = ("disabled" if not self.enabled
                 else "cuda-events" if self._cuda else "perf_counter")
        n = len(self._step_ms)
        step = np.frombuffer(self._step_ms, dtype=np.float64) if n else np.zeros(0)
        phase_arrays = [np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0)
                        for a in self._phase_ms]
        host_arrays = [np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0)
                       for a in self._host_phase_ms]
        other = np.maximum(step - np.sum(phase_arrays, axis=0), 0.0) if n else np.zeros(0)
        host_step = np.frombuffer(self._host_step_ms, dtype=np.float64) if n else np.zeros(0)
        host_other = (np.maximum(host_step - np.sum(host_arrays, axis=0), 0.0) if n
                      else np.zeros(0))
        phases = {name: percentiles(a) for name, a in zip(self.phases, phase_arrays)}
        phases["other"] = percentiles(other)
        host_phases = {name: percentiles(a) for name, a in zip(self.phases, host_arrays)}
        host_phases["other"] = percentiles(host_other)
        step_stats = percentiles(step)
        med = step_stats["median"]
        shares = {name: (s["median"] / med if med else None) for name, s in phases.items()}
        ci = [self.phases.index(p) for p in self.compute_phases]
        if n and ci:
            gpu_compute = percentiles(np.sum([phase_arrays[i] for i in ci], axis=0))
            host_compute = percentiles(np.sum([host_arrays[i] for i in ci], axis=0))
        else:
            gpu_compute = host_compute = percentiles([])
        launch_ratio = None
        phase_ratios = phase_behind = None
        if self._cuda and gpu_compute["median"]:
            launch_ratio = host_compute["median"] / gpu_compute["median"]
        if self._cuda and n:
            phase_ratios = {p: (host_phases[p]["median"] / phases[p]["median"]
                                if phases[p]["median"] else None) for p in self.compute_phases}
            phase_behind = {p: (self._phase_behind[self.phases.index(p)] / self._sampled_steps
                                if self._sampled_steps else None) for p in self.compute_phases}
        return {
            "device": str(self.device),
            "clock": clock,
            "enabled": self.enabled,
            "warmup_steps": self.warmup_steps,
            "measured_steps": n,
            "discarded_steps": self._discarded,
            "syncs": self._syncs,
            "phases": phases,
            "host_phases": host_phases,
            "step": step_stats,
            "host_step": percentiles(host_step),
            "warmup": percentiles(self._warm_step_ms),
            "warmup_host": percentiles(self._warm_host_step_ms),
            "data_share": shares.get("data") if "data" in self.phases else None,
            "phase_shares": shares,
            "compute_phases": list(self.compute_phases),
            "gpu_compute_ms": gpu_compute,
            "host_compute_ms": host_compute,
            "launch_ratio": launch_ratio,
            "phase_launch_ratios": phase_ratios,
            "gpu_behind_share": (self._gpu_behind / n if self._cuda and n else None),
            "phase_gpu_behind": phase_behind,
        }

    def recent(self, last=50):
        """Medians over the latest resolved measured steps, for the one-line log.

        Flushes first (one sync on CUDA: call it where the loop synchronizes anyway, at the log
        interval). Before the warm-up is over, the step time comes from the warm-up steps and the
        phase times are NaN.

        Args:
            last: how many of the latest steps to take.
        Returns:
            {"n": steps used, "warmup": bool, "step_ms": float, "data_ms": float (NaN without a
             data phase), "phases": {name: float}}; NaN where nothing was measured yet.
        """
        self.flush()
        last = max(1, int(last))
        nan = float("nan")
        if len(self._step_ms):
            step = np.frombuffer(self._step_ms, dtype=np.float64)[-last:]
            phases = {name: _median_or_nan(np.frombuffer(a, dtype=np.float64)[-last:])
                      for name, a in zip(self.phases, self._phase_ms)}
            warm = False
        elif len(self._warm_step_ms):
            step = np.frombuffer(self._warm_step_ms, dtype=np.float64)[-last:]
            phases = {name: nan for name in self.phases}
            warm = True
        else:
            return {"n": 0, "warmup": False, "step_ms": nan, "data_ms": nan,
                    "phases": {name: nan for name in self.phases}}
        return {"n": int(step.size), "warmup": warm, "step_ms": float(np.median(step)),
                "data_ms": phases.get("data", nan), "phases": phases}

def _median_or_nan(a):
    a = a[~np.isnan(a)]
    return float(np.median(a)) if a.size else float("nan")


def measure_overhead(device="cpu", steps=2000, phases=DEFAULT_PHASES, repeats=3):
    """Host cost of a StepTimer per step, with empty phases.

    Args:
        device: "cpu", or a CUDA device to include the event records (the loop synchronizes once
            per repeat, outside the timed region's per-step work).
        steps: steps per repeat.
        phases: phase names timed in every step.
        repeats: the best of this many repeats is kept (the least disturbed by other processes).
    Returns:
        {"per_step_us", "per_phase_us", "disabled_per_step_us"}: microseconds of timer cost per
        step with every phase entered once, per phase, and for a disabled timer, after
        subtracting the same loop with a null context per phase.
    """
    cuda = torch.device(device).type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)   # sync: the recorded events are done before t1

    def run(enabled):
        best = float("inf")
        for _ in range(repeats):
            timer = StepTimer(device, warmup_steps=0, phases=phases, enabled=enabled)
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                timer.start_step()
                for p in phases:
                    with timer.phase(p):
                        pass
                timer.end_step()
            sync()
            best = min(best, (time.perf_counter() - t0) / steps)
        return best

    def empty():
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(steps):
                for p in phases:
                    with contextlib.nullcontext():
                        pass
            best = min(best, (time.perf_counter() - t0) / steps)
        return best

    base = empty()   # the loop and a with-statement per phase cost this much without a timer
    on = max(run(True) - base, 0.0)
    off = max(run(False) - base, 0.0)
    return {"per_step_us": on * 1e6, "per_phase_us": on * 1e6 / len(phases),
            "disabled_per_step_us": off * 1e6}


# ----------------------------------------------------------------------------------------------
# diagnose
# ----------------------------------------------------------------------------------------------

def _pct(x):
    return f"{100.0 * x:.1f}%" if x < 0.1 else f"{100.0 * x:.0f}%"


def diagnose(summary):
    """One line saying what bounds the step, with the numbers behind the verdict.

    Rules, applied in order to a StepTimer summary (medians over the measured steps):
      1. "input-bound" when the data wait is more than 5% of the step (``data_share``). On CUDA
         the data time is the GPU's wait from the step start to "batch ready", so a batch read
         while the GPU was still busy with queued work costs nothing here.
      2. CPU runs: "CPU-bound" (there is no GPU to be bound on).
      3. CUDA, when the caller added ``gpu_busy_share`` (kernel time / step wall time, from
         ``TrainingProfiler.stats()``): "launch/host-bound" below 80%, else "GPU-bound".
      4. CUDA: "GPU-bound" when in at least half the steps the GPU had not even started the step
         when the host had finished issuing it (``gpu_behind_share`` >= 0.5: a full step of work
         was queued ahead of the GPU, so it never waited for the host).
      5. CUDA, per compute phase holding at least 10% of the GPU compute time: the phase is
         "host-paced" when the host took at least 80% as long to issue it as the GPU took to run
         it (host/GPU >= 0.8) and the GPU had reached the phase's start when the host left it
         (``phase_gpu_behind`` < 0.5): the GPU then followed the host launch by launch. The
         verdict is "launch/host-bound" when every such phase is host-paced, else "GPU-bound",
         naming the phase where the GPU ran well behind the host. A host sync inside a phase
         (``loss.item()``) makes that phase look host-paced (the host waits there for the GPU),
         so one sync-free GPU-heavy phase is enough to see a GPU-bound step; without per-phase
         numbers the rule falls back to the compute total (``launch_ratio`` >= 0.8).

    Args:
        summary: dict from ``StepTimer.summary()`` (optionally with "gpu_busy_share" added).
    Returns:
        A one-line string, e.g. "input-bound: data wait 41.2 ms = 23% of the 180 ms step (> 5%)".
    """
    step = (summary.get("step") or {}).get("median")
    if not step:
        return "no verdict: no measured steps (all steps were warm-up, or the timer was disabled)"
    phases = summary.get("phases") or {}
    host_phases = summary.get("host_phases") or {}
    data = (phases.get("data") or {}).get("median")
    share = summary.get("data_share")
    if share is None and data is not None:
        share = data / step
    data_txt = (f"data wait {format_ms(data)} = {_pct(share)} of the {format_ms(step)} step"
                if share is not None else f"no data phase timed; step {format_ms(step)}")
    if share is not None and share > INPUT_BOUND_SHARE:
        return f"input-bound: {data_txt} (> {_pct(INPUT_BOUND_SHARE)})"
    device = str(summary.get("device", "cpu"))
    if not device.startswith("cuda"):
        return f"CPU-bound: {data_txt}; no GPU in this run"
    busy = summary.get("gpu_busy_share")
    if busy is not None:
        verdict = "launch/host-bound" if busy < GPU_BUSY_SHARE else "GPU-bound"
        return (f"{verdict}: GPU kernels busy {_pct(busy)} of the step wall time (profiler; "
                f"threshold {_pct(GPU_BUSY_SHARE)}); {data_txt}")
    behind = summary.get("gpu_behind_share")
    if behind is not None and behind >= GPU_BEHIND_SHARE:
        return (f"GPU-bound: in {_pct(behind)} of steps the GPU had not started a step when the "
                f"host finished issuing it (a step of work always queued); {data_txt}")
    compute = list(summary.get("compute_phases") or [])
    names = "+".join(compute) or "compute"
    host_c = (summary.get("host_compute_ms") or {}).get("median")
    gpu_c = (summary.get("gpu_compute_ms") or {}).get("median")
    # Per-phase test (rule 5) when the summary has both clocks per phase.
    per_phase = []
    for p in compute:
        g = (phases.get(p) or {}).get("median")
        h = (host_phases.get(p) or {}).get("median")
        if g is not None and h is not None:
            per_phase.append((p, h, g))
    total_g = sum(g for _, _, g in per_phase)
    if per_phase and total_g > 0:
        phase_behind = summary.get("phase_gpu_behind") or {}
        big = [(p, h, g) for p, h, g in per_phase if g >= 0.1 * total_g]
        for p, h, g in sorted(big, key=lambda x: x[1] / x[2]):
            pb = phase_behind.get(p) or 0.0
            if h < LAUNCH_BOUND_RATIO * g or pb >= GPU_BEHIND_SHARE:
                why = (f"the GPU ran {p} in {format_ms(g)} after {format_ms(h)} of host issue "
                       f"(host/GPU {h / g:.2f} < {LAUNCH_BOUND_RATIO})" if h < LAUNCH_BOUND_RATIO * g
                       else f"in {_pct(pb)} of steps the GPU had not reached {p} when the host "
                            f"left it")
                return f"GPU-bound: {why}; {data_txt}"
        ratios = ", ".join(f"{p} {h / g:.2f}" for p, h, g in big)
        return (f"launch/host-bound: the host issued {names} in {format_ms(host_c)}, the GPU ran "
                f"it in {format_ms(gpu_c)} (host/GPU per phase: {ratios}; >= "
                f"{LAUNCH_BOUND_RATIO}, so the GPU waits on the host); {data_txt}")
    ratio = summary.get("launch_ratio")
    if ratio is None or host_c is None or gpu_c is None:
        return f"GPU-bound: {data_txt}; no host/GPU compute split measured"
    issued = (f"the host issued {names} in {format_ms(host_c)}, the GPU ran it in "
              f"{format_ms(gpu_c)} (host/GPU {ratio:.2f}")
    if ratio >= LAUNCH_BOUND_RATIO:
        return (f"launch/host-bound: {issued} >= {LAUNCH_BOUND_RATIO}, the GPU waits on the "
                f"host); {data_txt}")
    return f"GPU-bound: {issued} < {LAUNCH_BOUND_RATIO}); {data_txt}"


# ----------------------------------------------------------------------------------------------
# Run records
# ----------------------------------------------------------------------------------------------

def to_jsonable(obj):
    """Converts an object tree to plain JSON types.

    numpy and torch scalars become Python numbers, arrays and tensors lists, torch dtypes/devices
    and paths strings, dataclasses dicts, tuples/sets lists; non-finite floats become the strings
    "NaN", "Infinity", "-Infinity" (strict JSON has no NaN, and a NaN loss must stay visible).

    Args:
        obj: any nesting of dicts, sequences and scalars.
    Returns:
        The converted tree; raises TypeError on an object with no JSON form.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if math.isfinite(obj):
            return float(obj)
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, torch.Tensor):
        return to_jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, (torch.dtype, torch.device)):
        return str(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset, deque, array)):
        return [to_jsonable(v) for v in obj]
    raise TypeError(f"cannot write {type(obj).__name__} to JSON: {obj!r:.80}")


def fsync_dir(folder):
    """Makes renames in `folder` durable (best effort: some file systems refuse to open a directory)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(path, write):
    """Writes through ``write(file_object)`` to a temp file in the target folder, fsyncs, then
    renames over ``path``; on any failure the temp file is removed and ``path`` is untouched."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())   # the bytes are on disk before the name points at them
        os.replace(tmp, path)      # atomic: readers see the old file or the new one, never half
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def write_json_atomic(path, obj):
    """Writes ``obj`` as JSON to ``path`` atomically (temp file, fsync, os.replace).

    Args:
        path: target file; missing parent folders are created.
        obj: anything ``to_jsonable`` accepts.
    Returns:
        The path written (str). Raises TypeError before touching the disk if ``obj`` has no JSON
        form; on any failure the previous file at ``path`` is intact and no temp file remains.
    """
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n"
    _write_atomic(path, lambda f: f.write(text.encode("utf-8")))
    return os.fspath(path)


def _run(cmd, cwd=None, timeout=10):
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _package_version(dists, module):
    """Version of an optional package without importing it when its metadata is installed."""
    from importlib import metadata
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:   # lazily, and only as a fallback: importing kvikio loads its CUDA libraries
        mod = __import__(module)
        return getattr(mod, "__version__", "unknown")
    except Exception:
        return None


def environment_record(device="cpu"):
    """What is needed to reproduce a run: code version, host, libraries, GPU.

    Args:
        device: the run's device (str or torch.device); GPU fields are filled when CUDA is
            available.
    Returns:
        dict with keys "git_commit" (None outside a repository or before the first commit),
        "git_dirty" (tracked files modified; None when unknown), "git_untracked" (count),
        "hostname", "platform", "python", "numpy", "torch", "cuda" (torch.version.cuda), "cudnn",
        "kvikio" (None if not installed), "device", "gpu_name", "gpu_count", "gpu_memory_gib",
        "gpu_capability", "driver", "cpu_count", "time_utc".
    """
    repo = os.path.dirname(os.path.abspath(__file__))
    # A copy of the tree on a GPU machine may have no .git, or a stale one whose HEAD is not the commit
    # that was copied: whoever makes the copy names the commit in the environment, and that wins.
    named = os.environ.get("NANOTABPFN_GIT_COMMIT")
    commit = named or _run(["git", "rev-parse", "HEAD"], cwd=repo)
    status = None if named else _run(["git", "status", "--porcelain"], cwd=repo)
    dirty = untracked = None
    if status is not None:
        lines = [ln for ln in status.splitlines() if ln.strip()]
        dirty = any(not ln.startswith("??") for ln in lines)
        untracked = sum(ln.startswith("??") for ln in lines)
    device = torch.device(device)
    cuda = torch.cuda.is_available()
    rec = {
        "git_commit": commit,
        "git_dirty": dirty,
        "git_untracked": untracked,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "kvikio": _package_version(("kvikio-cu13", "kvikio-cu12", "kvikio"), "kvikio"),
        "device": str(device),
        "gpu_name": None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "gpu_memory_gib": None,
        "gpu_capability": None,
        "driver": None,
        "cpu_count": os.cpu_count(),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if cuda:
        index = device.index if device.type == "cuda" and device.index is not None else 0
        props = torch.cuda.get_device_properties(index)
        rec["gpu_name"] = props.name
        rec["gpu_memory_gib"] = round(props.total_memory / 2**30, 2)
        rec["gpu_capability"] = f"{props.major}.{props.minor}"
        drv = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        rec["driver"] = drv.splitlines()[0].strip() if drv else None
    return rec


def make_run_record(config, flags, timer_summary=None, extra=None, *, environment=None):
    """One JSON-ready record per run (results tables are generated from these, never typed).

    Args:
        config: the resolved configuration (dict or dataclass).
        flags: the command-line flags as given (dict).
        timer_summary: ``StepTimer.summary()`` or None.
        extra: anything else (final loss, eval scores, loader path, SDPA backend, peak memory,
            profiler stats...), merged under "extra".
        environment: ``environment_record()`` output; computed for the summary's device if None.
    Returns:
        {"schema_version", "created_utc", "argv", "config", "flags", "environment", "timing",
         "diagnosis", "extra"}, already converted by ``to_jsonable``.
    """
    if environment is None:
        device = (timer_summary or {}).get("device", "cpu")
        environment = environment_record(device)
    return to_jsonable({
        "schema_version": RUN_RECORD_SCHEMA_VERSION,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": list(sys.argv),
        "config": config,
        "flags": flags,
        "environment": environment,
        "timing": timer_summary,
        "diagnosis": diagnose(timer_summary) if timer_summary else None,
        "extra": extra or {},
    })


# ----------------------------------------------------------------------------------------------
# TrainingProfiler
# ----------------------------------------------------------------------------------------------

def label(name, enabled=True):
    """``torch.profiler.record_function(name)`` when enabled, else a no-op context.

    Args:
        name: the label shown in the profiler tables and the trace ("## data ##").
        enabled: False when profiling is off, so the hot loop pays nothing.
    Returns:
        A context manager.
    """
    if not enabled:
        return contextlib.nullcontext()
    return torch.profiler.record_function(name)


# Host-side rows of the transfer table. The copies are where data moves; the synchronize calls
# (and .item()'s _local_scalar_dense) are where the host waits for queued GPU work. A synchronous
# pageable copy also waits for the queue, so its cudaMemcpyAsync time is mostly that wait.
TRANSFER_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "cudaMemcpyAsync",
                "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                "aten::item", "aten::_local_scalar_dense")


def _attr(evt, *names):
    """First attribute present (torch 2.x renamed cuda_* to device_*)."""
    for n in names:
        v = getattr(evt, n, None)
        if v is not None:
            return v
    return 0


def _self_device_us(evt):
    return float(_attr(evt, "self_device_time_total", "self_cuda_time_total"))


def _on_device(evt):
    """True for GPU-timeline events (kernels, memcpy, memset, and GPU copies of labels)."""
    dt = getattr(evt, "device_type", None)
    return dt is not None and getattr(dt, "name", str(dt)) != "CPU"


def _is_device_activity(evt):
    """GPU work itself: device events that are not user annotations (record_function labels and
    ProfilerStep#N also appear on the GPU timeline; counting them would count kernels twice)."""
    return _on_device(evt) and not getattr(evt, "is_user_annotation", False)


def _short(name, width=80):
    return name if len(name) <= width else name[: width - 1] + "…"


class TrainingProfiler:
    """torch.profiler around a training loop: a schedule, a trace, and the blog's four tables.

    Usage::

        with TrainingProfiler(device, out_dir="runs/prof", wait=1, warmup=1, active=3) as prof:
            for step in range(steps):
                with prof.label("## data ##"):
                    batch = next(loader)
                ...
                prof.step()
        prof.print_tables()            # or prof.tables_markdown(); prof.stats() for the record

    Steps 0..wait-1 are not recorded, the next ``warmup`` are recorded and dropped (profiler
    start-up cost), the next ``active`` are kept (``repeat=1``). When the window closes, or at
    exit if training stops inside it, the trace is written to ``out_dir/trace_name`` (open it in
    https://ui.perfetto.dev or chrome://tracing) and the tables are computed from
    ``prof.key_averages()``. The profiler slows the host (it records every op), so its times are
    for attribution; the step times to quote come from StepTimer runs without the profiler.

    Args:
        device: the run's device; CUDA activity is recorded when it is a CUDA device.
        out_dir: folder for the trace (created when profiling starts).
        wait, warmup, active: the schedule, in steps.
        enabled: False makes it a no-op (``label`` returns null contexts).
        row_limit: rows in the CPU and CUDA tables.
        record_shapes, profile_memory, with_stack: passed to torch.profiler.profile.
        trace_name: trace file name inside out_dir.
    """

    def __init__(self, device="cpu", out_dir="runs/profile", *, wait=1, warmup=1, active=3,
                 enabled=True, row_limit=15, record_shapes=True, profile_memory=True,
                 with_stack=False, trace_name="trace.json"):
        if wait < 0 or warmup < 0 or active < 1:
            raise ValueError(f"need wait >= 0, warmup >= 0, active >= 1; got {wait}, {warmup}, "
                             f"{active}")
        self.out_dir = os.fspath(out_dir)
        self.device = torch.device(device)
        self.wait, self.warmup, self.active = int(wait), int(warmup), int(active)
        self.enabled = bool(enabled)
        self.row_limit = int(row_limit)
        self.record_shapes, self.profile_memory = record_shapes, profile_memory
        self.with_stack = with_stack
        self.trace_path = os.path.join(self.out_dir, trace_name)
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._prof = None
        self._steps = 0
        self._averages = None      # list of FunctionEventAvg from the active window
        self._trace_written = False
        self._memory = None

    # -- context -------------------------------------------------------------------------------

    def __enter__(self):
        if not self.enabled:
            return self
        from torch.profiler import ProfilerActivity, profile, schedule
        os.makedirs(self.out_dir, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(
            activities=activities,
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
        )
        self._prof.__enter__()
        return self

    def step(self):
        """Marks the end of a training step (advances the schedule)."""
        if self._prof is not None:
            self._steps += 1
            self._prof.step()

    def __exit__(self, exc_type, exc, tb):
        if self._prof is not None:
            self._prof.__exit__(exc_type, exc, tb)   # closes an open active window: trace ready
            if self.cuda:
                self._memory = self._cuda_memory()
        return False

    def label(self, name):
        """``record_function(name)`` while this profiler is enabled, else a no-op context."""
        return label(name, self.enabled)

    def _on_trace_ready(self, prof):
        # Called by torch when the active window closes (or at exit inside it).
        self._averages = list(prof.key_averages())
        folder = os.path.dirname(os.path.abspath(self.trace_path))
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(self.trace_path) + ".",
                                   suffix=".tmp")
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            os.replace(tmp, self.trace_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._trace_written = True

    def _cuda_memory(self):
        s = torch.cuda.memory_stats(self.device)
        return {
            "peak_allocated_bytes": s.get("allocated_bytes.all.peak", 0),
            "peak_reserved_bytes": s.get("reserved_bytes.all.peak", 0),
            "current_allocated_bytes": s.get("allocated_bytes.all.current", 0),
            "total_allocated_bytes": s.get("allocated_bytes.all.allocated", 0),
            "cudamalloc_calls": s.get("segment.all.allocated", 0),
            "cudamalloc_retries": s.get("num_alloc_retries", 0),
            "ooms": s.get("num_ooms", 0),
        }

    # -- numbers -------------------------------------------------------------------------------

    def _events(self):
        return self._averages or []

    def profiled_steps(self):
        """Steps inside the recorded window (count of ProfilerStep#N events)."""
        n = 0
        for e in self._events():
            if not _on_device(e) and e.key.startswith("ProfilerStep"):
                n += int(e.count)
        return n

    def _cpu_rows(self):
        rows = [e for e in self._events() if not _on_device(e)]
        total = sum(float(e.self_cpu_time_total) for e in rows)
        return rows, total

    def _device_rows(self):
        rows = [e for e in self._events() if _is_device_activity(e)]
        total = sum(_self_device_us(e) for e in rows)
        return rows, total

    def stats(self):
        """Numbers for the run record (all times in ms, per profiled step where noted).

        Returns:
            {"profiled_steps", "trace_path", "cpu_self_ms_per_step", "step_wall_ms" (mean host
             span of a profiled step), "gpu_kernel_ms_per_step" (sum of device activity; None on
             CPU), "gpu_busy_share" (kernel time / step wall time, capped at 1; None on CPU),
             "top_cpu": [{"name", "self_cpu_ms", "share", "calls"}], "top_cuda": [...],
             "transfers": [{"name", "cpu_total_ms", "cpu_ms_per_step", "share", "calls",
             "calls_per_step", "device_ms_per_step"}], "cuda_memory": dict or None}.
        """
        steps = self.profiled_steps()
        per = max(steps, 1)
        cpu, cpu_total = self._cpu_rows()
        dev, dev_total = self._device_rows()
        wall = sum(float(e.cpu_time_total) for e in cpu if e.key.startswith("ProfilerStep"))
        busy = None
        if self.cuda and wall > 0:
            busy = min(dev_total / wall, 1.0)
        top_cpu = [{"name": e.key, "self_cpu_ms": e.self_cpu_time_total / 1000.0,
                    "share": e.self_cpu_time_total / cpu_total if cpu_total else None,
                    "calls": int(e.count)}
                   for e in sorted(cpu, key=lambda e: -e.self_cpu_time_total)[: self.row_limit]]
        top_cuda = [{"name": e.key, "self_cuda_ms": _self_device_us(e) / 1000.0,
                     "share": _self_device_us(e) / dev_total if dev_total else None,
                     "calls": int(e.count)}
                    for e in sorted(dev, key=lambda e: -_self_device_us(e))[: self.row_limit]]
        return {
            "profiled_steps": steps,
            "trace_path": self.trace_path if self._trace_written else None,
            "cpu_self_ms_per_step": cpu_total / 1000.0 / per,
            "step_wall_ms": wall / 1000.0 / per if steps else None,
            "gpu_kernel_ms_per_step": dev_total / 1000.0 / per if self.cuda else None,
            "gpu_busy_share": busy,
            "top_cpu": top_cpu,
            "top_cuda": top_cuda if self.cuda else [],
            "transfers": self._transfer_rows(),
            "cuda_memory": self._memory,
        }

    def _transfer_rows(self):
        steps = max(self.profiled_steps(), 1)
        cpu, cpu_total = self._cpu_rows()
        by_key = {e.key: e for e in cpu}
        rows = []
        for name in TRANSFER_OPS:
            e = by_key.get(name)
            total = float(e.cpu_time_total) / 1000.0 if e is not None else 0.0
            calls = int(e.count) if e is not None else 0
            rows.append({"name": name, "cpu_total_ms": total, "cpu_ms_per_step": total / steps,
                         "share": (total * 1000.0 / cpu_total) if cpu_total else None,
                         "calls": calls, "calls_per_step": calls / steps,
                         "device_ms_per_step": None})
        if self.cuda:
            # The GPU side of the copies: how long the copy engine really moved bytes.
            dev, _ = self._device_rows()
            for e in sorted(dev, key=lambda e: -_self_device_us(e)):
                if e.key.startswith(("Memcpy", "Memset")):
                    rows.append({"name": e.key + " (GPU)", "cpu_total_ms": None,
                                 "cpu_ms_per_step": None, "share": None, "calls": int(e.count),
                                 "calls_per_step": int(e.count) / steps,
                                 "device_ms_per_step": _self_device_us(e) / 1000.0 / steps})
        return rows

    # -- tables --------------------------------------------------------------------------------

    def tables(self):
        """The four tables as markdown strings.

        Returns:
            {"cpu", "cuda", "transfers", "memory"}; each starts with a '### ' title line. Without
            a recorded window each says so; on a CPU run "cuda" and "memory" are one line saying
            that CUDA tables need a GPU.
        """
        steps = self.profiled_steps()
        if not self.enabled or self._averages is None:
            need = self.wait + self.warmup + self.active
            msg = (f"profiler recorded nothing: {self._steps} steps ran, the schedule needs more "
                   f"than wait+warmup={self.wait + self.warmup} (window ends at step {need})\n"
                   if self.enabled else "profiler disabled\n")
            return {k: f"### {t}\n\n{msg}" for k, t in
                    (("cpu", "Top CPU operations"), ("cuda", "Top CUDA operations"),
                     ("transfers", "Memory transfers and host waits"),
                     ("memory", "CUDA memory summary"))}
        s = self.stats()
        cpu, cpu_total = self._cpu_rows()
        out = {}
        out["cpu"] = (
            f"### Top CPU operations by self CPU time ({steps} profiled steps)\n\n"
            + markdown_table(
                ["Name", "Self CPU total", "Self CPU %", "CPU total", "Calls"],
                [[_cpu_name(e.key), format_ms(e.self_cpu_time_total / 1000.0),
                  _pct_cell(e.self_cpu_time_total, cpu_total),
                  format_ms(e.cpu_time_total / 1000.0), int(e.count)]
                 for e in sorted(cpu, key=lambda e: -e.self_cpu_time_total)[: self.row_limit]])
            + f"\nSelf CPU time total: {format_ms(cpu_total / 1000.0)} "
              f"({format_ms(s['cpu_self_ms_per_step'])} per step)\n")
        gpu_line = ("CUDA tables need a GPU: this run profiled the CPU only "
                    f"(device {self.device}, "
                    f"torch.cuda.is_available()={torch.cuda.is_available()}).\n")
        if self.cuda:
            dev, dev_total = self._device_rows()
            out["cuda"] = (
                f"### Top CUDA operations by self CUDA time ({steps} profiled steps)\n\n"
                "GPU-side activity (kernels, memcpy, memset); the aten op that launched each one "
                "is in the CPU table.\n\n"
                + markdown_table(
                    ["Name", "Self CUDA total", "Self CUDA %", "Calls"],
                    [[_short(e.key), format_ms(_self_device_us(e) / 1000.0),
                      _pct_cell(_self_device_us(e), dev_total), int(e.count)]
                     for e in sorted(dev, key=lambda e: -_self_device_us(e))[: self.row_limit]])
                + f"\nSelf CUDA time total: {format_ms(dev_total / 1000.0)} "
                  f"({format_ms(s['gpu_kernel_ms_per_step'])} per step; GPU busy "
                  f"{_pct(s['gpu_busy_share'] or 0.0)} of the {format_ms(s['step_wall_ms'])} "
                  f"profiled step)\n")
        else:
            out["cuda"] = "### Top CUDA operations\n\n" + gpu_line
        out["transfers"] = (
            f"### Memory transfers and host waits ({steps} profiled steps)\n\n"
            "CPU total includes children (aten::to contains aten::_to_copy contains aten::copy_ "
            "contains cudaMemcpyAsync), so rows overlap; % is of the total self CPU time. A "
            "synchronous copy or a synchronize is where the host waits for queued GPU work; "
            "compare with the GPU time of the copies (rows marked GPU).\n\n"
            + markdown_table(
                ["Name", "CPU total", "CPU per step", "% of CPU", "Calls", "Calls per step",
                 "GPU per step"],
                [[r["name"], _ms_or_dash(r["cpu_total_ms"], r["calls"]),
                  _ms_or_dash(r["cpu_ms_per_step"], r["calls"]),
                  f"{100 * r['share']:.1f}%" if r["share"] is not None and r["calls"] else None,
                  r["calls"], f"{r['calls_per_step']:.1f}",
                  _ms_or_dash(r["device_ms_per_step"], r["calls"])]
                 for r in s["transfers"]])
            + "\n'—': not called in the profiled steps (or no GPU side).\n")
        if self.cuda and self._memory is not None:
            m = self._memory
            gib = 2**30
            out["memory"] = (
                f"### CUDA memory summary ({self.device}, since process start or the last "
                "reset_peak_memory_stats)\n\n"
                + markdown_table(["Metric", "Value"], [
                    ["Peak allocated", f"{m['peak_allocated_bytes'] / gib:.3f} GiB"],
                    ["Peak reserved", f"{m['peak_reserved_bytes'] / gib:.3f} GiB"],
                    ["Currently allocated", f"{m['current_allocated_bytes'] / gib:.3f} GiB"],
                    ["Total allocated (cumulative)", f"{m['total_allocated_bytes'] / gib:.2f} GiB"],
                    ["cudaMalloc calls (segments)", m["cudamalloc_calls"]],
                    ["cudaMalloc retries", m["cudamalloc_retries"]],
                    ["OOMs", m["ooms"]],
                ]))
        else:
            out["memory"] = "### CUDA memory summary\n\n" + gpu_line
        return out

    def tables_markdown(self):
        """The four tables as one markdown string."""
        t = self.tables()
        return "\n".join(t[k] for k in ("cpu", "cuda", "transfers", "memory"))

    def print_tables(self, file=None):
        """Prints ``tables_markdown()`` (to stdout by default)."""
        print(self.tables_markdown(), file=file or sys.stdout)


def _ms_or_dash(ms, calls):
    return format_ms(ms) if ms is not None and calls else None


def _cpu_name(key):
    if key.startswith("ProfilerStep"):
        # Self time of the step wrapper = host time inside the step but outside every recorded op.
        return "ProfilerStep* (outside any op: Python, waits)"
    return _short(key)


def _pct_cell(part, total):
    return f"{100.0 * part / total:.1f}%" if total else None


# ----------------------------------------------------------------------------------------------
# Plots (matplotlib imported lazily, Agg backend, PNG written atomically)
# ----------------------------------------------------------------------------------------------

PHASE_ORDER = ("data", "forward", "backward", "optimizer", "other")


def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=True)   # headless: no display on CI or the GPU host
    import matplotlib.pyplot as plt
    return plt


def _save_png(fig, path):
    plt = _pyplot()
    try:
        _write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=120, bbox_inches="tight"))
    finally:
        plt.close(fig)
    return os.fspath(path)


def _step_median(row):
    s = row.get("step_ms")
    return s.get("median") if isinstance(s, dict) else s


def plot_phase_bars(rows, path, title="Step time by phase"):
    """Stacked bars of the median time of each phase, one bar per configuration.

    Args:
        rows: dicts {"config": str, "phases": {phase: median_ms}, "step_ms": {"median", "p10",
            "p90"} (optional)}. Phases stack in the order data, forward, backward, optimizer,
            other, then any others. When "step_ms" is given its median is drawn as a black tick:
            the median of step sums is not the sum of phase medians.
        path: PNG file to write.
        title: plot title.
    Returns:
        The path written.
    """
    if not rows:
        raise ValueError("plot_phase_bars: no rows")
    plt = _pyplot()
    names = [p for p in PHASE_ORDER if any(p in r.get("phases", {}) for r in rows)]
    names += sorted({p for r in rows for p in r.get("phases", {})} - set(names))
    colors = {"data": "tab:red", "forward": "tab:blue", "backward": "tab:orange",
              "optimizer": "tab:green", "other": "tab:gray"}
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2), 4.5))
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for name in names:
        vals = np.array([float(r.get("phases", {}).get(name) or 0.0) for r in rows])
        ax.bar(x, vals, 0.6, bottom=bottom, label=name, color=colors.get(name))
        bottom += vals
    steps = [_step_median(r) for r in rows]
    if any(s is not None for s in steps):
        xs = [xi for xi, s in zip(x, steps) if s is not None]
        ax.scatter(xs, [s for s in steps if s is not None], marker="_", s=600, color="black",
                   zorder=3, label="step median")
    ax.set_xticks(x)
    ax.set_xticklabels([str(r.get("config", i)) for i, r in enumerate(rows)], rotation=30,
                       ha="right")
    ax.set_ylabel("ms per step (median)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save_png(fig, path)


def plot_speedup(rows, path, title="Speedup vs baseline", baseline=None):
    """Bars of speedup against a baseline, with p10–p90 error bars.

    Args:
        rows: dicts {"config": str, "step_ms": {"median", "p10", "p90"}} (speedup computed as
            baseline median / row median; the bar spans baseline median / row p90 to baseline
            median / row p10, i.e. the row's spread only), or {"config", "speedup": float,
            "speedup_p10": float, "speedup_p90": float} (given directly; the p10/p90 optional).
        path: PNG file to write.
        title: plot title.
        baseline: config name of the baseline; default the first row.
    Returns:
        The path written.
    """
    if not rows:
        raise ValueError("plot_speedup: no rows")
    plt = _pyplot()
    base = rows[0] if baseline is None else next(
        (r for r in rows if r.get("config") == baseline), None)
    if base is None:
        raise ValueError(f"plot_speedup: baseline {baseline!r} not among the rows")
    base_med = _step_median(base)
    sp, lo, hi = [], [], []
    for r in rows:
        if r.get("speedup") is not None:
            s = float(r["speedup"])
            lo_v = float(r.get("speedup_p10", s))
            hi_v = float(r.get("speedup_p90", s))
        else:
            st = r.get("step_ms") or {}
            if not base_med or not st.get("median"):
                raise ValueError(f"plot_speedup: row {r.get('config')!r} has neither 'speedup' "
                                 "nor step_ms medians (for it and the baseline)")
            s = base_med / st["median"]
            lo_v = base_med / st.get("p90", st["median"])
            hi_v = base_med / st.get("p10", st["median"])
        sp.append(s)
        lo.append(max(s - min(lo_v, hi_v), 0.0))
        hi.append(max(max(lo_v, hi_v) - s, 0.0))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2), 4.5))
    x = np.arange(len(rows))
    ax.bar(x, sp, 0.6, yerr=[lo, hi], capsize=4, color="tab:blue")
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    for xi, s in zip(x, sp):
        ax.annotate(f"{s:.2f}x", (xi, s), textcoords="offset points", xytext=(0, 4),
                    ha="center", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels([str(r.get("config", i)) for i, r in enumerate(rows)], rotation=30,
                       ha="right")
    ax.set_ylabel(f"speedup vs {base.get('config', 'baseline')} (p10–p90)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    return _save_png(fig, path)


def _smooth(values, frac=0.02):
    """Centred moving average over ~frac of the curve (at least 1 point), edges shrink."""
    v = np.asarray(values, dtype=np.float64)
    w = max(1, int(round(len(v) * frac)))
    if w <= 1 or len(v) < 3:
        return v
    k = np.ones(w)
    num = np.convolve(v, k, mode="same")
    den = np.convolve(np.ones_like(v), k, mode="same")
    return num / den


def plot_loss_curves(curves, path, title="Training loss", band="minmax", smooth=0.02):
    """Several runs' loss curves in one plot, each with its run-to-run band.

    Args:
        curves: {name: (steps, losses)} or {name: [(steps, losses), ...]} for repeats. Repeats
            are interpolated onto the steps of the first repeat.
        path: PNG file to write.
        title: plot title.
        band: "minmax" (min to max across repeats) or "std" (mean ± one std).
        smooth: centred moving-average window as a fraction of the curve length (0 for none);
            applied to every repeat before the band is taken.
    Returns:
        The path written.
    """
    if not curves:
        raise ValueError("plot_loss_curves: no curves")
    if band not in ("minmax", "std"):
        raise ValueError(f"band must be 'minmax' or 'std', got {band!r}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (name, runs) in enumerate(curves.items()):
        if isinstance(runs, tuple) and len(runs) == 2 and np.ndim(runs[0]) == 1:
            runs = [runs]
        runs = list(runs)
        if not runs:
            continue
        steps0 = np.asarray(runs[0][0], dtype=np.float64)
        stack = []
        for steps, losses in runs:
            steps, losses = np.asarray(steps, np.float64), np.asarray(losses, np.float64)
            if len(steps) != len(losses):
                raise ValueError(f"curve {name!r}: {len(steps)} steps for {len(losses)} losses")
            stack.append(np.interp(steps0, steps, _smooth(losses, smooth) if smooth else losses))
        stack = np.vstack(stack)
        color = f"C{i % 10}"
        mean = stack.mean(axis=0)
        label_txt = f"{name} ({len(runs)} run{'s' if len(runs) > 1 else ''})"
        ax.plot(steps0, mean, color=color, lw=1.5, label=label_txt)
        if len(runs) > 1:
            if band == "minmax":
                lo, hi = stack.min(axis=0), stack.max(axis=0)
            else:
                sd = stack.std(axis=0, ddof=1)
                lo, hi = mean - sd, mean + sd
            ax.fill_between(steps0, lo, hi, color=color, alpha=0.2, lw=0)
    ax.set_xlabel("step")
    ax.set_ylabel("loss" + (" (smoothed)" if smooth else ""))
    ax.set_title(title + (f"; band: {'min–max' if band == 'minmax' else '±1 std'} across repeats"))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save_png(fig, path)


def plot_scaling(rows, path, title="Multi-GPU scaling"):
    """Throughput and step time against the number of GPUs.

    Args:
        rows: dicts {"gpus": int, "datasets_per_s": float, "step_ms": float or {"median", "p10",
            "p90"}, "config": str (optional; one line per config)}. The left panel also draws
            ideal linear scaling from each config's smallest GPU count.
        path: PNG file to write.
        title: plot title.
    Returns:
        The path written.
    """
    if not rows:
        raise ValueError("plot_scaling: no rows")
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    groups = {}
    for r in rows:
        groups.setdefault(str(r.get("config", "")), []).append(r)
    for i, (cfg, rs) in enumerate(groups.items()):
        rs = sorted(rs, key=lambda r: r["gpus"])
        g = np.array([r["gpus"] for r in rs], dtype=np.float64)
        tput = np.array([r["datasets_per_s"] for r in rs], dtype=np.float64)
        color = f"C{i % 10}"
        ax1.plot(g, tput, "o-", color=color, label=cfg or "measured")
        ax1.plot(g, tput[0] * g / g[0], ":", color=color, alpha=0.6,
                 label=f"{cfg + ' ' if cfg else ''}ideal")
        med = np.array([_step_median(r) for r in rs], dtype=np.float64)
        ax2.plot(g, med, "o-", color=color, label=cfg or "measured")
        if all(isinstance(r.get("step_ms"), dict) and "p10" in r["step_ms"] for r in rs):
            ax2.fill_between(g, [r["step_ms"]["p10"] for r in rs],
                             [r["step_ms"]["p90"] for r in rs], color=color, alpha=0.2, lw=0)
    for ax, ylabel in ((ax1, "datasets / s"), (ax2, "ms per step (median, p10–p90)")):
        ax.set_xlabel("GPUs")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    return _save_png(fig, path)
