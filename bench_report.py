"""Results from run records (profile_utils.make_run_record's layout): per-run summaries, aggregation over repeats,
markdown tables, targets, progress lines and plots (matplotlib imported inside the plots only)."""
import contextlib
import datetime
import os
import platform
import re
import statistics

import numpy as np

from profile_utils import TABLE_TITLES, format_duration, format_ms, git_commit, md_cell, percentiles
from safe_io import atomic_output, write_json_atomic, write_text_atomic

PHASES = ("data", "forward", "backward", "optimizer", "other")
# Speed targets for the best configuration of each full-size workload (printed as met / missed).
TARGETS = {
    "blog": {"step_ms": 15.0, "peak_gib": 3.0, "data_share": 0.01}, "upstream": {"step_ms": 2.0, "data_share": 0.01}}


# ---- One record -> one summary; repeats -> one row -----------------------------------------------

def extra_of(record):
    return record.get("extra") or {}


def summarize_record(record):
    """The fields of one run record the tables use (step_ms is the run's median); KeyError without step timing."""
    timing, ex = record["timing"], extra_of(record)
    step = timing["step"]
    if step.get("median") is None:
        raise KeyError("run record has no measured steps (all warm-up?)")
    loss = ex.get("final_loss")
    return {
        "step_ms": float(step["median"]), "step_p10": float(step["p10"]), "step_p90": float(step["p90"]),
        "step_times": [float(v) for v in ex.get("step_times_ms") or []] or None,
        "phases": {name: float(stats["median"]) for name, stats in (timing.get("phases") or {}).items()
                   if isinstance(stats, dict) and stats.get("median") is not None},
        "data_share": float(timing.get("data_share") or 0.0),
        "peak_memory_bytes": int(ex.get("peak_memory_bytes") or 0), "data_path": ex.get("data_path"),
        "attention_kernel": ex.get("attention_kernel") or ex.get("sdpa_backend"),   # sdpa_backend: older records
        "final_loss": float(loss) if isinstance(loss, (int, float)) else None, "diagnosis": ex.get("diagnosis") or "",
        "world_size": int(ex.get("world_size") or 1), "global_batch": int(ex.get("global_batch") or 0) or None,
        "measured_steps": int(timing.get("measured_steps") or step.get("n") or 0)}


def aggregate(summaries):
    """One (workload, config) over its repeats: the median of the runs' medians, min/max, p10/p90 of the pooled
    steps (else lowest p10 / highest p90: `spread` says which), phase medians, worst peak memory and so on."""
    medians = [s["step_ms"] for s in summaries]
    if all(s["step_times"] for s in summaries):
        pooled = percentiles([t for s in summaries for t in s["step_times"]])
        p10, p90, spread = pooled["p10"], pooled["p90"], "pooled steps"
    else:
        p10, p90 = min(s["step_p10"] for s in summaries), max(s["step_p90"] for s in summaries)
        spread = "lowest p10 - highest p90 of the repeats"
    losses = [s["final_loss"] for s in summaries if s["final_loss"] is not None]

    def distinct(values):
        return " / ".join(str(v) for v in dict.fromkeys(v for v in values if v))

    return {
        "median_ms": statistics.median(medians), "min_ms": min(medians), "max_ms": max(medians),
        "p10_ms": p10, "p90_ms": p90, "spread": spread, "repeat_ms": medians,
        "phases": {n: statistics.median(s["phases"].get(n, 0.0) for s in summaries)
                   for n in _phase_names(s["phases"] for s in summaries)},
        "data_share": statistics.median(s["data_share"] for s in summaries),
        "peak_memory_bytes": max(s["peak_memory_bytes"] for s in summaries),
        "final_loss": statistics.median(losses) if losses else None,
        "data_path": distinct(s["data_path"] for s in summaries),
        "attention_kernel": distinct(s["attention_kernel"] for s in summaries),
        "verdicts": distinct(s["diagnosis"].split(":", 1)[0] for s in summaries),
        # The repeat at the median (the lower one of an even count) speaks for the row.
        "diagnosis": sorted(summaries, key=lambda s: s["step_ms"])[(len(summaries) - 1) // 2]["diagnosis"],
        "world_size": max(s["world_size"] for s in summaries),
        "global_batch": max((s["global_batch"] or 0) for s in summaries) or None, "repeats": len(summaries)}


def _phase_names(phase_dicts):
    """PHASES first, then any other phase name, sorted."""
    seen = {n for d in phase_dicts for n in d}
    return [n for n in PHASES if n in seen] + sorted(seen - set(PHASES))


def add_speedups(rows):
    """Sets row["speedup"] = baseline median / row median (None without a "baseline" row) in place."""
    base = next((r for r in rows if r["config"] == "baseline" and r.get("median_ms")), None)
    for row in rows:
        row["speedup"] = base["median_ms"] / row["median_ms"] if base and row.get("median_ms") else None
    return rows


def best_row(rows):
    """The measured row with the lowest median step time, or None."""
    return min((r for r in rows if r.get("median_ms")), key=lambda r: r["median_ms"], default=None)


def rows_for(runs, workload, configs, flags_of, group_of=None):
    """Aggregated rows of one workload in `configs` order, a status for configs without a record, speedups."""
    rows = []
    for config in configs:
        mine = [r for r in runs if r["workload"] == workload and r["config"] == config]
        ok = [r["summary"] for r in mine if r["status"] == "ok"]
        row = {"config": config, "flags": list(flags_of.get(config, [])), "group": (group_of or {}).get(config, "")}
        if ok:
            problems = [r for r in mine if r["status"] in ("failed", "pending")]
            row.update(aggregate(ok))
            row["status"] = f"{len(ok)} of {len(mine)} repeats measured; {problems[0]['error']}" if problems else "ok"
        else:
            errors = [r["error"] for r in mine if r["error"]]
            first = mine[0]["status"] if mine else None
            kind = {"unsupported": "skipped: ", "pending": "not run yet: "}.get(first, "failed: ")
            row["status"] = kind + (errors[0] if errors else "no run")
        rows.append(row)
    return add_speedups(rows)


def check_targets(workload, row):
    """TARGETS of `workload` against a row: list of (what, target, measured, met)."""
    targets, out = TARGETS.get(workload, {}), []
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


def targets_lines(all_rows, quick):
    """The "Targets" section: TARGETS for each workload's best configuration."""
    lines = ["## Targets (best configuration of each workload)", ""]
    if quick:
        return lines + ["- n/a: --quick shapes; the targets apply to the full blog and upstream workloads", ""]
    for workload in (w for w in all_rows if w in TARGETS):
        best = best_row(all_rows[workload])
        if not best:
            lines.append(f"- {workload}: no successful run")
            continue
        lines += [f"- {workload} {what} {target}: {'met' if met else 'MISSED'} ({measured}, `{best['config']}`)"
                  for what, target, measured, met in check_targets(workload, best)]
    return lines + [""]


# ---- Markdown ------------------------------------------------------------------------------------

def table(headers, rows):
    """Markdown lines of a plain table (cells as given, '|---|' rules)."""
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + \
        ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def fmt_bytes(n):
    return f"{n / 2**30:.2f} GiB" if n else "n/a (CPU)"


def spread_cell(median, p10, p90):
    return f"{format_ms(median)} [{format_ms(p10)}–{format_ms(p90)}]"


def rank_cell(rank):
    """A mean rank among nanoTabPFN and the baselines (1 = best), or '—' where none was computed."""
    return "—" if rank is None else f"{rank:.2f}"


def ablation_table(rows, batch_size):
    """Markdown lines of one workload's rows_for() (batch_size: datasets per step and rank), notes, diagnoses."""
    cells, notes, diagnoses = [], [], []
    for row in rows:
        flags = " ".join(row["flags"]) or "(none)"
        if not row.get("median_ms"):
            notes.append(f"- `{row['config']}` (`{flags}`): {row['status']}")
            continue
        per_s = (row["global_batch"] or row["world_size"] * batch_size) * 1000.0 / row["median_ms"]
        cells.append([
            row["config"], f"`{flags}`", spread_cell(row["median_ms"], row["p10_ms"], row["p90_ms"]),
            f"{format_ms(row['min_ms'])}–{format_ms(row['max_ms'])}",
            f"{row['speedup']:.2f}x" if row.get("speedup") else "—", f"{per_s:.1f}",
            f"{row['phases'].get('data', 0.0):.2f} ms ({100 * row['data_share']:.1f}%)",
            fmt_bytes(row["peak_memory_bytes"]), md_cell(row["data_path"]), md_cell(row["attention_kernel"]),
            f"{row['final_loss']:.4f}" if row.get("final_loss") is not None else "—", md_cell(row["verdicts"])])
        if row["status"] != "ok":
            notes.append(f"- `{row['config']}`: {row['status']}")
        diagnoses.append(f"- `{row['config']}`: {row['diagnosis']}")
    lines = table(["config", "flags", "ms/step median [p10–p90]", "repeat medians min–max", "speedup vs baseline",
                   "datasets/s", "data wait", "peak memory", "data path", "attention kernel", "final loss",
                   "diagnosis"], cells)
    lines += [""] + notes if notes else []
    if diagnoses:
        lines += ["", "Diagnoses (profile_utils.diagnose, the median repeat of each config):"] + diagnoses
    return lines


def gpu_label(gpus):
    return f"{gpus} GPU" + ("s" if gpus > 1 else "")


def scaling_rows(runs, workload, gpus, batch_size):
    """Rows of one workload's scaling table (runs labelled gpu_label(N)); efficiency is against the fewest GPUs."""
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


def scaling_table(wrows, unit):
    """Markdown lines of one workload's scaling rows; counts without a record become notes."""
    cells = [[row["gpus"], spread_cell(row["step_ms"]["median"], row["step_ms"]["p10"], row["step_ms"]["p90"]),
              f"{format_ms(row['min_ms'])}–{format_ms(row['max_ms'])}", f"{row['datasets_per_s']:.1f}",
              f"{100 * row['efficiency']:.0f}%", f"{100 * row['data_share']:.1f}%", fmt_bytes(row["peak_memory_bytes"])]
             for row in wrows if "step_ms" in row]
    notes = [f"- {row['gpus']} {unit}: {row['status']}" for row in wrows if row["status"] != "ok"]
    return table([unit, "ms/step median [p10–p90]", "repeat medians min–max", "datasets/s", "scaling efficiency",
                  "data wait", "peak memory (rank 0)"], cells) + ([""] + notes if notes else [])


def quality_lines(runs, ttq):
    """One workload's quality table (per run, then the mean ROC AUC per configuration) and its time to quality."""
    cells, evals = [], {}
    for x in (x for x in runs if x["status"] == "ok"):
        ex = extra_of(x["record"])
        tail = ex["losses"][-50:]
        cells.append([x["name"], x["seed"], f"{sum(tail) / len(tail):.4f}", f"{ex['eval']['roc_auc']:.4f}",
                      *(f"{ex['eval'][k]:.4f}" if k in ex["eval"] else "—" for k in ("acc", "balanced_acc"))])
        evals.setdefault(x["name"], []).append(ex["eval"]["roc_auc"])
        evals.setdefault(ex["reference"]["name"], []).append(ex["reference"]["scores"]["roc_auc"])
    cells += [[f"**{name}**: mean over seeds", "", "", f"{statistics.mean(aucs):.4f} (min {min(aucs):.4f}, "
               f"max {max(aucs):.4f})", "", ""] for name, aucs in evals.items()]
    lines = table(["configuration", "seed", "final loss (mean of last 50 steps)", "ROC AUC", "accuracy",
                   "balanced accuracy"], cells)
    if ttq:
        lines += ["", f"Time to quality (`{' '.join(ttq['flags'])} --time-budget {ttq['budget_s']:.0f} --eval-every "
                  f"{ttq['eval_every']} --eval-suite {ttq.get('suite', 'toy')}`, seed 0): {ttq['steps_done']} steps in "
                  f"{ttq['train_seconds']:.1f} s of training; final ROC AUC {ttq['final']['roc_auc']:.4f}.", ""]
        lines += table(["baseline", "its ROC AUC", "its mean rank at the last evaluation",
                        "first evaluation at or above its ROC AUC"],
                       [[name, f"{b['roc_auc']:.4f}", rank_cell(b.get("mean_rank")),
                         f"step {p['step']}, {p['train_seconds']:.1f} s" if p else "none within the budget"]
                        for name, b in ttq["baselines"].items() for p in [ttq["first_passing"][name]]])
        lines += [""] + table(["step", "training seconds", "ROC AUC", "mean rank"],
                              [[h[0], f"{h[1]:.1f}", f"{h[2]:.4f}", rank_cell(h[3] if len(h) > 3 else None)]
                               for h in ttq["history"]])
    return lines + [""]


def print_summary(all_rows, quick, incomplete):
    for workload, rows in all_rows.items():
        print(f"{workload}: ms/step median, speedup, data wait, peak memory")
        for row in rows:
            if not row.get("median_ms"):
                print(f"  {row['config']:<30s} {row['status']}")
                continue
            speed = f"{row['speedup']:.2f}x" if row.get("speedup") else "—"
            print(f"  {row['config']:<30s} {format_ms(row['median_ms']):>9s}  {speed:>6s}  "
                  f"data {100 * row['data_share']:5.1f}%  {fmt_bytes(row['peak_memory_bytes'])}")
    for line in targets_lines(all_rows, quick)[2:]:
        if line:
            print("targets: " + line[2:])
    for line in incomplete:
        print(line[2:])


# ---- --profile: the four TrainingProfiler tables of the baseline against the best configuration ---

def split_profile_tables(markdown):
    """{kind: section} of TrainingProfiler.tables_markdown() (four "### title" sections)."""
    out = {}
    for section in re.split(r"(?m)^(?=### )", markdown or ""):
        section = section.strip()
        kind = next((k for k, title in TABLE_TITLES if section.startswith("### " + title)), None)
        if kind and kind not in out:
            out[kind] = section
    return out


def _cell_of(section, name_col, name, value_col):
    """A cell of the first markdown table of a section, by row name; None when absent or '—'."""
    cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
             for line in (section or "").splitlines() if line.startswith("|")]
    value = next((row.get(value_col) for row in (dict(zip(cells[0], c)) for c in cells[2:])
                  if row.get(name_col) == name), None)
    return value if value not in (None, "", "—") else None


def _find(pattern):
    return lambda text: (m := re.search(pattern, text or "")) and m.group(1)


# (what, figure of a section) compared per table kind.
COMPARED = {
    "cpu": [("self CPU time per profiled step", _find(r"\((\S+ \S+) per step\)"))],
    "cuda": [("GPU time per profiled step", _find(r"\((\S+ \S+) per step;")),
             ("GPU busy", _find(r"GPU busy (\S+) of"))],
    "transfers": [(f"{op} {col.replace(' per step', ' time per step')}",
                   lambda s, op=op, col=col: _cell_of(s, "Name", op, col))
                  for op, col in (("cudaMemcpyAsync", "CPU per step"), ("cudaMemcpyAsync", "GPU per step"),
                                  ("cudaStreamSynchronize", "CPU per step"), ("aten::item", "CPU per step"),
                                  ("aten::copy_", "CPU per step"))],
    "memory": [("peak allocated", lambda s: _cell_of(s, "Metric", "Peak allocated", "Value"))]}


def compare_profile_table(kind, base, best):
    """One line comparing a table's figures, baseline -> best; empty when neither has them."""
    pairs = [(what, get(base), get(best)) for what, get in COMPARED[kind]]
    return "; ".join(f"{what}: {a or '—'} (baseline) → {b or '—'} (best)" for what, a, b in pairs if a or b)


def profile_lines(base_tables, best_tables, best_name):
    """The four tables, each with its comparison line, baseline then best (as "#### label: title")."""
    tb, tt = split_profile_tables(base_tables), split_profile_tables(best_tables)
    lines = [] if tb or tt else ["no profiler tables in the records (train_optimized.py --profile wrote none)", ""]
    for i, (kind, title) in enumerate(TABLE_TITLES, 1):
        lines += [f"### {i}. {title}", ""]
        comparison = compare_profile_table(kind, tb.get(kind), tt.get(kind))
        lines += [f"Comparison: {comparison}", ""] if comparison else []
        for label, section in (("baseline", tb.get(kind)), (f"best ({best_name})", tt.get(kind))):
            body = section.splitlines() if section else ["### ", "", "(no table)"]
            lines += [f"#### {label}: {body[0][4:]}".rstrip(": ")] + body[1:] + [""]
    return lines


# ---- Headers, files, progress --------------------------------------------------------------------

def device_name(env):
    """The accelerator the records ran on ("NVIDIA H200"), or "cpu"."""
    name = env.get("gpu_name")
    return str(name) if name and not str(env.get("device") or "").startswith("cpu") else "cpu"


def now_iso():
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def header_lines(title, command, env, extra=()):
    """The header of every results file: command, date, commit, device and versions."""
    versions = ", ".join(f"{label} {env.get(label.lower()) or 'n/a'}"
                         for label in ("torch", "CUDA", "cuDNN", "kvikio", "driver", "python"))
    gpus = f" x{env['gpu_count']}" if (env.get("gpu_count") or 0) > 1 else ""
    return [f"# {title}", "", f"- command: `{command}`", f"- date: {now_iso()}", f"- git commit: {git_commit()}",
            f"- device: {device_name(env)}{gpus} (host {env.get('hostname', platform.node())})",
            f"- versions: {versions}", *extra, ""]


def write_outputs(out_dir, name, command, env, data, lines, more=()):
    """Writes <name>.json (command, date, commit, device, environment, then `data`) and <name>.md atomically."""
    md_path, json_path = os.path.join(out_dir, f"{name}.md"), os.path.join(out_dir, f"{name}.json")
    write_json_atomic(json_path, {"command": command, "date": now_iso(), "git_commit": git_commit(),
                                  "device": device_name(env), "environment": env, **data})
    write_text_atomic(md_path, "\n".join(lines), "results table")
    print("wrote " + ", ".join(os.path.relpath(p) for p in [md_path, json_path, *more]))


class Progress:
    """Numbered progress lines with an ETA (`[3/12] label: text, ETA 4:10`); per_run_s: the seconds a run
    should take before any has finished (basis: where it comes from); to_run: runs not reused."""

    def __init__(self, total, what, per_run_s=None, basis="a guess", to_run=None):
        self.total, self.done, self.seconds = total, 0, []
        to_run = total if to_run is None else to_run
        estimate = (f"roughly {format_duration(to_run * per_run_s)} ({format_duration(per_run_s)} a run, {basis})"
                    if per_run_s else "duration unknown until the first run ends")
        reused = f" ({total - to_run} reused)" if to_run != total else ""
        print(f"{what}: {total} run{'s' * (total != 1)}{reused}, {estimate}; each line ends with an ETA", flush=True)

    def line(self, label, text, seconds=None):
        """Prints `[i/total] label: text, ETA m:ss`; `seconds` (the run's wall time) feeds the ETA."""
        self.done += 1
        if seconds:
            self.seconds.append(seconds)
        left = self.total - self.done
        eta = ("done" if not left else f"ETA {format_duration(left * statistics.mean(self.seconds))}"
               if self.seconds else "ETA unknown")
        print(f"[{self.done}/{self.total}] {label}: {text}, {eta}", flush=True)


# ---- Plots (matplotlib's Figure without pyplot, imported lazily; PNGs written atomically) ---------

@contextlib.contextmanager
def _figure(path, title, figsize, ncols=1):
    """Yields the axes of a new figure, then writes it with `title` on top to `path` as a PNG."""
    from matplotlib.figure import Figure   # no pyplot: no backend, no display, nothing to close
    fig = Figure(figsize=figsize)
    yield fig.subplots(ncols=ncols)
    fig.suptitle(title)
    with atomic_output(path, "plot") as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")


def save_plot(plot_fn, rows, path, title, **kwargs):
    """Calls a plot function; None with a one-line note when it fails (the tables are already measured)."""
    try:
        return plot_fn(rows, path, title=title, **kwargs)
    except Exception as e:
        print(f"note: plot {os.path.basename(path)} not written ({type(e).__name__}: {e})")


def plot_ablation(out_dir, name, all_rows):
    """Stacked phase bars and speedup bars per workload; the paths written."""
    written = []
    for workload, rows in all_rows.items():
        bars = [{"config": r["config"], "phases": r["phases"],
                 "step_ms": {"median": r["median_ms"], "p10": r["p10_ms"], "p90": r["p90_ms"]}}
                for r in rows if r.get("median_ms")]
        if not bars:
            continue
        written.append(save_plot(plot_phase_bars, bars, os.path.join(out_dir, f"{name}-{workload}-phases.png"),
                                 f"{workload}: median ms/step by phase (tick: step median)"))
        if any(r["config"] == "baseline" for r in bars):
            written.append(save_plot(plot_speedup, bars, os.path.join(out_dir, f"{name}-{workload}-speedup.png"),
                                     f"{workload}: speedup vs baseline (ratio of medians)", baseline="baseline"))
    return [p for p in written if p]


def _config_ticks(ax, rows):
    """x positions of one bar per row, labelled by config."""
    x = np.arange(len(rows))
    ax.set_xticks(x)
    ax.set_xticklabels([str(r.get("config", i)) for i, r in enumerate(rows)], rotation=30, ha="right")
    ax.grid(axis="y", alpha=0.3)
    return x


def plot_phase_bars(rows, path, title="Step time by phase"):
    """Stacked phase medians, a tick at the step median; rows [{"config", "phases": {phase: ms}, "step_ms"}]."""
    colors = {"data": "tab:red", "forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green",
              "other": "tab:gray"}
    with _figure(path, title, (max(5.0, 1.1 * len(rows) + 2), 4.5)) as ax:
        x, bottom = _config_ticks(ax, rows), np.zeros(len(rows))
        for name in _phase_names(r["phases"] for r in rows):
            vals = np.array([r["phases"].get(name, 0.0) for r in rows])
            ax.bar(x, vals, 0.6, bottom=bottom, label=name, color=colors.get(name))
            bottom += vals
        # The median of step sums is not the sum of phase medians: the step median gets its own tick.
        ax.scatter(x, [r["step_ms"]["median"] for r in rows], marker="_", s=600, color="black", zorder=3,
                   label="step median")
        ax.set_ylabel("ms per step (median)")
        ax.legend(fontsize=8)
    return os.fspath(path)


def plot_speedup(rows, path, title="Speedup vs baseline", baseline=None):
    """Bars of baseline median / row median with p10–p90 error bars, or of the rows' own "speedup" (optional
    "speedup_p10" / "speedup_p90"). baseline: config name (default the first row)."""
    base = rows[0] if baseline is None else next((r for r in rows if r.get("config") == baseline), None)
    if base is None:
        raise ValueError(f"plot_speedup: baseline {baseline!r} not among the rows")
    speedups, low, high = [], [], []
    for r in rows:
        if r.get("speedup") is not None:
            s = float(r["speedup"])
            band = r.get("speedup_p10", s), r.get("speedup_p90", s)
        else:
            base_ms, step = base["step_ms"]["median"], r["step_ms"]
            s = base_ms / step["median"]
            band = base_ms / step["p90"], base_ms / step["p10"]
        speedups.append(s)
        low.append(max(s - min(band), 0.0))
        high.append(max(max(band) - s, 0.0))
    with _figure(path, title, (max(5.0, 1.1 * len(rows) + 2), 4.5)) as ax:
        x = _config_ticks(ax, rows)
        ax.bar(x, speedups, 0.6, yerr=[low, high], capsize=4, color="tab:blue")
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        for xi, s in zip(x, speedups):
            ax.annotate(f"{s:.2f}x", (xi, s), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
        ax.set_ylabel(f"speedup vs {base.get('config', 'baseline')} (p10–p90)")
    return os.fspath(path)


def _smooth(values, frac):
    """Centred moving average over ~frac of the curve (at least 1 point); edges shrink."""
    w = int(round(len(values) * frac))
    if w <= 1 or len(values) < 3:
        return values
    kernel = np.ones(w)
    return np.convolve(values, kernel, mode="same") / np.convolve(np.ones_like(values), kernel, mode="same")


def plot_loss_curves(curves, path, title="Training loss", band="minmax", smooth=0.02):
    """Loss curves {name: (steps, losses) or [(steps, losses), ...]} with a run-to-run band ("minmax" or "std");
    repeats are interpolated onto the first one's steps; smooth: moving-average fraction (0: none)."""
    band_name = "min–max" if band == "minmax" else "±1 std"
    with _figure(path, f"{title}; band: {band_name} across repeats", (7, 4.5)) as ax:
        for i, (name, runs) in enumerate(curves.items()):
            runs = [runs] if isinstance(runs, tuple) and len(runs) == 2 and np.ndim(runs[0]) == 1 else list(runs)
            if not runs:
                continue
            steps0 = np.asarray(runs[0][0], dtype=np.float64)
            stack = np.vstack([np.interp(steps0, steps, _smooth(np.asarray(losses, np.float64), smooth))
                               for steps, losses in runs])
            mean = stack.mean(axis=0)
            ax.plot(steps0, mean, color=f"C{i % 10}", lw=1.5, label=f"{name} ({len(runs)} run{'s' * (len(runs) > 1)})")
            if len(runs) > 1:
                sd = stack.std(axis=0, ddof=1)
                lo, hi = (stack.min(axis=0), stack.max(axis=0)) if band == "minmax" else (mean - sd, mean + sd)
                ax.fill_between(steps0, lo, hi, color=f"C{i % 10}", alpha=0.2, lw=0)
        ax.set(xlabel="step", ylabel="loss" + (" (smoothed)" if smooth else ""))
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    return os.fspath(path)


def plot_scaling(rows, path, title="Multi-GPU scaling"):
    """Throughput (with ideal linear scaling from the fewest GPUs) and step time against GPUs:
    rows [{"gpus", "datasets_per_s", "step_ms": {"median", "p10", "p90"}, "config" (optional)}]."""
    rows = sorted(rows, key=lambda r: r["gpus"])
    gpus = np.array([r["gpus"] for r in rows], dtype=np.float64)
    per_s = np.array([r["datasets_per_s"] for r in rows], dtype=np.float64)
    label = rows[0].get("config") or "measured"
    with _figure(path, title, (10, 4.2), ncols=2) as (ax1, ax2):
        ax1.plot(gpus, per_s, "o-", label=label)
        ax1.plot(gpus, per_s[0] * gpus / gpus[0], ":", color="C0", alpha=0.6, label="ideal")
        ax2.plot(gpus, [r["step_ms"]["median"] for r in rows], "o-", label=label)
        ax2.fill_between(gpus, [r["step_ms"]["p10"] for r in rows], [r["step_ms"]["p90"] for r in rows],
                         color="C0", alpha=0.2, lw=0)
        for ax, ylabel in ((ax1, "datasets / s"), (ax2, "ms per step (median, p10–p90)")):
            ax.set(xlabel="GPUs", ylabel=ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    return os.fspath(path)


def plot_time_to_quality(ttq, path, title="ROC AUC against training time"):
    """The time-to-quality run's evaluations against training seconds, each baseline a horizontal line."""
    with _figure(path, title, (7, 4.5)) as ax:
        ax.plot([h[1] for h in ttq["history"]], [h[2] for h in ttq["history"]], marker="o", label="nanoTabPFN")
        for i, (name, b) in enumerate(ttq["baselines"].items()):
            ax.axhline(b["roc_auc"], linestyle="--", linewidth=1, color=f"C{1 + i}", label=name)
        ax.set(xlabel="training seconds (evaluation not counted)", ylabel="mean ROC AUC")
        ax.legend(fontsize=8)
    return os.fspath(path)
