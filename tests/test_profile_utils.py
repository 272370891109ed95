"""Tests for profile_utils: the step timer, diagnose, run records (written through safe_io), the profiler tables.

CPU tests run anywhere in a few seconds; the CUDA tests at the end check the event clock against
a synchronize-per-phase clock, the timer's cost and the verdicts on real GPU loops.
"""
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest
import torch

import profile_utils as pu
import safe_io

STATS_KEYS = {"n", "median", "p10", "p90", "mean", "std", "min", "max"}
SUMMARY_KEYS = {"device", "clock", "enabled", "warmup_steps", "measured_steps", "discarded_steps",
                "syncs", "phases", "host_phases", "step", "host_step", "warmup", "warmup_host",
                "data_share", "phase_shares", "compute_phases", "gpu_compute_ms",
                "host_compute_ms", "launch_ratio", "phase_launch_ratios", "gpu_behind_share",
                "phase_gpu_behind"}
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _sleep_ms(ms):
    time.sleep(ms / 1000.0)


# ----------------------------------------------------------------------------------------------
# StepTimer on CPU
# ----------------------------------------------------------------------------------------------

def test_cpu_phase_medians_match_known_sleeps_and_warmup_is_apart():
    sleeps = {"data": 6.0, "forward": 3.0, "backward": 0.0, "optimizer": 1.5}
    timer = pu.StepTimer("cpu", warmup_steps=2)
    for step in range(10):
        timer.start_step()
        for name, ms in sleeps.items():
            with timer.phase(name):
                _sleep_ms(ms + (25.0 if step < 2 and name == "forward" else 0.0))
        timer.end_step()
    s = timer.summary()
    assert s["measured_steps"] == 8 and s["warmup"]["n"] == 2 and s["step"]["n"] == 8
    assert s["clock"] == "perf_counter" and s["syncs"] == 0
    slack = 3.0   # sleep never returns early; a busy runner may add a few ms
    for name, ms in sleeps.items():
        med = s["phases"][name]["median"]
        assert s["phases"][name]["n"] == 8
        assert ms <= med <= ms + slack, (name, med)
    # the 25 ms warm-up forward passes are reported apart, not in the step statistics
    assert s["warmup"]["median"] >= 25.0 + sum(sleeps.values())
    assert s["step"]["max"] < 25.0
    total = sum(s["phases"][n]["median"] for n in sleeps)
    assert total <= s["step"]["median"] + 0.5
    assert s["phases"]["other"]["median"] < 1.0
    assert s["data_share"] == pytest.approx(s["phases"]["data"]["median"] / s["step"]["median"])
    # data's share of the step, within what the slack above allows (0.26-0.67; 0.57 idle); the line above pins its formula
    nominal = sum(sleeps.values())
    low, high = sleeps["data"] / (nominal + slack * len(sleeps) + 1.0), (sleeps["data"] + slack) / (nominal + slack)
    assert low < s["data_share"] < high
    # on CPU the host view is the clock of record
    assert s["host_step"]["median"] == pytest.approx(s["step"]["median"])


def test_summary_keys_and_stats_shape():
    timer = pu.StepTimer("cpu", warmup_steps=1)
    for _ in range(4):
        timer.start_step()
        with timer.phase("data"):
            pass
        timer.end_step()
    s = timer.summary()
    assert set(s) == SUMMARY_KEYS
    assert set(s["phases"]) == {"data", "forward", "backward", "optimizer", "other"}
    assert set(s["host_phases"]) == set(s["phases"])
    for stats in list(s["phases"].values()) + [s["step"], s["host_step"], s["warmup"]]:
        assert set(stats) == STATS_KEYS
    # phases not entered in a step count as 0 ms for that step
    assert s["phases"]["forward"]["median"] == 0.0 and s["phases"]["forward"]["n"] == 3
    assert s["launch_ratio"] is None and s["gpu_behind_share"] is None   # CPU run
    assert s["phase_launch_ratios"] is None and s["phase_gpu_behind"] is None
    json.dumps(s, allow_nan=False)


def test_repeated_phase_in_one_step_adds_up():
    timer = pu.StepTimer("cpu", phases=("data", "forward"))
    for _ in range(3):
        timer.start_step()
        for _ in range(2):   # e.g. two micro-batches of gradient accumulation
            with timer.phase("forward"):
                _sleep_ms(2.0)
        timer.end_step()
    assert timer.summary()["phases"]["forward"]["median"] >= 4.0


def test_misuse_raises_clearly():
    timer = pu.StepTimer("cpu")
    with pytest.raises(ValueError, match="unknown phase"):
        timer.phase("fetch")
    with pytest.raises(RuntimeError, match="outside start_step"):
        with timer.phase("data"):
            pass
    with pytest.raises(RuntimeError, match="end_step\\(\\) without"):
        timer.end_step()
    timer.start_step()
    with pytest.raises(RuntimeError, match="do not nest"):
        with timer.phase("forward"):
            with timer.phase("backward"):
                pass
    with pytest.raises(ValueError):
        pu.StepTimer("cpu", phases=("data", "other"))
    with pytest.raises(ValueError):
        pu.StepTimer("cpu", compute_phases=("nope",))


def test_unfinished_step_is_discarded_and_counted():
    timer = pu.StepTimer("cpu")
    timer.start_step()
    with timer.phase("data"):
        pass
    timer.start_step()   # the first one never reached end_step
    timer.end_step()
    s = timer.summary()
    assert s["discarded_steps"] == 1 and s["measured_steps"] == 1


def test_disabled_timer_records_nothing():
    timer = pu.StepTimer("cpu", enabled=False)
    assert timer.phase("data") is timer.phase("forward")   # one shared no-op context
    for _ in range(100):
        timer.start_step()
        with timer.phase("data"):
            pass
        timer.end_step()
    s = timer.summary()
    assert s["clock"] == "disabled" and s["measured_steps"] == 0
    assert pu.diagnose(s).startswith("no verdict")


def test_recent_for_the_log_line():
    timer = pu.StepTimer("cpu", warmup_steps=2)
    r = timer.recent(10)
    assert r["n"] == 0 and math.isnan(r["step_ms"]) and math.isnan(r["data_ms"])
    for i in range(6):
        timer.start_step()
        with timer.phase("data"):
            _sleep_ms(1.0 if i >= 2 else 0.0)
        timer.end_step()
        if i == 0:
            r = timer.recent(10)   # warm-up only: a step time, no phase times yet
            assert r["warmup"] and r["n"] == 1 and r["step_ms"] >= 0 and math.isnan(r["data_ms"])
    r = timer.recent(3)
    assert not r["warmup"] and r["n"] == 3 and r["data_ms"] >= 1.0
    assert r["step_ms"] >= r["data_ms"] and set(r["phases"]) == set(timer.phases)


class _NoTimer:
    """The calls of a timer that does nothing: measure_overhead's baseline."""

    def start_step(self):
        pass

    end_step = start_step

    def phase(self, name):
        return pu._NULL_PHASE


def measure_overhead(device="cpu", steps=2000, phases=pu.DEFAULT_PHASES, repeats=3):
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
    on = max(best(lambda: pu.StepTimer(device, phases=phases)) - base, 0.0)
    off = max(best(lambda: pu.StepTimer(device, phases=phases, enabled=False)) - base, 0.0)
    return {"per_step_us": on * 1e6, "per_phase_us": on * 1e6 / len(phases), "disabled_per_step_us": off * 1e6}


def _clock_reads_per_step(monkeypatch, enabled, steps):
    """perf_counter reads the timer makes in each of `steps` 4-phase steps (CPU)."""
    reads = []
    real = time.perf_counter

    def counting():
        reads[-1] += 1
        return real()
    monkeypatch.setattr(pu.time, "perf_counter", counting)
    timer = pu.StepTimer("cpu", enabled=enabled)
    for _ in range(steps):
        reads.append(0)
        timer.start_step()
        for name in ("data", "forward", "backward", "optimizer"):
            with timer.phase(name):
                pass
        timer.end_step()
    monkeypatch.setattr(pu.time, "perf_counter", real)
    return reads, timer


def test_timer_hot_path_does_constant_small_work_per_step(monkeypatch, capsys):
    """No timed bound (timings belong in benchmark.py): the hot path's work is counted instead. A step
    reads the clock a fixed, small number of times (two per phase, two per step), the same at step 5
    and step 500 (nothing grows with the run), prints nothing, and a disabled timer reads no clock."""
    reads, timer = _clock_reads_per_step(monkeypatch, True, 500)
    assert set(reads) == {2 * 4 + 2}
    assert timer.summary()["syncs"] == 0
    disabled, _ = _clock_reads_per_step(monkeypatch, False, 50)
    assert set(disabled) == {0}
    assert capsys.readouterr().out == ""
    m = measure_overhead(steps=200)
    assert m["per_step_us"] > 0 and m["per_phase_us"] == pytest.approx(m["per_step_us"] / 4)


def test_memory_stays_flat_floats_not_objects():
    steps, warm = 10_000, 10
    timer = pu.StepTimer("cpu", warmup_steps=warm)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(steps):
        timer.start_step()
        with timer.phase("data"):
            pass
        with timer.phase("forward"):
            pass
        timer.end_step()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    measured = steps - warm
    floats = measured * 2 * (len(timer.phases) + 1)   # clock + host view, phases + step
    # array('d') keeps 8 bytes a float; Python float objects in lists would cost >= 32.
    assert grown < 12 * floats, f"{grown} bytes for {floats} floats"
    s = timer.summary()
    assert s["measured_steps"] == measured and s["phases"]["data"]["n"] == measured


# ----------------------------------------------------------------------------------------------
# diagnose
# ----------------------------------------------------------------------------------------------

def _stats(median):
    return pu.percentiles([median])


def _fake_summary(device="cuda:0", data=1.0, host=None, gpu=None, behind=0.0, phase_behind=None,
                  other=0.5):
    """A StepTimer-like summary: host / gpu are {phase: median ms} of the compute phases."""
    host = host or {"forward": 1.0, "backward": 1.5, "optimizer": 0.5}
    gpu = gpu or {"forward": 60.0, "backward": 110.0, "optimizer": 3.0}
    cuda = device.startswith("cuda")
    step = data + sum(gpu.values()) + other
    host_c, gpu_c = sum(host.values()), sum(gpu.values())
    return {
        "device": device, "step": _stats(step), "data_share": data / step,
        "phases": {"data": _stats(data), **{p: _stats(v) for p, v in gpu.items()}},
        "host_phases": {"data": _stats(data), **{p: _stats(v) for p, v in host.items()}},
        "compute_phases": list(gpu), "host_compute_ms": _stats(host_c),
        "gpu_compute_ms": _stats(gpu_c), "launch_ratio": host_c / gpu_c if cuda else None,
        "gpu_behind_share": behind if cuda else None,
        "phase_gpu_behind": (phase_behind or {p: 0.0 for p in gpu}) if cuda else None,
    }


def test_diagnose_input_bound_names_the_numbers():
    s = _fake_summary(data=41.2, gpu={"forward": 45.0, "backward": 90.0, "optimizer": 3.3},
                      other=0.5)
    line = pu.diagnose(s)
    assert line.startswith("input-bound:")
    assert "41.2 ms" in line and "23%" in line and "180 ms" in line
    assert "\n" not in line


def test_diagnose_launch_bound_when_every_big_phase_is_host_paced():
    s = _fake_summary(data=0.01, host={"forward": 0.95, "backward": 1.9, "optimizer": 0.01},
                      gpu={"forward": 1.0, "backward": 2.0, "optimizer": 0.2})
    line = pu.diagnose(s)
    # the optimizer holds < 10% of the GPU compute time: its low ratio does not count
    assert line.startswith("launch/host-bound:") and "forward 0.95" in line
    assert "optimizer" not in line.split("per phase:")[1].split(";")[0]


def test_diagnose_gpu_bound_when_host_issues_fast():
    line = pu.diagnose(_fake_summary(data=0.5))
    assert line.startswith("GPU-bound:") and "ran backward in 110 ms" in line and "0.01" in line


def test_diagnose_gpu_bound_despite_a_sync_inside_backward():
    # upstream's loss.item() inside the backward phase: the host waits there, so backward looks
    # host-paced, but the sync-free forward shows the GPU running far behind the host.
    s = _fake_summary(data=0.5, host={"forward": 2.0, "backward": 110.0, "optimizer": 0.4},
                      gpu={"forward": 60.0, "backward": 110.0, "optimizer": 3.0})
    assert s["launch_ratio"] > 0.6   # the compute total alone would hide it
    line = pu.diagnose(s)
    assert line.startswith("GPU-bound:") and "forward" in line


def test_diagnose_gpu_bound_when_the_gpu_is_behind():
    # Host blocked on a full launch queue: issue time ~ GPU time, but the GPU had work queued.
    host = {"forward": 48.0, "backward": 98.0, "optimizer": 2.9}
    gpu = {"forward": 49.0, "backward": 99.0, "optimizer": 3.0}
    line = pu.diagnose(_fake_summary(data=0.1, host=host, gpu=gpu, behind=0.9))
    assert line.startswith("GPU-bound:") and "90%" in line
    line = pu.diagnose(_fake_summary(data=0.1, host=host, gpu=gpu,
                                     phase_behind={"forward": 0.0, "backward": 0.8}))
    assert line.startswith("GPU-bound:") and "had not reached backward" in line
    assert pu.diagnose(_fake_summary(data=0.1, host=host, gpu=gpu)).startswith("launch/host")


def test_diagnose_prefers_profiler_busy_share_and_edges():
    s = _fake_summary(data=0.1)
    s["gpu_busy_share"] = 0.4
    assert pu.diagnose(s).startswith("launch/host-bound:")
    s["gpu_busy_share"] = 0.95
    assert pu.diagnose(s).startswith("GPU-bound:")
    # exactly 5% is not input-bound (the rule is "more than 5%")
    s = _fake_summary(data=5.0, gpu={"forward": 30.0, "backward": 60.0, "optimizer": 4.5})
    assert s["data_share"] == pytest.approx(0.05)
    assert not pu.diagnose(s).startswith("input-bound")
    assert pu.diagnose(_fake_summary(device="cpu", data=0.2)).startswith("CPU-bound:")
    assert pu.diagnose(_fake_summary(device="cpu", data=50.0)).startswith("input-bound:")
    # without per-phase host times: the compute-total fallback
    s = _fake_summary(data=0.1, host={"forward": 0.9, "backward": 1.9, "optimizer": 0.2},
                      gpu={"forward": 1.0, "backward": 2.0, "optimizer": 0.2})
    del s["host_phases"]
    assert pu.diagnose(s).startswith("launch/host-bound:") and "host/GPU 0.94" in pu.diagnose(s)


def test_diagnose_on_a_real_cpu_summary():
    timer = pu.StepTimer("cpu")
    for _ in range(4):
        timer.start_step()
        with timer.phase("data"):
            _sleep_ms(3.0)
        with timer.phase("forward"):
            _sleep_ms(1.0)
        timer.end_step()
    assert pu.diagnose(timer.summary()).startswith("input-bound: data wait")


# ----------------------------------------------------------------------------------------------
# Run records
# ----------------------------------------------------------------------------------------------

def test_write_json_atomic_converts_scalars_and_makes_parents(tmp_path):
    path = tmp_path / "a" / "b" / "rec.json"
    obj = {"np": np.float32(1.5), "i": np.int64(3), "t": torch.tensor(2.5), "arr": np.arange(3),
           "nan": float("nan"), "inf": -math.inf, "dtype": torch.float32, "tuple": (1, 2)}
    safe_io.write_json_atomic(path, obj)
    back = json.loads(path.read_text())
    assert back == {"np": 1.5, "i": 3, "t": 2.5, "arr": [0, 1, 2], "nan": "NaN",
                    "inf": "-Infinity", "dtype": "torch.float32", "tuple": [1, 2]}
    assert os.listdir(path.parent) == ["rec.json"]


def test_write_json_atomic_puts_each_number_list_on_one_line(tmp_path):
    path = tmp_path / "rec.json"
    obj = {"losses": [2.5, -3e-05, 1e+20, 7], "grid": [[1, 2], [3, 4]], "names": ["a", "b"], "mixed": [1, "NaN"]}
    safe_io.write_json_atomic(path, obj)
    text = path.read_text()
    assert json.loads(text) == obj                                         # the same content
    assert '"losses": [2.5, -3e-05, 1e+20, 7]' in text and "[1, 2]" in text and "[3, 4]" in text
    assert '"names": [\n' in text and '"mixed": [\n' in text                # lists holding strings stay indented


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_write_json_atomic_failure_keeps_previous_file(tmp_path, monkeypatch, failing):
    path = tmp_path / "rec.json"
    safe_io.write_json_atomic(path, {"version": 1})

    def boom(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(safe_io.os, failing, boom)
    with pytest.raises(OSError, match="simulated"):
        safe_io.write_json_atomic(path, {"version": 2})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"version": 1}
    assert os.listdir(tmp_path) == ["rec.json"]   # no temp file left behind


def test_write_json_atomic_rejects_unserialisable_before_touching_disk(tmp_path):
    path = tmp_path / "rec.json"
    safe_io.write_json_atomic(path, {"version": 1})
    with pytest.raises(TypeError, match="cannot write object"):
        safe_io.write_json_atomic(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"version": 1}
    assert os.listdir(tmp_path) == ["rec.json"]


def test_environment_record_keys():
    rec = pu.environment_record("cpu")
    expected = {"git_commit", "git_dirty", "git_untracked", "hostname", "platform", "python",
                "numpy", "torch", "cuda", "cudnn", "kvikio", "device", "gpu_name", "gpu_count",
                "gpu_memory_gib", "gpu_capability", "driver", "cpu_count", "time_utc"}
    assert set(rec) == expected
    assert rec["torch"] == torch.__version__ and rec["cpu_count"] == os.cpu_count()
    assert rec["device"] == "cpu"
    assert rec["git_commit"] is None or len(rec["git_commit"]) == 40
    if not torch.cuda.is_available():
        assert rec["gpu_count"] == 0 and rec["gpu_name"] is None
    json.dumps(rec, allow_nan=False)


def test_make_run_record_is_strict_json_with_diagnosis():
    @dataclasses.dataclass
    class Cfg:
        lr: float = 4e-3
        steps: int = 10

    timer = pu.StepTimer("cpu")
    for _ in range(3):
        timer.start_step()
        with timer.phase("forward"):
            pass
        timer.end_step()
    env = {"torch": torch.__version__}
    rec = pu.make_run_record(Cfg(), {"flash": False}, timer.summary(),
                             {"final_loss": np.float32(0.5)}, environment=env)
    assert rec["schema_version"] == pu.RUN_RECORD_SCHEMA_VERSION
    assert rec["config"] == {"lr": 4e-3, "steps": 10} and rec["extra"]["final_loss"] == 0.5
    assert rec["diagnosis"].startswith("CPU-bound") and rec["environment"] == env
    assert rec["timing"]["measured_steps"] == 3
    json.dumps(rec, allow_nan=False)


# ----------------------------------------------------------------------------------------------
# TrainingProfiler on CPU
# ----------------------------------------------------------------------------------------------

def _tiny_training(prof, steps, device="cpu"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        with prof.label("## data ##"):
            x = torch.randn(32, 8).to(device)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()


def test_training_profiler_cpu_tables_and_trace(tmp_path):
    with pu.TrainingProfiler("cpu", out_dir=tmp_path / "prof", wait=1, warmup=1, active=3) as prof:
        _tiny_training(prof, steps=7)
    assert prof.profiled_steps() == 3
    tables = prof.tables()
    assert set(tables) == {"cpu", "cuda", "transfers", "memory"}
    assert "aten::addmm" in tables["cpu"] and "| Self CPU total |" in tables["cpu"]
    assert "## data ##" in tables["cpu"]
    assert "CUDA tables need a GPU" in tables["cuda"]
    assert "CUDA tables need a GPU" in tables["memory"]
    assert "| aten::to |" in tables["transfers"] and "cudaMemcpyAsync" in tables["transfers"]
    text = prof.tables_markdown()
    assert text.count("### ") == 4
    stats = prof.stats()
    rows = {r["name"]: r for r in stats["transfers"]}
    to = rows["aten::to"]   # our .to(device) plus the ones inside the loss / optimizer
    assert to["calls"] >= 3 and to["calls_per_step"] == pytest.approx(to["calls"] / 3)
    assert to["cpu_ms_per_step"] == pytest.approx(to["cpu_total_ms"] / 3)
    assert rows["cudaStreamSynchronize"]["calls"] == 0
    assert stats["gpu_busy_share"] is None and stats["top_cpu"][0]["self_cpu_ms"] > 0
    trace = json.loads((tmp_path / "prof" / "trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::addmm" in names
    assert os.listdir(tmp_path / "prof") == ["trace.json"]


def test_training_profiler_trace_in_a_tensorboard_log_dir(tmp_path):
    """With log_dir the trace is `<log_dir>/<host>_<pid>.<ms>.pt.trace.json`, where TensorBoard's profiler
    plugin (and Perfetto) find it, and nothing is written to out_dir."""
    log_dir = tmp_path / "tb" / "run1"
    with pu.TrainingProfiler("cpu", out_dir=tmp_path / "unused", log_dir=log_dir, wait=1, warmup=1,
                             active=2) as prof:
        _tiny_training(prof, steps=5)
    files = os.listdir(log_dir)
    assert len(files) == 1 and files[0].endswith(".pt.trace.json"), files
    assert prof.stats()["trace_path"] == str(log_dir / files[0])
    trace = json.loads((log_dir / files[0]).read_text())
    assert "aten::addmm" in {e.get("name") for e in trace["traceEvents"]}
    assert not (tmp_path / "unused").exists()


def test_training_profiler_print_and_too_few_steps(tmp_path, capsys):
    with pu.TrainingProfiler("cpu", out_dir=tmp_path, wait=2, warmup=1, active=2) as prof:
        _tiny_training(prof, steps=1)
    prof.print_tables()
    out = capsys.readouterr().out
    assert "profiler recorded nothing: 1 steps ran" in out
    assert not (tmp_path / "trace.json").exists()


def test_training_profiler_disabled_is_a_no_op(tmp_path):
    prof = pu.TrainingProfiler("cpu", out_dir=tmp_path / "never", enabled=False)
    with prof:
        with prof.label("x") as ctx:
            assert ctx is None
        prof.step()
    assert "profiler disabled" in prof.tables_markdown()
    assert not (tmp_path / "never").exists()


# ----------------------------------------------------------------------------------------------
# Formatting
# ----------------------------------------------------------------------------------------------

def test_formatting_helpers():
    assert pu.format_ms(180.0) == "180 ms" and pu.format_ms(41.23) == "41.2 ms"
    assert pu.format_ms(3.14159) == "3.14 ms" and pu.format_ms(0.078) == "78.0 µs"
    assert pu.format_ms(None) == "n/a" and pu.format_ms(float("nan")) == "n/a"
    table = pu.markdown_table(["name", "ms"], [["a|b", 1.23456], ["c", None]])
    assert table.splitlines() == ["| name | ms |", "| :--- | ---: |", "| a\\|b | 1.235 |",
                                  "| c | — |"]
    with pytest.raises(ValueError):
        pu.markdown_table(["a", "b"], [[1]])
    p = pu.percentiles(range(1, 101))
    assert p["n"] == 100 and p["median"] == 50.5 and p["min"] == 1 and p["max"] == 100
    assert p["p10"] == pytest.approx(10.9) and p["p90"] == pytest.approx(90.1)
    assert p["std"] == pytest.approx(np.std(np.arange(1, 101), ddof=1))
    assert pu.percentiles([])["median"] is None and pu.percentiles([])["n"] == 0
    assert pu.percentiles([1.0, float("nan"), 3.0]) == pu.percentiles([1.0, 3.0])


def test_import_has_no_side_effects():
    code = ("import sys, profile_utils; "
            "print('matplotlib' in sys.modules, 'kvikio' in sys.modules, "
            "'model' in sys.modules, 'loaders' in sys.modules)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "False", "False"]


# ----------------------------------------------------------------------------------------------
# CUDA: the event clock, its cost, and the verdicts on real loops
# ----------------------------------------------------------------------------------------------

def _gpu_work(a, n):
    for _ in range(n):
        a = torch.tanh(a @ a) * 0.5   # ~ms per matmul at 4096: the GPU is the bottleneck
    return a


def _timed_loop(timer, steps, data_ms, fwd_n, bwd_n, a, sync="other"):
    """sync: where the loop reads a value back each step: "other" (after the optimizer phase,
    outside the compute phases), "backward" (inside it, as upstream's loss.item()), or None."""
    for _ in range(steps):
        timer.start_step()
        with timer.phase("data"):
            _sleep_ms(data_ms)
        with timer.phase("forward"):
            b = _gpu_work(a, fwd_n)
        with timer.phase("backward"):
            b = _gpu_work(b, bwd_n)
            if sync == "backward":
                b.sum().item()
        with timer.phase("optimizer"):
            b = b + 1
        if sync == "other":
            b.sum().item()
        timer.end_step()


@needs_cuda
def test_cuda_events_agree_with_a_synchronize_per_phase_clock():
    dev = torch.device("cuda")
    a = torch.randn(4096, 4096, device=dev) / 64
    _gpu_work(a, 3)
    timer = pu.StepTimer(dev, warmup_steps=2)
    _timed_loop(timer, 12, data_ms=5.0, fwd_n=3, bwd_n=6, a=a)
    s = timer.summary()
    assert s["clock"] == "cuda-events" and s["measured_steps"] == 10
    # Reference: synchronize before every clock read (what the timer avoids on its fast path).
    ref = {"data": [], "forward": [], "backward": []}
    for _ in range(10):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        _sleep_ms(5.0)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        b = _gpu_work(a, 3)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        _gpu_work(b, 6)
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        ref["data"].append((t1 - t0) * 1e3)
        ref["forward"].append((t2 - t1) * 1e3)
        ref["backward"].append((t3 - t2) * 1e3)
    for name, values in ref.items():
        want, got = float(np.median(values)), s["phases"][name]["median"]
        print(f"{name}: events {got:.3f} ms, synchronized clock {want:.3f} ms")
        assert abs(got - want) <= 0.05 * want + 0.3, (name, got, want)
    # the host issued forward+backward in far less time than the GPU ran them
    assert s["launch_ratio"] < 0.3
    assert s["syncs"] <= 2   # flush() in summary(), nothing per step
    # On a GPU-bound loop the timer cannot slow the step: the host waits at .item() anyway.
    walls = {}
    for enabled in (False, True, False, True):
        timer = pu.StepTimer(dev, enabled=enabled)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        _timed_loop(timer, 8, data_ms=0.0, fwd_n=3, bwd_n=6, a=a)
        walls.setdefault(enabled, []).append((time.perf_counter() - t0) / 8 * 1e3)
    off, on = min(walls[False]), min(walls[True])
    print(f"GPU-bound step: timer off {off:.3f} ms, on {on:.3f} ms")
    assert abs(on - off) < 0.02 * off + 0.1, (on, off)


@needs_cuda
def test_cuda_timer_cost_is_noise_on_a_launch_bound_loop():
    dev = torch.device("cuda")
    x = torch.zeros(1, device=dev)
    # Three timers used in turn, step by step, so host noise and drift hit all of them alike.
    timers = {"off": pu.StepTimer(dev, enabled=False), "on": pu.StepTimer(dev),
              "on, phase_every=10": pu.StepTimer(dev, phase_every=10)}
    times = {k: [] for k in timers}
    for i in range(3 * 220):
        key = list(timers)[i % 3]
        timer = timers[key]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        timer.start_step()
        with timer.phase("data"):
            y = x + 1
        for name in ("forward", "backward", "optimizer"):
            with timer.phase(name):
                for _ in range(100):   # tiny kernels: the host launch rate is the limit
                    y = y + 1
        timer.end_step()
        torch.cuda.synchronize()
        if i >= 60:   # the first 20 steps of each are warm-up
            times[key].append((time.perf_counter() - t0) * 1e3)
    med = {k: float(np.median(v)) for k, v in times.items()}
    off = med["off"]
    summaries = {k: timers[k].summary() for k in ("on", "on, phase_every=10")}
    empty = measure_overhead(dev, steps=500)
    for k, s in summaries.items():
        print(f"launch-bound step, timer {k}: {med[k]:.3f} ms vs off {off:.3f} ms: "
              f"{(med[k] - off) * 1e3:+.1f} µs per step ({100 * (med[k] - off) / off:+.1f}%); "
              f"{pu.diagnose(s)}")
    print(f"empty-step timer cost {empty['per_step_us']:.1f} µs")
    s, s10 = summaries["on"], summaries["on, phase_every=10"]
    assert med["on"] - off < 0.05 * off + 0.05, med   # 6 event records: tens of µs
    assert med["on, phase_every=10"] - off < 0.03 * off + 0.03, med
    assert pu.diagnose(s).startswith("launch/host-bound")
    assert pu.diagnose(s10).startswith("launch/host-bound")
    assert s10["phases"]["forward"]["n"] == 22 and s10["step"]["n"] == 220


@needs_cuda
def test_cuda_verdicts_on_real_loops():
    dev = torch.device("cuda")
    big = torch.randn(4096, 4096, device=dev) / 64      # ~2.7 ms per matmul
    small = torch.randn(8, 8, device=dev) / 8           # ~µs kernels: launch-bound
    _gpu_work(big, 3)
    verdicts = {}
    for case, kwargs in {
            "input": dict(data_ms=20.0, fwd_n=1, bwd_n=1, a=big),
            "gpu_sync_other": dict(data_ms=0.0, fwd_n=4, bwd_n=8, a=big),
            "gpu_sync_in_backward": dict(data_ms=0.0, fwd_n=4, bwd_n=8, a=big, sync="backward"),
            "gpu_nosync": dict(data_ms=0.0, fwd_n=4, bwd_n=8, a=big, sync=None),
            "launch_sync_other": dict(data_ms=0.0, fwd_n=40, bwd_n=80, a=small),
            "launch_sync_in_backward": dict(data_ms=0.0, fwd_n=40, bwd_n=80, a=small,
                                            sync="backward")}.items():
        timer = pu.StepTimer(dev, warmup_steps=2)
        _timed_loop(timer, 14, **kwargs)
        verdicts[case] = pu.diagnose(timer.summary())
        print(case, "->", verdicts[case])
    assert verdicts["input"].startswith("input-bound")
    for case in ("gpu_sync_other", "gpu_sync_in_backward", "gpu_nosync"):
        assert verdicts[case].startswith("GPU-bound"), case
    for case in ("launch_sync_other", "launch_sync_in_backward"):
        assert verdicts[case].startswith("launch/host-bound"), case


@needs_cuda
def test_cuda_profiler_tables(tmp_path):
    dev = torch.device("cuda")
    with pu.TrainingProfiler(dev, out_dir=tmp_path, wait=1, warmup=1, active=3) as prof:
        _tiny_training(prof, steps=6, device=dev)
    tables = prof.tables()
    print(prof.tables_markdown())
    assert "CUDA tables need a GPU" not in tables["cuda"] + tables["memory"]
    assert "Self CUDA total" in tables["cuda"] and "Peak allocated" in tables["memory"]
    rows = {r["name"]: r for r in prof.stats()["transfers"]}
    assert rows["cudaMemcpyAsync"]["calls"] >= 3
    assert any(name.startswith("Memcpy HtoD") for name in rows)
    stats = prof.stats()
    assert 0.0 < stats["gpu_busy_share"] <= 1.0 and stats["cuda_memory"]["peak_allocated_bytes"] > 0
    assert (tmp_path / "trace.json").stat().st_size > 0


def test_a_named_commit_wins_over_a_stale_git(monkeypatch):
    """A tree copied to a GPU machine may carry an old .git: the commit named by the copier is recorded."""
    monkeypatch.setenv("NANOTABPFN_GIT_COMMIT", "0123abc")
    rec = pu.environment_record("cpu")
    assert rec["git_commit"] == "0123abc" and rec["git_dirty"] is None
    assert pu.git_commit() == "0123abc"
    monkeypatch.delenv("NANOTABPFN_GIT_COMMIT")
    assert pu.git_commit() != "0123abc"
