"""Runs train_optimized.py configurations, each in its own process, and writes results/<gpu>/.

    python benchmark.py                         # the ablation: both workloads, 3 interleaved repeats
    python benchmark.py --quick                 # CPU-sized smoke run (what CI runs)
    python benchmark.py --workloads blog --configs baseline,pinned+streams --repeats 5
    python benchmark.py --profile               # the blog's four profiler tables, baseline | best
    python benchmark.py --loaders-only          # loader throughput against the host-to-device bandwidth
    python benchmark.py --scaling --gpus 1,2    # torchrun (DDP) scaling table
    python benchmark.py --budget-minutes 8 ...  # stop starting runs after 8 min; then the same + --resume

Every figure written is computed from the JSON run records that train_optimized.py writes with
`--record`; ablation.json keeps those records, so each table cell traces back to the runs behind it.
Targets (issue 5) live here as constants and are printed for the best configuration; no test checks them.
"""
import argparse
import datetime
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

REPO = os.path.dirname(os.path.abspath(__file__))

# The matrix: (name, flags of train_optimized.py, group), in table order. Groups: "baseline"; "alone"
# (one optimization by itself); "stack" (the blog's cumulative order: pinned -> +streams -> +gds-bin ->
# +flash; its first step is the "pinned" row); "beyond" (past the blog). Later issues append rows here;
# a row whose flags train_optimized.py does not accept yet is skipped with a one-line note.
CONFIGS = [
    ("baseline", [], "baseline"),
    ("pinned", ["--pinned"], "alone"),
    ("streams", ["--streams"], "alone"),
    ("gds-bin", ["--gds-bin"], "alone"),
    ("gds-bin-host", ["--gds-bin", "--kvikio-target", "host"], "alone"),
    ("flash", ["--flash"], "alone"),
    ("resident", ["--resident"], "alone"),
    ("amp-bf16", ["--amp", "bf16"], "alone"),
    ("compile", ["--compile"], "alone"),
    ("pinned+streams", ["--pinned", "--streams"], "stack"),
    ("pinned+streams+gds-bin", ["--pinned", "--streams", "--gds-bin"], "stack"),
    ("pinned+streams+gds-bin+flash", ["--pinned", "--streams", "--gds-bin", "--flash"], "stack"),
    ("resident+flash", ["--resident", "--flash"], "beyond"),
    ("resident+flash+bf16", ["--resident", "--flash", "--amp", "bf16"], "beyond"),
    ("+compile", ["--resident", "--flash", "--amp", "bf16", "--compile"], "beyond"),
    ("+matmul-features", ["--resident", "--flash", "--amp", "bf16", "--compile", "--feature-attention", "matmul"],
     "beyond"),
    ("+broadcast-features", ["--resident", "--flash", "--amp", "bf16", "--compile", "--feature-attention",
                             "broadcast"], "beyond"),
    ("+fused+async", ["--resident", "--flash", "--amp", "bf16", "--compile", "--feature-attention", "broadcast",
                      "--fused-optimizer", "--async-loss"], "beyond"),
    ("+flash-kernel", ["--resident", "--flash", "--amp", "bf16", "--compile", "--feature-attention", "broadcast",
                       "--fused-optimizer", "--async-loss", "--sdpa-backend", "flash"], "beyond"),
    ("+cuda-graphs", ["--resident", "--flash", "--amp", "bf16", "--compile", "--feature-attention", "broadcast",
                      "--fused-optimizer", "--async-loss", "--cuda-graphs"], "beyond"),
    ("+flex", ["--resident", "--flash", "--amp", "bf16", "--compile", "--feature-attention", "broadcast",
               "--fused-optimizer", "--async-loss", "--cuda-graphs", "--padded-attention", "flex"], "beyond"),
    ("fast", ["--fast"], "beyond"),
]
QUICK_CONFIGS = ("baseline", "pinned+streams", "flash")

# Workloads: the blog's (batch 6 of 5000-row tables) and upstream nanoTabPFN's (batch 32 of 150 rows).
# num_datasets sizes the cached dump (blog: 6000 x 5000 x 5 float32 = 600 MB of X); steps x batch stay
# below it so no run wraps around the dump.
WORKLOADS = {
    "blog": dict(batch_size=6, rows=5000, features=5, steps=100, warmup=10, num_datasets=6000),
    "upstream": dict(batch_size=32, rows=150, features=5, steps=300, warmup=20, num_datasets=50000),
}
# --quick: the same two shapes in miniature (few long tables / many short ones), small enough that
# six runs finish in well under a minute on 2 CPU cores.
QUICK_WORKLOADS = {
    "blog": dict(batch_size=2, rows=32, features=5, steps=6, warmup=2, num_datasets=64),
    "upstream": dict(batch_size=8, rows=12, features=5, steps=6, warmup=2, num_datasets=64),
}

# Issue 5's speed targets, for the best configuration of each full-size workload (checked here, printed
# as met / missed with the measured figure; never asserted in a test).
TARGETS = {
    "blog": {"step_ms": 15.0, "peak_gib": 3.0, "data_share": 0.01},
    "upstream": {"step_ms": 2.0, "data_share": 0.01},
}

# Loader configurations of --loaders-only: (name, make_loader keyword arguments).
LOADER_CONFIGS = [
    ("baseline-h5", dict(kind="h5")),
    ("pinned", dict(kind="h5", pinned=True)),
    ("streams", dict(kind="h5", streams=True)),
    ("pinned+streams", dict(kind="h5", pinned=True, streams=True)),
    ("gds-bin", dict(kind="bin")),
    ("resident", dict(kind="resident")),
]

PHASES = ("data", "forward", "backward", "optimizer")
LOADER_WARMUP = 10   # untimed batches per loader in --loaders-only (thread start-up, first reads)


class UsageError(Exception):
    """Bad command-line input: main() prints `error: <message>` and returns 2."""


class RunError(Exception):
    """A failure that is not the user's input (a dump that could not be generated): exit code 1."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line, no usage block: the repository's convention for bad input.
        raise UsageError(message)


# ---------------------------------------------------------------------------------------------
# Pure parts: scheduling, per-run summaries, aggregation, markdown (unit-tested directly).

def schedule(workloads, configs, repeats):
    """The run order: per workload, repeat r runs every config once (A B C A B C), so drift over time
    (clocks, thermals, page cache) hits every configuration alike.

    Returns:
        list of (workload, repeat (1-based), config) tuples.
    """
    return [(w, r, c) for w in workloads for r in range(1, repeats + 1) for c in configs]


def _quantile(values, q):
    """Linear-interpolated quantile (numpy's default) of a non-empty list."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _extra(record):
    """The record's "extra" block (train.run puts loader, losses, peak memory... there)."""
    extra = record.get("extra")
    return extra if isinstance(extra, dict) else {}


def _field(record, key):
    """A run-record field from "extra" (make_run_record's layout) or from the top level."""
    value = _extra(record).get(key)
    return record.get(key) if value is None else value


def step_times_ms(record):
    """Per-step times (ms) of the timed steps, or None: today's records carry only percentiles."""
    timing = record.get("timing") or {}
    for source in (timing, timing.get("step") or {}, _extra(record)):
        for key in ("step_times_ms", "values"):
            values = source.get(key)
            if isinstance(values, list) and values:
                return [float(v) for v in values]
    return None


def summarize_record(record):
    """The fields of one run record (profile_utils.make_run_record layout) that the tables use.

    Returns:
        dict with step_ms (the run's median step time), step_p10 / step_p90, step_times (list or
        None), phases {name: median ms}, data_share, peak_memory_bytes, data_path, sdpa_backend,
        final_loss, diagnosis, world_size, global_batch (datasets per step over all ranks, or None),
        measured_steps.
    Raises:
        KeyError / TypeError when the record has no step timing.
    """
    timing = record["timing"]
    step = timing["step"]
    if step.get("median") is None:
        raise KeyError("run record has no measured steps (all warm-up?)")
    phases = {name: float(stats["median"]) for name, stats in (timing.get("phases") or {}).items()
              if isinstance(stats, dict) and stats.get("median") is not None}
    loader = _field(record, "loader") or {}
    loss = _field(record, "final_loss")
    world = int(_field(record, "world_size") or 1)
    batch = ((record.get("config") or {}).get("train") or {}).get("batch_size")
    global_batch = _field(record, "global_batch") or (batch * world if batch else None)
    return {
        "step_ms": float(step["median"]),
        "step_p10": float(step.get("p10") if step.get("p10") is not None else step["median"]),
        "step_p90": float(step.get("p90") if step.get("p90") is not None else step["median"]),
        "step_times": step_times_ms(record),
        "phases": phases,
        "data_share": float(timing.get("data_share") or 0.0),
        "peak_memory_bytes": int(_field(record, "peak_memory_bytes") or 0),
        "data_path": _field(record, "data_path") or (loader.get("path") if isinstance(loader, dict) else None),
        "sdpa_backend": _field(record, "sdpa_backend"),
        "final_loss": float(loss) if isinstance(loss, (int, float)) else None,
        "diagnosis": _field(record, "diagnosis") or "",
        "world_size": world,
        "global_batch": int(global_batch) if global_batch else None,
        "measured_steps": int(timing.get("measured_steps") or step.get("n") or 0),
    }


def aggregate(summaries):
    """Combines the per-repeat summaries of one (workload, config).

    Args:
        summaries: list of summarize_record() dicts, one per successful repeat.
    Returns:
        dict: median_ms (median over repeats of each run's median), min_ms / max_ms (of those medians),
        p10_ms / p90_ms (of every timed step of every repeat pooled when the records carry per-step
        times, else the lowest p10 and highest p90 of the repeats), spread (which of the two),
        repeat_ms (the per-repeat medians, in order), phases (median over repeats per phase),
        data_share (median), peak_memory_bytes (max), final_loss (median), data_path / sdpa_backend /
        verdicts (distinct values joined), diagnosis (the full line of the median repeat).
    """
    medians = [s["step_ms"] for s in summaries]
    if all(s["step_times"] for s in summaries):
        pooled = [t for s in summaries for t in s["step_times"]]
        p10, p90, spread = _quantile(pooled, 0.10), _quantile(pooled, 0.90), "pooled steps"
    else:
        # Records without per-step times: the envelope of the repeats' own p10 and p90 (with one
        # repeat, exactly that run's p10-p90).
        p10 = min(s["step_p10"] for s in summaries)
        p90 = max(s["step_p90"] for s in summaries)
        spread = "lowest p10 - highest p90 of the repeats"
    names = [n for n in PHASES if any(n in s["phases"] for s in summaries)]
    names += sorted({n for s in summaries for n in s["phases"]} - set(names))
    losses = [s["final_loss"] for s in summaries if s["final_loss"] is not None]

    def distinct(key):
        values = []
        for s in summaries:
            if s[key] and s[key] not in values:
                values.append(s[key])
        return " / ".join(str(v) for v in values)

    return {
        "median_ms": statistics.median(medians),
        "min_ms": min(medians),
        "max_ms": max(medians),
        "p10_ms": p10,
        "p90_ms": p90,
        "spread": spread,
        "repeat_ms": medians,
        "phases": {n: statistics.median(s["phases"].get(n, 0.0) for s in summaries) for n in names},
        "data_share": statistics.median(s["data_share"] for s in summaries),
        "peak_memory_bytes": max(s["peak_memory_bytes"] for s in summaries),
        "final_loss": statistics.median(losses) if losses else None,
        "data_path": distinct("data_path"),
        "sdpa_backend": distinct("sdpa_backend"),
        "verdicts": " / ".join(dict.fromkeys(verdict(s["diagnosis"]) for s in summaries if s["diagnosis"])),
        # The repeat at the median (the lower one of an even count) speaks for the row.
        "diagnosis": sorted(summaries, key=lambda s: s["step_ms"])[(len(summaries) - 1) // 2]["diagnosis"],
        "world_size": max(s["world_size"] for s in summaries),
        "global_batch": max((s["global_batch"] or 0) for s in summaries) or None,
        "repeats": len(summaries),
    }


def add_speedups(rows, baseline="baseline"):
    """Sets row["speedup"] = baseline median / row median (None without a baseline row) in place."""
    base = next((r for r in rows if r["config"] == baseline and r.get("median_ms")), None)
    for row in rows:
        row["speedup"] = (base["median_ms"] / row["median_ms"]) if base and row.get("median_ms") else None
    return rows


def best_row(rows):
    """The measured row with the lowest median step time, or None."""
    measured = [r for r in rows if r.get("median_ms")]
    return min(measured, key=lambda r: r["median_ms"]) if measured else None


def check_targets(workload, row):
    """Issue 5's targets for `workload` against a row: list of (what, target, measured, met)."""
    targets = TARGETS.get(workload, {})
    out = []
    if "step_ms" in targets:
        out.append(("ms/step", f"<= {targets['step_ms']:g} ms", f"{row['median_ms']:.2f} ms",
                    row["median_ms"] <= targets["step_ms"]))
    if "peak_gib" in targets:
        peak = row["peak_memory_bytes"] / 2**30
        out.append(("peak memory", f"<= {targets['peak_gib']:g} GiB",
                    f"{peak:.2f} GiB" if row["peak_memory_bytes"] else "n/a (no CUDA)",
                    bool(row["peak_memory_bytes"]) and peak <= targets["peak_gib"]))
    if "data_share" in targets:
        out.append(("data wait", f"<= {100 * targets['data_share']:g}% of step",
                    f"{100 * row['data_share']:.2f}%", row["data_share"] <= targets["data_share"]))
    return out


def _fmt_bytes(n):
    return f"{n / 2**30:.2f} GiB" if n else "n/a (CPU)"


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ") if text not in (None, "") else "—"


def format_ms(ms):
    """Milliseconds for the tables: two decimals below 100 ms, one above."""
    return f"{ms:.2f}" if ms < 100 else f"{ms:.1f}"


def verdict(diagnosis):
    """The first word group of a profile_utils.diagnose() line ("input-bound", "GPU-bound", ...)."""
    return diagnosis.split(":", 1)[0] if diagnosis else ""


ABLATION_COLUMNS = ("config", "flags", "ms/step median [p10–p90]", "repeat medians min–max",
                    "speedup vs baseline", "datasets/s", "data wait", "peak memory", "data path",
                    "SDPA backend", "final loss", "diagnosis")


def ablation_table(rows, batch_size):
    """Markdown table of one workload's aggregated rows; configs that did not run become notes,
    and each config's full diagnosis line follows the table.

    Args:
        rows: rows_for() output (aggregate() fields plus config, flags, status, speedup).
        batch_size: datasets per step and rank (for datasets/s).
    Returns:
        list of markdown lines.
    """
    lines = ["| " + " | ".join(ABLATION_COLUMNS) + " |", "|" + "---|" * len(ABLATION_COLUMNS)]
    notes, diagnoses = [], []
    for row in rows:
        flags = " ".join(row["flags"]) or "(none)"
        if not row.get("median_ms"):
            notes.append(f"- `{row['config']}` (`{flags}`): {row['status']}")
            continue
        speed = f"{row['speedup']:.2f}x" if row.get("speedup") else "—"
        per_s = (row["global_batch"] or row["world_size"] * batch_size) * 1000.0 / row["median_ms"]
        data_ms = row["phases"].get("data", 0.0)
        loss = f"{row['final_loss']:.4f}" if row.get("final_loss") is not None else "—"
        lines.append(
            f"| {row['config']} | `{flags}` | {format_ms(row['median_ms'])} [{format_ms(row['p10_ms'])}–"
            f"{format_ms(row['p90_ms'])}] | {format_ms(row['min_ms'])}–{format_ms(row['max_ms'])} | {speed}"
            f" | {per_s:.1f} | {data_ms:.2f} ms ({100 * row['data_share']:.1f}%) |"
            f" {_fmt_bytes(row['peak_memory_bytes'])} | {_cell(row['data_path'])} | {_cell(row['sdpa_backend'])}"
            f" | {loss} | {_cell(row['verdicts'])} |")
        if row["status"] != "ok":
            notes.append(f"- `{row['config']}`: {row['status']}")
        diagnoses.append(f"- `{row['config']}`: {row['diagnosis']}")
    return lines + ([""] + notes if notes else []) + (["", "Diagnoses (profile_utils.diagnose, the median repeat "
                                                           "of each config):"] + diagnoses if diagnoses else [])


# ---------------------------------------------------------------------------------------------
# Files: atomic writes, output folder, environment.

def write_text_atomic(path, text):
    """Writes text to a temp file in the same folder, flush+fsync, then renames over `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())   # the bytes are on disk before the name points at them
        _readable(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _readable(path):
    """Gives a results file the usual rw-r--r-- (temp files are created 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
    return path


def write_json(path, obj):
    from profile_utils import write_json_atomic  # lazily: `import benchmark` stays light
    _readable(write_json_atomic(path, obj))


def save_plot(plot_fn, rows, path, title, **kwargs):
    """Calls a profile_utils plot function (which writes its PNG atomically). Returns the path, or
    None with a one-line note: a plotting problem must not lose the tables already measured."""
    try:
        return _readable(plot_fn(rows, path, title=title, **kwargs))
    except Exception as e:
        print(f"note: plot {os.path.basename(path)} not written ({type(e).__name__}: {e})")
        return None


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"


def environment_of(records):
    """The environment block (GPU name, versions) of the first record that has one."""
    for record in records:
        env = record.get("environment") or _extra(record).get("environment")
        if isinstance(env, dict) and env:
            return env
    return {}


def device_name(env):
    """The accelerator the records ran on ("NVIDIA H200"), or "cpu"."""
    name = env.get("gpu_name")
    device = str(env.get("device") or "")
    return str(name) if name and not device.startswith("cpu") else "cpu"


def default_out_dir(env):
    """results/<gpu-name-slug>/ (results/nvidia-h200/), or results/cpu-<host>/ without a GPU."""
    name = device_name(env)
    if name == "cpu":
        host = str(env.get("hostname") or platform.node() or "host").split(".")[0]
        return os.path.join(REPO, "results", "cpu-" + slug(host))
    return os.path.join(REPO, "results", slug(name))


def detect_env():
    """GPU name without records (before any run, or when all failed): nvidia-smi, so this process
    never opens a CUDA context (each run gets a clean GPU)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
        if out.returncode == 0 and names:
            return {"gpu_name": names[0], "device": "cuda", "gpu_count": len(names)}
    except (OSError, subprocess.SubprocessError):
        pass
    return {"device": "cpu", "gpu_count": 0}


def planned_env(args):
    """detect_env(), or no GPU when the runs are told --device cpu."""
    return {"device": "cpu", "gpu_count": 0} if args.device.startswith("cpu") else detect_env()


def git_commit():
    """Commit of the repository, with "+dirty" when tracked files differ from it.

    NANOTABPFN_GIT_COMMIT, when set, wins: a copy of the tree on a GPU machine may carry a stale .git
    (its HEAD is not the commit that was copied), so whoever makes the copy names the commit."""
    if os.environ.get("NANOTABPFN_GIT_COMMIT"):
        return os.environ["NANOTABPFN_GIT_COMMIT"]
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:  # not a checkout, and no commit named
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return proc.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def now_iso():
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def header_lines(title, command, env, extra=()):
    """The header of every results file: command, date, commit, device and versions."""
    versions = ", ".join(f"{label} {env.get(key) if env.get(key) is not None else 'n/a'}"
                         for label, key in (("torch", "torch"), ("CUDA", "cuda"), ("cuDNN", "cudnn"),
                                            ("kvikio", "kvikio"), ("driver", "driver"), ("python", "python")))
    gpus = f" x{env['gpu_count']}" if (env.get("gpu_count") or 0) > 1 else ""
    return [f"# {title}", "",
            f"- command: `{command}`",
            f"- date: {now_iso()}",
            f"- git commit: {git_commit()}",
            f"- device: {device_name(env)}{gpus} (host {env.get('hostname', platform.node())})",
            f"- versions: {versions}",
            *extra, ""]


# ---------------------------------------------------------------------------------------------
# Dumps: generated once with prior_dump's importable API, cached under data/bench/ by shape and seed.

def dump_path(shape, seed, device):
    return os.path.join(REPO, "data", "bench", f"prior-n{shape['num_datasets']}-r{shape['rows']}"
                                               f"-f{shape['features']}-c2-s{seed}-{device}.h5")


def ensure_dump(shape, seed, device="cpu", timeout=3600):
    """The cached dump for `shape`, generated first if missing.

    Generation runs prior_dump.write_dump in a child process: on a GPU host the prior may run on
    CUDA, and this process must not hold a CUDA context while the measured runs use the GPU.
    write_dump writes atomically, so an interrupted generation leaves no file under the final name.

    Args:
        shape: workload dict (num_datasets, rows, features).
        seed: prior seed. device: "cpu" or "cuda" (CPU and CUDA dumps differ; both are cached).
    Returns:
        the dump path.
    """
    path = dump_path(shape, seed, device)
    if os.path.exists(path):
        return path
    print(f"generating {os.path.relpath(path, REPO)} ({shape['num_datasets']} datasets x {shape['rows']} rows"
          f" x {shape['features']} features, prior on {device}) ...", flush=True)
    code = ("import sys, prior_dump; s = prior_dump.write_dump(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),"
            " int(sys.argv[4]), 2, int(sys.argv[5]), device=sys.argv[6]);"
            " print(f\"  done in {s['seconds']:.1f} s ({s['bytes'] / 1e6:.0f} MB)\")")
    cmd = [sys.executable, "-c", code, path, str(shape["num_datasets"]), str(shape["rows"]),
           str(shape["features"]), str(seed), device]
    try:
        proc = subprocess.run(cmd, cwd=REPO, timeout=timeout, env=child_env())
    except subprocess.TimeoutExpired:
        raise RunError(f"generating the dump {path} took more than {timeout} s") from None
    if proc.returncode != 0 or not os.path.exists(path):
        raise RunError(f"could not generate the dump {path} (prior_dump.write_dump exit {proc.returncode})")
    return path


# ---------------------------------------------------------------------------------------------
# Running train_optimized.py.

def child_env(distributed=False):
    env = dict(os.environ)
    # Hard requirement of the GPU hosts: NVLink multicast stays off (in NCCL, symmetric memory, NVSHMEM).
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    env["PYTHONUNBUFFERED"] = "1"
    if distributed:
        # torchrun sets OMP_NUM_THREADS=1 for every rank when N > 1 but not when N = 1; set it for
        # every process count so all rows of the scaling table run with the same threads per rank.
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def train_command(dump, shape, flags, record_path, device="auto", extra=(), nproc=None):
    """The train_optimized.py command line of one run (through torchrun when nproc is given)."""
    args = ["train_optimized.py", "--data", dump, "--steps", str(shape["steps"]),
            "--batch-size", str(shape["batch_size"]), "--no-eval", "--log-every", str(shape["steps"]),
            "--timing-warmup", str(shape["warmup"]), "--record", record_path]
    if device != "auto":
        args += ["--device", device]
    args += list(extra) + list(flags)
    if nproc is None:
        return [sys.executable] + args
    # torch.distributed.run is torchrun's module: no dependence on a `torchrun` script on PATH.
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] + args


def _last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def rejected_flags(returncode, stderr):
    """True when train_optimized.py's argparse refused the flags (a flag a later issue adds)."""
    return returncode == 2 and ("unrecognized arguments" in stderr or "invalid choice" in stderr)


def run_once(cmd, record_path, timeout):
    """Runs one training process and reads its record.

    Returns:
        dict with status ("ok", "unsupported", "failed"), returncode, wall_seconds, error (one
        line), record (dict or None).
    """
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
    out = {"returncode": proc.returncode, "wall_seconds": time.perf_counter() - t0, "record": None, "error": ""}
    if rejected_flags(proc.returncode, stderr):
        return {**out, "status": "unsupported",
                "error": "train_optimized.py does not accept these flags yet (" + _last_line(stderr) + ")"}
    if proc.returncode != 0:
        return {**out, "status": "failed",
                "error": f"exit {proc.returncode}: " + (_last_line(stderr) or _last_line(stdout))}
    try:
        with open(record_path) as f:
            record = json.load(f)
        summarize_record(record)   # fails here, not in the tables, if the record lacks step timing
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {**out, "status": "failed", "error": f"no usable run record: {type(e).__name__}: {e}"}
    return {**out, "status": "ok", "record": record}


def slim_record(record):
    """The record as kept in the results JSON: all of it but the (long) profiler tables markdown."""
    extra = {k: v for k, v in _extra(record).items() if k != "profile_tables"}
    return {**{k: v for k, v in record.items() if k != "extra"}, "extra": extra}


def _display_command(cmd):
    """The command as written to files: `python` for the interpreter, paths relative to the repo."""
    shown = ["python" if c == sys.executable else c for c in cmd]
    return [os.path.relpath(c, REPO) if os.path.isabs(c) and c.startswith(REPO + os.sep) else c for c in shown]


def progress_line(label, result):
    if result["status"] == "unsupported":
        return f"{label}: skipped: {result['error']}"
    if result["status"] == "failed":
        return f"{label}: FAILED: {result['error']}"
    s = summarize_record(result["record"])
    return f"{label}: {format_ms(s['step_ms'])} ms/step (data {100 * s['data_share']:.1f}%)"


def run_matrix(shapes, dumps, configs, repeats, args, flags_of=None, nproc_of=None, previous=None,
               deadline=None):
    """Runs every (workload, repeat, config) in schedule() order, one process each.

    Args:
        shapes / dumps: {workload: shape} and {workload: dump path}.
        configs: names to run, in order; flags_of maps a name to its flags (default: the matrix).
        nproc_of: {config: process count} to launch a config through torchrun (--scaling).
        previous: {(workload, repeat, config): run} measured earlier (--resume), reused as they are.
        deadline: time.monotonic() after which no new run starts (--budget-minutes); the rest are
            returned with status "pending".
    Returns:
        list of run dicts: workload, config, repeat, flags, command, status ("ok", "unsupported",
        "failed", "pending"), error, returncode, wall_seconds, record, summary.
    """
    flags_of = flags_of or {name: flags for name, flags, _ in CONFIGS}
    previous = previous or {}
    unsupported = {}
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-records-") as tmp:
        for workload, repeat, config in schedule(list(shapes), configs, repeats):
            base = {"workload": workload, "config": config, "repeat": repeat, "flags": list(flags_of[config])}
            label = f"[{workload} r{repeat}/{repeats}] {config}"
            done = previous.get((workload, repeat, config))
            if done is not None:
                summary = summarize_record(done["record"]) if done["status"] == "ok" else None
                runs.append({**done, "summary": summary, "reused": True})
                if done["status"] == "unsupported":
                    unsupported[config] = done["error"]
                print(progress_line(label, done) + " (from the earlier run, --resume)", flush=True)
                continue
            if config in unsupported:   # rejected once: the same flags are rejected every time
                runs.append({**base, "command": None, "status": "unsupported", "error": unsupported[config],
                             "returncode": None, "wall_seconds": 0.0, "record": None, "summary": None})
                continue
            if deadline is not None and time.monotonic() > deadline:
                runs.append({**base, "command": None, "status": "pending", "error": "--budget-minutes spent",
                             "returncode": None, "wall_seconds": 0.0, "record": None, "summary": None})
                continue
            record_path = os.path.join(tmp, f"{workload}-{slug(config)}-r{repeat}.json")
            cmd = train_command(dumps[workload], shapes[workload], flags_of[config], record_path,
                                device=args.device, extra=args.train_args_list, nproc=(nproc_of or {}).get(config))
            result = run_once(cmd, record_path, args.run_timeout)
            if result["status"] == "unsupported":
                unsupported[config] = result["error"]
            print(progress_line(label, result), flush=True)
            runs.append({**base, "command": shlex.join(_display_command(cmd)), **result,
                         "summary": summarize_record(result["record"]) if result["record"] else None})
    return runs


def load_previous(path, shapes, dumps, args):
    """The runs of an earlier <name>.json that --resume may reuse: successful ones (and flag
    rejections while the training scripts are unchanged) with the same --quick, device, --train-args,
    workload shape and dump, and the config's flags unchanged.

    Returns:
        {(workload, repeat, config): run dict}.
    """
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        print(f"resume: no readable {os.path.relpath(path)}; running everything", flush=True)
        return {}
    if (data.get("quick"), data.get("device_arg"), data.get("train_args")) != \
            (args.quick, args.device, args.train_args_list):
        print("resume: --quick, --device or --train-args differ from the earlier run; running everything",
              flush=True)
        return {}
    if data.get("code_sources") != code_sources():
        print("resume: the code that shapes a run changed since the earlier runs (or they predate this check); "
              "running everything", flush=True)
        return {}
    same = {w for w in shapes
            if (data.get("workloads") or {}).get(w) == {**shapes[w], "dump": os.path.relpath(dumps[w], REPO)}}
    current = {name: flags for name, flags, _ in CONFIGS}
    # A rejection of flags still holds while train.py / train_optimized.py are unchanged.
    keep = ("ok", "unsupported") if data.get("train_sources") == train_sources() else ("ok",)
    return {(r["workload"], r["repeat"], r["config"]): r for r in data.get("runs", [])
            if r.get("status") in keep and (r.get("record") or r["status"] == "unsupported")
            and r["workload"] in same and r["config"] in current and r.get("flags") == current[r["config"]]}


def _sources_digest(names):
    digest = hashlib.sha256()
    for name in names:
        try:
            with open(os.path.join(REPO, name), "rb") as f:
                digest.update(f.read())
        except OSError:
            pass
    return digest.hexdigest()


def train_sources():
    """sha256 of train.py + train_optimized.py (to know whether a flag rejection is still current)."""
    return _sources_digest(("train.py", "train_optimized.py"))


MEASURED_SOURCES = ("train.py", "train_optimized.py", "model.py", "loaders.py", "profile_utils.py", "prior_dump.py")


def code_sources():
    """sha256 of every file that shapes a measured run: --resume reuses runs only while it matches."""
    return _sources_digest(MEASURED_SOURCES)


def config_flags(name):
    return next(flags for n, flags, _ in CONFIGS if n == name)


def config_group(name):
    return next(group for n, _, group in CONFIGS if n == name)


def rows_for(runs, workload, configs, flags_of=None, baseline="baseline"):
    """Aggregated rows of one workload in `configs` order, with a status for configs that never
    produced a record, and speedups against `baseline`."""
    flags_of = flags_of or {name: flags for name, flags, _ in CONFIGS}
    group_of = {name: group for name, _, group in CONFIGS}
    rows = []
    for config in configs:
        mine = [r for r in runs if r["workload"] == workload and r["config"] == config]
        ok = [r["summary"] for r in mine if r["status"] == "ok"]
        row = {"config": config, "flags": list(flags_of.get(config, [])), "group": group_of.get(config, "")}
        problems = [r for r in mine if r["status"] in ("failed", "pending")]
        if ok:
            row.update(aggregate(ok))
            row["status"] = "ok" if not problems else \
                f"{len(ok)} of {len(mine)} repeats measured; {problems[0]['error']}"
        else:
            errors = [r["error"] for r in mine if r["error"]]
            kind = {"unsupported": "skipped: ", "pending": "not run yet: "}.get(mine[0]["status"] if mine else "",
                                                                              "failed: ")
            row["status"] = kind + (errors[0] if errors else "no run")
        rows.append(row)
    return add_speedups(rows, baseline)


def runs_for_json(runs):
    return [{k: (slim_record(v) if k == "record" and v else v) for k, v in r.items()} for r in runs]


# ---------------------------------------------------------------------------------------------
# Command-line values.

def _parse_list(text, known, what):
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
    names = _parse_list(args.workloads, list(table), "workloads")
    shapes = {}
    for name in names:
        shape = dict(table[name])
        for key in ("steps", "batch_size", "rows", "num_datasets"):
            if getattr(args, key) is not None:
                if getattr(args, key) < 1:
                    raise UsageError(f"--{key.replace('_', '-')} must be at least 1")
                shape[key] = getattr(args, key)
        if args.timing_warmup is not None:
            if args.timing_warmup < 0:
                raise UsageError("--timing-warmup must be >= 0")
            shape["warmup"] = args.timing_warmup
        if shape["steps"] <= shape["warmup"]:
            raise UsageError(f"{name}: --steps {shape['steps']} must exceed the {shape['warmup']} warm-up steps "
                             "(lower --timing-warmup)")
        if shape["batch_size"] > shape["num_datasets"]:
            raise UsageError(f"{name}: batch size {shape['batch_size']} exceeds the dump's "
                             f"{shape['num_datasets']} datasets")
        shapes[name] = shape
    return shapes


def _workload_line(shape, dump):
    return (f"batch {shape['batch_size']} x {shape['rows']} rows x {shape['features']} features, "
            f"{shape['steps']} steps ({shape['warmup']} warm-up steps excluded); dump "
            f"`{os.path.relpath(dump, REPO)}` ({shape['num_datasets']} datasets)")


def _dump_device(args):
    if args.dump_device != "auto":
        return args.dump_device
    return "cuda" if planned_env(args)["device"] == "cuda" else "cpu"


# ---------------------------------------------------------------------------------------------
# Mode: the ablation.

def targets_lines(all_rows, quick):
    """The "targets" section: issue 5's targets for each workload's best configuration."""
    lines = ["## Targets (issue 5; best configuration of each workload)", ""]
    if quick:
        return lines + ["- n/a: --quick shapes; the targets apply to the full blog and upstream workloads", ""]
    for workload, rows in all_rows.items():
        best = best_row(rows)
        if workload not in TARGETS:
            continue
        if best is None:
            lines.append(f"- {workload}: no successful run")
            continue
        for what, target, measured, met in check_targets(workload, best):
            lines.append(f"- {workload} {what} {target}: {'met' if met else 'MISSED'} ({measured}, "
                         f"`{best['config']}`)")
    return lines + [""]


def plot_ablation(out_dir, name, all_rows):
    """Stacked phase bars and speedup bars per workload (profile_utils plots, atomic PNGs)."""
    import profile_utils  # lazily: matplotlib is imported inside its plot functions
    written = []
    for workload, rows in all_rows.items():
        measured = [r for r in rows if r.get("median_ms")]
        if not measured:
            continue
        bars = [{"config": r["config"], "phases": r["phases"],
                 "step_ms": {"median": r["median_ms"], "p10": r["p10_ms"], "p90": r["p90_ms"]}}
                for r in measured]
        path = save_plot(profile_utils.plot_phase_bars, bars, os.path.join(out_dir, f"{name}-{workload}-phases.png"),
                         f"{workload}: median ms/step by phase (tick: step median)")
        written += [path] if path else []
        if any(r["config"] == "baseline" for r in measured):
            # plot_speedup computes baseline median / config median (the table's ratio) and draws the
            # config's p10-p90 as the error bar.
            path = save_plot(profile_utils.plot_speedup, bars,
                             os.path.join(out_dir, f"{name}-{workload}-speedup.png"),
                             f"{workload}: speedup vs baseline (ratio of medians)", baseline="baseline")
            written += [path] if path else []
    return written


def mode_ablation(args, command):
    """Runs the matrix and writes <name>.md, <name>.json and the PNGs. Returns (exit code, rows, out dir)."""
    deadline = time.monotonic() + 60 * args.budget_minutes if args.budget_minutes else None
    shapes = resolve_workloads(args)
    out_dir = args.out or default_out_dir(planned_env(args))
    md_path = os.path.join(out_dir, f"{args.name}.md")
    json_path = os.path.join(out_dir, f"{args.name}.json")
    device = _dump_device(args)
    dumps = {w: ensure_dump(shape, args.dump_seed, device) for w, shape in shapes.items()}
    previous = load_previous(json_path, shapes, dumps, args) if args.resume else {}
    runs = run_matrix(shapes, dumps, args.config_list, args.repeats, args, previous=previous, deadline=deadline)
    if not any(r["status"] == "ok" for r in runs):
        # Nothing measured: keep whatever an earlier run wrote rather than a table of failures.
        print(f"no run produced a record; nothing written (first error: "
              f"{next((r['error'] for r in runs if r['error']), 'none')})")
        return 1, {}, out_dir
    env = environment_of([r["record"] for r in runs if r["record"]]) or planned_env(args)
    pending = sum(r["status"] == "pending" for r in runs)
    incomplete = ([f"- INCOMPLETE: {len(runs) - pending} of {len(runs)} runs done when --budget-minutes "
                   f"{args.budget_minutes:g} ran out; rerun the same command with --resume to finish"]
                  if pending else [])
    all_rows = {w: rows_for(runs, w, args.config_list) for w in shapes}
    spread = sorted({r.get("spread") for rows in all_rows.values() for r in rows if r.get("spread")})

    lines = header_lines("Ablation: train_optimized.py configurations", command, env, extra=[
        f"- repeats: {args.repeats}, interleaved (every config once per repeat: A B C A B C), each run in its "
        "own process",
        "- ms/step: median over repeats of each run's median step time (warm-up steps excluded); "
        f"[p10–p90]: {' / '.join(spread) or 'n/a'}; min–max of the per-repeat medians; speedup = baseline "
        "median / config median; data wait: the run's median time blocked on the next batch (share of the "
        "median step), median over repeats",
        f"- every figure is computed from the run records in `{args.name}.json` (`runs[*].record`)"
        + (f"; {sum(bool(r.get('reused')) for r in runs)} runs reused from an earlier invocation (--resume)"
           if previous else ""), *incomplete])
    for workload, rows in all_rows.items():
        lines += [f"## {workload} workload", "", _workload_line(shapes[workload], dumps[workload]), ""]
        lines += ablation_table(rows, shapes[workload]["batch_size"]) + [""]
    lines += targets_lines(all_rows, args.quick)

    pngs = plot_ablation(out_dir, args.name, all_rows)
    write_json(json_path, {
        "command": command, "date": now_iso(), "git_commit": git_commit(), "device": device_name(env),
        "environment": env, "quick": args.quick, "repeats": args.repeats, "order": "interleaved",
        "device_arg": args.device, "train_args": args.train_args_list, "complete": not pending,
        "train_sources": train_sources(), "code_sources": code_sources(),
        "workloads": {w: {**shapes[w], "dump": os.path.relpath(dumps[w], REPO)} for w in shapes},
        "configs": [{"name": n, "flags": config_flags(n), "group": config_group(n)} for n in args.config_list],
        "rows": all_rows, "targets": TARGETS, "plots": [os.path.basename(p) for p in pngs],
        "runs": runs_for_json(runs)})
    write_text_atomic(md_path, "\n".join(lines))

    print()
    for workload, rows in all_rows.items():
        print(f"{workload}: ms/step median, speedup, data wait, peak memory")
        for row in rows:
            if row.get("median_ms"):
                speed = f"{row['speedup']:.2f}x" if row.get("speedup") else "—"
                print(f"  {row['config']:<30s} {format_ms(row['median_ms']):>8s} ms  {speed:>6s}  "
                      f"data {100 * row['data_share']:5.1f}%  {_fmt_bytes(row['peak_memory_bytes'])}")
            else:
                print(f"  {row['config']:<30s} {row['status']}")
    for line in targets_lines(all_rows, args.quick)[2:]:
        if line:
            print("targets: " + line[2:])
    if pending:
        print(incomplete[0][2:])
    print("wrote " + ", ".join(os.path.relpath(p) for p in [md_path, json_path] + pngs))
    return (1 if any(r["status"] == "failed" for r in runs) else 0), all_rows, out_dir


# ---------------------------------------------------------------------------------------------
# Mode: --profile, the blog's four tables for the baseline and the best configuration.

PROFILE_TABLES = (("cpu", "Top CPU operations"), ("cuda", "Top CUDA operations"),
                  ("transfers", "Memory transfers and host waits"), ("memory", "CUDA memory summary"))


def split_profile_tables(markdown):
    """{kind: section} of TrainingProfiler.tables_markdown() (four "### title" sections)."""
    out = {}
    for section in re.split(r"(?m)^(?=### )", markdown or ""):
        section = section.strip()
        if not section.startswith("### "):
            continue
        kind = next((k for k, title in PROFILE_TABLES if section[4:].startswith(title)), None)
        if kind and kind not in out:
            out[kind] = section
    return out


def markdown_rows(section):
    """The first markdown table of a section as a list of {header: cell} dicts."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    if len(lines) < 2:
        return []

    def cells(line):
        return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]

    headers = cells(lines[0])
    return [dict(zip(headers, cells(line))) for line in lines[2:]]


def _find(pattern, text):
    match = re.search(pattern, text or "")
    return match.group(1) if match else None


def _cell_of(section, name_col, name, value_col):
    row = next((r for r in markdown_rows(section or "") if r.get(name_col) == name), None)
    value = row.get(value_col) if row else None
    return value if value not in (None, "", "—") else None


def compare_profile_table(kind, base, best):
    """One comparison line for a table (baseline -> best), from the figures in the two sections;
    empty when neither has them."""
    pairs = []
    if kind == "cpu":
        pairs.append(("self CPU time per profiled step", _find(r"\((\S+ \S+) per step\)", base),
                      _find(r"\((\S+ \S+) per step\)", best)))
    elif kind == "cuda":
        pairs.append(("GPU time per profiled step", _find(r"\((\S+ \S+) per step;", base),
                      _find(r"\((\S+ \S+) per step;", best)))
        pairs.append(("GPU busy", _find(r"GPU busy (\S+) of", base), _find(r"GPU busy (\S+) of", best)))
    elif kind == "transfers":
        for op, col in (("cudaMemcpyAsync", "CPU per step"), ("cudaMemcpyAsync", "GPU per step"),
                        ("cudaStreamSynchronize", "CPU per step"), ("aten::item", "CPU per step"),
                        ("aten::copy_", "CPU per step")):
            pairs.append((f"{op} {col.replace(' per step', ' time per step')}", _cell_of(base, "Name", op, col),
                          _cell_of(best, "Name", op, col)))
    elif kind == "memory":
        pairs.append(("peak allocated", _cell_of(base, "Metric", "Peak allocated", "Value"),
                      _cell_of(best, "Metric", "Peak allocated", "Value")))
    parts = [f"{what}: {a or '—'} (baseline) → {b or '—'} (best)" for what, a, b in pairs if a or b]
    return "; ".join(parts)


def _demote(section, label):
    """A "### title" section as "#### label" + its body (the tables sit under one heading per kind)."""
    lines = section.splitlines()
    return [f"#### {label}: {lines[0][4:]}"] + lines[1:]


def best_configs(args, shapes, out_dir):
    """{workload: (name, flags, why)} of the configuration to profile / scale; None where unknown.

    --best-flags wins; else the lowest median of <out>/<name>.json (an earlier ablation)."""
    if args.best_flags is not None:
        flags = shlex.split(args.best_flags)
        return {w: ("best", flags, "given with --best-flags") for w in shapes}
    path = os.path.join(out_dir, f"{args.name}.json")
    found = {w: None for w in shapes}
    try:
        with open(path) as f:
            rows = json.load(f).get("rows", {})
    except (OSError, ValueError):
        return found
    for w in shapes:
        best = best_row(rows.get(w, []))
        if best:
            found[w] = (best["config"], best["flags"], f"lowest median ms/step ({format_ms(best['median_ms'])}) "
                                                       f"in {os.path.relpath(path, REPO)}")
    return found


def mode_profile(args, command):
    """Profiles the baseline and the best configuration of each workload; writes profile.md/json."""
    shapes = resolve_workloads(args)
    out_dir = args.out or default_out_dir(planned_env(args))
    best = best_configs(args, shapes, out_dir)
    if any(v is None for v in best.values()):
        print(f"profile: no --best-flags and no {args.name}.json with every workload in {os.path.relpath(out_dir)}; "
              "running the ablation first", flush=True)
        out_dir = mode_ablation(args, command)[2]
        best = best_configs(args, shapes, out_dir)
        if any(v is None for v in best.values()):
            raise RunError("no configuration produced a timing in the ablation; nothing to profile")
    device = _dump_device(args)
    trace_root = os.path.join(REPO, "runs", "bench-profile")
    runs = []
    for workload, shape in shapes.items():
        dump = ensure_dump(shape, args.dump_seed, device)
        name, flags, _ = best[workload]
        configs = ["baseline"] if not flags else ["baseline", name if name != "baseline" else "best"]
        flags_of = {c: (flags if c != "baseline" else []) for c in configs}
        extra = {c: ["--profile", "--profile-dir", os.path.join(trace_root, f"{workload}-{slug(c)}")]
                 for c in configs}
        flags_with_profile = {c: flags_of[c] + extra[c] for c in configs}
        for run in run_matrix({workload: shape}, {workload: dump}, configs, 1, args, flags_of=flags_with_profile):
            run["flags"] = flags_of[run["config"]]
            runs.append(run)
    if not any(r["status"] == "ok" for r in runs):
        print("no profiled run produced a record; nothing written")
        return 1
    env = environment_of([r["record"] for r in runs if r["record"]]) or planned_env(args)
    lines = header_lines("Profiles: baseline and best configuration", command, env, extra=[
        "- torch.profiler over a few steps of each run (profile_utils.TrainingProfiler: wait/warm-up/active "
        "schedule); the profiler slows the host, so its times are for attribution; quote step times from "
        f"`{args.name}.md`",
        f"- traces: `{os.path.relpath(trace_root, REPO)}/<workload>-<config>/` (not committed)"])
    failed = False
    for workload in shapes:
        name, flags, why = best[workload]
        mine = {r["config"]: r for r in runs if r["workload"] == workload}
        base_run = mine.get("baseline")
        best_run = next((r for c, r in mine.items() if c != "baseline"), base_run)
        lines += [f"## {workload} workload", "",
                  f"baseline: `(no flags)` | best: `{name}` (`{' '.join(flags) or '(no flags)'}`), {why}", ""]
        if not base_run or not best_run or base_run["status"] != "ok" or best_run["status"] != "ok":
            errors = [f"{r['config']}: {r['error']}" for r in mine.values() if r["status"] != "ok"]
            lines += [f"no profile: {'; '.join(errors)}", ""]
            failed = True
            continue
        tb = split_profile_tables(_extra(base_run["record"]).get("profile_tables", ""))
        tt = split_profile_tables(_extra(best_run["record"]).get("profile_tables", ""))
        sb, st = base_run["summary"], best_run["summary"]
        lines += [f"step time in these profiled runs (median, profiler on): {format_ms(sb['step_ms'])} ms "
                  f"(baseline) → {format_ms(st['step_ms'])} ms (best)", ""]
        if not tb and not tt:
            lines += ["no profiler tables in the records (train_optimized.py --profile wrote none)", ""]
            failed = True
        for i, (kind, title) in enumerate(PROFILE_TABLES, 1):
            lines += [f"### {i}. {title}", ""]
            comparison = compare_profile_table(kind, tb.get(kind), tt.get(kind))
            if comparison:
                lines += [f"Comparison: {comparison}", ""]
            for label, section in (("baseline", tb.get(kind)), (f"best ({name})", tt.get(kind))):
                lines += (_demote(section, label) if section else [f"#### {label}", "", "(no table)"]) + [""]
    md_path, json_path = os.path.join(out_dir, "profile.md"), os.path.join(out_dir, "profile.json")
    write_json(json_path, {"command": command, "date": now_iso(), "git_commit": git_commit(),
                           "device": device_name(env), "environment": env,
                           "best": {w: {"config": b[0], "flags": b[1], "why": b[2]} for w, b in best.items()},
                           "runs": [{**r, "record": r["record"]} for r in runs]})
    write_text_atomic(md_path, "\n".join(lines))
    print("wrote " + ", ".join(os.path.relpath(p) for p in (md_path, json_path)))
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# Mode: --loaders-only, loader throughput without training.
#
# In-process on purpose: no model, optimizer or CUDA graph state is built, each loader is closed
# before the next starts, and the host-to-device reference is measured in the same process and on
# the same device, so "GB/s delivered" and "GB/s the link can do" are directly comparable.

def _sync(device):
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _in_process_device(args):
    """The torch.device of --device for the modes that measure in this process (train.resolve_device)."""
    from train import resolve_device
    try:
        return resolve_device(args.device)
    except (ValueError, RuntimeError) as e:
        raise UsageError(str(e)) from None


def _timed_ms(device, fn):
    """Milliseconds one call of fn takes: CUDA events around it on CUDA (GPU time of what it queues),
    the host clock on CPU. Returns (ms, fn's result)."""
    import torch
    if device.type != "cuda":
        t0 = time.perf_counter()
        result = fn()
        return (time.perf_counter() - t0) * 1e3, result
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    result = fn()
    end.record()
    end.synchronize()   # why: elapsed_time needs both events complete
    return start.elapsed_time(end), result


def h2d_bandwidth(device, nbytes, repeats=10):
    """Host-to-device copy bandwidth of one `nbytes` buffer, pinned and pageable, with CUDA events.

    Returns:
        {"pinned": {...}, "pageable": {...}} with bytes, median_ms, gb_per_s (1e9 bytes/s); None
        without CUDA.
    """
    import torch
    if device.type != "cuda":
        return None
    out = {}
    for kind in ("pinned", "pageable"):
        src = torch.ones(nbytes, dtype=torch.uint8)   # written once: no page faults inside the clock
        if kind == "pinned":
            src = src.pin_memory()
        src.to(device, non_blocking=True)             # warm-up: allocator and driver set-up
        _sync(device)
        times = [_timed_ms(device, lambda: src.to(device, non_blocking=True))[0] for _ in range(repeats)]
        median = statistics.median(times)
        out[kind] = {"bytes": nbytes, "median_ms": median, "gb_per_s": nbytes / (median / 1e3) / 1e9,
                     "times_ms": times}
    return out


def measure_loader(info, shape, device, kwargs, warmup, batches):
    """Batches per second and bytes per second one loader delivers to `device`, without training.

    Args:
        info: loaders.DumpInfo. shape: the workload (batch_size). kwargs: make_loader arguments.
        warmup: untimed batches first (thread start-up, first reads, allocator).
        batches: timed batches.
    Returns:
        dict with status, loader, data path, notes, batches_per_s, ms_per_batch, gb_per_s, bytes,
        setup_s (make_loader + warm-up, untimed), seconds.
    """
    from loaders import make_loader
    t0 = time.perf_counter()
    try:
        loader = make_loader(info, shape["batch_size"], device, **kwargs)
    except Exception as e:   # one row says why (e.g. no kvikio); the other loaders still run
        return {"status": "failed", "error": f"{type(e).__name__}: {_last_line(str(e))}"}
    try:
        it = iter(loader)
        for _ in range(warmup):
            next(it)
        _sync(device)   # why: warm-up copies must not spill into the timed window
        setup = time.perf_counter() - t0
        nbytes = 0
        t1 = time.perf_counter()
        for _ in range(batches):
            batch = next(it)
            nbytes += batch.x.numel() * batch.x.element_size() + batch.y.numel() * batch.y.element_size()
        _sync(device)   # why: copies may still be in flight; the clock stops when the last batch is there
        seconds = time.perf_counter() - t1
        desc = loader.describe()
    except Exception as e:
        return {"status": "failed", "error": f"{type(e).__name__}: {_last_line(str(e))}"}
    finally:
        loader.close()
    return {"status": "ok", "loader": desc.get("loader"), "path": desc.get("path"),
            "notes": list(desc.get("notes") or loader.notes or []), "batches": batches, "bytes": nbytes,
            "seconds": seconds, "batches_per_s": batches / seconds, "ms_per_batch": 1000.0 * seconds / batches,
            "gb_per_s": nbytes / seconds / 1e9, "setup_s": setup}


def batch_copy_us(device, shape, repeats=50):
    """Median time (µs, CUDA events) of copying one batch's x and y host-to-device, pinned and pageable."""
    import torch
    if device.type != "cuda":
        return None
    out = {}
    B, R, F = shape["batch_size"], shape["rows"], shape["features"]
    for kind in ("pinned", "pageable"):
        x, y = torch.randn(B, R, F), torch.randn(B, R)
        if kind == "pinned":
            x, y = x.pin_memory(), y.pin_memory()
        x.to(device), y.to(device)
        _sync(device)
        times = [_timed_ms(device, lambda: (x.to(device, non_blocking=True), y.to(device, non_blocking=True)))[0]
                 * 1000.0 for _ in range(repeats)]
        out[kind] = statistics.median(times)
    return out


def mode_loaders(args, command):
    """Measures each loader of LOADER_CONFIGS per workload; writes loaders.md and loaders.json."""
    shapes = resolve_workloads(args)
    # Dumps first: a missing one is generated in a child process, before this one touches CUDA.
    dumps = {w: ensure_dump(shape, args.dump_seed, _dump_device(args)) for w, shape in shapes.items()}
    from loaders import DumpError, open_dump
    device = _in_process_device(args)
    from profile_utils import environment_record
    env = environment_record(device)
    out_dir = args.out or default_out_dir(env)
    try:
        infos = {w: open_dump(dumps[w]) for w in shapes}
    except DumpError as e:
        raise UsageError(str(e)) from None
    h2d = h2d_bandwidth(device, args.h2d_mib << 20)
    copies = {w: batch_copy_us(device, s) for w, s in shapes.items()}
    names = [n for n, _ in LOADER_CONFIGS]
    kwargs_of = dict(LOADER_CONFIGS)
    results = []
    for workload, repeat, name in schedule(list(shapes), names, args.repeats):
        shape = shapes[workload]
        r = measure_loader(infos[workload], shape, device, kwargs_of[name], LOADER_WARMUP, args.loader_batches)
        results.append({"workload": workload, "loader_config": name, "repeat": repeat,
                        "kwargs": kwargs_of[name], **r})
        what = (f"{r['batches_per_s']:.1f} batches/s, {r['gb_per_s']:.3f} GB/s ({r['path']})"
                if r["status"] == "ok" else f"FAILED: {r['error']}")
        print(f"[{workload} r{repeat}/{args.repeats}] {name}: {what}", flush=True)

    pinned_gbs = h2d["pinned"]["gb_per_s"] if h2d else None
    rows = {}
    for workload in shapes:
        rows[workload] = []
        for name in names:
            mine = [r for r in results if r["workload"] == workload and r["loader_config"] == name]
            ok = [r for r in mine if r["status"] == "ok"]
            if not ok:
                rows[workload].append({"loader_config": name, "status": "failed: " + mine[0]["error"]})
                continue
            bps = statistics.median(r["batches_per_s"] for r in ok)
            gbs = statistics.median(r["gb_per_s"] for r in ok)
            rows[workload].append({
                "loader_config": name, "status": "ok", "path": ok[0]["path"], "loader": ok[0]["loader"],
                "batches_per_s": bps, "ms_per_batch": 1000.0 / bps,
                "datasets_per_s": bps * shapes[workload]["batch_size"], "gb_per_s": gbs,
                # A resident dump is sliced in device memory: no host-to-device copy to compare with.
                "share_of_pinned_h2d": (gbs / pinned_gbs if pinned_gbs and not str(ok[0]["path"]).startswith(
                    "resident") else None),
                "setup_s": statistics.median(r["setup_s"] for r in ok), "repeats": len(ok),
                "notes": ok[0]["notes"]})

    lines = header_lines("Loaders without training: throughput to the device", command, env, extra=[
        f"- method: each loader built and warmed up ({LOADER_WARMUP} batches, untimed), then timed over "
        f"{args.loader_batches} batches with a synchronize before and after; bytes = x + y of each batch; "
        f"medians over {args.repeats} interleaved repeats",
        "- measured in one process (no model, each loader closed before the next) so the loaders and the "
        "host-to-device reference below share the same device and process"])
    lines += ["## Host-to-device reference (same process, CUDA events)", ""]
    if h2d:
        for kind in ("pinned", "pageable"):
            lines.append(f"- {kind}: {h2d[kind]['gb_per_s']:.1f} GB/s ({args.h2d_mib} MiB buffer, "
                         f".to(device, non_blocking=True), median of {len(h2d[kind]['times_ms'])})")
        for workload, c in copies.items():
            lines.append(f"- one {workload} batch (x and y): {c['pinned']:.1f} µs pinned, {c['pageable']:.1f} µs "
                         "pageable (median of 50)")
    else:
        lines.append(f"- n/a: the bandwidth comparison needs CUDA (device {device}); the GB/s below are bytes "
                     "delivered into host tensors")
    lines.append("")
    for workload, wrows in rows.items():
        shape = shapes[workload]
        lines += [f"## {workload} workload", "",
                  f"batch {shape['batch_size']} x {shape['rows']} rows x {shape['features']} features; "
                  f"dump `{os.path.relpath(dumps[workload], REPO)}`", "",
                  "| loader | data path | batches/s | ms/batch | datasets/s | GB/s delivered | % of pinned H2D |"
                  " set-up s (untimed) |", "|---|---|---|---|---|---|---|---|"]
        notes = []
        for row in wrows:
            if row["status"] != "ok":
                notes.append(f"- `{row['loader_config']}`: {row['status']}")
                continue
            share = (f"{100 * row['share_of_pinned_h2d']:.1f}%" if row["share_of_pinned_h2d"] is not None
                     else "n/a (no copy)" if str(row["path"]).startswith("resident") and h2d else "n/a")
            lines.append(f"| {row['loader_config']} | {_cell(row['path'])} | {row['batches_per_s']:.1f} | "
                         f"{row['ms_per_batch']:.3f} | {row['datasets_per_s']:.0f} | {row['gb_per_s']:.3f} | "
                         f"{share} | {row['setup_s']:.2f} |")
            notes += [f"- `{row['loader_config']}`: {n}" for n in row["notes"]]
        lines += ([""] + notes if notes else []) + [""]
    md_path, json_path = os.path.join(out_dir, "loaders.md"), os.path.join(out_dir, "loaders.json")
    write_json(json_path, {"command": command, "date": now_iso(), "git_commit": git_commit(),
                           "device": str(device), "environment": env, "h2d": h2d, "batch_copy_us": copies,
                           "workloads": {w: {**shapes[w], "dump": os.path.relpath(dumps[w], REPO)} for w in shapes},
                           "rows": rows, "measurements": results})
    write_text_atomic(md_path, "\n".join(lines))
    print("wrote " + ", ".join(os.path.relpath(p) for p in (md_path, json_path)))
    return 1 if any(r["status"] != "ok" for r in results) else 0


# ---------------------------------------------------------------------------------------------
# Mode: --scaling, torchrun over 1..N processes.

def supports_torchrun():
    """Whether train.py / train_optimized.py set up torch.distributed (issue 6)."""
    for name in ("train.py", "train_optimized.py"):
        try:
            with open(os.path.join(REPO, name)) as f:
                if "init_process_group" in f.read():
                    return True
        except OSError:
            pass
    return False


def resolve_gpus(args, env):
    count = int(env.get("gpu_count") or 0)
    if args.gpus:
        try:
            gpus = [int(g) for g in args.gpus.split(",") if g.strip()]
        except ValueError:
            raise UsageError(f"--gpus {args.gpus!r}: expected comma-separated integers") from None
        if not gpus or min(gpus) < 1:
            raise UsageError(f"--gpus {args.gpus!r}: process counts must be >= 1")
    elif count:
        gpus = [g for g in (1, 2, 4, 8) if g <= count]
    else:
        gpus = [1, 2]
    if count and max(gpus) > count:
        raise UsageError(f"--gpus {max(gpus)} but this machine has {count} GPU(s)")
    if not count and not args.quick:
        raise UsageError("--scaling needs CUDA GPUs (or --quick for a 1-2 process gloo run on CPU)")
    return gpus


def gpu_label(gpus):
    return f"{gpus} GPU" + ("s" if gpus > 1 else "")


def scaling_rows(runs, workload, gpus, batch_size):
    """Rows of the scaling table of one workload (runs labelled gpu_label(N)).

    Returns:
        list of dicts: gpus, status, world_size, step_ms {median, p10, p90}, min_ms / max_ms,
        datasets_per_s (global batch / median step), efficiency (datasets/s over N/N0 times the
        datasets/s at the fewest process count N0 measured), data_share, peak_memory_bytes,
        repeat_ms; a failed count has only gpus and status.
    """
    rows, base = [], None
    for g in gpus:
        mine = [r for r in runs if r["workload"] == workload and r["config"] == gpu_label(g)]
        ok = [r["summary"] for r in mine if r["status"] == "ok"]
        if not ok:
            rows.append({"gpus": g, "status": "failed: " + (mine[0]["error"] if mine else "no run")})
            continue
        agg = aggregate(ok)
        world = agg["world_size"]
        per_s = (agg["global_batch"] or world * batch_size) * 1000.0 / agg["median_ms"]
        base = base or (g, per_s)
        rows.append({
            "gpus": g, "status": "ok" if world == g else f"record says world size {world}, expected {g}",
            "config": workload, "world_size": world,
            "step_ms": {"median": agg["median_ms"], "p10": agg["p10_ms"], "p90": agg["p90_ms"]},
            "min_ms": agg["min_ms"], "max_ms": agg["max_ms"], "datasets_per_s": per_s,
            "efficiency": per_s / (base[1] * g / base[0]), "data_share": agg["data_share"],
            "peak_memory_bytes": agg["peak_memory_bytes"], "repeat_ms": agg["repeat_ms"]})
    return rows


def mode_scaling(args, command):
    """torchrun --nproc_per_node=N train_optimized.py for each N; writes scaling.md/json and PNGs."""
    if not supports_torchrun():
        raise UsageError("train_optimized.py does not support torchrun yet (no torch.distributed set-up in "
                         "train.py / train_optimized.py)")
    shapes = resolve_workloads(args)
    env0 = detect_env()
    gpus = resolve_gpus(args, env0)
    out_dir = args.out or default_out_dir(env0)
    best = best_configs(args, shapes, out_dir)
    device = _dump_device(args)
    dumps = {w: ensure_dump(shape, args.dump_seed, device) for w, shape in shapes.items()}
    runs = []
    for workload, shape in shapes.items():
        name, flags, why = best[workload] or ("baseline", [], "no --best-flags and no ablation.json: baseline")
        best[workload] = (name, flags, why)
        labels = [gpu_label(g) for g in gpus]
        runs += run_matrix({workload: shape}, {workload: dumps[workload]}, labels, args.repeats, args,
                           flags_of={label: flags for label in labels}, nproc_of=dict(zip(labels, gpus)))
    if not any(r["status"] == "ok" for r in runs):
        print("no scaling run produced a record; nothing written (first error: "
              f"{next((r['error'] for r in runs if r['error']), 'none')})")
        return 1
    env = environment_of([r["record"] for r in runs if r["record"]]) or env0
    rows = {w: scaling_rows(runs, w, gpus, shape["batch_size"]) for w, shape in shapes.items()}
    lines = header_lines("Scaling: torchrun (DDP) over GPUs", command, env, extra=[
        "- `python -m torch.distributed.run --standalone --nproc_per_node=N train_optimized.py ...` with "
        "NCCL_NVLS_ENABLE=0 (NVLink multicast off) and OMP_NUM_THREADS=1 (unless set) for every N; --batch-size is "
        "per rank, so the "
        "global batch is N x batch",
        f"- {args.repeats} interleaved repeats; ms/step: median over repeats of rank 0's median step time; "
        "datasets/s = N x batch / median step; efficiency = datasets/s / (N x datasets/s at the fewest GPUs)"])
    pngs = []
    import profile_utils  # lazily: matplotlib is imported inside its plot functions
    unit = "GPUs" if device_name(env) != "cpu" else "processes (gloo on CPU)"
    for workload, wrows in rows.items():
        name, flags, why = best[workload]
        lines += [f"## {workload} workload", "", _workload_line(shapes[workload], dumps[workload])
                  + f"; flags `{' '.join(flags) or '(none)'}` ({name}: {why})", "",
                  f"| {unit} | ms/step median [p10–p90] | repeat medians min–max | datasets/s |"
                  " scaling efficiency | data wait | peak memory (rank 0) |", "|---|---|---|---|---|---|---|"]
        notes = []
        for row in wrows:
            if "step_ms" not in row:
                notes.append(f"- {row['gpus']} {unit}: {row['status']}")
                continue
            s = row["step_ms"]
            lines.append(f"| {row['gpus']} | {format_ms(s['median'])} [{format_ms(s['p10'])}–"
                         f"{format_ms(s['p90'])}] | "
                         f"{format_ms(row['min_ms'])}–{format_ms(row['max_ms'])} | {row['datasets_per_s']:.1f} | "
                         f"{100 * row['efficiency']:.0f}% | {100 * row['data_share']:.1f}% | "
                         f"{_fmt_bytes(row['peak_memory_bytes'])} |")
            if row["status"] != "ok":
                notes.append(f"- {row['gpus']} {unit}: {row['status']}")
        lines += ([""] + notes if notes else []) + [""]
        plotted = [r for r in wrows if "step_ms" in r]
        if plotted:
            path = save_plot(profile_utils.plot_scaling, plotted, os.path.join(out_dir, f"scaling-{workload}.png"),
                             f"{workload}: DDP scaling ({device_name(env)})")
            pngs += [path] if path else []
    md_path, json_path = os.path.join(out_dir, "scaling.md"), os.path.join(out_dir, "scaling.json")
    write_json(json_path, {"command": command, "date": now_iso(), "git_commit": git_commit(),
                           "device": device_name(env), "environment": env, "gpus": gpus,
                           "workloads": {w: {**shapes[w], "dump": os.path.relpath(dumps[w], REPO)} for w in shapes},
                           "flags": {w: {"config": b[0], "flags": b[1], "why": b[2]} for w, b in best.items()},
                           "rows": rows, "runs": runs_for_json(runs)})
    write_text_atomic(md_path, "\n".join(lines))
    print("wrote " + ", ".join(os.path.relpath(p) for p in [md_path, json_path] + pngs))
    return 1 if any(r["status"] != "ok" for w in rows.values() for r in w) else 0


# ---------------------------------------------------------------------------------------------
# --quality: loss curves of the baseline and the best flags, and time to the Random Forest's AUC.

def quality_command(dump, shape, flags, record_path, seed, extra=()):
    """A train_optimized.py run that evaluates (unlike the timing runs) and keeps every step's loss."""
    return [sys.executable, "train_optimized.py", "--data", dump, "--batch-size", str(shape["batch_size"]),
            "--seed", str(seed), "--log-every", "250", "--timing-warmup", str(shape["warmup"]),
            "--record", record_path, *extra, *flags]


def first_reach(eval_history, bar):
    """(step, seconds) of the first evaluation whose mean ROC AUC is >= bar, or None."""
    for entry in eval_history or []:
        if entry["scores"]["roc_auc"] >= bar:
            return entry["step"], entry["train_seconds"]
    return None


def mode_quality(args, command):
    """Baseline (fp32, every flag off) vs --fast: loss curves over --steps for --repeats seeds, their eval
    scores, and a --time-budget run of --fast timed to the Random Forest's mean ROC AUC."""
    shapes = resolve_workloads(args)
    env0 = detect_env()
    out_dir = args.out or default_out_dir(env0)
    device = _dump_device(args)
    best_flags = args.best_flags.split() if args.best_flags else ["--fast"]
    seeds = list(range(args.repeats))
    tmp = os.path.join(REPO, "runs", "bench-quality")
    os.makedirs(tmp, exist_ok=True)
    lines, results, pngs = None, {}, []
    md_path, json_path = os.path.join(out_dir, "quality.md"), os.path.join(out_dir, "quality.json")
    import profile_utils  # lazily: matplotlib is imported inside its plot functions

    def save_partial(workload, runs, ttq=None):
        # Every finished run's record is on disk at once: a run cut off later loses only itself.
        write_json(json_path, {"command": command, "date": now_iso(), "git_commit": git_commit(), "partial": True,
                               "workloads": {**results, workload: {"runs": runs, "time_to_quality": ttq}}})

    for workload, shape in shapes.items():
        dump = ensure_dump(shape, args.dump_seed, device)
        curves, evals = {"baseline (fp32, no flags)": [], "best: " + " ".join(best_flags): []}, {}
        runs = []
        for seed in seeds:  # interleaved: baseline, best, baseline, best ...
            for name, flags in zip(curves, ([], best_flags)):
                rec_path = os.path.join(tmp, f"{workload}-{len(runs)}.json")
                cmd = quality_command(dump, shape, flags, rec_path, seed, ["--steps", str(shape["steps"])])
                r = run_once(cmd, rec_path, args.run_timeout)
                runs.append({"name": name, "seed": seed, "status": r["status"], "error": r["error"],
                             "record": slim_record(r["record"]) if r["record"] else None})
                save_partial(workload, runs)
                if r["status"] != "ok":
                    print(f"[{workload} quality seed {seed}] {name}: {r['status']}: {r['error']}")
                    continue
                ex = _extra(r["record"])
                losses = ex.get("losses") or []
                curves[name].append((list(range(1, len(losses) + 1)), losses))
                evals.setdefault(name, []).append(ex["eval"])
                evals.setdefault("random forest", []).append(ex["random_forest"])
                print(f"[{workload} quality seed {seed}] {name}: final loss {ex['final_loss']:.4f}, "
                      f"roc_auc {ex['eval']['roc_auc']:.4f}", flush=True)
        ttq = None
        if args.time_budget:
            rec_path = os.path.join(tmp, f"{workload}-ttq.json")
            cmd = quality_command(dump, shape, best_flags, rec_path, 0,
                                  ["--time-budget", str(args.time_budget), "--eval-every", str(args.eval_every)])
            r = run_once(cmd, rec_path, args.run_timeout)
            if r["status"] == "ok":
                ex = _extra(r["record"])
                bar = ex["random_forest"]["roc_auc"]
                ttq = {"budget_s": args.time_budget, "eval_every": args.eval_every, "flags": best_flags,
                       "steps_done": ex["steps_done"], "train_seconds": ex["train_seconds"],
                       "final": ex["eval"], "random_forest": ex["random_forest"],
                       "history": [(e["step"], e["train_seconds"], e["scores"]["roc_auc"]) for e in ex["eval_history"]],
                       "first_reach": first_reach(ex["eval_history"], bar), "record": slim_record(r["record"])}
                reach = ttq["first_reach"]
                print(f"[{workload} time-to-quality] {args.time_budget:.0f} s: {ex['steps_done']} steps, roc_auc "
                      f"{ex['eval']['roc_auc']:.4f} vs random forest {bar:.4f}; first reached: "
                      + (f"step {reach[0]} at {reach[1]:.1f} s" if reach else "never"), flush=True)
            else:
                print(f"[{workload} time-to-quality] {r['status']}: {r['error']}")
        env = environment_of([x["record"] for x in runs if x["record"]]) or env0
        if lines is None:
            lines = header_lines("Quality: the fast path learns what the baseline learns", command, env, extra=[
                f"- seeds {seeds}: the same seed gives both configurations the same initial weights and batches; "
                "the band in the plot is the min-max over seeds (run-to-run noise of each configuration)"])
        path = save_plot(profile_utils.plot_loss_curves, curves, os.path.join(out_dir, f"loss-curves-{workload}.png"),
                         f"{workload}: {shape['steps']} steps, {len(seeds)} seeds ({device_name(env)})")
        pngs += [path] if path else []
        lines += [f"## {workload} workload", "", _workload_line(shape, dump) + f"; {shape['steps']} steps", "",
                  "| configuration | seed | final loss (mean of last 50 steps) | ROC AUC | accuracy | balanced accuracy |",
                  "|---|---|---|---|---|---|"]
        for x in runs:
            if x["status"] == "ok":
                ex = _extra(x["record"])
                tail = ex["losses"][-50:]
                lines.append(f"| {x['name']} | {x['seed']} | {sum(tail) / len(tail):.4f} | {ex['eval']['roc_auc']:.4f} | "
                             f"{ex['eval']['acc']:.4f} | {ex['eval']['balanced_acc']:.4f} |")
        for name, scores in evals.items():
            aucs = [sc["roc_auc"] for sc in scores]
            lines.append(f"| **{name}**: mean over seeds | | | {statistics.mean(aucs):.4f} "
                         f"(min {min(aucs):.4f}, max {max(aucs):.4f}) | | |")
        if ttq:
            reach = ttq["first_reach"]
            lines += ["", f"Time to quality (`{' '.join(best_flags)} --time-budget {ttq['budget_s']:.0f} "
                      f"--eval-every {ttq['eval_every']}`, seed 0): {ttq['steps_done']} steps in "
                      f"{ttq['train_seconds']:.1f} s of training; final ROC AUC {ttq['final']['roc_auc']:.4f} vs the "
                      f"Random Forest's {ttq['random_forest']['roc_auc']:.4f}; first evaluation at or above it: "
                      + (f"step {reach[0]}, {reach[1]:.1f} s." if reach else "none within the budget."), "",
                      "| step | training seconds | ROC AUC |", "|---|---|---|"]
            lines += [f"| {st} | {sec:.1f} | {auc:.4f} |" for st, sec, auc in ttq["history"]]
        lines.append("")
        results[workload] = {"shape": shape, "dump": os.path.relpath(dump, REPO), "runs": runs,
                             "time_to_quality": ttq}
    all_runs = [x for w in results.values() for x in w["runs"]]
    if not any(x["status"] == "ok" for x in all_runs):
        print("no quality run produced a record; quality.md not written")
        return 1
    write_json(json_path, {"command": command, "date": now_iso(), "git_commit": git_commit(), "workloads": results})
    write_text_atomic(md_path, "\n".join(lines))
    print("wrote " + ", ".join(os.path.relpath(p) for p in [md_path, json_path] + pngs))
    failed = any(x["status"] != "ok" for x in all_runs) or any(
        args.time_budget and not w["time_to_quality"] for w in results.values())
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# Mode: --attention, the datapoint attention alone: the floor under the step's time.

# Split quantiles measured: the prior draws the split as int(R * U(0.1, 0.9)) (prior_dump.draw_splits), so
# these are its 10th, 50th and 90th percentiles; a step's median time sits at the median split.
ATTENTION_SPLIT_QUANTILES = (0.18, 0.5, 0.82)


def attention_inputs(N, H, R, D, device, dtype):
    """A (N, R, 3, H, D) qkv buffer laid out as the model's in-projection writes it, and an output grad."""
    import torch
    qkv = torch.randn(N, R, 3, H, D, device=device, dtype=dtype, requires_grad=True)
    return qkv, torch.randn(N, H, R, D, device=device, dtype=dtype)


def attention_step(kernel, qkv, grad, split, flex_fn=None, block_mask=None):
    """One forward and backward of the datapoint attention as the model runs it: every one of the R rows
    queries the first `split` rows (keys/values sliced, no mask), or, for "flex", all R keys under a
    block mask that skips the rows >= split (the padded --cuda-graphs step)."""
    import torch.nn.functional as F
    from model import sdpa_restriction
    q = qkv[:, :, 0].transpose(1, 2)                                   # (N, H, R, D), a view
    if kernel == "flex":
        k, v = qkv[:, :, 1].transpose(1, 2), qkv[:, :, 2].transpose(1, 2)
        out = flex_fn(q, k, v, block_mask=block_mask)
    else:
        k, v = qkv[:, :split, 1].transpose(1, 2), qkv[:, :split, 2].transpose(1, 2)   # (N, H, S, D)
        with sdpa_restriction(kernel):
            out = F.scaled_dot_product_attention(q, k, v)
    out.backward(grad)


def time_attention(kernel, qkv, grad, split, device, repeats, **kw):
    """(first_ms, [ms...]): the first call on the host clock (it includes any per-shape planning or
    compilation), then `repeats` calls timed with CUDA events (the host clock on CPU) after 2 warm-ups."""
    _sync(device)
    t0 = time.perf_counter()
    attention_step(kernel, qkv, grad, split, **kw)
    _sync(device)   # why: the first call's cost includes its GPU work
    first = (time.perf_counter() - t0) * 1e3
    for _ in range(2):
        attention_step(kernel, qkv, grad, split, **kw)
    times = [_timed_ms(device, lambda: attention_step(kernel, qkv, grad, split, **kw))[0] for _ in range(repeats)]
    qkv.grad = None
    return first, times


def mode_attention(args, command):
    """Times the datapoint attention (forward + backward, one layer) per kernel at each workload's shape
    and split quantiles; writes attention.md / attention.json with the per-step total over the layers."""
    import torch
    from model import ModelConfig
    shapes = resolve_workloads(args)
    device = _in_process_device(args)
    from profile_utils import environment_record
    env = environment_record(device)
    out_dir = args.out or default_out_dir(env)
    cfg = ModelConfig()
    H, D, layers = cfg.num_attention_heads, cfg.embedding_size // cfg.num_attention_heads, cfg.num_layers
    # bf16 is what the fast configurations train in; the CPU run (tests, --quick) uses fp32.
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    kernels = ["flash", "cudnn", "efficient", "flex"] if device.type == "cuda" else ["math", "flash"]
    repeats = 3 if args.quick else 15
    results = {}
    for workload, shape in shapes.items():
        R, C = shape["rows"], shape["features"] + 1
        N = shape["batch_size"] * C
        rows = []
        qkv, grad = attention_inputs(N, H, R, D, device, dtype)
        for quantile in ATTENTION_SPLIT_QUANTILES:
            split = max(1, min(R, int(R * quantile)))
            for kernel in kernels:
                if kernel == "flex" and quantile != 0.5:
                    continue   # compiled per split: the median only
                kw = {}
                try:
                    if kernel == "flex":
                        from torch.nn.attention.flex_attention import flex_attention
                        from model import _train_key_block_mask
                        kw = {"flex_fn": torch.compile(flex_attention, dynamic=False),
                              "block_mask": _train_key_block_mask(torch.tensor(split, device=device), R, device)}
                    first, times = time_attention(kernel, qkv, grad, split, device, repeats, **kw)
                except Exception as e:   # a kernel this GPU / dtype / head size cannot run: one row says why
                    rows.append({"kernel": kernel, "split": split, "status": f"n/a: {_last_line(str(e))[:140]}"})
                    print(f"[{workload}] {kernel} split {split}: n/a ({_last_line(str(e))[:100]})", flush=True)
                    continue
                median = statistics.median(times)
                flops = 4 * N * H * R * split * D * 3.5     # forward 2 matmuls; backward 2.5x the forward
                rows.append({"kernel": kernel, "split": split, "status": "ok", "first_ms": first,
                             "median_ms": median, "min_ms": min(times), "max_ms": max(times), "times_ms": times,
                             "tflops": flops / (median / 1e3) / 1e12, "per_step_ms": median * layers})
                print(f"[{workload}] {kernel} split {split}: {median:.3f} ms (fwd+bwd, one layer), "
                      f"first call {first:.1f} ms", flush=True)
        del qkv, grad
        results[workload] = {"N": N, "H": H, "R": R, "D": D, "layers": layers, "dtype": str(dtype), "rows": rows,
                             "target_ms": TARGETS.get(workload, {}).get("step_ms") if not args.quick else None}

    lines = header_lines("The datapoint attention alone: the floor under a training step", command, env, extra=[
        f"- method: one layer's attention between datapoints, forward + backward, on q/k/v views of one "
        f"(N, R, 3, H, D) {str(dtype).replace('torch.', '')} buffer as the model's in-projection writes them; "
        f"every row queries the first S rows (sliced keys, no mask), except flex: all R keys under the block "
        f"mask of the padded --cuda-graphs step; median of {repeats} calls after 2 warm-ups, timed with "
        f"{'CUDA events' if device.type == 'cuda' else 'the host clock'}",
        "- first call: host clock, includes per-shape work (cuDNN builds an execution plan for every new "
        "split length; flex compiles); TFLOP/s counts 4·N·H·R·S·D for the forward and 2.5x that for the backward",
        f"- per step: {layers} layers x the one-layer median; splits at the prior's 10/50/90th percentiles of "
        "int(R x U(0.1, 0.9))"])
    for workload, r in results.items():
        lines += [f"## {workload} workload", "",
                  f"N = B x C = {r['N']} sequences, H = {r['H']} heads of D = {r['D']}, R = {r['R']} rows", "",
                  "| kernel | split S | fwd+bwd, one layer (ms) | range | per step, all layers (ms) | TFLOP/s |"
                  " first call (ms) |", "|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            if row["status"] != "ok":
                lines.append(f"| {row['kernel']} | {row['split']} | {row['status']} | | | | |")
                continue
            lines.append(f"| {row['kernel']} | {row['split']} | {row['median_ms']:.3f} | {row['min_ms']:.3f}–"
                         f"{row['max_ms']:.3f} | {row['per_step_ms']:.2f} | {row['tflops']:.3g} | "
                         f"{row['first_ms']:.1f} |")
        median_split = max(1, min(r["R"], int(r["R"] * 0.5)))
        ok = [row for row in r["rows"] if row["status"] == "ok" and row["split"] == median_split]
        if ok:
            best = min(ok, key=lambda row: row["per_step_ms"])
            line = (f"- fastest at the median split: `{best['kernel']}`, {best['per_step_ms']:.2f} ms per step for "
                    f"the datapoint attention alone")
            if r["target_ms"]:
                line += (f", {100 * best['per_step_ms'] / r['target_ms']:.0f}% of the {r['target_ms']:g} ms "
                         "step target")
            lines.append("")
            lines.append(line)
        lines.append("")
    os.makedirs(out_dir, exist_ok=True)
    md_path, json_path = os.path.join(out_dir, "attention.md"), os.path.join(out_dir, "attention.json")
    write_json(json_path, {"command": command, "date": now_iso(), "git_commit": git_commit(), "device": device_name(env),
                           "environment": env, "workloads": results})
    write_text_atomic(md_path, "\n".join(lines))
    print("wrote " + ", ".join(os.path.relpath(p) for p in (md_path, json_path)))
    return 0


# ---------------------------------------------------------------------------------------------
# Command line.

def build_parser():
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="CPU-sized run: tiny dumps, 6 steps, 1 repeat, a handful of configs (what CI runs)")
    p.add_argument("--workloads", default="blog,upstream", help="comma-separated workloads: blog, upstream")
    p.add_argument("--configs", default=None,
                   help="comma-separated config names of the matrix (default: all; --quick: "
                        + ", ".join(QUICK_CONFIGS) + ")")
    p.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 3; --quick: 1)")
    p.add_argument("--steps", type=int, default=None, help="steps per run, for every selected workload")
    p.add_argument("--batch-size", type=int, default=None, help="datasets per step (per rank), every workload")
    p.add_argument("--rows", type=int, default=None, help="rows per dataset of the generated dumps")
    p.add_argument("--num-datasets", type=int, default=None, help="datasets in the generated dumps")
    p.add_argument("--timing-warmup", type=int, default=None, help="untimed warm-up steps per run")
    p.add_argument("--dump-seed", type=int, default=0, help="prior seed of the generated dumps (cache key)")
    p.add_argument("--dump-device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where prior_dump generates a missing dump (auto: cuda when a GPU is present; "
                        "CPU and CUDA dumps differ and are cached apart)")
    p.add_argument("--device", default="auto", help="--device of every run: auto, cpu, cuda or cuda:N")
    p.add_argument("--train-args", default="",
                   help='extra train_optimized.py arguments for every run, e.g. "--optimizer adamw"')
    p.add_argument("--run-timeout", type=int, default=1800, help="seconds before one run is killed")
    p.add_argument("--budget-minutes", type=float, default=None,
                   help="start no new run after this many minutes; what is done is written (finish with --resume)")
    p.add_argument("--resume", action="store_true",
                   help="reuse the successful runs of <out>/<name>.json with the same shapes, dumps and flags")
    p.add_argument("--out", default=None, help="output folder (default: results/<gpu-name>/)")
    p.add_argument("--name", default="ablation", help="base name of the ablation files (ablation.md, .json)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--profile", action="store_true",
                      help="profile the baseline and the best config: the blog's four tables -> profile.md")
    mode.add_argument("--loaders-only", action="store_true",
                      help="loader throughput without training (batches/s, GB/s vs host-to-device) -> loaders.md")
    mode.add_argument("--quality", action="store_true",
                      help="loss curves and eval of baseline vs best (--best-flags, default --fast) over "
                           "--repeats seeds, plus a --time-budget run -> quality.md, loss-curves-<workload>.png")
    mode.add_argument("--attention", action="store_true",
                      help="the datapoint attention alone (forward + backward) per kernel at each workload's "
                           "shape and split quantiles: the floor under the step -> attention.md")
    mode.add_argument("--scaling", action="store_true",
                      help="torchrun over --gpus process counts -> scaling.md, scaling-<workload>.png")
    p.add_argument("--best-flags", default=None,
                   help='flags of the "best" config for --profile / --scaling, written with "=": '
                        '--best-flags="--resident --flash" (default: the lowest median in <out>/ablation.json)')
    p.add_argument("--gpus", default=None, help="process counts for --scaling, e.g. 1,2 (default: 1,2,4,8 up to "
                                                "the GPU count; CPU --quick: 1,2)")
    p.add_argument("--time-budget", type=float, default=0.0,
                   help="--quality: also train --best-flags for this many seconds and time the first eval at "
                        "or above the Random Forest's ROC AUC")
    p.add_argument("--eval-every", type=int, default=500, help="--quality: steps between evals of that run")
    p.add_argument("--loader-batches", type=int, default=200, help="timed batches per loader in --loaders-only")
    p.add_argument("--h2d-mib", type=int, default=256, help="buffer size of the host-to-device reference copy")
    return p


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        if args.repeats is None:
            args.repeats = 1 if args.quick else 3
        if args.repeats < 1:
            raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
        if args.budget_minutes is not None and args.budget_minutes <= 0:
            raise UsageError(f"--budget-minutes must be positive, got {args.budget_minutes:g}")
        for flag in ("run_timeout", "loader_batches", "h2d_mib"):
            value = getattr(args, flag)
            if value is not None and value < 1:
                raise UsageError(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
        names = [n for n, _, _ in CONFIGS]
        args.config_list = (_parse_list(args.configs, names, "configs") if args.configs
                            else list(QUICK_CONFIGS) if args.quick else names)
        args.train_args_list = shlex.split(args.train_args)
        command = shlex.join(["python", "benchmark.py"] + argv)
        if args.loaders_only:
            return mode_loaders(args, command)
        if args.attention:
            return mode_attention(args, command)
        if args.scaling:
            return mode_scaling(args, command)
        if args.quality:
            return mode_quality(args, command)
        if args.profile:
            return mode_profile(args, command)
        return mode_ablation(args, command)[0]
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: runs finished so far are in their records; rerun with --resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
