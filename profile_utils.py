"""Measuring a run: StepTimer (per-phase step times), diagnose (what bounds the step), TrainingProfiler (torch.profiler
tables, trace), JSON run records, shared formatting. Imports no model or loader; at import, touches no CUDA or file."""
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


# ---- Formatting (shared by every script) -----------------------------------------------------------
def percentiles(values):
    """{"n", "median", "p10", "p90", "mean", "std" (ddof=1), "min", "max"} of the non-NaN values (all None if none)."""
    a = np.asarray(values, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    if a.size == 0:
        return {"n": 0, **dict.fromkeys(("median", "p10", "p90", "mean", "std", "min", "max"))}
    p10, median, p90 = np.percentile(a, [10.0, 50.0, 90.0]).tolist()
    return {"n": a.size, "median": median, "p10": p10, "p90": p90, "mean": float(a.mean()),
            "std": float(a.std(ddof=1)) if a.size > 1 else 0.0, "min": float(a.min()), "max": float(a.max())}


def format_duration(seconds):
    """"m:ss", or "h:mm:ss" from an hour on (ETAs and run lengths)."""
    h, rest = divmod(int(round(seconds)), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def format_ms(x):
    """Milliseconds to three significant digits ("180 ms", "41.2 ms", "3.14 ms", "78.0 µs"); "n/a" for None/NaN."""
    if x is None or math.isnan(float(x)):
        return "n/a"
    x = float(x)
    unit, v = ("ms", x) if abs(x) >= 1.0 or x == 0.0 else ("µs", x * 1000.0)
    a = abs(v)
    digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 or a == 0 else 3
    return f"{v:.{digits}f} {unit}"


def md_cell(value):
    """Markdown cell text: None or "" -> '—', floats to 4 significant digits, '|' escaped, one line."""
    if value is None or value == "":
        return "—"
    return (f"{value:.4g}" if isinstance(value, float) else str(value)).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers, rows):
    """A GitHub markdown table ending in a newline, cells through md_cell; first column left-aligned, others right."""
    def line(cells):
        return "| " + " | ".join(md_cell(c) for c in cells) + " |"

    lines = [line(headers), "| :--- |" + " ---: |" * (len(headers) - 1)]
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) != len(headers):
            raise ValueError(f"row {i} has {len(row)} cells for {len(headers)} columns")
        lines.append(line(row))
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
            raise RuntimeError(f"timer.phase({self.name!r}) opened inside phase {t._open_phase!r}: "
                               "phases do not nest (they would count twice)")
        t._open_phase = self.name
        # CUDA: no event here; on the GPU clock a phase starts at the previous boundary.
        t._phase_t0 = time.perf_counter()

    def __exit__(self, exc_type, exc, tb):
        t = self.timer
        t._cur_host[self.index] += (time.perf_counter() - t._phase_t0) * 1000.0
        if t._sampled:
            # Had the GPU reached this phase's start when the host finished issuing the phase? If not, it had
            # earlier work queued and was not waiting for this phase's launches (cudaEventQuery: never blocks).
            t._cur_behind[self.index] |= not t._query(t._cur_events[-1])
            ev = t._event()
            t._record(ev, t._stream)   # no sync: the GPU timestamps it when it reaches this point
            t._cur_events.append(ev)
            t._cur_event_phase.append(self.index)
        t._open_phase = None


class StepTimer:
    """Per-phase step times: start_step(); `with timer.phase("data"): ...`; end_step(); summary() at the end.

    Phases may repeat in a step (times add up), not nest; the rest of the step is "other"; the clock pauses between
    steps; warmup_steps are reported apart. CUDA: an event at each phase boundary, resolved lazily (no sync on the
    fast path), phase events on every phase_every-th step only; CPU: perf_counter. compute_phases: see diagnose."""
    MAX_PENDING = 64   # CUDA: unresolved steps before end_step waits for the oldest

    def __init__(self, device="cpu", warmup_steps=0, phases=DEFAULT_PHASES, *, compute_phases=None,
                 enabled=True, phase_every=1):
        self.device, self.enabled = torch.device(device), bool(enabled)
        self.warmup_steps, self.phases, self.phase_every = int(warmup_steps), tuple(phases), int(phase_every)
        if compute_phases is None:
            compute_phases = [p for p in DEFAULT_COMPUTE_PHASES if p in self.phases]
        self.compute_phases = tuple(compute_phases)
        if not self.phases or len(set(self.phases)) != len(self.phases) or "other" in self.phases:
            raise ValueError(f"phases must be distinct non-empty names other than 'other', got {self.phases}")
        if any(p not in self.phases for p in self.compute_phases):
            raise ValueError(f"compute_phases {self.compute_phases} are not all among phases {self.phases}")
        if self.warmup_steps < 0 or self.phase_every < 1:
            raise ValueError(f"need warmup_steps >= 0 and phase_every >= 1, got {warmup_steps}, {phase_every}")
        self._cuda = self.enabled and self.device.type == "cuda"
        self._contexts = {name: _Phase(self, i, name) for i, name in enumerate(self.phases)}
        n = len(self.phases)
        # Every ended step as a float64 row [step, *phases] in ms, warm-up first: on the clock of record and the host's.
        self._ms, self._host_ms = array("d"), array("d")
        self._steps_started = self._discarded = self._syncs = 0   # steps ended (the warm-up split), dropped, waits
        self._in_step, self._open_phase, self._phase_t0, self._step_t0 = False, None, 0.0, 0.0
        self._cur_host = [0.0] * n
        # CUDA: GPU-behind counts of measured steps, per phase of sampled measured steps, and the open step's flags.
        self._gpu_behind, self._phase_behind, self._cur_behind = 0, [0] * n, [False] * n
        self._sampled, self._sampled_steps = False, 0   # CUDA: this step records phase events; measured ones that did
        # CUDA: event pool, the open step's boundaries [start, end of 1st phase, ...] and their phases, unresolved
        # steps (FIFO); device index and stream are resolved at the first step (no CUDA call in __init__).
        self._pool, self._cur_events, self._cur_event_phase, self._pending = [], [], [], deque()
        self._device_index, self._stream, self._raw_stream = self.device.index, None, None
        # Private C functions where they exist: they skip the Python wrappers of torch.cuda.Event and current_stream.
        base = getattr(torch._C, "_CudaEventBase", None)
        self._record, self._query, self._elapsed = (getattr(base, name, None) or getattr(torch.cuda.Event, name)
                                                    for name in ("record", "query", "elapsed_time"))
        self._raw_stream_fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    def _event(self):
        return self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)

    def start_step(self):
        """Starts the clock of a step (call it before fetching the batch)."""
        if not self.enabled:
            return
        if self._in_step:
            # The previous step never reached end_step (an exception, a `continue`): drop it. Its events may
            # still be queued on the GPU; re-recording a queued event is allowed.
            self._discarded += 1
            self._open_phase = None
            self._pool.extend(self._cur_events)
        self._in_step = True
        self._cur_host = [0.0] * len(self.phases)
        if self._cuda:
            if self._device_index is None:
                self._device_index = torch.cuda.current_device()
            raw = self._raw_stream_fn(self._device_index) if self._raw_stream_fn is not None else None
            if raw is None or raw != self._raw_stream or self._stream is None:   # the current stream changed
                self._stream, self._raw_stream = torch.cuda.current_stream(self.device), raw
            ev = self._event()
            self._record(ev, self._stream)   # no sync: see the class docstring
            self._cur_events, self._cur_event_phase = [ev], []
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
            self._store(host_step, self._cur_host, host_step, self._cur_host)
            return
        if not warm:
            # GPU not at this step's start when the host issued it all: over a step of work queued (never blocks).
            self._gpu_behind += not self._query(self._cur_events[0])
            if self._sampled:
                self._sampled_steps += 1
                for i, behind in enumerate(self._cur_behind):
                    self._phase_behind[i] += behind
        end = self._event()
        self._record(end, self._stream)
        pending = self._pending
        pending.append((end, self._sampled, self._cur_events, self._cur_event_phase, host_step, self._cur_host))
        while pending and self._query(pending[0][0]):   # resolve finished steps (cudaEventQuery: never blocks)
            self._resolve(pending.popleft())
        while len(pending) > self.MAX_PENDING:
            # Sync: the host is MAX_PENDING steps ahead of the GPU; wait for the oldest step only.
            pending[0][0].synchronize()
            self._syncs += 1
            self._resolve(pending.popleft())

    def _resolve(self, item):
        end, sampled, events, event_phase, host_step, host_phases = item
        step = self._elapsed(events[0], end)   # every event is complete: no wait here
        # NaN: an unsampled step has no GPU phase times (percentiles() leaves NaN out)
        phases = [0.0 if sampled else math.nan] * len(self.phases)
        for k, idx in enumerate(event_phase):
            # phase k runs from the previous boundary to its own end event
            phases[idx] += self._elapsed(events[k], events[k + 1])
        self._store(step, phases, host_step, host_phases)
        self._pool.append(end)
        self._pool.extend(events)

    def _store(self, step, phases, host_step, host_phases):
        self._ms.append(step)
        self._ms.extend(phases)
        self._host_ms.append(host_step)
        self._host_ms.extend(host_phases)

    def flush(self):
        """Resolves every finished step: on CUDA one cudaEventSynchronize on the last recorded event unless the GPU
        is already past it (a sync point: call it at log intervals, not every step). A no-op on CPU or disabled."""
        if not self._pending:
            return
        last = self._pending[-1][0]
        if not self._query(last):
            # Sync: wait for the GPU to finish the last ended step (counted only when it really waits).
            last.synchronize()
            self._syncs += 1
        while self._pending:
            self._resolve(self._pending.popleft())

    def _rows(self, buffer):
        """(warm-up rows, measured rows) of a row buffer: (steps, 1 + phases) views, no copy."""
        rows = np.asarray(buffer).reshape(-1, 1 + len(self.phases))
        return rows[:self.warmup_steps], rows[self.warmup_steps:]

    def step_times_ms(self):
        """Every measured (post-warm-up) step time in ms, in order (resolves pending CUDA events)."""
        self.flush()
        return self._rows(self._ms)[1][:, 0].tolist()

    def summary(self):
        """percentiles() of the measured steps in ms per phase ("other": step minus phases), per step and of the
        compute sum, on both clocks; shares of the median step; CUDA: launch ratios, GPU-behind shares. A sync."""
        self.flush()
        ci = [1 + self.phases.index(p) for p in self.compute_phases]

        def stats(buffer):
            # One clock: {phase: stats, "other": stats}, then stats of the step, the compute sum, the warm-up steps.
            warm, rows = self._rows(buffer)
            by_name = {name: percentiles(rows[:, 1 + i]) for i, name in enumerate(self.phases)}
            by_name["other"] = percentiles(np.maximum(rows[:, 0] - rows[:, 1:].sum(axis=1), 0.0))
            compute = percentiles(rows[:, ci].sum(axis=1) if ci else [])
            return by_name, percentiles(rows[:, 0]), compute, percentiles(warm[:, 0])

        phases, step, gpu_compute, warmup = stats(self._ms)
        host_phases, host_step, host_compute, warmup_host = stats(self._host_ms)
        n, med = step["n"], step["median"]
        shares = {name: (s["median"] / med if med and s["median"] is not None else None) for name, s in phases.items()}
        cuda = self._cuda and n
        return {
            "device": str(self.device),
            "clock": "disabled" if not self.enabled else "cuda-events" if self._cuda else "perf_counter",
            "enabled": self.enabled, "warmup_steps": self.warmup_steps, "measured_steps": n,
            "discarded_steps": self._discarded, "syncs": self._syncs, "phases": phases, "host_phases": host_phases,
            "step": step, "host_step": host_step, "warmup": warmup, "warmup_host": warmup_host,
            "data_share": shares.get("data"), "phase_shares": shares, "compute_phases": list(self.compute_phases),
            "gpu_compute_ms": gpu_compute, "host_compute_ms": host_compute,
            "launch_ratio": (host_compute["median"] / gpu_compute["median"]
                             if self._cuda and gpu_compute["median"] else None),
            "phase_launch_ratios": {p: (host_phases[p]["median"] / phases[p]["median"] if phases[p]["median"]
                                        else None) for p in self.compute_phases} if cuda else None,
            "gpu_behind_share": self._gpu_behind / n if cuda else None,
            "phase_gpu_behind": {p: (self._phase_behind[self.phases.index(p)] / self._sampled_steps
                                     if self._sampled_steps else None) for p in self.compute_phases} if cuda else None}

    def recent(self, last=50):
        """Medians over the latest `last` measured steps for the log line: {"n", "warmup", "step_ms", "data_ms",
        "phases"} (NaN where nothing was measured; in the warm-up only step_ms). Flushes: a sync on CUDA."""
        self.flush()
        warm_rows, rows = self._rows(self._ms)
        warm = not len(rows)
        rows = (warm_rows if warm else rows)[-max(1, int(last)):]
        phases = {name: math.nan if warm else _median_or_nan(rows[:, 1 + i]) for i, name in enumerate(self.phases)}
        return {"n": len(rows), "warmup": warm and bool(len(rows)), "step_ms": _median_or_nan(rows[:, 0]),
                "data_ms": phases.get("data", math.nan), "phases": phases}


def _median_or_nan(a):
    a = a[~np.isnan(a)]
    return float(np.median(a)) if a.size else math.nan


# ---- diagnose --------------------------------------------------------------------------------------
def _pct(x):
    return f"{100.0 * x:.1f}%" if x < 0.1 else f"{100.0 * x:.0f}%"


def diagnose(summary):
    """One line naming what bounds the step, with its numbers, from StepTimer.summary() (and the profiler's optional
    "gpu_busy_share"). Rules in order: data share, CPU run, busy share, GPU behind, host/GPU time per compute phase."""
    def median(stats, key):
        return (stats.get(key) or {}).get("median")

    step = median(summary, "step")
    if not step:
        return "no verdict: no measured steps (all steps were warm-up, or the timer was disabled)"
    phases, host_phases = summary.get("phases") or {}, summary.get("host_phases") or {}
    data, share = median(phases, "data"), summary.get("data_share")
    if share is None and data is not None:
        share = data / step
    data_txt = (f"data wait {format_ms(data)} = {_pct(share)} of the {format_ms(step)} step"
                if share is not None else f"no data phase timed; step {format_ms(step)}")
    if share is not None and share > INPUT_BOUND_SHARE:
        return f"input-bound: {data_txt} (> {_pct(INPUT_BOUND_SHARE)})"
    if not str(summary.get("device", "cpu")).startswith("cuda"):
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
    host_c, gpu_c = median(summary, "host_compute_ms"), median(summary, "gpu_compute_ms")
    issued = (f"the host issued {'+'.join(compute) or 'compute'} in {format_ms(host_c)}, the GPU ran it in "
              f"{format_ms(gpu_c)}")
    # The per-phase rule, where the summary has host and GPU times per compute phase.
    per_phase = [(p, median(host_phases, p), median(phases, p)) for p in compute]
    per_phase = [(p, h, g) for p, h, g in per_phase if g is not None and h is not None]
    total_g = sum(g for _, _, g in per_phase)
    if per_phase and total_g > 0:
        phase_behind = summary.get("phase_gpu_behind") or {}
        big = [(p, h, g) for p, h, g in per_phase if g >= 0.1 * total_g]
        for p, h, g in sorted(big, key=lambda x: x[1] / x[2]):
            if h < LAUNCH_BOUND_RATIO * g:
                return (f"GPU-bound: the GPU ran {p} in {format_ms(g)} after {format_ms(h)} of host issue "
                        f"(host/GPU {h / g:.2f} < {LAUNCH_BOUND_RATIO}); {data_txt}")
            if (phase_behind.get(p) or 0.0) >= GPU_BEHIND_SHARE:
                return (f"GPU-bound: in {_pct(phase_behind[p])} of steps the GPU had not reached {p} when the host "
                        f"left it; {data_txt}")
        ratios = ", ".join(f"{p} {h / g:.2f}" for p, h, g in big)
        return (f"launch/host-bound: {issued} (host/GPU per phase: {ratios}; >= {LAUNCH_BOUND_RATIO}, so the GPU "
                f"waits on the host); {data_txt}")
    ratio = summary.get("launch_ratio")
    if ratio is None or host_c is None or gpu_c is None:
        return f"GPU-bound: {data_txt}; no host/GPU compute split measured"
    if ratio >= LAUNCH_BOUND_RATIO:
        return (f"launch/host-bound: {issued} (host/GPU {ratio:.2f} >= {LAUNCH_BOUND_RATIO}, the GPU waits on the "
                f"host); {data_txt}")
    return f"GPU-bound: {issued} (host/GPU {ratio:.2f} < {LAUNCH_BOUND_RATIO}); {data_txt}"


# ---- Run records -----------------------------------------------------------------------------------
def _run(cmd, cwd=None):
    """stdout of a command, None when it fails or is missing."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None


def git_state():
    """{"git_commit", "git_dirty" (tracked files modified), "git_untracked" (count)}; None where unknown.
    NANOTABPFN_GIT_COMMIT wins: a tree copied to a GPU machine may carry a stale .git, so the copier names it."""
    named = os.environ.get("NANOTABPFN_GIT_COMMIT")
    repo = os.path.dirname(os.path.abspath(__file__))
    commit = named or _run(["git", "rev-parse", "HEAD"], cwd=repo)
    status = _run(["git", "status", "--porcelain"], cwd=repo) if commit and not named else None
    lines = [ln for ln in (status or "").splitlines() if ln.strip()]
    return {"git_commit": commit, "git_dirty": None if status is None else any(not ln.startswith("??") for ln in lines),
            "git_untracked": None if status is None else sum(ln.startswith("??") for ln in lines)}


def git_commit():
    """The commit as one string for results headers: "<sha>", "<sha>+dirty", or "unknown"."""
    state = git_state()
    return state["git_commit"] + ("+dirty" if state["git_dirty"] else "") if state["git_commit"] else "unknown"


def _kvikio_version():
    """From the installed metadata, without importing kvikio (which loads its CUDA libraries) unless it has none."""
    from importlib import metadata
    for dist in ("kvikio-cu13", "kvikio-cu12", "kvikio"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(dist)
    try:
        return getattr(__import__("kvikio"), "__version__", "unknown")
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
        "kvikio": _kvikio_version(), "device": str(device),
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
    """One JSON-ready record per run: config (dict or dataclass), flags, environment_record() (of the summary's
    device when None), the StepTimer summary and its diagnosis, and extra (final loss, loader, ...)."""
    if environment is None:
        environment = environment_record((timer_summary or {}).get("device", "cpu"))
    return to_jsonable({
        "schema_version": RUN_RECORD_SCHEMA_VERSION,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": list(sys.argv), "config": config, "flags": flags, "environment": environment, "timing": timer_summary,
        "diagnosis": diagnose(timer_summary) if timer_summary else None, "extra": extra or {}})


# ---- TrainingProfiler ------------------------------------------------------------------------------
# Host-side rows of the transfer table: the copies are where data moves; the synchronize calls (and
# .item()'s _local_scalar_dense) are where the host waits for queued GPU work.
TRANSFER_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "cudaMemcpyAsync", "cudaStreamSynchronize",
                "cudaDeviceSynchronize", "cudaEventSynchronize", "aten::item", "aten::_local_scalar_dense")
TABLE_TITLES = (("cpu", "Top CPU operations"), ("cuda", "Top CUDA operations"),
                ("transfers", "Memory transfers and host waits"), ("memory", "CUDA memory summary"))
# The memory table: (row, key in stats()["cuda_memory"], torch.cuda.memory_stats key, GiB digits or None: a count).
MEMORY_ROWS = (("Peak allocated", "peak_allocated_bytes", "allocated_bytes.all.peak", 3),
               ("Peak reserved", "peak_reserved_bytes", "reserved_bytes.all.peak", 3),
               ("Currently allocated", "current_allocated_bytes", "allocated_bytes.all.current", 3),
               ("Total allocated (cumulative)", "total_allocated_bytes", "allocated_bytes.all.allocated", 2),
               ("cudaMalloc calls (segments)", "cudamalloc_calls", "segment.all.allocated", None),
               ("cudaMalloc retries", "cudamalloc_retries", "num_alloc_retries", None),
               ("OOMs", "ooms", "num_ooms", None))


class TrainingProfiler:
    """torch.profiler with a wait/warmup/active schedule: `with TrainingProfiler(device, out_dir) as prof:`,
    `with prof.label("## data ##"): ...`, `prof.step()` after each step; then a trace and four tables. The trace is
    out_dir/trace.json, or with a TensorBoard log_dir `<log_dir>/<host>_<pid>.<ms>.pt.trace.json` (Perfetto too)."""
    ROW_LIMIT = 15   # rows of the top-operations tables

    def __init__(self, device="cpu", out_dir="runs/profile", *, log_dir=None, wait=1, warmup=1, active=3,
                 enabled=True):
        if wait < 0 or warmup < 0 or active < 1:
            raise ValueError(f"need wait >= 0, warmup >= 0, active >= 1; got {wait}, {warmup}, {active}")
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.out_dir = os.fspath(out_dir) if log_dir is None else self.log_dir
        self.device, self.enabled = torch.device(device), bool(enabled)
        self.wait, self.warmup, self.active = int(wait), int(warmup), int(active)
        self.trace_path = os.path.join(self.out_dir, "trace.json")   # a TensorBoard name is set when written
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._prof, self._steps, self._trace_written, self._memory = None, 0, False, None
        self._averages = None      # list of FunctionEventAvg from the active window

    def __enter__(self):
        if not self.enabled:
            return self
        from torch.profiler import ProfilerActivity, profile, schedule
        os.makedirs(self.out_dir, exist_ok=True)
        self._prof = profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else []),
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=self._on_trace_ready, record_shapes=True, profile_memory=True)
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
                s = torch.cuda.memory_stats(self.device)
                self._memory = {key: s.get(stats_key, 0) for _, key, stats_key, _ in MEMORY_ROWS}

    def label(self, name):
        """record_function(name) while this profiler is enabled, else a no-op context (the hot loop pays nothing)."""
        return torch.profiler.record_function(name) if self.enabled else contextlib.nullcontext()

    def _on_trace_ready(self, prof):
        # Called by torch when the active window closes (or at exit inside it).
        self._averages = list(prof.key_averages())
        if self.log_dir is not None:
            name = f"{socket.gethostname()}_{os.getpid()}.{time.time_ns() // 1_000_000}.pt.trace.json"
            self.trace_path = os.path.join(self.log_dir, name)
        with atomic_output(self.trace_path, "profiler trace") as tmp:
            prof.export_chrome_trace(tmp)
        self._trace_written = True

    def profiled_steps(self):
        """Steps inside the recorded window (count of ProfilerStep#N events)."""
        return sum(int(e.count) for e in self._rows()[0] if e.key.startswith("ProfilerStep"))

    def _rows(self):
        """(CPU rows, their self CPU µs, GPU activity rows, their self GPU µs) of the recorded window."""
        cpu = [e for e in self._averages or [] if e.device_type.name == "CPU"]
        # GPU-timeline events; labels and ProfilerStep#N appear there too (they would count twice)
        dev = [e for e in self._averages or [] if e.device_type.name != "CPU"
               and not getattr(e, "is_user_annotation", False)]
        return cpu, sum(float(e.self_cpu_time_total) for e in cpu), dev, sum(e.self_device_time_total for e in dev)

    def stats(self):
        """The tables' numbers in ms: per-step totals, GPU busy share (None on CPU), top CPU / CUDA ops, transfers."""
        steps = self.profiled_steps()
        per = max(steps, 1)
        cpu, cpu_total, dev, dev_total = self._rows()
        dev = sorted(dev, key=lambda e: -e.self_device_time_total)
        wall = sum(float(e.cpu_time_total) for e in cpu if e.key.startswith("ProfilerStep"))
        top_cpu = [{"name": e.key, "self_cpu_ms": e.self_cpu_time_total / 1000.0, "cpu_ms": e.cpu_time_total / 1000.0,
                    "share": e.self_cpu_time_total / cpu_total if cpu_total else None, "calls": int(e.count)}
                   for e in sorted(cpu, key=lambda e: -e.self_cpu_time_total)[:self.ROW_LIMIT]]
        top_cuda = [{"name": e.key, "self_cuda_ms": e.self_device_time_total / 1000.0,
                     "share": e.self_device_time_total / dev_total if dev_total else None, "calls": int(e.count)}
                    for e in dev[:self.ROW_LIMIT]]
        by_key, transfers = {e.key: e for e in cpu}, []
        for name in TRANSFER_OPS:
            e = by_key.get(name)
            total, calls = (float(e.cpu_time_total) / 1000.0, int(e.count)) if e is not None else (0.0, 0)
            transfers.append({"name": name, "cpu_total_ms": total, "cpu_ms_per_step": total / per,
                              "share": (total * 1000.0 / cpu_total) if cpu_total else None,
                              "calls": calls, "calls_per_step": calls / per, "device_ms_per_step": None})
        if self.cuda:   # the GPU side of the copies: how long the copy engine really moved bytes
            transfers += [{"name": e.key + " (GPU)", "cpu_total_ms": None, "cpu_ms_per_step": None, "share": None,
                           "calls": int(e.count), "calls_per_step": int(e.count) / per,
                           "device_ms_per_step": e.self_device_time_total / 1000.0 / per}
                          for e in dev if e.key.startswith(("Memcpy", "Memset"))]
        return {
            "profiled_steps": steps, "trace_path": self.trace_path if self._trace_written else None,
            "cpu_self_ms_per_step": cpu_total / 1000.0 / per, "step_wall_ms": wall / 1000.0 / per if steps else None,
            "gpu_kernel_ms_per_step": dev_total / 1000.0 / per if self.cuda else None,
            "gpu_busy_share": min(dev_total / wall, 1.0) if self.cuda and wall > 0 else None, "top_cpu": top_cpu,
            "top_cuda": top_cuda if self.cuda else [], "transfers": transfers, "cuda_memory": self._memory}

    def tables(self):
        """{"cpu", "cuda", "transfers", "memory"}: markdown sections from a '### ' title (or why they are empty)."""
        if not self.enabled or self._averages is None:
            msg = (f"profiler recorded nothing: {self._steps} steps ran, the schedule needs more than wait+warmup="
                   f"{self.wait + self.warmup} (window ends at step {self.wait + self.warmup + self.active})\n"
                   if self.enabled else "profiler disabled\n")
            return {k: f"### {t}\n\n{msg}" for k, t in TABLE_TITLES}
        s = self.stats()
        steps, (_, cpu_total, _, dev_total) = s["profiled_steps"], self._rows()
        no_gpu = ("CUDA tables need a GPU: this run profiled the CPU only (device "
                  f"{self.device}, torch.cuda.is_available()={torch.cuda.is_available()}).\n")
        # Self time of the step wrapper = host time inside the step but outside every recorded op.
        cpu_rows = [["ProfilerStep* (outside any op: Python, waits)" if r["name"].startswith("ProfilerStep")
                     else _short(r["name"]), format_ms(r["self_cpu_ms"]), _share_cell(r["share"]),
                     format_ms(r["cpu_ms"]), r["calls"]] for r in s["top_cpu"]]
        out = {"cpu": f"### Top CPU operations by self CPU time ({steps} profiled steps)\n\n"
                      + markdown_table(["Name", "Self CPU total", "Self CPU %", "CPU total", "Calls"], cpu_rows)
                      + f"\nSelf CPU time total: {format_ms(cpu_total / 1000.0)} "
                        f"({format_ms(s['cpu_self_ms_per_step'])} per step)\n",
               "cuda": "### Top CUDA operations\n\n" + no_gpu}
        if self.cuda:
            cuda_rows = [[_short(r["name"]), format_ms(r["self_cuda_ms"]), _share_cell(r["share"]), r["calls"]]
                         for r in s["top_cuda"]]
            out["cuda"] = (f"### Top CUDA operations by self CUDA time ({steps} profiled steps)\n\n"
                           "GPU-side activity (kernels, memcpy, memset); the aten op that launched each one "
                           "is in the CPU table.\n\n"
                           + markdown_table(["Name", "Self CUDA total", "Self CUDA %", "Calls"], cuda_rows)
                           + f"\nSelf CUDA time total: {format_ms(dev_total / 1000.0)} "
                             f"({format_ms(s['gpu_kernel_ms_per_step'])} per step; GPU busy "
                             f"{_pct(s['gpu_busy_share'] or 0.0)} of the {format_ms(s['step_wall_ms'])} "
                             "profiled step)\n")
        transfer_rows = [[r["name"], *(_ms_or_dash(r[k], r["calls"]) for k in ("cpu_total_ms", "cpu_ms_per_step")),
                          _share_cell(r["share"]) if r["calls"] else None, r["calls"], f"{r['calls_per_step']:.1f}",
                          _ms_or_dash(r["device_ms_per_step"], r["calls"])] for r in s["transfers"]]
        out["transfers"] = (
            f"### Memory transfers and host waits ({steps} profiled steps)\n\n"
            "CPU total includes children (aten::to contains aten::_to_copy contains aten::copy_ "
            "contains cudaMemcpyAsync), so rows overlap; % is of the total self CPU time. A "
            "synchronous copy or a synchronize is where the host waits for queued GPU work; "
            "compare with the GPU time of the copies (rows marked GPU).\n\n"
            + markdown_table(["Name", "CPU total", "CPU per step", "% of CPU", "Calls", "Calls per step",
                              "GPU per step"], transfer_rows)
            + "\n'—': not called in the profiled steps (or no GPU side).\n")
        out["memory"] = "### CUDA memory summary\n\n" + no_gpu
        if self.cuda and self._memory is not None:
            rows = [[row, self._memory[key] if digits is None else f"{self._memory[key] / 2**30:.{digits}f} GiB"]
                    for row, key, _, digits in MEMORY_ROWS]
            out["memory"] = (f"### CUDA memory summary ({self.device}, since process start or the last "
                             "reset_peak_memory_stats)\n\n" + markdown_table(["Metric", "Value"], rows))
        return out

    def tables_markdown(self):
        """The four tables as one markdown string."""
        return "\n".join(self.tables().values())

    def print_tables(self, file=None):
        print(self.tables_markdown(), file=file)


def _short(name, width=80):
    return name if len(name) <= width else name[: width - 1] + "…"


def _ms_or_dash(ms, calls):
    return format_ms(ms) if ms is not None and calls else None


def _share_cell(share):
    return f"{100.0 * share:.1f}%" if share is not None else None
