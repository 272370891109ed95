"""benchmark.py: run order, aggregation math, tables traced back to records, CLI errors (CPU, fast)."""
import json
import os
import re
import statistics
import subprocess
import sys

import numpy as np
import pytest

import benchmark

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
    base = [benchmark.summarize_record(fake_record(m, peak=p)) for m, p in ((100.0, 5), (120.0, 7), (90.0, 6))]
    fast = [benchmark.summarize_record(fake_record(m, p10=m - 5, p90=m + 5)) for m in (50.0, 40.0, 45.0)]
    a, b = benchmark.aggregate(base), benchmark.aggregate(fast)
    assert a["median_ms"] == 100.0 and (a["min_ms"], a["max_ms"]) == (90.0, 120.0)
    assert a["repeat_ms"] == [100.0, 120.0, 90.0]          # kept in run order
    assert a["peak_memory_bytes"] == 7                     # worst repeat
    assert b["median_ms"] == 45.0
    # Without per-step times in the records: lowest p10 .. highest p90 of the repeats.
    assert (b["p10_ms"], b["p90_ms"]) == (35.0, 55.0)
    assert b["phases"]["forward"] == 22.5                  # median over repeats of each phase
    assert b["data_share"] == pytest.approx(statistics.median([1 / 50, 1 / 40, 1 / 45]))
    rows = benchmark.add_speedups([{"config": "baseline", **a}, {"config": "fast", **b}])
    assert rows[0]["speedup"] == 1.0
    assert rows[1]["speedup"] == pytest.approx(100.0 / 45.0)   # baseline median / config median
    assert benchmark.best_row(rows)["config"] == "fast"


def test_aggregate_pools_per_step_times_when_records_carry_them():
    rng = np.random.default_rng(0)
    steps = [list(rng.uniform(10, 20, 30)), list(rng.uniform(15, 30, 30))]
    s = [benchmark.summarize_record(fake_record(float(np.median(t)), steps=t)) for t in steps]
    agg = benchmark.aggregate(s)
    pooled = np.concatenate(steps)
    assert agg["p10_ms"] == pytest.approx(np.percentile(pooled, 10))
    assert agg["p90_ms"] == pytest.approx(np.percentile(pooled, 90))
    assert agg["spread"] == "pooled steps"


def test_rows_for_reports_skipped_and_failed_configs():
    ok = fake_record(10.0)
    runs = [{"workload": "w", "config": "baseline", "repeat": 1, "status": "ok", "error": "",
             "summary": benchmark.summarize_record(ok)},
            {"workload": "w", "config": "compile", "repeat": 1, "status": "unsupported",
             "error": "train_optimized.py does not accept these flags yet", "summary": None},
            {"workload": "w", "config": "flash", "repeat": 1, "status": "failed", "error": "exit 1: boom",
             "summary": None}]
    rows = benchmark.rows_for(runs, "w", ["baseline", "compile", "flash"])
    assert rows[0]["median_ms"] == 10.0 and rows[0]["speedup"] == 1.0
    assert rows[1]["status"].startswith("skipped: ") and "median_ms" not in rows[1]
    assert rows[2]["status"] == "failed: exit 1: boom"
    lines = benchmark.ablation_table(rows, batch_size=4)
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
    checks = {what: met for what, _, _, met in benchmark.check_targets("blog", row)}
    assert checks == {"ms/step": True, "peak memory": False, "data wait": True}
    checks = {what: met for what, _, _, met in benchmark.check_targets("upstream", {**row, "median_ms": 2.5})}
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
    base = benchmark.split_profile_tables(SAMPLE_TABLES.format(memcpy_total="400 ms", memcpy="133 ms",
                                                               peak="34.000 GiB"))
    best = benchmark.split_profile_tables(SAMPLE_TABLES.format(memcpy_total="60.0 µs", memcpy="20.0 µs",
                                                               peak="2.900 GiB"))
    assert list(base) == ["cpu", "cuda", "transfers", "memory"]
    line = benchmark.compare_profile_table("transfers", base["transfers"], best["transfers"])
    assert line.startswith("cudaMemcpyAsync CPU time per step: 133 ms (baseline) → 20.0 µs (best)")
    assert benchmark.compare_profile_table("memory", base["memory"], best["memory"]) == \
        "peak allocated: 34.000 GiB (baseline) → 2.900 GiB (best)"
    assert "173 ms (baseline)" in benchmark.compare_profile_table("cpu", base["cpu"], best["cpu"])
    assert "GPU busy: 98% (baseline)" in benchmark.compare_profile_table("cuda", base["cuda"], best["cuda"])


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
    # Progress: one line per run, "[blog r1/1] baseline: 12.34 ms/step (data 1.2%)".
    assert re.search(r"^\[blog r1/1\] baseline: [\d.]+ ms/step \(data [\d.]+%\)$", proc.stdout, re.M)

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
            assert cell.split(" [")[0] == benchmark.format_ms(medians[config]), (workload, config, cell)
            data_ms = statistics.median(r["timing"]["phases"]["data"]["median"] for r in records)
            assert rows[config]["data wait"].startswith(f"{data_ms:.2f} ms")
        for config in configs:
            assert rows[config]["speedup vs baseline"] == f"{medians['baseline'] / medians[config]:.2f}x"


def quick_mode(tmp_path, flag, name, workloads):
    """Runs `benchmark.py <flag> --quick` on CPU; returns its <name>.md text and <name>.json data."""
    out = tmp_path / name
    proc = run_cli(flag, "--quick", "--out", str(out), "--workloads", workloads)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return (out / f"{name}.md").read_text(), json.loads((out / f"{name}.json").read_text())


def test_loaders_only_quick_on_cpu(tmp_path):
    md, data = quick_mode(tmp_path, "--loaders-only", "loaders", "blog")
    rows = {r["loader_config"]: r for r in data["rows"]["blog"]}
    assert set(rows) == {name for name, _ in benchmark.LOADER_CONFIGS}
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
        splits = {int(shape["rows"] * q) for q in benchmark.ATTENTION_SPLIT_QUANTILES}
        assert {(r["kernel"], r["split"]) for r in result["rows"]} == {(k, s) for k in ("math", "flash")
                                                                        for s in splits}
        for row in result["rows"]:
            assert row["status"] == "ok" and row["median_ms"] > 0
            assert row["per_step_ms"] == pytest.approx(3 * row["median_ms"])
            assert f"| {row['kernel']} | {row['split']} | {row['median_ms']:.3f} |" in md
    assert "fastest at the median split" in md


def test_scaling_rows_throughput_and_efficiency():
    def run(gpus, median, world):
        record = fake_record(median, world_size=world)
        record["extra"]["global_batch"] = 4 * world
        return {"workload": "w", "config": benchmark.gpu_label(gpus), "status": "ok", "error": "",
                "summary": benchmark.summarize_record(record)}
    runs = [run(1, 10.0, 1), run(2, 12.0, 2), run(2, 11.0, 2), run(4, 20.0, 2),
            {"workload": "w", "config": benchmark.gpu_label(8), "status": "failed", "error": "exit 1: nccl"}]
    rows = benchmark.scaling_rows(runs, "w", [1, 2, 4, 8], batch_size=4)
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
            "train_sources": benchmark.train_sources(), "code_sources": benchmark.code_sources(),
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


def test_first_reach_finds_the_first_eval_at_or_above_the_bar():
    import benchmark
    history = [{"step": 100, "train_seconds": 1.0, "scores": {"roc_auc": 0.80}},
               {"step": 200, "train_seconds": 2.0, "scores": {"roc_auc": 0.95}},
               {"step": 300, "train_seconds": 3.0, "scores": {"roc_auc": 0.97}}]
    assert benchmark.first_reach(history, 0.95) == (200, 2.0)
    assert benchmark.first_reach(history, 0.99) is None
    assert benchmark.first_reach([], 0.5) is None
