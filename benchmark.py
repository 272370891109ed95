"""Runs train_optimized.py configurations, each in its own process, and writes results/<gpu>/.

Modes: the ablation (default), --profile, --loaders-only, --attention, --scaling (torchrun), --quality; README
"Using it" shows the calls. Every figure comes from the run records (train_optimized.py --record) in the JSON.
"""
import hashlib
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import bench_report as br
from profile_utils import format_ms
from runtime import ArgumentParser, UsageError, fail, resolve_device
from safe_io import OutputError, check_outputs, write_json_atomic
from evaluation import EVAL_SUITES

REPO = os.path.dirname(os.path.abspath(__file__))

# The matrix: (name, flags of train_optimized.py, group), in table order. Groups: "baseline"; "alone" (one
# optimization by itself); "stack" (the blog's cumulative order); "beyond" (past the blog). A row whose
# flags train_optimized.py rejects is skipped with a one-line note.
FAST_STACK = ["--resident", "--flash", "--amp", "bf16", "--compile", "--feature-attention", "broadcast",
              "--fused-optimizer", "--async-loss"]
CONFIGS = [
    ("baseline", [], "baseline"), ("pinned", ["--pinned"], "alone"), ("streams", ["--streams"], "alone"),
    ("gds-bin", ["--gds-bin"], "alone"), ("gds-bin-host", ["--gds-bin", "--kvikio-target", "host"], "alone"),
    ("flash", ["--flash"], "alone"), ("resident", ["--resident"], "alone"), ("amp-bf16", ["--amp", "bf16"], "alone"),
    ("compile", ["--compile"], "alone"), ("pinned+streams", ["--pinned", "--streams"], "stack"),
    ("pinned+streams+gds-bin", ["--pinned", "--streams", "--gds-bin"], "stack"),
    ("pinned+streams+gds-bin+flash", ["--pinned", "--streams", "--gds-bin", "--flash"], "stack"),
    ("resident+flash", ["--resident", "--flash"], "beyond"),
    ("resident+flash+bf16", ["--resident", "--flash", "--amp", "bf16"], "beyond"),
    ("+compile", ["--resident", "--flash", "--amp", "bf16", "--compile"], "beyond"),
    ("+matmul-features", FAST_STACK[:5] + ["--feature-attention", "matmul"], "beyond"),
    ("+broadcast-features", FAST_STACK[:7], "beyond"), ("+fused+async", FAST_STACK, "beyond"),
    ("+flash-kernel", FAST_STACK + ["--attention", "flash"], "beyond"),
    ("+last-layer-target-only", FAST_STACK + ["--attention", "flash", "--last-layer-target-only"], "beyond"),
    ("+triton", FAST_STACK + ["--attention", "triton", "--last-layer-target-only"], "beyond"),
    ("+triton-graphs", FAST_STACK + ["--attention", "triton", "--last-layer-target-only", "--cuda-graphs"], "beyond"),
    ("+fa4-graphs", FAST_STACK + ["--attention", "fa4", "--last-layer-target-only", "--cuda-graphs"], "beyond"),
    ("+cuda-graphs", FAST_STACK + ["--cuda-graphs"], "beyond"),
    ("+flex", FAST_STACK + ["--cuda-graphs", "--attention", "flex"], "beyond"), ("fast", ["--fast"], "beyond")]
FLAGS = {name: flags for name, flags, _ in CONFIGS}
GROUPS = {name: group for name, _, group in CONFIGS}
QUICK_CONFIGS = ("baseline", "pinned+streams", "flash")

# Workloads: the blog's (batch 6 of 5000-row tables) and upstream nanoTabPFN's (batch 32 of 150 rows).
# num_datasets sizes the cached dump; steps x batch stay below it so no run wraps around the dump.
WORKLOADS = {
    "blog": dict(batch_size=6, rows=5000, features=5, steps=100, warmup=10, num_datasets=6000),
    "upstream": dict(batch_size=32, rows=150, features=5, steps=300, warmup=20, num_datasets=50000)}
# --quick: the same two shapes in miniature, small enough that six runs take well under a minute on 2 cores.
QUICK_WORKLOADS = {
    "blog": dict(batch_size=2, rows=32, features=5, steps=6, warmup=2, num_datasets=64),
    "upstream": dict(batch_size=8, rows=12, features=5, steps=6, warmup=2, num_datasets=64)}
# Every file that shapes a measured run: --resume reuses runs only while their digest matches; flag rejections
# only while TRAIN_SOURCES' digest matches.
TRAIN_SOURCES = ("train.py", "train_optimized.py")
MEASURED_SOURCES = TRAIN_SOURCES + ("model.py", "loaders.py", "dump_format.py", "gds.py", "graphed_step.py",
                                    "triton_attention.py", "fa4_attention.py", "profile_utils.py", "prior_dump.py",
                                    "runtime.py")
# The least value of each numeric flag (argument name: least).
LEAST = dict(repeats=1, run_timeout=1, loader_batches=1, h2d_mib=1, steps=1, batch_size=1, rows=1, features=1,
             num_datasets=1, timing_warmup=0)


class RunError(Exception):
    """A failure that is not the user's input (a dump that could not be generated): exit code 1."""


def schedule(workloads, configs, repeats):
    """[(workload, repeat (1-based), config)], every config once per repeat (A B C A B C): drift hits all alike."""
    return [(w, r, c) for w in workloads for r in range(1, repeats + 1) for c in configs]


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"


def rel(path):
    return os.path.relpath(path, REPO)


def read_source(name):
    """The bytes of a repository file, b"" when it cannot be read."""
    try:
        with open(os.path.join(REPO, name), "rb") as f:
            return f.read()
    except OSError:
        return b""


def sources_digest(names):
    """sha256 of these repository files (TRAIN_SOURCES or MEASURED_SOURCES)."""
    return hashlib.sha256(b"".join(map(read_source, names))).hexdigest()


# ---- The machine, the output folder, the dumps ---------------------------------------------------

def detect_env(device="auto"):
    """GPU name from nvidia-smi, so this process never opens a CUDA context; no GPU when runs get --device cpu."""
    if not device.startswith("cpu"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
            if out.returncode == 0 and names:
                return {"gpu_name": names[0], "device": "cuda", "gpu_count": len(names)}
        except (OSError, subprocess.SubprocessError):
            pass
    return {"device": "cpu", "gpu_count": 0}


def out_dir_of(args, env):
    """--out, else results/<gpu-name-slug>/ (results/nvidia-h200/), or results/cpu-<host>/ without a GPU."""
    name = br.device_name(env)
    host = str(env.get("hostname") or platform.node()).split(".")[0]
    return args.out or os.path.join(REPO, "results", "cpu-" + slug(host) if name == "cpu" else slug(name))


def make_dumps(args, shapes):
    """{workload: cached dump}, each written if missing by prior_dump.py in a child process (this process holds no
    CUDA context while runs use the GPU); the prior runs on cuda when a GPU is present."""
    device = detect_env(args.device)["device"] if args.dump_device == "auto" else args.dump_device
    dumps = {}
    for workload, shape in shapes.items():
        n, rows, features = shape["num_datasets"], shape["rows"], shape["features"]
        path = dumps[workload] = os.path.join(REPO, "data", "bench",
                                              f"prior-n{n}-r{rows}-f{features}-c2-s{args.dump_seed}-{device}.h5")
        if os.path.exists(path):
            continue
        print(f"generating {rel(path)} ({n} datasets x {rows} rows x {features} features, prior on {device}) ...",
              flush=True)
        cmd = [sys.executable, "prior_dump.py", "--out", path, "--num-datasets", str(n), "--rows", str(rows),
               "--features", str(features), "--classes", "2", "--seed", str(args.dump_seed), "--device", device]
        try:
            proc = subprocess.run(cmd, cwd=REPO, timeout=3600, env=child_env())
        except subprocess.TimeoutExpired:
            raise RunError(f"generating the dump {path} took more than 3600 s") from None
        if proc.returncode != 0 or not os.path.exists(path):
            raise RunError(f"could not generate the dump {path} (prior_dump.py exit {proc.returncode})")
    return dumps


def child_env(distributed=False):
    env = dict(os.environ)
    # Hard requirement of the GPU hosts: NVLink multicast stays off (in NCCL, symmetric memory, NVSHMEM).
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               PYTHONUNBUFFERED="1")
    if distributed:   # torchrun sets OMP_NUM_THREADS=1 only when N > 1: the same threads per rank for every N
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


# ---- Running train_optimized.py ------------------------------------------------------------------

def train_command(args, dump, shape, flags, record_path, nproc=None):
    """The train_optimized.py command line of one timing run (through torchrun when nproc is given)."""
    cmd = ["train_optimized.py", "--data", dump, "--steps", str(shape["steps"]),
           "--batch-size", str(shape["batch_size"]), "--no-eval", "--log-every", str(shape["steps"]),
           "--timing-warmup", str(shape["warmup"]), "--record", record_path]
    cmd += (["--device", args.device] if args.device != "auto" else []) + args.train_args_list + list(flags)
    if nproc is None:
        return [sys.executable] + cmd
    # torch.distributed.run is torchrun's module: no dependence on a `torchrun` script on PATH.
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] + cmd


def run_once(cmd, record_path, timeout):
    """One training process and its record: {"status" ("ok", "unsupported": argparse refused the flags,
    "failed"), "returncode", "wall_seconds", "error" (one line), "record"}."""
    if os.path.exists(record_path):
        os.remove(record_path)
    t0 = time.perf_counter()
    # Its own process group, so a timeout or Ctrl-C also ends torchrun's ranks, not only the launcher.
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(distributed="torch.distributed.run" in cmd), start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException as e:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if not isinstance(e, subprocess.TimeoutExpired):
            raise
        return {"status": "failed", "returncode": None, "wall_seconds": time.perf_counter() - t0,
                "error": f"timed out after {timeout} s", "record": None}
    out = {"status": "failed", "returncode": proc.returncode, "wall_seconds": time.perf_counter() - t0,
           "record": None}
    last_err, last_out = ((text.strip().splitlines() or [""])[-1].strip() for text in (stderr, stdout))
    if proc.returncode == 2 and ("unrecognized arguments" in stderr or "invalid choice" in stderr):
        return {**out, "status": "unsupported",
                "error": f"train_optimized.py does not accept these flags yet ({last_err})"}
    if proc.returncode != 0:
        return {**out, "error": f"exit {proc.returncode}: {last_err or last_out}"}
    try:
        with open(record_path) as f:
            record = json.load(f)
        br.summarize_record(record)   # fails here, not in the tables, if the record lacks step timing
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {**out, "error": f"no usable run record: {type(e).__name__}: {e}"}
    return {**out, "status": "ok", "error": "", "record": record}


def slim_record(record):
    """The record as kept in the results JSON: all of it but the (long) profiler tables markdown."""
    return {**record, "extra": {k: v for k, v in br.extra_of(record).items() if k != "profile_tables"}}


def runs_for_json(runs):
    return [{**r, "record": r["record"] and slim_record(r["record"])} for r in runs]


def result_text(run):
    if run["status"] != "ok":
        return {"unsupported": "skipped: ", "pending": "not started: "}.get(run["status"], "FAILED: ") + run["error"]
    return f"{format_ms(run['summary']['step_ms'])}/step (data {100 * run['summary']['data_share']:.1f}%)"


def run_seconds_guess(args):
    """(seconds per run, basis) to announce: the median wall time of <out>/<name>.json's runs, else a guess."""
    try:
        with open(os.path.join(out_dir_of(args, detect_env(args.device)), f"{args.name}.json")) as f:
            data = json.load(f)
        walls = [r["wall_seconds"] for r in data.get("runs", []) if r.get("wall_seconds")]
        if walls and data.get("quick") == args.quick:
            return statistics.median(walls), f"median of {len(walls)} runs in {args.name}.json"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return 15 if args.quick else 60, "a guess"


def run_matrix(shapes, dumps, configs, repeats, args, flags_of=FLAGS, nproc_of=None, previous=None, deadline=None,
               what="runs"):
    """Runs every schedule() entry in its own process. flags_of: {config: flags}; nproc_of: {config: torchrun
    processes}; previous: {(workload, repeat, config): run} to reuse (--resume); deadline: time.monotonic() after
    which no run starts (status "pending")."""
    nproc_of, previous, unsupported, runs = nproc_of or {}, previous or {}, {}, []
    plan = schedule(list(shapes), configs, repeats)
    progress = br.Progress(len(plan), f"{what} ({len(shapes)} workloads x {len(configs)} configs x {repeats} "
                                      "repeats, one process each)", *run_seconds_guess(args),
                           to_run=sum(key not in previous for key in plan))
    with tempfile.TemporaryDirectory(prefix="bench-records-") as tmp:
        for workload, repeat, config in plan:
            run = {"workload": workload, "config": config, "repeat": repeat, "flags": list(flags_of[config]),
                   "command": None, "returncode": None, "wall_seconds": 0.0, "record": None, "summary": None}
            reused = (workload, repeat, config) in previous
            if reused:
                run = {**previous[workload, repeat, config], "reused": True}
            elif config in unsupported:   # rejected once: the same flags are rejected every time
                run.update(status="unsupported", error=unsupported[config])
            elif deadline is not None and time.monotonic() > deadline:
                run.update(status="pending", error="--budget-minutes spent")
            else:
                record_path = os.path.join(tmp, f"{workload}-{slug(config)}-r{repeat}.json")
                cmd = train_command(args, dumps[workload], shapes[workload], flags_of[config], record_path,
                                    nproc_of.get(config))
                # As written to files: `python` for the interpreter, paths relative to the repository.
                shown = [rel(c) if os.path.isabs(c) and c.startswith(REPO + os.sep) else c
                         for c in ("python" if c == sys.executable else c for c in cmd)]
                run.update(command=shlex.join(shown), **run_once(cmd, record_path, args.run_timeout))
            if run["status"] == "unsupported":
                unsupported[config] = run["error"]
            run["summary"] = br.summarize_record(run["record"]) if run["status"] == "ok" else None
            runs.append(run)
            progress.line(f"{workload} r{repeat}/{repeats} {config}", result_text(run) + (
                " (from the earlier run, --resume)" if reused else ""), None if reused else run["wall_seconds"])
    return runs


def measured_env(runs, what, fallback):
    """The first run record's environment (else `fallback`); None, with a note, when no run produced a record."""
    if not any(r["status"] == "ok" for r in runs):
        print(f"no {what} produced a record; nothing written (first error: "
              f"{next((r['error'] for r in runs if r['error']), 'none')})")
        return None
    return next((r["record"]["environment"] for r in runs if (r.get("record") or {}).get("environment")), fallback)


def load_previous(path, shapes, dumps, args):
    """{(workload, repeat, config): run} of an earlier <name>.json that --resume may reuse (same set-up and code)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        print(f"resume: no readable {os.path.relpath(path)}; running everything", flush=True)
        return {}
    if (data.get("quick"), data.get("device_arg"), data.get("train_args")) != \
            (args.quick, args.device, args.train_args_list):
        print("resume: --quick, --device or --train-args differ from the earlier run; running everything", flush=True)
        return {}
    if data.get("code_sources") != sources_digest(MEASURED_SOURCES):
        print("resume: the code that shapes a run changed since the earlier runs; running everything", flush=True)
        return {}
    same = {w for w in shapes if (data.get("workloads") or {}).get(w) == workloads_json(shapes, dumps)[w]}
    keep = ("ok", "unsupported") if data.get("train_sources") == sources_digest(TRAIN_SOURCES) else ("ok",)
    return {(r["workload"], r["repeat"], r["config"]): r for r in data.get("runs", [])
            if r.get("status") in keep and (r.get("record") or r["status"] == "unsupported")
            and r["workload"] in same and r["config"] in FLAGS and r.get("flags") == FLAGS[r["config"]]}


# ---- Workloads -----------------------------------------------------------------------------------

def parse_list(text, known, what):
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"--{what} is empty")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown {what.rstrip('s')} {unknown[0]!r} (choose from {', '.join(known)})")
    return names


def resolve_workloads(args):
    """{name: shape} of the selected workloads with the command-line overrides applied."""
    table = QUICK_WORKLOADS if args.quick else WORKLOADS
    given = dict(steps=args.steps, batch_size=args.batch_size, rows=args.rows, features=args.features,
                 num_datasets=args.num_datasets, warmup=args.timing_warmup)
    shapes = {}
    for name in parse_list(args.workloads, list(table), "workloads"):
        shape = shapes[name] = {**table[name], **{k: v for k, v in given.items() if v is not None}}
        if shape["steps"] <= shape["warmup"]:
            raise UsageError(f"{name}: --steps {shape['steps']} must exceed the {shape['warmup']} warm-up steps "
                             "(lower --timing-warmup)")
        if shape["batch_size"] > shape["num_datasets"]:
            raise UsageError(f"{name}: batch size {shape['batch_size']} exceeds the dump's "
                             f"{shape['num_datasets']} datasets")
    return shapes


def workload_line(shape, dump):
    return (f"batch {shape['batch_size']} x {shape['rows']} rows x {shape['features']} features, "
            f"{shape['steps']} steps ({shape['warmup']} warm-up steps excluded); dump "
            f"`{rel(dump)}` ({shape['num_datasets']} datasets)")


def workloads_json(shapes, dumps):
    return {w: {**shapes[w], "dump": rel(dumps[w])} for w in shapes}


# ---- Mode: the ablation --------------------------------------------------------------------------

def mode_ablation(args, command):
    """Runs the matrix and writes <name>.md, <name>.json and the PNGs; the exit code."""
    deadline = time.monotonic() + 60 * args.budget_minutes if args.budget_minutes else None
    shapes, env0 = resolve_workloads(args), detect_env(args.device)
    out_dir, dumps = out_dir_of(args, env0), make_dumps(args, shapes)
    previous = load_previous(os.path.join(out_dir, f"{args.name}.json"), shapes, dumps, args) if args.resume else {}
    runs = run_matrix(shapes, dumps, args.config_list, args.repeats, args, previous=previous, deadline=deadline,
                      what="ablation")
    env = measured_env(runs, "run", env0)
    if env is None:
        return 1
    pending = sum(r["status"] == "pending" for r in runs)
    incomplete = ([f"- INCOMPLETE: {len(runs) - pending} of {len(runs)} runs done when --budget-minutes "
                   f"{args.budget_minutes:g} ran out; rerun the same command with --resume to finish"]
                  if pending else [])
    all_rows = {w: br.rows_for(runs, w, args.config_list, FLAGS, GROUPS) for w in shapes}
    spread = sorted({r.get("spread") for rows in all_rows.values() for r in rows if r.get("spread")})
    lines = br.header_lines("Ablation: train_optimized.py configurations", command, env, extra=[
        f"- repeats: {args.repeats}, interleaved (every config once per repeat: A B C A B C), each run in its "
        "own process", "- ms/step: median over repeats of each run's median step time (warm-up steps excluded); "
        f"[p10–p90]: {' / '.join(spread) or 'n/a'}; min–max of the per-repeat medians; speedup = baseline "
        "median / config median; data wait: the run's median time blocked on the next batch (share of the "
        "median step), median over repeats",
        f"- every figure is computed from the run records in `{args.name}.json` (`runs[*].record`)"
        + (f"; {sum(bool(r.get('reused')) for r in runs)} runs reused from an earlier invocation (--resume)"
           if previous else ""), *incomplete])
    for workload, rows in all_rows.items():
        lines += [f"## {workload} workload", "", workload_line(shapes[workload], dumps[workload]), "",
                  *br.ablation_table(rows, shapes[workload]["batch_size"]), ""]
    lines += br.targets_lines(all_rows, args.quick)
    pngs = br.plot_ablation(out_dir, args.name, all_rows)
    br.write_outputs(out_dir, args.name, command, env, {
        "quick": args.quick, "repeats": args.repeats, "order": "interleaved", "device_arg": args.device,
        "train_args": args.train_args_list, "complete": not pending, "train_sources": sources_digest(TRAIN_SOURCES),
        "code_sources": sources_digest(MEASURED_SOURCES), "workloads": workloads_json(shapes, dumps),
        "configs": [{"name": n, "flags": FLAGS[n], "group": GROUPS[n]} for n in args.config_list],
        "rows": all_rows, "targets": br.TARGETS, "plots": [os.path.basename(p) for p in pngs],
        "runs": runs_for_json(runs)}, lines, pngs)
    br.print_summary(all_rows, args.quick, incomplete)
    return 1 if any(r["status"] == "failed" for r in runs) else 0


# ---- Mode: --profile, the blog's four tables for the baseline and the best configuration ---------

def best_configs(args, shapes, out_dir):
    """{workload: {"config", "flags", "why"} or None}: --best-flags, else the lowest median of <out>/<name>.json."""
    if args.best_flags is not None:
        return {w: {"config": "best", "flags": shlex.split(args.best_flags), "why": "given with --best-flags"}
                for w in shapes}
    path = os.path.join(out_dir, f"{args.name}.json")
    try:
        with open(path) as f:
            rows = json.load(f).get("rows", {})
    except (OSError, ValueError):
        rows = {}
    best = {w: br.best_row(rows.get(w, [])) for w in shapes}
    return {w: b and {"config": b["config"], "flags": b["flags"],
                      "why": f"lowest median ms/step ({format_ms(b['median_ms'])}) in {rel(path)}"}
            for w, b in best.items()}


def mode_profile(args, command):
    """Profiles the baseline and the best configuration of each workload; writes profile.md / profile.json."""
    shapes, env0 = resolve_workloads(args), detect_env(args.device)
    out_dir = out_dir_of(args, env0)
    best = best_configs(args, shapes, out_dir)
    if None in best.values():
        print(f"profile: no --best-flags and no {args.name}.json with every workload in {os.path.relpath(out_dir)}; "
              "running the ablation first", flush=True)
        mode_ablation(args, command)
        best = best_configs(args, shapes, out_dir)
        if None in best.values():
            raise RunError("no configuration produced a timing in the ablation; nothing to profile")
    dumps, trace_root, runs = make_dumps(args, shapes), os.path.join(REPO, "runs", "bench-profile"), []
    for workload, shape in shapes.items():
        name, flags = best[workload]["config"], best[workload]["flags"]
        flags_of = {"baseline": []} | ({name if name != "baseline" else "best": flags} if flags else {})
        with_profile = {c: f + ["--profile", "--profile-dir", os.path.join(trace_root, f"{workload}-{slug(c)}")]
                        for c, f in flags_of.items()}
        runs += [{**run, "flags": flags_of[run["config"]]} for run in run_matrix(
            {workload: shape}, {workload: dumps[workload]}, list(flags_of), 1, args, flags_of=with_profile,
            what="profiled runs")]
    env = measured_env(runs, "profiled run", env0)
    if env is None:
        return 1
    lines = br.header_lines("Profiles: baseline and best configuration", command, env, extra=[
        "- torch.profiler over a few steps of each run (profile_utils.TrainingProfiler: wait/warm-up/active "
        "schedule); the profiler slows the host, so its times are for attribution; quote step times from "
        f"`{args.name}.md`", f"- traces: `{rel(trace_root)}/<workload>-<config>/` (not committed)"])
    failed = False
    for workload in shapes:
        name, flags, why = best[workload]["config"], best[workload]["flags"], best[workload]["why"]
        mine = [r for r in runs if r["workload"] == workload]   # the baseline, then the best unless that is it
        base_run, best_run = mine[0], mine[-1]
        lines += [f"## {workload} workload", "",
                  f"baseline: `(no flags)` | best: `{name}` (`{' '.join(flags) or '(no flags)'}`), {why}", ""]
        if any(r["status"] != "ok" for r in mine):
            lines += ["no profile: " + "; ".join(f"{r['config']}: {r['error']}" for r in mine if r["status"] != "ok"),
                      ""]
            failed = True
            continue
        tables = [br.extra_of(r["record"]).get("profile_tables", "") for r in (base_run, best_run)]
        failed |= not any(tables)
        lines += [f"step time in these profiled runs (median, profiler on): {format_ms(base_run['summary']['step_ms'])}"
                  f" (baseline) → {format_ms(best_run['summary']['step_ms'])} (best)", "",
                  *br.profile_lines(tables[0], tables[1], name)]
    br.write_outputs(out_dir, "profile", command, env, {"best": best, "runs": runs}, lines)
    return 1 if failed else 0


# ---- Modes measured in this process (bench_micro): --loaders-only and --attention ----------------

def mode_loaders(args, command):
    """Each loader of bench_micro.LOADER_CONFIGS without training; writes loaders.md / loaders.json."""
    shapes = resolve_workloads(args)
    dumps = make_dumps(args, shapes)   # first: a missing dump is generated in a child, before this process uses CUDA
    import bench_micro
    from dump_format import DumpError, open_dump
    from profile_utils import environment_record
    device = resolve_device(args.device)
    env = environment_record(device)
    try:
        infos = {w: open_dump(dumps[w]) for w in shapes}
    except DumpError as e:
        raise UsageError(str(e)) from None
    data = bench_micro.run_loaders(shapes, infos, device, args.repeats, args.loader_batches, args.h2d_mib)
    lines = br.header_lines("Loaders without training: throughput to the device", command, env, extra=[
        f"- method: each loader built and warmed up ({bench_micro.LOADER_WARMUP} batches, untimed), then timed "
        f"over {args.loader_batches} batches with a synchronize before and after; bytes = x + y of each batch; "
        f"medians over {args.repeats} interleaved repeats",
        "- measured in one process (no model, each loader closed before the next) so the loaders and the "
        "host-to-device reference share the same device and process"])
    lines += bench_micro.loaders_lines(data, shapes, {w: rel(p) for w, p in dumps.items()}, args.h2d_mib)
    br.write_outputs(out_dir_of(args, env), "loaders", command, env,
                     {"workloads": workloads_json(shapes, dumps), **data}, lines)
    return 1 if any(r["status"] != "ok" for r in data["measurements"]) else 0


def mode_attention(args, command):
    """The datapoint attention alone per kernel, at each workload's shape and split quantiles."""
    import bench_micro
    from profile_utils import environment_record
    shapes, device = resolve_workloads(args), resolve_device(args.device)
    env, repeats = environment_record(device), 3 if args.quick else 15
    results = bench_micro.run_attention(shapes, device, repeats)
    first = next(iter(results.values()))
    lines = br.header_lines("The datapoint attention alone: the floor under a training step", command, env,
                            extra=bench_micro.attention_method_lines(first["dtype"], repeats, device.type == "cuda",
                                                                     first["layers"]))
    targets = {w: None if args.quick else br.TARGETS.get(w, {}).get("step_ms") for w in results}
    lines += bench_micro.attention_lines(results, targets)
    br.write_outputs(out_dir_of(args, env), "attention", command, env, {"workloads": results}, lines)
    return 0


# ---- Mode: --scaling, torchrun over 1..N processes -----------------------------------------------

def supports_torchrun():
    """Whether train.py / train_optimized.py set up torch.distributed."""
    return any(b"init_process_group" in read_source(n) for n in ("train.py", "train_optimized.py", "runtime.py"))


def resolve_gpus(args, env):
    count = int(env.get("gpu_count") or 0)
    if args.gpus:
        try:
            gpus = [int(g) for g in args.gpus.split(",") if g.strip()]
        except ValueError:
            raise UsageError(f"--gpus {args.gpus!r}: expected comma-separated integers") from None
        if not gpus or min(gpus) < 1:
            raise UsageError(f"--gpus {args.gpus!r}: process counts must be >= 1")
    else:
        gpus = [g for g in (1, 2, 4, 8) if g <= count] if count else [1, 2]
    if count and max(gpus) > count:
        raise UsageError(f"--gpus {max(gpus)} but this machine has {count} GPU(s)")
    if not count and not args.quick:
        raise UsageError("--scaling needs CUDA GPUs (or --quick for a 1-2 process gloo run on CPU)")
    return gpus


def mode_scaling(args, command):
    """torchrun --nproc_per_node=N train_optimized.py for each N; writes scaling.md / scaling.json and PNGs."""
    if not supports_torchrun():
        raise UsageError("train_optimized.py does not support torchrun yet (no torch.distributed set-up in "
                         "train.py / train_optimized.py)")
    shapes, env0 = resolve_workloads(args), detect_env()
    gpus, out_dir = resolve_gpus(args, env0), out_dir_of(args, env0)
    best, dumps, runs = best_configs(args, shapes, out_dir), make_dumps(args, shapes), []
    labels = [br.gpu_label(g) for g in gpus]
    for workload, shape in shapes.items():
        best[workload] = best[workload] or {"config": "baseline", "flags": [],
                                            "why": "no --best-flags and no ablation.json: baseline"}
        runs += run_matrix({workload: shape}, {workload: dumps[workload]}, labels, args.repeats, args,
                           flags_of=dict.fromkeys(labels, best[workload]["flags"]), nproc_of=dict(zip(labels, gpus)),
                           what="scaling runs")
    env = measured_env(runs, "scaling run", env0)
    if env is None:
        return 1
    rows = {w: br.scaling_rows(runs, w, gpus, shape["batch_size"]) for w, shape in shapes.items()}
    lines = br.header_lines("Scaling: torchrun (DDP) over GPUs", command, env, extra=[
        "- `python -m torch.distributed.run --standalone --nproc_per_node=N train_optimized.py ...` with "
        "NCCL_NVLS_ENABLE=0 (NVLink multicast off) and OMP_NUM_THREADS=1 (unless set) for every N; --batch-size "
        "is per rank, so the global batch is N x batch",
        f"- {args.repeats} interleaved repeats; ms/step: median over repeats of rank 0's median step time; "
        "datasets/s = N x batch / median step; efficiency = datasets/s / (N x datasets/s at the fewest GPUs)"])
    unit = "GPUs" if br.device_name(env) != "cpu" else "processes (gloo on CPU)"
    pngs = []
    for workload, wrows in rows.items():
        name, flags, why = best[workload]["config"], best[workload]["flags"], best[workload]["why"]
        lines += [f"## {workload} workload", "", workload_line(shapes[workload], dumps[workload])
                  + f"; flags `{' '.join(flags) or '(none)'}` ({name}: {why})", "", *br.scaling_table(wrows, unit), ""]
        plotted = [r for r in wrows if "step_ms" in r]
        if plotted:
            pngs.append(br.save_plot(br.plot_scaling, plotted, os.path.join(out_dir, f"scaling-{workload}.png"),
                                     f"{workload}: DDP scaling ({br.device_name(env)})"))
    br.write_outputs(out_dir, "scaling", command, env, {
        "gpus": gpus, "workloads": workloads_json(shapes, dumps), "flags": best,
        "rows": rows, "runs": runs_for_json(runs)}, lines, [p for p in pngs if p])
    return 1 if any(r["status"] != "ok" for w in rows.values() for r in w) else 0


# ---- Mode: --quality, loss curves of the baseline and the best flags, and time to the Random Forest's AUC ---

def quality_run(args, workload, shape, dump, flags, name, seed, extra):
    """One train_optimized.py run that evaluates (unlike the timing runs) and keeps every step's loss."""
    rec_path = os.path.join(REPO, "runs", "bench-quality", f"{workload}-{name}.json")
    cmd = [sys.executable, "train_optimized.py", "--data", dump, "--batch-size", str(shape["batch_size"]),
           "--seed", str(seed), "--log-every", "250", "--timing-warmup", str(shape["warmup"]),
           "--eval-suite", args.eval_suite, "--record", rec_path, *extra, *flags]
    return run_once(cmd, rec_path, args.run_timeout)


def quality_runs(args, workload, shape, dump, best_flags, progress, save):
    """Baseline and best interleaved over --repeats seeds: (runs, curves {name: [(steps, losses)]})."""
    curves, runs = {"baseline (fp32, no flags)": [], "best: " + " ".join(best_flags): []}, []
    for seed in range(args.repeats):
        for name, flags in zip(curves, ([], best_flags)):
            r = quality_run(args, workload, shape, dump, flags, len(runs), seed, ["--steps", str(shape["steps"])])
            runs.append({"name": name, "seed": seed, "status": r["status"], "error": r["error"],
                         "record": r["record"] and slim_record(r["record"])})
            save(runs)   # every finished run is on disk at once: a run cut off later loses only itself
            label = f"{workload} quality seed {seed} {name}"
            if r["status"] != "ok":
                progress.line(label, f"{r['status']}: {r['error']}")
                continue
            ex = br.extra_of(r["record"])
            losses = ex.get("losses") or []
            curves[name].append((list(range(1, len(losses) + 1)), losses))
            progress.line(label, f"final loss {ex['final_loss']:.4f}, roc_auc {ex['eval']['roc_auc']:.4f}",
                          r["wall_seconds"])
    return runs, curves


def time_to_quality(args, workload, shape, dump, best_flags, progress):
    """A --time-budget run of the best flags, evaluated every --eval-every steps; None when it failed."""
    r = quality_run(args, workload, shape, dump, best_flags, "ttq", 0,
                    ["--time-budget", str(args.time_budget), "--eval-every", str(args.eval_every)])
    if r["status"] != "ok":
        progress.line(f"{workload} time-to-quality", f"{r['status']}: {r['error']}")
        return None
    ex = br.extra_of(r["record"])
    from evaluation import first_time_passing   # lazily: sklearn and the suite load only for --quality
    history = ex["eval_history"]
    last = history[-1]["scores"] if history else {}
    baselines = ({n: {"roc_auc": v, "mean_rank": last.get("baselines_rank", {}).get(n)}
                  for n, v in last["baselines_roc_auc"].items()} if "baselines_roc_auc" in last
                 else {ex["reference"]["name"]: ex["reference"]["scores"]})
    passed = first_time_passing(history, baselines)
    progress.line(f"{workload} time-to-quality", f"{args.time_budget:.0f} s: {ex['steps_done']} steps, roc_auc "
                  f"{ex['eval']['roc_auc']:.4f}; first passed: " + ", ".join(
                      f"{n} {'at %.1f s' % p['train_seconds'] if p else 'never'}" for n, p in passed.items()),
                  r["wall_seconds"])
    return {"budget_s": args.time_budget, "eval_every": args.eval_every, "flags": best_flags, "suite": args.eval_suite,
            "steps_done": ex["steps_done"], "train_seconds": ex["train_seconds"], "final": ex["eval"],
            "baselines": baselines, "first_passing": passed, "record": slim_record(r["record"]),
            "history": [(e["step"], e["train_seconds"], e["scores"]["roc_auc"], e["scores"].get("rank"))
                        for e in history]}


def mode_quality(args, command):
    """Baseline (fp32, no flags) vs --best-flags (default --fast): loss curves over --repeats seeds, their eval
    scores, and a --time-budget run timed to the Random Forest's mean ROC AUC."""
    shapes, env0 = resolve_workloads(args), detect_env()
    out_dir, dumps, results, curves = out_dir_of(args, env0), make_dumps(args, shapes), {}, {}
    best_flags = args.best_flags.split() if args.best_flags else ["--fast"]
    os.makedirs(os.path.join(REPO, "runs", "bench-quality"), exist_ok=True)
    progress = br.Progress(len(shapes) * (2 * args.repeats + bool(args.time_budget)),
                           f"quality (baseline and best over {args.repeats} seeds per workload"
                           + (", plus a time-to-quality run" if args.time_budget else "") + ")",
                           *run_seconds_guess(args))
    for workload, shape in shapes.items():
        def save(runs, workload=workload):
            write_json_atomic(os.path.join(out_dir, "quality.json"), {
                "command": command, "date": br.now_iso(), "git_commit": br.git_commit(), "partial": True,
                "workloads": {**results, workload: {"runs": runs, "time_to_quality": None}}})
        runs, curves[workload] = quality_runs(args, workload, shape, dumps[workload], best_flags, progress, save)
        ttq = (time_to_quality(args, workload, shape, dumps[workload], best_flags, progress) if args.time_budget
               else None)
        results[workload] = {"shape": shape, "dump": rel(dumps[workload]), "runs": runs, "time_to_quality": ttq}
    all_runs = [x for w in results.values() for x in w["runs"]]
    env = measured_env(all_runs, "quality run", env0)
    if env is None:
        return 1
    lines = br.header_lines("Quality: the fast path learns what the baseline learns", command, env, extra=[
        f"- seeds {list(range(args.repeats))}: the same seed gives both configurations the same initial weights "
        "and batches; the band in the plot is the min-max over seeds (run-to-run noise of each configuration)"])
    pngs = []
    for workload, shape in shapes.items():
        ttq = results[workload]["time_to_quality"]
        pngs.append(br.save_plot(br.plot_loss_curves, curves[workload], os.path.join(
            out_dir, f"loss-curves-{workload}.png"), f"{workload}: {shape['steps']} steps, {args.repeats} seeds "
            f"({br.device_name(env)})"))
        if ttq and ttq["history"]:
            pngs.append(br.save_plot(br.plot_time_to_quality, ttq, os.path.join(
                out_dir, f"time-to-quality-{workload}.png"), f"{workload}, {ttq['suite']} suite: ROC AUC against "
                "training seconds"))
        lines += [f"## {workload} workload", "", workload_line(shape, dumps[workload]) + f"; {shape['steps']} steps",
                  "", *br.quality_lines(results[workload]["runs"], ttq)]
    br.write_outputs(out_dir, "quality", command, env, {"workloads": results}, lines, [p for p in pngs if p])
    failed = any(x["status"] != "ok" for x in all_runs) or any(
        args.time_budget and not w["time_to_quality"] for w in results.values())
    return 1 if failed else 0


# ---- Command line --------------------------------------------------------------------------------

def build_parser():
    p = ArgumentParser(description=__doc__.split("\n")[0])
    add = p.add_argument
    add("--quick", action="store_true", help="CPU-sized run: tiny dumps, 6 steps, 1 repeat, a few configs (CI)")
    add("--workloads", default="blog,upstream", help="comma-separated workloads: blog, upstream")
    add("--configs", help="comma-separated config names (default: all; --quick: " + ", ".join(QUICK_CONFIGS) + ")")
    add("--repeats", type=int, help="interleaved repeats (default 3; --quick: 1)")
    add("--steps", type=int, help="steps per run, for every selected workload")
    add("--batch-size", type=int, help="datasets per step (per rank), every workload")
    add("--rows", type=int, help="rows per dataset of the generated dumps")
    add("--features", type=int, help="max features per dataset of the generated dumps")
    add("--num-datasets", type=int, help="datasets in the generated dumps")
    add("--timing-warmup", type=int, help="untimed warm-up steps per run")
    add("--dump-seed", type=int, default=0, help="prior seed of the generated dumps (cache key)")
    add("--dump-device", choices=["auto", "cpu", "cuda"], default="auto",
        help="where prior_dump generates a missing dump (auto: cuda when present; cached apart)")
    add("--device", default="auto", help="--device of every run: auto, cpu, cuda or cuda:N")
    add("--train-args", default="", help='extra train_optimized.py arguments for every run, e.g. "--optimizer adamw"')
    add("--run-timeout", type=int, default=1800, help="seconds before one run is killed")
    add("--budget-minutes", type=float, help="start no new run after this many minutes (finish with --resume)")
    add("--resume", action="store_true", help="reuse the successful runs of <out>/<name>.json with the same set-up")
    add("--out", help="output folder (default: results/<gpu-name>/)")
    add("--name", default="ablation", help="base name of the ablation files (ablation.md, .json)")
    mode = p.add_mutually_exclusive_group().add_argument
    mode("--profile", action="store_true", help="the blog's four profiler tables, baseline | best -> profile.md")
    mode("--loaders-only", action="store_true", help="loader throughput without training vs host-to-device -> "
         "loaders.md")
    mode("--quality", action="store_true", help="loss curves and eval of baseline vs best over --repeats seeds "
         "-> quality.md")
    mode("--attention", action="store_true", help="the datapoint attention alone per kernel, with its floors -> "
         "attention.md")
    mode("--scaling", action="store_true", help="torchrun over --gpus process counts -> scaling.md")
    add("--best-flags", help='flags of the "best" config, as --best-flags="--resident --flash" (default: the '
        "lowest median in <out>/ablation.json; --quality: --fast)")
    add("--gpus", help="process counts for --scaling, e.g. 1,2 (default: 1,2,4,8 up to the GPU count)")
    add("--time-budget", type=float, default=0.0, help="--quality: also train --best-flags this many seconds")
    add("--eval-every", default="500", help="--quality: steps (or Ns seconds) between evals of that run")
    add("--eval-suite", choices=list(EVAL_SUITES), default="toy",
        help="--quality: the toy tasks, the real suite's first split per task (real), or all its splits (real-all)")
    add("--loader-batches", type=int, default=200, help="timed batches per loader in --loaders-only")
    add("--h2d-mib", type=int, default=256, help="buffer size of the host-to-device reference copy")
    return p


def check_args(args, argv):
    """Fills the defaults that depend on --quick and checks the numbers (UsageError); returns the command."""
    args.repeats = args.repeats if args.repeats is not None else 1 if args.quick else 3
    for key, least in LEAST.items():
        if getattr(args, key) is not None and getattr(args, key) < least:
            raise UsageError(f"--{key.replace('_', '-')} must be at least {least}, got {getattr(args, key)}")
    if args.budget_minutes is not None and args.budget_minutes <= 0:
        raise UsageError(f"--budget-minutes must be positive, got {args.budget_minutes:g}")
    args.config_list = (parse_list(args.configs, list(FLAGS), "configs") if args.configs
                        else list(QUICK_CONFIGS) if args.quick else list(FLAGS))
    args.train_args_list = shlex.split(args.train_args)
    try:   # before any run: a folder that cannot be written must not cost the runs (default: under results/)
        check_outputs({"--out dir": args.out or os.path.join(REPO, "results")})
    except OutputError as e:
        raise UsageError(str(e)) from None
    return shlex.join(["python", "benchmark.py"] + argv)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        command = check_args(args, argv)
        for flag, mode in (("loaders_only", mode_loaders), ("attention", mode_attention), ("scaling", mode_scaling),
                           ("quality", mode_quality), ("profile", mode_profile)):
            if getattr(args, flag):
                return mode(args, command)
        return mode_ablation(args, command)
    except UsageError as e:
        return fail(e)
    except (RunError, OutputError) as e:
        return fail(e, 1)
    except KeyboardInterrupt:
        print("interrupted: runs finished so far are in their records; rerun with --resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
