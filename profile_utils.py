"""Measuring a training run: StepTimer (per-phase step times), diagnose (what bounds the step),
TrainingProfiler (torch.profiler schedule, trace, four tables), the run record (environment_record,
make_run_record), and the formatting every script shares (percentiles, format_ms, markdown_table).
Imports neither the model nor the loaders; importing it has no side effects (no CUDA, no file I/O).
"""
import contextlib
import datetime
import math
import os
import platform
import socket
import subprocess
import sys
import time
from array import array
from collections import deque

import numpy as np
import torch

from safe_io import atomic_output, to_jsonable

RUN_RECORD_SCHEMA_VERSION = 1
DEFAULT_PHASES = ("data", "forward", "backward", "optimizer")
# Phases that issue GPU compute; the launch-bound test compares their host and GPU times.
DEFAULT_COMPUTE_PHASES = ("forward", "backward", "optimizer")
# diagnose() thresholds.
INPUT_BOUND_SHARE = 0.05
LAUNCH_BOUND_RATIO = 0.8
GPU_BEHIND_SHARE = 0.5
GPU_BUSY_SHARE = 0.8


# ---- Formatting helpers (shared by every script) ---------------------------------------------------

def percentiles(values):
    """{"n", "median", "p10", "p90", "mean", "std" (ddof=1), "min", "max"} of a sample; NaN entries are
    left out (a phase on an unsampled step); every statistic is None when nothing is left."""
    a = np.asarray(values, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    n = int(a.size)
    if n == 0:
        return {"n": 0, **dict.fromkeys(("median", "p10", "p90", "mean", "std", "min", "max"))}
    p10, median, p90 = (float(v) for v in np.percentile(a, [10.0, 50.0, 90.0]))
    return {"n": n, "median": median, "p10": p10, "p90": p90, "mean": float(a.mean()),
            "std": float(a.std(ddof=1)) if n > 1 else 0.0, "min": float(a.min()), "max": float(a.max())}


def format_duration(seconds):
    """"m:ss", or "h:mm:ss" from an hour on (ETAs and run lengths)."""
    h, rest = divmod(int(round(seconds)), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def format_ms(x):
    """Milliseconds with three significant digits: "180 ms", "41.2 ms", "3.14 ms", "78.0 µs"; "n/a" for
    None or NaN."""
    if x is None or math.isnan(float(x)):
        return "n/a"
    x = float(x)
    if math.isinf(x):
        return f"{x} ms"
    unit, v = ("ms", x) if abs(x) >= 1.0 or x == 0.0 else ("µs", x * 1000.0)
    a = abs(v)
    digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 or a == 0 else 3
    return f"{v:.{digits}f} {unit}"


def md_cell(value):
    """Markdown cell text: None or "" -> '—', floats to 4 significant digits, '|' escaped, one line."""
    if value is None or value == "":
        return "—"
    return (f"{value:.4g}" if isinstance(value, float) else str(value)).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers, rows, align=None):
    """A GitHub markdown table (one string ending in a newline). None cells print '—', floats 4
    significant digits; align: one of 'l'/'r'/'c' per column (default: first left, others right)."""
    headers = list(headers)
    align = align or "l" + "r" * (len(headers) - 1)
    if len(align) != len(headers):
        raise ValueError(f"align has {len(align)} letters for {len(headers)} columns")
    rule = {"l": ":---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(md_cell(h) for h in headers) + " |", "| " + " | ".join(rule[a] for a in align) + " |"]
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) != len(headers):
            raise ValueError(f"row {i} has {len(row)} cells for {len(headers)} columns")
        lines.append("| " + " | ".join(md_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


# ---- StepTimer -------------------------------------------------------------------------------------

_NULL_PHASE = contextlib.nullcontext()   # what a disabled timer's phase() returns (reusable)


class _Phase:
    """One phase of a StepTimer: one reusable object per phase name, so the hot path allocates nothing."""
    __slots__ = ("timer", "index", "name")

    def __init__(self, timer, index, name):
        self.timer, self.index, self.name = timer, index, name

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
            ev = t._event()
            t._record(ev, t._stream)   # no sync: the GPU timestamps it when it reaches this point
            t._cur_events.append(ev)
            t._cur_event_phase.append(self.index)
        t._open_phase = None
        return False


class StepTimer:
    """Splits every training step into phases and keeps per-step times as floats.

    Usage: start_step(); `with timer.phase("data"): ...` per phase; end_step(); summary() at the end.
    A phase may repeat within a step (its times add up); phases do not nest; time inside the step but
    outside every phase is "other"; the clock pauses between end_step() and start_step(). On CUDA each
    phase boundary is a CUDA event (no sync on the fast path; flush() at log intervals resolves them),
    on CPU perf_counter; perf_counter is also kept as the host view (host_step, host_phases).

    Args:
        device: CUDA events are used when its type is "cuda".
        warmup_steps: the first steps, excluded from the statistics and reported apart.
        phases: names of the phases ("other" is reserved).
        compute_phases: the phases that issue GPU compute, for diagnose()'s launch-bound test
            (default: forward, backward, optimizer, those present).
        enabled: False makes every method a no-op.
        max_pending: CUDA: unresolved steps before the timer waits for the oldest.
        phase_every: CUDA: record phase events on every k-th step only (cuts host cost on
            launch-bound loops; the step's own start/end events are recorded every step).
    """

    def __init__(self, device="cpu", warmup_steps=0, phases=DEFAULT_PHASES, *, compute_phases=None,
                 enabled=True, max_pending=64, phase_every=1):
        self.device = torch.device(device)
        self.enabled = bool(enabled)
        self.warmup_steps, self.phases, self.phase_every = int(warmup_steps), tuple(phases), int(phase_every)
        if compute_phases is None:
            compute_phases = [p for p in DEFAULT_COMPUTE_PHASES if p in self.phases]
        self.compute_phases = tuple(compute_phases)
        self.max_pending = max(1, int(max_pending))
        if not self.phases or len(set(self.phases)) != len(self.phases) or "other" in self.phases:
            raise ValueError(f"phases must be distinct non-empty names other than 'other', got {self.phases}")
        if any(p not in self.phases for p in self.compute_phases):
            raise ValueError(f"compute_phases {self.compute_phases} are not all among phases {self.phases}")
        if self.warmup_steps < 0 or self.phase_every < 1:
            raise ValueError(f"need warmup_steps >= 0 and phase_every >= 1, got {warmup_steps}, {phase_every}")
        self._cuda = self.enabled and self.device.type == "cuda"
        self._device_index = None   # resolved at the first step: no CUDA call in __init__
        self._record = self._query = self._elapsed = None   # bound at the first CUDA step
        self._contexts = {name: _Phase(self, i, name) for i, name in enumerate(self.phases)}
        n = len(self.phases)
        # Measured steps: per-phase and per-step times in ms (float64 arrays, no Python objects).
        self._phase_ms = [array("d") for _ in range(n)]        # clock of record (events on CUDA)
        self._host_phase_ms = [array("d") for _ in range(n)]   # perf_counter
        self._step_ms, self._host_step_ms, self._warm_step_ms, self._warm_host_step_ms = (
            array("d"), array("d"), array("d"), array("d"))
        self._steps_started = 0      # steps ended (measured + warm-up), fixes the warm-up split
        self._discarded = self._syncs = 0
        self._gpu_behind = 0   # measured steps the GPU had not started when the host ended them
        self._phase_behind = [0] * n   # measured steps where the GPU had not reached the phase's
        self._cur_behind = [False] * n  # start when the host left the phase (CUDA only)
        self._sampled = False          # CUDA: this step records phase events (phase_every)
        self._sampled_steps = 0        # measured steps with phase events
        self._in_step, self._open_phase = False, None
        self._phase_t0 = self._step_t0 = 0.0
        self._cur_host = [0.0] * n
        # CUDA state: event pool, events of the open step, unresolved steps (FIFO).
        self._pool = []
        self._stream = self._raw_stream = self._cur_start = None
        self._cur_events = []      # boundaries of the open step: [start, end of 1st phase, ...]
        self._cur_event_phase = []
        self._pending = deque()

    # -- hot path ------------------------------------------------------------------------------

    def _event(self):
        return self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)

    def _bind_event_methods(self):
        # The C methods of the event base class, without torch.cuda.Event's Python wrappers
        # (~0.5 µs a call, about 10 calls a step); the public methods where it is missing.
        base, public = getattr(torch._C, "_CudaEventBase", None), torch.cuda.Event
        self._record, self._query, self._elapsed = (getattr(base, name, None) or getattr(public, name)
                                                    for name in ("record", "query", "elapsed_time"))

    def _refresh_stream(self):
        # torch.cuda.current_stream() costs ~5 µs; the raw handle ~0.3 µs, so build the Stream
        # object only when the current stream changed (private API, hence the fallback).
        if self._device_index is None:
            self._device_index = (self.device.index if self.device.index is not None else torch.cuda.current_device())
            self._bind_event_methods()
        raw_fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        raw = raw_fn(self._device_index) if raw_fn is not None else None
        if raw is None or raw != self._raw_stream or self._stream is None:
            self._stream, self._raw_stream = torch.cuda.current_stream(self.device), raw

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
            ev = self._event()
            self._record(ev, self._stream)   # no sync: see the class docstring
            self._cur_start, self._cur_events, self._cur_event_phase = ev, [ev], []
            self._cur_behind = [False] * len(self.phases)
            self._sampled = self._steps_started % self.phase_every == 0
        self._step_t0 = time.perf_counter()

    def phase(self, name):
        """A reusable context manager timing phase `name` of the current step (a no-op when disabled)."""
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
        end = self._event()
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
        """Resolved steps after the warm-up."""
        return len(self._step_ms)

    def step_times_ms(self):
        """Every measured (post-warm-up) step time in ms, in order (resolves pending CUDA events)."""
        self.flush()
        return list(self._step_ms)

    def summary(self):
        """Statistics of the measured steps in ms (flushes first: a sync on CUDA).

        Returns a dict: device, clock ("cuda-events" | "perf_counter" | "disabled"), enabled,
        warmup_steps, measured_steps, discarded_steps, syncs; phases / host_phases {name: stats}
        with "other" (step minus phases); step, host_step, warmup, warmup_host (stats); data_share and
        phase_shares (median phase / median step); compute_phases, gpu_compute_ms / host_compute_ms
        (stats of the per-step compute sum); CUDA only, else None: launch_ratio (host / GPU compute
        medians), phase_launch_ratios, gpu_behind_share, phase_gpu_behind. stats = percentiles().
        """
        self.flush()
        n = len(self._step_ms)
        step, host_step = _floats(self._step_ms), _floats(self._host_step_ms)
        phase_arrays = [_floats(a) for a in self._phase_ms]
        host_arrays = [_floats(a) for a in self._host_phase_ms]
        phases, host_phases = ({name: percentiles(a) for name, a in zip(self.phases, arrays)}
                               for arrays in (phase_arrays, host_arrays))
        phases["other"] = percentiles(np.maximum(step - np.sum(phase_arrays, axis=0), 0.0) if n else [])
        host_phases["other"] = percentiles(np.maximum(host_step - np.sum(host_arrays, axis=0), 0.0) if n else [])
        step_stats = percentiles(step)
        med = step_stats["median"]
        shares = {name: (s["median"] / med if med else None) for name, s in phases.items()}
        ci = [self.phases.index(p) for p in self.compute_phases]
        gpu_compute = percentiles(np.sum([phase_arrays[i] for i in ci], axis=0) if n and ci else [])
        host_compute = percentiles(np.sum([host_arrays[i] for i in ci], axis=0) if n and ci else [])
        cuda = self._cuda and n
        return {
            "device": str(self.device),
            "clock": "disabled" if not self.enabled else "cuda-events" if self._cuda else "perf_counter",
            "enabled": self.enabled, "warmup_steps": self.warmup_steps, "measured_steps": n,
            "discarded_steps": self._discarded, "syncs": self._syncs,
            "phases": phases, "host_phases": host_phases, "step": step_stats,
            "host_step": percentiles(host_step), "warmup": percentiles(self._warm_step_ms),
            "warmup_host": percentiles(self._warm_host_step_ms),
            "data_share": shares.get("data") if "data" in self.phases else None,
            "phase_shares": shares, "compute_phases": list(self.compute_phases),
            "gpu_compute_ms": gpu_compute, "host_compute_ms": host_compute,
            "launch_ratio": (host_compute["median"] / gpu_compute["median"]
                             if self._cuda and gpu_compute["median"] else None),
            "phase_launch_ratios": {p: (host_phases[p]["median"] / phases[p]["median"] if phases[p]["median"]
                                        else None) for p in self.compute_phases} if cuda else None,
            "gpu_behind_share": self._gpu_behind / n if cuda else None,
            "phase_gpu_behind": {p: (self._phase_behind[self.phases.index(p)] / self._sampled_steps
                                     if self._sampled_steps else None) for p in self.compute_phases} if cuda else None}

    def recent(self, last=50):
        """Medians over the latest `last` measured steps for the log line: {"n", "warmup", "step_ms",
        "data_ms", "phases"} (NaN where nothing was measured; during the warm-up only step_ms). Flushes:
        one sync on CUDA, so call it at the log interval."""
        self.flush()
        last, nan = max(1, int(last)), float("nan")
        warm = not len(self._step_ms)
        step = _floats(self._warm_step_ms if warm else self._step_ms)[-last:]
        phases = {name: nan if warm else _median_or_nan(_floats(a)[-last:])
                  for name, a in zip(self.phases, self._phase_ms)}
        return {"n": int(step.size), "warmup": warm and bool(step.size),
                "step_ms": float(np.median(step)) if step.size else nan, "data_ms": phases.get("data", nan),
                "phases": phases}


def _floats(buffer):
    """A float64 numpy view of an array('d') (no copy), empty when the buffer is."""
    return np.frombuffer(buffer, dtype=np.float64) if len(buffer) else np.zeros(0)


def _median_or_nan(a):
    a = a[~np.isnan(a)]
    return float(np.median(a)) if a.size else float("nan")


class _NoTimer:
    """The calls of a timer that does nothing: measure_overhead's baseline."""

    def start_step(self):
        pass

    end_step = start_step

    def phase(self, name):
        return _NULL_PHASE


def measure_overhead(device="cpu", steps=2000, phases=DEFAULT_PHASES, repeats=3):
    """Host cost of a StepTimer per step with empty phases, best of `repeats`, minus the same loop calling a
    timer that does nothing. Returns {"per_step_us", "per_phase_us", "disabled_per_step_us"}."""
    cuda = torch.device(device).type == "cuda"

    def best(make_timer):
        result = float("inf")
        for _ in range(repeats):
            timer = make_timer()
            if cuda:
                torch.cuda.synchronize(device)   # sync: the previous repeat's events are done before t0
            t0 = time.perf_counter()
            for _ in range(steps):
                timer.start_step()
                for p in phases:
                    with timer.phase(p):
                        pass
                timer.end_step()
            if cuda:
                torch.cuda.synchronize(device)   # sync: this repeat's events are done before the clock stops
            result = min(result, (time.perf_counter() - t0) / steps)
        return result

    base = best(_NoTimer)
    on = max(best(lambda: StepTimer(device, phases=phases)) - base, 0.0)
    off = max(best(lambda: StepTimer(device, phases=phases, enabled=False)) - base, 0.0)
    return {"per_step_us": on * 1e6, "per_phase_us": on * 1e6 / len(phases), "disabled_per_step_us": off * 1e6}


# ---- diagnose --------------------------------------------------------------------------------------

def _pct(x):
    return f"{100.0 * x:.1f}%" if x < 0.1 else f"{100.0 * x:.0f}%"


def diagnose(summary):
    """One line saying what bounds the step, with the numbers behind the verdict.

    Rules in order: "input-bound" when the data wait is > 5% of the step; "CPU-bound" on a CPU run;
    on CUDA, the profiler's gpu_busy_share when present (< 80%: "launch/host-bound"); "GPU-bound"
    when the GPU had not started half the steps when the host finished issuing them; else per
    compute phase holding >= 10% of the GPU compute time: "launch/host-bound" when every such phase
    is host-paced (host/GPU >= 0.8 and the GPU was not behind), else "GPU-bound" (falls back to the
    compute total's launch_ratio without per-phase host times).

    Args:
        summary: StepTimer.summary(), optionally with "gpu_busy_share" added.
    Returns:
        e.g. "input-bound: data wait 41.2 ms = 23% of the 180 ms step (> 5%)".
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
    host_c = (summary.get("host_compute_ms") or {}).get("median")
    gpu_c = (summary.get("gpu_compute_ms") or {}).get("median")
    issued = (f"the host issued {'+'.join(compute) or 'compute'} in {format_ms(host_c)}, the GPU ran it in "
              f"{format_ms(gpu_c)}")
    per_phase = _per_phase_verdict(summary, compute, phases, host_phases, f"{issued} (host/GPU per phase: ", data_txt)
    if per_phase:
        return per_phase
    ratio = summary.get("launch_ratio")
    if ratio is None or host_c is None or gpu_c is None:
        return f"GPU-bound: {data_txt}; no host/GPU compute split measured"
    if ratio >= LAUNCH_BOUND_RATIO:
        return (f"launch/host-bound: {issued} (host/GPU {ratio:.2f} >= {LAUNCH_BOUND_RATIO}, the GPU waits on the "
                f"host); {data_txt}")
    return f"GPU-bound: {issued} (host/GPU {ratio:.2f} < {LAUNCH_BOUND_RATIO}); {data_txt}"


def _per_phase_verdict(summary, compute, phases, host_phases, issued, data_txt):
    """The per-phase rule of diagnose(), or None when the summary lacks per-phase host/GPU times."""
    per_phase = []
    for p in compute:
        g = (phases.get(p) or {}).get("median")
        h = (host_phases.get(p) or {}).get("median")
        if g is not None and h is not None:
            per_phase.append((p, h, g))
    total_g = sum(g for _, _, g in per_phase)
    if not per_phase or total_g <= 0:
        return None
    phase_behind = summary.get("phase_gpu_behind") or {}
    big = [(p, h, g) for p, h, g in per_phase if g >= 0.1 * total_g]
    for p, h, g in sorted(big, key=lambda x: x[1] / x[2]):
        pb = phase_behind.get(p) or 0.0
        if h < LAUNCH_BOUND_RATIO * g or pb >= GPU_BEHIND_SHARE:
            why = (f"the GPU ran {p} in {format_ms(g)} after {format_ms(h)} of host issue "
                   f"(host/GPU {h / g:.2f} < {LAUNCH_BOUND_RATIO})" if h < LAUNCH_BOUND_RATIO * g
                   else f"in {_pct(pb)} of steps the GPU had not reached {p} when the host left it")
            return f"GPU-bound: {why}; {data_txt}"
    ratios = ", ".join(f"{p} {h / g:.2f}" for p, h, g in big)
    return f"launch/host-bound: {issued}{ratios}; >= {LAUNCH_BOUND_RATIO}, so the GPU waits on the host); {data_txt}"


# ---- Run records -----------------------------------------------------------------------------------

REPO = os.path.dirname(os.path.abspath(__file__))


def _run(cmd, cwd=None, timeout=10):
    """stdout of a command, None when it fails or is missing."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip() if r.returncode == 0 else None
    return None


def git_state():
    """{"git_commit", "git_dirty" (tracked files modified), "git_untracked" (count)}; None where unknown.
    NANOTABPFN_GIT_COMMIT wins: a tree copied to a GPU machine may carry a stale .git, so the copier names it."""
    named = os.environ.get("NANOTABPFN_GIT_COMMIT")
    if named:
        return {"git_commit": named, "git_dirty": None, "git_untracked": None}
    commit = _run(["git", "rev-parse", "HEAD"], cwd=REPO)
    status = _run(["git", "status", "--porcelain"], cwd=REPO) if commit else None
    lines = [ln for ln in (status or "").splitlines() if ln.strip()]
    return {"git_commit": commit, "git_dirty": None if status is None else any(not ln.startswith("??") for ln in lines),
            "git_untracked": None if status is None else sum(ln.startswith("??") for ln in lines)}


def git_commit():
    """The commit as one string for results headers: "<sha>", "<sha>+dirty", or "unknown"."""
    state = git_state()
    return state["git_commit"] + ("+dirty" if state["git_dirty"] else "") if state["git_commit"] else "unknown"


def _package_version(dists, module):
    """Version of an optional package without importing it when its metadata is installed."""
    from importlib import metadata
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:   # a fallback only: importing kvikio loads its CUDA libraries
        return getattr(__import__(module), "__version__", "unknown")
    except Exception:
        return None


def environment_record(device="cpu"):
    """What reproduces a run: git state, host, library versions, GPU (filled when CUDA is available)."""
    device = torch.device(device)
    cuda = torch.cuda.is_available()
    rec = {
        **git_state(), "hostname": socket.gethostname(), "platform": platform.platform(),
        "python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "kvikio": _package_version(("kvikio-cu13", "kvikio-cu12", "kvikio"), "kvikio"), "device": str(device),
        "gpu_name": None, "gpu_count": torch.cuda.device_count() if cuda else 0, "gpu_memory_gib": None,
        "gpu_capability": None, "driver": None, "cpu_count": os.cpu_count(),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if cuda:
        props = torch.cuda.get_device_properties(device.index if device.type == "cuda" and device.index else 0)
        rec.update(gpu_name=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 2),
                   gpu_capability=f"{props.major}.{props.minor}")
        drv = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        rec["driver"] = drv.splitlines()[0].strip() if drv else None
    return rec


def make_run_record(config, flags, timer_summary=None, extra=None, *, environment=None):
    """One JSON-ready record per run: {"schema_version", "created_utc", "argv", "config", "flags",
    "environment", "timing", "diagnosis", "extra"} (results tables are generated from these).

    Args:
        config: the resolved configuration (dict or dataclass); flags: the command-line flags (dict).
        timer_summary: StepTimer.summary() or None; extra: anything else (final loss, loader, ...).
        environment: environment_record() output; computed for the summary's device when None.
    """
    if environment is None:
        environment = environment_record((timer_summary or {}).get("device", "cpu"))
    return to_jsonable({
        "schema_version": RUN_RECORD_SCHEMA_VERSION,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": list(sys.argv), "config": config, "flags": flags, "environment": environment, "timing": timer_summary,
        "diagnosis": diagnose(timer_summary) if timer_summary else None, "extra": extra or {}})


# ---- TrainingProfiler ------------------------------------------------------------------------------

def label(name, enabled=True):
    """torch.profiler.record_function(name) when enabled, else a no-op context (the hot loop pays nothing)."""
    return torch.profiler.record_function(name) if enabled else contextlib.nullcontext()


# Host-side rows of the transfer table: the copies are where data moves; the synchronize calls (and
# .item()'s _local_scalar_dense) are where the host waits for queued GPU work.
TRANSFER_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "cudaMemcpyAsync",
                "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                "aten::item", "aten::_local_scalar_dense")
TABLE_TITLES = (("cpu", "Top CPU operations"), ("cuda", "Top CUDA operations"),
                ("transfers", "Memory transfers and host waits"), ("memory", "CUDA memory summary"))


def _self_device_us(evt):
    value = getattr(evt, "self_device_time_total", None)   # torch 2.x renamed cuda_* to device_*
    return float(value if value is not None else getattr(evt, "self_cuda_time_total", 0) or 0)


def _on_device(evt):
    """True for GPU-timeline events (kernels, memcpy, memset, and GPU copies of labels)."""
    dt = getattr(evt, "device_type", None)
    return dt is not None and getattr(dt, "name", str(dt)) != "CPU"


def _is_device_activity(evt):
    """GPU work itself: labels and ProfilerStep#N also appear on the GPU timeline (they would count twice)."""
    return _on_device(evt) and not getattr(evt, "is_user_annotation", False)


def _short(name, width=80):
    return name if len(name) <= width else name[: width - 1] + "…"


def tensorboard_trace_name():
    """The file name torch.profiler.tensorboard_trace_handler gives a trace (TensorBoard's profiler
    plugin and Perfetto both open `<log_dir>/*.pt.trace.json`)."""
    return f"{socket.gethostname()}_{os.getpid()}.{time.time_ns() // 1_000_000}.pt.trace.json"


class TrainingProfiler:
    """torch.profiler around a training loop: a wait/warmup/active schedule, a trace, four tables.

    Usage: `with TrainingProfiler(device, out_dir) as prof:` ... `with prof.label("## data ##"):` ...
    `prof.step()` after each step; then prof.print_tables() / tables_markdown() / stats().

    Args:
        device: CUDA activity is recorded when it is a CUDA device.
        out_dir: folder of the trace `trace.json` (created when profiling starts).
        log_dir: a TensorBoard log dir; when given the trace goes there as `<host>_<pid>.<ms>.pt.trace.json`
            (tensorboard_trace_handler's name) instead of out_dir/trace.json.
        wait, warmup, active: the schedule in steps (repeat=1).
        enabled: False makes it a no-op.
        row_limit: rows in the CPU and CUDA tables.
        record_shapes, profile_memory, with_stack: passed to torch.profiler.profile.
    """

    def __init__(self, device="cpu", out_dir="runs/profile", *, log_dir=None, wait=1, warmup=1, active=3,
                 enabled=True, row_limit=15, record_shapes=True, profile_memory=True, with_stack=False):
        if wait < 0 or warmup < 0 or active < 1:
            raise ValueError(f"need wait >= 0, warmup >= 0, active >= 1; got {wait}, {warmup}, {active}")
        self.out_dir = os.fspath(log_dir if log_dir is not None else out_dir)
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.device, self.enabled, self.row_limit = torch.device(device), bool(enabled), int(row_limit)
        self.wait, self.warmup, self.active = int(wait), int(warmup), int(active)
        self.record_shapes, self.profile_memory, self.with_stack = record_shapes, profile_memory, with_stack
        self.trace_path = os.path.join(self.out_dir, "trace.json")   # a TensorBoard name is set when written
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._prof, self._steps, self._trace_written, self._memory = None, 0, False, None
        self._averages = None      # list of FunctionEventAvg from the active window

    def __enter__(self):
        if not self.enabled:
            return self
        from torch.profiler import ProfilerActivity, profile, schedule
        os.makedirs(self.out_dir, exist_ok=True)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self._prof = profile(
            activities=activities, schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=self._on_trace_ready, record_shapes=self.record_shapes,
            profile_memory=self.profile_memory, with_stack=self.with_stack)
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
        """record_function(name) while this profiler is enabled, else a no-op context."""
        return label(name, self.enabled)

    def _on_trace_ready(self, prof):
        # Called by torch when the active window closes (or at exit inside it).
        self._averages = list(prof.key_averages())
        if self.log_dir is not None:
            self.trace_path = os.path.join(self.log_dir, tensorboard_trace_name())
        with atomic_output(self.trace_path, "profiler trace") as tmp:
            prof.export_chrome_trace(tmp)
        self._trace_written = True

    def _cuda_memory(self):
        s = torch.cuda.memory_stats(self.device)
        keys = {"peak_allocated_bytes": "allocated_bytes.all.peak", "peak_reserved_bytes": "reserved_bytes.all.peak",
                "current_allocated_bytes": "allocated_bytes.all.current",
                "total_allocated_bytes": "allocated_bytes.all.allocated", "cudamalloc_calls": "segment.all.allocated",
                "cudamalloc_retries": "num_alloc_retries", "ooms": "num_ooms"}
        return {name: s.get(key, 0) for name, key in keys.items()}

    # -- numbers -------------------------------------------------------------------------------

    def _events(self):
        return self._averages or []

    def profiled_steps(self):
        """Steps inside the recorded window (count of ProfilerStep#N events)."""
        return sum(int(e.count) for e in self._events() if not _on_device(e) and e.key.startswith("ProfilerStep"))

    def _cpu_rows(self):
        rows = [e for e in self._events() if not _on_device(e)]
        return rows, sum(float(e.self_cpu_time_total) for e in rows)

    def _device_rows(self):
        rows = [e for e in self._events() if _is_device_activity(e)]
        return rows, sum(_self_device_us(e) for e in rows)

    def stats(self):
        """Numbers for the run record, in ms: profiled_steps, trace_path, cpu_self_ms_per_step,
        step_wall_ms, gpu_kernel_ms_per_step and gpu_busy_share (None on CPU), top_cpu, top_cuda,
        transfers (rows of the transfer table), cuda_memory."""
        steps = self.profiled_steps()
        per = max(steps, 1)
        cpu, cpu_total = self._cpu_rows()
        dev, dev_total = self._device_rows()
        wall = sum(float(e.cpu_time_total) for e in cpu if e.key.startswith("ProfilerStep"))
        top_cpu = [{"name": e.key, "self_cpu_ms": e.self_cpu_time_total / 1000.0, "cpu_ms": e.cpu_time_total / 1000.0,
                    "share": e.self_cpu_time_total / cpu_total if cpu_total else None, "calls": int(e.count)}
                   for e in sorted(cpu, key=lambda e: -e.self_cpu_time_total)[: self.row_limit]]
        top_cuda = [{"name": e.key, "self_cuda_ms": _self_device_us(e) / 1000.0,
                     "share": _self_device_us(e) / dev_total if dev_total else None, "calls": int(e.count)}
                    for e in sorted(dev, key=lambda e: -_self_device_us(e))[: self.row_limit]]
        return {
            "profiled_steps": steps, "trace_path": self.trace_path if self._trace_written else None,
            "cpu_self_ms_per_step": cpu_total / 1000.0 / per, "step_wall_ms": wall / 1000.0 / per if steps else None,
            "gpu_kernel_ms_per_step": dev_total / 1000.0 / per if self.cuda else None,
            "gpu_busy_share": min(dev_total / wall, 1.0) if self.cuda and wall > 0 else None, "top_cpu": top_cpu,
            "top_cuda": top_cuda if self.cuda else [], "transfers": self._transfer_rows(), "cuda_memory": self._memory}

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
                         "calls": calls, "calls_per_step": calls / steps, "device_ms_per_step": None})
        if self.cuda:   # the GPU side of the copies: how long the copy engine really moved bytes
            for e in sorted(self._device_rows()[0], key=lambda e: -_self_device_us(e)):
                if e.key.startswith(("Memcpy", "Memset")):
                    rows.append({"name": e.key + " (GPU)", "cpu_total_ms": None, "cpu_ms_per_step": None,
                                 "share": None, "calls": int(e.count), "calls_per_step": int(e.count) / steps,
                                 "device_ms_per_step": _self_device_us(e) / 1000.0 / steps})
        return rows

    # -- tables --------------------------------------------------------------------------------

    def tables(self):
        """{"cpu", "cuda", "transfers", "memory"}: markdown, each starting with a '### ' title line; without
        a recorded window each says so; on a CPU run "cuda" and "memory" say that they need a GPU."""
        if not self.enabled or self._averages is None:
            need = self.wait + self.warmup + self.active
            msg = (f"profiler recorded nothing: {self._steps} steps ran, the schedule needs more "
                   f"than wait+warmup={self.wait + self.warmup} (window ends at step {need})\n"
                   if self.enabled else "profiler disabled\n")
            return {k: f"### {t}\n\n{msg}" for k, t in TABLE_TITLES}
        steps, s = self.profiled_steps(), self.stats()
        no_gpu = ("CUDA tables need a GPU: this run profiled the CPU only (device "
                  f"{self.device}, torch.cuda.is_available()={torch.cuda.is_available()}).\n")
        return {"cpu": self._cpu_table(steps, s),
                "cuda": self._cuda_table(steps, s) if self.cuda else "### Top CUDA operations\n\n" + no_gpu,
                "transfers": _transfer_table(steps, s),
                "memory": (_memory_table(self.device, self._memory) if self.cuda and self._memory is not None
                           else "### CUDA memory summary\n\n" + no_gpu)}

    def _cpu_table(self, steps, s):
        cpu_total = self._cpu_rows()[1]
        rows = [[_cpu_name(r["name"]), format_ms(r["self_cpu_ms"]), _share_cell(r["share"]), format_ms(r["cpu_ms"]),
                 r["calls"]] for r in s["top_cpu"]]
        return (f"### Top CPU operations by self CPU time ({steps} profiled steps)\n\n"
                + markdown_table(["Name", "Self CPU total", "Self CPU %", "CPU total", "Calls"], rows)
                + f"\nSelf CPU time total: {format_ms(cpu_total / 1000.0)} "
                  f"({format_ms(s['cpu_self_ms_per_step'])} per step)\n")

    def _cuda_table(self, steps, s):
        dev_total = self._device_rows()[1]
        rows = [[_short(r["name"]), format_ms(r["self_cuda_ms"]), _share_cell(r["share"]), r["calls"]]
                for r in s["top_cuda"]]
        return (f"### Top CUDA operations by self CUDA time ({steps} profiled steps)\n\n"
                "GPU-side activity (kernels, memcpy, memset); the aten op that launched each one "
                "is in the CPU table.\n\n" + markdown_table(["Name", "Self CUDA total", "Self CUDA %", "Calls"], rows)
                + f"\nSelf CUDA time total: {format_ms(dev_total / 1000.0)} "
                  f"({format_ms(s['gpu_kernel_ms_per_step'])} per step; GPU busy "
                  f"{_pct(s['gpu_busy_share'] or 0.0)} of the {format_ms(s['step_wall_ms'])} profiled step)\n")

    def tables_markdown(self):
        """The four tables as one markdown string."""
        t = self.tables()
        return "\n".join(t[k] for k, _ in TABLE_TITLES)

    def print_tables(self, file=None):
        print(self.tables_markdown(), file=file or sys.stdout)


def _transfer_table(steps, s):
    rows = [[r["name"], _ms_or_dash(r["cpu_total_ms"], r["calls"]), _ms_or_dash(r["cpu_ms_per_step"], r["calls"]),
             _share_cell(r["share"]) if r["calls"] else None,
             r["calls"], f"{r['calls_per_step']:.1f}", _ms_or_dash(r["device_ms_per_step"], r["calls"])]
            for r in s["transfers"]]
    return (f"### Memory transfers and host waits ({steps} profiled steps)\n\n"
            "CPU total includes children (aten::to contains aten::_to_copy contains aten::copy_ "
            "contains cudaMemcpyAsync), so rows overlap; % is of the total self CPU time. A "
            "synchronous copy or a synchronize is where the host waits for queued GPU work; "
            "compare with the GPU time of the copies (rows marked GPU).\n\n"
            + markdown_table(["Name", "CPU total", "CPU per step", "% of CPU", "Calls", "Calls per step",
                              "GPU per step"], rows) + "\n'—': not called in the profiled steps (or no GPU side).\n")


def _memory_table(device, m):
    gib = 2**30
    return (f"### CUDA memory summary ({device}, since process start or the last reset_peak_memory_stats)\n\n"
            + markdown_table(["Metric", "Value"], [
                ["Peak allocated", f"{m['peak_allocated_bytes'] / gib:.3f} GiB"],
                ["Peak reserved", f"{m['peak_reserved_bytes'] / gib:.3f} GiB"],
                ["Currently allocated", f"{m['current_allocated_bytes'] / gib:.3f} GiB"],
                ["Total allocated (cumulative)", f"{m['total_allocated_bytes'] / gib:.2f} GiB"],
                ["cudaMalloc calls (segments)", m["cudamalloc_calls"]], ["cudaMalloc retries", m["cudamalloc_retries"]],
                ["OOMs", m["ooms"]]]))


def _ms_or_dash(ms, calls):
    return format_ms(ms) if ms is not None and calls else None


def _cpu_name(key):
    # Self time of the step wrapper = host time inside the step but outside every recorded op.
    return "ProfilerStep* (outside any op: Python, waits)" if key.startswith("ProfilerStep") else _short(key)


def _share_cell(share):
    return f"{100.0 * share:.1f}%" if share is not None else None
