"""benchmark.py, bench_report.py, bench_micro.py: run order, aggregation math, tables traced back to records,
progress lines, plots, the micro-benchmarks, CLI errors (CPU, fast)."""
import json
import os
import re
import statistics
import subprocess
import sys

import numpy as np
import pytest
import torch

import bench_micro
import bench_report as br
import benchmark
import model
from profile_utils import format_ms
from train_optimized import triton_kernel_runs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake_record(median, p10=None, p90=None, data=1.0, peak=0, loss=0.5, steps=None, path="h5py+sync-copy",
                world_size=None):
    """A run record in profile_utils.make_run_record's layout, with made-up timings."""
    stats = {"n": 10, "median": median, "p10": median * 0.9 if p10 is None else p10,
             "p90": median * 1.1 if p90 is None else p90}
    timing = {"device": "cpu", "measured_steps": 10, "step": stats, "data_share": data / median,
              "phases": {"data": {"median": data}, "forward": {"median": median / 2},
                         "backward": {"median": median / 3}, "optimizer": {"median": 0.1}}}
    extra = {"peak_memory_bytes": peak, "final_loss": loss, "data_path": path, "sdpa_backend": None,
             "diagnosis": "CPU-bound: data wait small", "loader": {"path": path}}
    if steps is not None:
        extra["step_times_ms"] = steps
    if world_size is not None:
        extra["world_size"] = world_size
    return {"schema_version": 1, "timing": timing, "environment": {"device": "cpu"}, "extra": extra,
            "diagnosis": "CPU-bound"}


def test_schedule_interleaves_configs_within_each_repeat():
    order = benchmark.schedule(["blog", "upstream"], ["A", "B", "C"], 2)
    assert order == [("blog", 1, "A"), ("blog", 1, "B"), ("blog", 1, "C"),
                     ("blog", 2, "A"), ("blog", 2, "B"), ("blog", 2, "C"),
                     ("upstream", 1, "A"), ("upstream", 1, "B"), ("upstream", 1, "C"),
                     ("upstream", 2, "A"), ("upstream", 2, "B"), ("upstream", 2, "C")]
    # Not A A B B C C: the same config never runs twice in a row within a workload.
    configs = [c for _, _, c in benchmark.schedule(["w"], ["A", "B", "C"], 3)]
    assert "".join(configs) == "ABCABCABC"


def test_aggregate_median_of_medians_spread_and_speedup():
    base = [br.summarize_record(fake_record(m, peak=p)) for m, p in ((100.0, 5), (120.0, 7), (90.0, 6))]
    fast = [br.summarize_record(fake_record(m, p10=m - 5, p90=m + 5)) for m in (50.0, 40.0, 45.0)]
    a, b = br.aggregate(base), br.aggregate(fast)
    assert a["median_ms"] == 100.0 and (a["min_ms"], a["max_ms"]) == (90.0, 120.0)
    assert a["repeat_ms"] == [100.0, 120.0, 90.0]          # kept in run order
    assert a["peak_memory_bytes"] == 7                     # worst repeat
    assert b["median_ms"] == 45.0
    # Without per-step times in the records: lowest p10 .. highest p90 of the repeats.
    assert (b["p10_ms"], b["p90_ms"]) == (35.0, 55.0)
    assert b["phases"]["forward"] == 22.5                  # median over repeats of each phase
    assert b["data_share"] == pytest.approx(statistics.median([1 / 50, 1 / 40, 1 / 45]))
    rows = br.add_speedups([{"config": "baseline", **a}, {"config": "fast", **b}])
    assert rows[0]["speedup"] == 1.0
    assert rows[1]["speedup"] == pytest.approx(100.0 / 45.0)   # baseline median / config median
    assert br.best_row(rows)["config"] == "fast"


def test_aggregate_pools_per_step_times_when_records_carry_them():
    rng = np.random.default_rng(0)
    steps = [list(rng.uniform(10, 20, 30)), list(rng.uniform(15, 30, 30))]
    s = [br.summarize_record(fake_record(float(np.median(t)), steps=t)) for t in steps]
    agg = br.aggregate(s)
    pooled = np.concatenate(steps)
    assert agg["p10_ms"] == pytest.approx(np.percentile(pooled, 10))
    assert agg["p90_ms"] == pytest.approx(np.percentile(pooled, 90))
    assert agg["spread"] == "pooled steps"


def test_rows_for_reports_skipped_and_failed_configs():
    ok = fake_record(10.0)
    runs = [{"workload": "w", "config": "baseline", "repeat": 1, "status": "ok", "error": "",
             "summary": br.summarize_record(ok)},
            {"workload": "w", "config": "compile", "repeat": 1, "status": "unsupported",
             "error": "train_optimized.py does not accept these flags yet", "summary": None},
            {"workload": "w", "config": "flash", "repeat": 1, "status": "failed", "error": "exit 1: boom",
             "summary": None}]
    rows = br.rows_for(runs, "w", ["baseline", "compile", "flash"], benchmark.FLAGS)
    assert rows[0]["median_ms"] == 10.0 and rows[0]["speedup"] == 1.0
    assert rows[1]["status"].startswith("skipped: ") and "median_ms" not in rows[1]
    assert rows[2]["status"] == "failed: exit 1: boom"
    lines = br.ablation_table(rows, batch_size=4)
    table = [line for line in lines if line.startswith("| ")]
    assert len(table) == 2                                    # header + the one measured row
    assert any(line.startswith("- `compile`") and "skipped" in line for line in lines)
    assert any(line.startswith("- `flash`") and "failed" in line for line in lines)


def test_rejected_flags_are_skipped_not_failed(tmp_path):
    script = tmp_path / "fake_train.py"
    script.write_text("import sys\nprint('usage: x', file=sys.stderr)\n"
                      "print('x: error: unrecognized arguments: --compile', file=sys.stderr)\nsys.exit(2)\n")
    result = benchmark.run_once([sys.executable, str(script)], str(tmp_path / "r.json"), timeout=60)
    assert result["status"] == "unsupported" and "unrecognized arguments: --compile" in result["error"]
    script.write_text("import sys\nprint('error: dump is broken', file=sys.stderr)\nsys.exit(2)\n")
    result = benchmark.run_once([sys.executable, str(script)], str(tmp_path / "r.json"), timeout=60)
    assert result["status"] == "failed" and result["error"] == "exit 2: error: dump is broken"


def test_targets_met_and_missed():
    row = {"median_ms": 14.0, "peak_memory_bytes": 4 * 2**30, "data_share": 0.002}
    checks = {what: met for what, _, _, met in br.check_targets("blog", row)}
    assert checks == {"ms/step": True, "peak memory": False, "data wait": True}
    checks = {what: met for what, _, _, met in br.check_targets("upstream", {**row, "median_ms": 2.5})}
    assert checks == {"ms/step": False, "data wait": True}


SAMPLE_TABLES = """### Top CPU operations by self CPU time (3 profiled steps)

| Name | Self CPU total | Self CPU % | CPU total | Calls |
| :--- | ---: | ---: | ---: | ---: |
| cudaMemcpyAsync | 400 ms | 77.0% | 400 ms | 6 |

Self CPU time total: 520 ms (173 ms per step)

### Top CUDA operations by self CUDA time (3 profiled steps)

| Name | Self CUDA total | Self CUDA % | Calls |
| :--- | ---: | ---: | ---: |
| kernel | 500 ms | 90.0% | 30 |

Self CUDA time total: 510 ms (170 ms per step; GPU busy 98% of the 175 ms profiled step)

### Memory transfers and host waits (3 profiled steps)

| Name | CPU total | CPU per step | % of CPU | Calls | Calls per step | GPU per step |
| :--- | ---: | ---: | ---: | ---: | ---: | ---: |
| cudaMemcpyAsync | {memcpy_total} | {memcpy} | 77.0% | 6 | 2.0 | 78.0 µs |

### CUDA memory summary (cuda:0, since process start or the last reset_peak_memory_stats)

| Metric | Value |
| :--- | ---: |
| Peak allocated | {peak} |
"""


def test_profile_tables_split_and_compare():
    base = br.split_profile_tables(SAMPLE_TABLES.format(memcpy_total="400 ms", memcpy="133 ms",
                                                               peak="34.000 GiB"))
    best = br.split_profile_tables(SAMPLE_TABLES.format(memcpy_total="60.0 µs", memcpy="20.0 µs",
                                                               peak="2.900 GiB"))
    assert list(base) == ["cpu", "cuda", "transfers", "memory"]
    line = br.compare_profile_table("transfers", base["transfers"], best["transfers"])
    assert line.startswith("cudaMemcpyAsync CPU time per step: 133 ms (baseline) → 20.0 µs (best)")
    assert br.compare_profile_table("memory", base["memory"], best["memory"]) == \
        "peak allocated: 34.000 GiB (baseline) → 2.900 GiB (best)"
    assert "173 ms (baseline)" in br.compare_profile_table("cpu", base["cpu"], best["cpu"])
    assert "GPU busy: 98% (baseline)" in br.compare_profile_table("cuda", base["cuda"], best["cuda"])


def run_cli(*args, timeout=600):
    # One intra-op thread per training process: on a 2-core machine shared with other tests, two
    # spinning threads per process make the runs several times slower (and change no result here).
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.run([sys.executable, "benchmark.py", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.parametrize("args", [["--configs", "baseline,warp-drive"], ["--workloads", "blog,moon"],
                                  ["--repeats", "0"], ["--no-such-flag"]])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args):
    proc = run_cli("--quick", "--out", str(tmp_path / "out"), *args, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert not (tmp_path / "out").exists()


def _table_rows(markdown, workload):
    """{config: cells} of the table under "## <workload> workload"."""
    section = markdown.split(f"## {workload} workload", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]   # header, rule, rows
    headers = [c.strip() for c in lines[0].strip("|").split("|")]
    return {cells[0]: dict(zip(headers, cells)) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = run_cli("--quick", "--out", str(out))
    return proc, out


def test_quick_ablation_writes_tables_traced_to_records(quick_run):
    proc, out = quick_run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    md = (out / "ablation.md").read_text()
    data = json.loads((out / "ablation.json").read_text())
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs and all((out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "python benchmark.py --quick --out" in md and "git commit:" in md
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*"))
    # Progress: what will run and roughly how long first, then one numbered line per run with an ETA,
    # "[1/6] blog r1/1 baseline: 12.3 ms/step (data 1.2%), ETA 0:52".
    assert re.search(r"^ablation \(2 workloads x 3 configs x 1 repeats, one process each\): 6 runs, roughly "
                     r"\d+:\d\d \(", proc.stdout, re.M), proc.stdout[:500]
    assert re.search(r"^\[1/6\] blog r1/1 baseline: [\d.]+ ms/step \(data [\d.]+%\), ETA \d+:\d\d$",
                     proc.stdout, re.M), proc.stdout[:1000]
    assert re.search(r"^\[6/6\] upstream r1/1 flash: [\d.]+ ms/step \(data [\d.]+%\), done$", proc.stdout, re.M)

    workloads = list(data["workloads"])
    assert workloads == ["blog", "upstream"]
    configs = [c["name"] for c in data["configs"]]
    assert configs == list(benchmark.QUICK_CONFIGS)
    # Runs happened in the interleaved order.
    assert [(r["workload"], r["repeat"], r["config"]) for r in data["runs"]] == \
        benchmark.schedule(workloads, configs, data["repeats"])
    for workload in workloads:
        rows = _table_rows(md, workload)
        assert set(rows) == set(configs)
        medians = {}
        for config in configs:
            records = [r["record"] for r in data["runs"]
                       if r["workload"] == workload and r["config"] == config and r["status"] == "ok"]
            assert records, f"{workload}/{config} produced no record"
            # Recomputed from the raw records, not from the aggregated rows.
            medians[config] = statistics.median(r["timing"]["step"]["median"] for r in records)
            cell = rows[config]["ms/step median [p10–p90]"]
            assert cell.split(" [")[0] == format_ms(medians[config]), (workload, config, cell)
            data_ms = statistics.median(r["timing"]["phases"]["data"]["median"] for r in records)
            assert rows[config]["data wait"].startswith(f"{data_ms:.2f} ms")
        for config in configs:
            assert rows[config]["speedup vs baseline"] == f"{medians['baseline'] / medians[config]:.2f}x"


def quick_mode(tmp_path, flag, name, workloads):
    """Runs `benchmark.py <flag> --quick` on CPU; returns its <name>.md text and <name>.json data."""
    out = tmp_path / name
    proc = run_cli(flag, "--quick", "--out", str(out), "--workloads", workloads, "--device", "cpu")   # GPU machines too
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return (out / f"{name}.md").read_text(), json.loads((out / f"{name}.json").read_text())


def test_loaders_only_quick_on_cpu(tmp_path):
    md, data = quick_mode(tmp_path, "--loaders-only", "loaders", "blog")
    rows = {r["loader_config"]: r for r in data["rows"]["blog"]}
    assert set(rows) == {name for name, _ in bench_micro.LOADER_CONFIGS}
    for name, row in rows.items():
        assert row["status"] == "ok", (name, row)
        assert row["batches_per_s"] > 0
        assert f"| {name} | {row['path']} | {row['batches_per_s']:.1f} |" in md
    if data["h2d"] is None:
        assert "needs CUDA" in md


def test_attention_quick_on_cpu_times_every_kernel_at_every_split(tmp_path):
    md, data = quick_mode(tmp_path, "--attention", "attention", "blog,upstream")
    assert set(data["workloads"]) == {"blog", "upstream"}
    for workload, shape in benchmark.QUICK_WORKLOADS.items():
        result = data["workloads"][workload]
        assert result["N"] == shape["batch_size"] * (shape["features"] + 1) and result["R"] == shape["rows"]
        splits = {int(shape["rows"] * q) for q in bench_micro.ATTENTION_SPLIT_QUANTILES}
        assert {(r["kernel"], r["split"]) for r in result["rows"]} == {(k, s) for k in ("math", "flash")
                                                                        for s in splits}
        for row in result["rows"]:
            assert row["status"] == "ok" and row["median_ms"] > 0 and row["clock"] == "host"
            assert row["per_step_ms"] == pytest.approx(3 * row["median_ms"])
            assert f"| {row['kernel']} | {row['split']} | {row['median_ms']:.3f} |" in md
    assert "fastest at the median split" in md


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
@pytest.mark.parametrize("kernel", ["flash", "triton-padded"])
def test_attention_timer_replays_a_graph_that_computes_the_eager_gradient(kernel):
    """The per-kernel rows time a CUDA graph replay: it must compute what an eager call computes."""
    if kernel == "triton-padded" and not triton_kernel_runs():
        pytest.skip("the triton kernel does not run here")
    device = torch.device("cuda")
    torch.manual_seed(0)
    qkv = torch.randn(12, 300, 3, 4, 24, device=device, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(12, 300, 4, 24, device=device, dtype=torch.bfloat16).transpose(1, 2)
    t = bench_micro.time_attention(kernel, qkv, grad, 150, device, 3)
    assert t["clock"] == "graph" and len(t["times_ms"]) == 3 and qkv.grad is None
    name, mask = ("triton", torch.arange(300, device=device) < 150) if kernel == "triton-padded" else (kernel, None)
    keys = slice(None) if mask is not None else slice(0, 150)

    def call():
        q, k, v = (qkv[:, rows, i].transpose(1, 2) for i, rows in ((0, slice(None)), (1, keys), (2, keys)))
        model.datapoint_attention(q, k, v, name, key_mask=mask).backward(grad)

    call()
    eager, qkv.grad = qkv.grad.clone(), None
    bench_micro.replayed(call, device)()
    torch.testing.assert_close(qkv.grad, eager, rtol=2e-2, atol=2e-2)   # FA2's dq sums in any order


def test_scaling_rows_throughput_and_efficiency():
    def run(gpus, median, world):
        record = fake_record(median, world_size=world)
        record["extra"]["global_batch"] = 4 * world
        return {"workload": "w", "config": br.gpu_label(gpus), "status": "ok", "error": "",
                "summary": br.summarize_record(record)}
    runs = [run(1, 10.0, 1), run(2, 12.0, 2), run(2, 11.0, 2), run(4, 20.0, 2),
            {"workload": "w", "config": br.gpu_label(8), "status": "failed", "error": "exit 1: nccl"}]
    rows = br.scaling_rows(runs, "w", [1, 2, 4, 8], batch_size=4)
    assert rows[0]["datasets_per_s"] == pytest.approx(400.0) and rows[0]["efficiency"] == pytest.approx(1.0)
    assert rows[1]["step_ms"]["median"] == 11.5                      # median of the two repeats
    assert rows[1]["datasets_per_s"] == pytest.approx(8 * 1000 / 11.5)
    assert rows[1]["efficiency"] == pytest.approx(8 * 1000 / 11.5 / 800.0)
    assert rows[2]["status"] == "record says world size 2, expected 4"  # a launch that did not scale out
    assert rows[3] == {"gpus": 8, "status": "failed: exit 1: nccl"}


def test_scaling_without_torchrun_support_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(benchmark, "supports_torchrun", lambda: False)
    assert benchmark.main(["--scaling", "--quick", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "does not support torchrun" in err[0]
    assert not (tmp_path / "s").exists()


def test_resume_reuses_only_matching_successful_runs(tmp_path):
    args = benchmark.build_parser().parse_args(["--quick"])
    args.train_args_list, args.device = [], "auto"
    shapes = {"blog": dict(benchmark.QUICK_WORKLOADS["blog"])}
    dumps = {"blog": os.path.join(REPO, "data", "bench", "x.h5")}
    ok = {"workload": "blog", "repeat": 1, "config": "flash", "flags": ["--flash"], "status": "ok",
          "record": fake_record(5.0)}
    runs = [ok, {**ok, "repeat": 2, "status": "failed", "record": None},
            {**ok, "config": "pinned", "flags": ["--pinned", "--old-flag"]},       # flags changed since
            {**ok, "workload": "upstream"},                                        # not a workload now
            {**ok, "config": "compile", "flags": ["--compile"], "status": "unsupported", "record": None}]
    data = {"quick": True, "device_arg": "auto", "train_args": [], "runs": runs,
            "train_sources": benchmark.sources_digest(benchmark.TRAIN_SOURCES),
            "code_sources": benchmark.sources_digest(benchmark.MEASURED_SOURCES),
            "workloads": {"blog": {**shapes["blog"], "dump": "data/bench/x.h5"}}}
    path = tmp_path / "ablation.json"
    path.write_text(json.dumps(data))
    assert list(benchmark.load_previous(str(path), shapes, dumps, args)) == [("blog", 1, "flash"),
                                                                             ("blog", 1, "compile")]
    data["train_sources"] = "edited since"                                         # rejections are re-checked
    path.write_text(json.dumps(data))
    assert list(benchmark.load_previous(str(path), shapes, dumps, args)) == [("blog", 1, "flash")]
    data["workloads"]["blog"]["steps"] += 1                                        # another shape: nothing
    path.write_text(json.dumps(data))
    assert benchmark.load_previous(str(path), shapes, dumps, args) == {}
    data["workloads"]["blog"]["steps"] -= 1
    data["code_sources"] = "measured with other code"                              # code changed: nothing
    path.write_text(json.dumps(data))
    assert benchmark.load_previous(str(path), shapes, dumps, args) == {}


def test_committed_h200_records_still_regenerate_their_rows():
    """results/nvidia-h200/before-redesign/ablation.json (records written by the code before the redesign) still
    loads: every row's median and speedup are recomputed from its raw records by the current aggregation."""
    with open(os.path.join(REPO, "results", "nvidia-h200", "before-redesign", "ablation.json")) as f:
        data = json.load(f)
    for workload, rows in data["rows"].items():
        runs = [{**r, "summary": br.summarize_record(r["record"]) if r["status"] == "ok" else None}
                for r in data["runs"] if r["workload"] == workload]
        names = [row["config"] for row in rows]
        again = {row["config"]: row for row in br.rows_for(runs, workload, names, benchmark.FLAGS)}
        for row in rows:
            if row.get("median_ms"):
                assert again[row["config"]]["median_ms"] == pytest.approx(row["median_ms"]), row["config"]
                assert again[row["config"]]["speedup"] == pytest.approx(row["speedup"]), row["config"]
                assert again[row["config"]]["attention_kernel"] == (row.get("sdpa_backend") or "")


def test_progress_lines_number_the_runs_and_give_an_eta(capsys):
    progress = br.Progress(3, "ablation", per_run_s=20, basis="a guess")
    progress.line("blog r1/1 baseline", "12.3 ms/step", seconds=30.0)
    progress.line("blog r1/1 flash", "skipped: no flag")      # no wall time: the ETA keeps the finished runs'
    progress.line("blog r1/1 fast", "5.0 ms/step", seconds=10.0)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ablation: 3 runs, roughly 1:00 (0:20 a run, a guess); each line ends with an ETA"
    assert out[1:] == ["[1/3] blog r1/1 baseline: 12.3 ms/step, ETA 1:00", "[2/3] blog r1/1 flash: skipped: no flag, "
                       "ETA 0:30", "[3/3] blog r1/1 fast: 5.0 ms/step, done"]
    assert br.format_duration(3725) == "1:02:05"


def test_attention_flop_and_hopper_floors_match_the_blog_numbers():
    """At the blog's median split (N = 36, H = 4, R = 5000, S = 2500, D = 24) over 3 layers: ~2.4e12 FLOP with
    the head padded to 32 (~3.4 ms of tensor cores at 700 TFLOP/s) and ~1.1e10 exponentials (~2.6 ms of SFU)."""
    shape = (36, 4, 5000, 2500, 24)
    assert bench_micro.attention_flop(*shape) == 4 * 36 * 4 * 5000 * 2500 * 24 * 3.5
    floors = bench_micro.attention_floors_ms(*shape)
    assert 3 * bench_micro.attention_flop(*shape[:4], 24, head_dim=32) == pytest.approx(2.42e12, rel=0.01)
    assert 3 * floors["tensor_core_ms"] == pytest.approx(3.46, rel=0.01)
    assert 3 * floors["sfu_ms"] == pytest.approx(2.58, rel=0.01)
    assert {k for k, _ in bench_micro.attention_kernels(torch_device("cpu"))} == {"math", "flash"}
    assert {k for k, _ in bench_micro.attention_kernels(torch_device("cuda"))} >= {"flash", "cudnn", "efficient",
                                                                                   "flex", "triton-padded"}


def test_step_attention_makes_the_graphed_steps_calls(monkeypatch):
    """time_step_attention: layers - 1 full padded calls, then the target column (every C-th sequence) from its test
    rows only, each with the train-row prefix as keys; the kernel stood in for by math SDPA (no GPU here)."""
    import torch
    import model
    calls = []

    def recorded(q, k, v, kernel, key_mask=None, test_rows_only=False):
        calls.append((kernel, tuple(q.shape), int(key_mask.sum()), bool(key_mask[:4].all()), test_rows_only))
        return model.datapoint_attention(q, k, v, "math", key_mask=key_mask)

    monkeypatch.setattr(bench_micro, "datapoint_attention", recorded)
    qkv = torch.randn(6, 10, 3, 2, 8, requires_grad=True)                 # B = 2 tables x C = 3 columns
    grad = torch.randn(6, 10, 2, 8).transpose(1, 2)
    times = bench_micro.time_step_attention(qkv, grad, 4, 3, 3, torch_device("cpu"), 2)
    assert len(times) == 2 and all(t > 0 for t in times) and qkv.grad is None
    assert calls[:3] == [("triton", (6, 2, 10, 8), 4, True, False)] * 2 + [("triton", (2, 2, 10, 8), 4, True, True)]
    assert len(calls) == 4 * 3                                            # 2 warm-ups + 2 timed, 3 layers each
    calls.clear()
    bench_micro.time_step_attention(qkv, grad, 4, 3, 3, torch_device("cpu"), 1, last_layer_target_only=False)
    assert calls[:3] == [("triton", (6, 2, 10, 8), 4, True, False)] * 3
    calls.clear()
    bench_micro.time_step_attention(qkv, grad, 4, 3, 3, torch_device("cpu"), 1, kernel="fa4")
    assert calls[:3] == [("fa4", (6, 2, 10, 8), 4, True, False)] * 2 + [("fa4", (2, 2, 10, 8), 4, True, True)]


def torch_device(name):
    import torch
    return torch.device(name)


def test_first_time_passing_finds_the_first_eval_at_or_above_each_bar():
    from evaluation import first_time_passing
    history = [{"step": 100, "train_seconds": 1.0, "scores": {"roc_auc": 0.80}},
               {"step": 200, "train_seconds": 2.0, "scores": {"roc_auc": 0.95}},
               {"step": 300, "train_seconds": 3.0, "scores": {"roc_auc": 0.97}}]
    passed = first_time_passing(history, {"a": {"roc_auc": 0.95}, "b": {"roc_auc": 0.99}})
    assert passed["a"] == {"step": 200, "train_seconds": 2.0, "bar": 0.95} and passed["b"] is None
    assert first_time_passing([], {"a": {"roc_auc": 0.5}}) == {"a": None}


def test_quality_with_the_real_suite_records_when_each_baseline_is_passed(tmp_path):
    """--quality --eval-suite real: the time-to-quality run is scored against every baseline, and plotted."""
    import bench_report as br
    ttq = {"flags": ["--fast"], "budget_s": 6, "eval_every": "3s", "suite": "real", "steps_done": 10,
           "train_seconds": 6.0, "final": {"roc_auc": 0.74},
           "baselines": {"lightgbm": {"roc_auc": 0.72, "mean_rank": 2.25}, "knn": {"roc_auc": 0.69}},
           "first_passing": {"lightgbm": {"step": 10, "train_seconds": 6.0, "bar": 0.72}, "knn": None},
           "history": [(5, 3.0, 0.70), (10, 6.0, 0.74, 1.5)]}
    text = "\n".join(br.quality_lines([], ttq))
    assert "| lightgbm | 0.7200 | 2.25 | step 10, 6.0 s |" in text
    assert "| knn | 0.6900 | — | none within the budget |" in text
    assert "| 10 | 6.0 | 0.7400 | 1.50 |" in text and "| 5 | 3.0 | 0.7000 | — |" in text
    _assert_png(type(tmp_path)(br.plot_time_to_quality(ttq, tmp_path / "ttq.png")))


def _assert_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    assert [p for p in os.listdir(path.parent) if p.endswith(".tmp")] == []


def test_plots_write_png(tmp_path):
    rows = [
        {"config": "baseline", "phases": {"data": 40.0, "forward": 60.0, "backward": 70.0,
                                          "optimizer": 5.0, "other": 3.0},
         "step_ms": {"median": 180.0, "p10": 175.0, "p90": 190.0}},
        {"config": "+pinned", "phases": {"data": 10.0, "forward": 60.0, "backward": 70.0,
                                         "optimizer": 5.0},
         "step_ms": {"median": 150.0, "p10": 148.0, "p90": 155.0}},
    ]
    written = br.plot_phase_bars(rows, tmp_path / "p" / "phases.png", "phases")
    assert written == str(tmp_path / "p" / "phases.png")   # parent folder created
    _assert_png(tmp_path / "p" / "phases.png")
    br.plot_speedup(rows, tmp_path / "speedup.png", "speedup")
    _assert_png(tmp_path / "speedup.png")
    br.plot_speedup([{"config": "a", "speedup": 1.0}, {"config": "b", "speedup": 1.5,
                                                        "speedup_p10": 1.4, "speedup_p90": 1.6}],
                    tmp_path / "speedup2.png", "given")
    _assert_png(tmp_path / "speedup2.png")
    steps = np.arange(200)
    rng = np.random.default_rng(0)
    curves = {"fp32": [(steps, 1 / (1 + steps / 20) + 0.05 * rng.standard_normal(200))
                       for _ in range(3)],
              "bf16": (steps, 1 / (1 + steps / 22))}
    br.plot_loss_curves(curves, tmp_path / "loss.png", "loss")
    _assert_png(tmp_path / "loss.png")
    br.plot_loss_curves(curves, tmp_path / "loss_std.png", "loss", band="std", smooth=0)
    _assert_png(tmp_path / "loss_std.png")
    scaling = [{"gpus": g, "datasets_per_s": 100.0 * g * 0.9, "step_ms": {"median": 60.0 + g,
                "p10": 59.0 + g, "p90": 62.0 + g}} for g in (1, 2, 4, 8)]
    br.plot_scaling(scaling, tmp_path / "scaling.png")
    _assert_png(tmp_path / "scaling.png")
    with pytest.raises(ValueError, match="baseline"):
        br.plot_speedup(rows, tmp_path / "x.png", "x", baseline="nope")
    assert not (tmp_path / "x.png").exists()
