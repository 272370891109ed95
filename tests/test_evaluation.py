"""evaluation.py and real_data.py: the selection rule on synthetic tables (binary, multiclass, held-out), one
real task end to end (preparation from the installed package, our classifier, every baseline, the ranks), the
multiclass scores, the toy suite."""
import csv
import io
import tarfile

import numpy as np
import pytest
import torch

import evaluation as ev
import real_data as rd
from classifier import NanoTabPFNClassifier
from model import NanoTabPFNModel


def tiny_classifier(seed=0, num_outputs=2):
    torch.manual_seed(seed)
    return NanoTabPFNClassifier(NanoTabPFNModel(embedding_size=16, num_attention_heads=2, mlp_hidden_size=16,
                                                num_layers=1, num_outputs=num_outputs), n_estimators=2)


def table(n=200, seed=0):
    """A synthetic R-style CSV table: row names, a binary target, a leaky copy and cut, an id, a constant,
    a categorical with NA, a duplicate, a mostly-missing column, and two honest numeric features."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    target = np.where(a + rng.standard_normal(n) > 0.3, "yes", "no")
    colour = rng.choice(["red", "green", "blue", "NA"], n)
    header = ["", "a", "outcome", "b", "copy", "cut", "id", "const", "colour", "a_again", "sparse"]
    rows = [[str(i + 1), f"{a[i]:.6f}", target[i], f"{b[i]:.6f}", str(int(target[i] == "yes")),
             f"{(1.0 if target[i] == 'yes' else -1.0) * (1 + abs(b[i])):.4f}", str(1000 + i), "5", colour[i],
             f"{a[i]:.6f}", "NA" if i % 4 else "1.5"] for i in range(n)]
    return header, rows


def archive_of(tables: dict, path):
    """A resources.tar.gz laid out as pydataset's: resources/rdata/csv/<package>/<item>.csv."""
    with tarfile.open(path, "w:gz") as tar:
        for name, (header, rows) in tables.items():
            text = io.StringIO()
            csv.writer(text).writerows([header, *rows])
            data = text.getvalue().encode()
            info = tarfile.TarInfo(f"resources/rdata/csv/{name}.csv")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_rule_on_a_synthetic_table():
    task, reason = rd.build_task("pkg/t", *table())
    assert reason == "kept"
    assert task.target == "outcome"
    # Leaky copy and cut, id, constant, duplicate and mostly-missing columns are gone.
    assert task.features == ["a", "b", "colour"]
    np.testing.assert_array_equal(task.categorical, [False, False, True])
    colour = task.X[:, 2]
    assert np.isnan(colour).any() and set(np.unique(colour[~np.isnan(colour)])) == {0.0, 1.0, 2.0}  # sorted codes
    assert task.X.dtype == np.float32 and task.y.dtype == np.int64 and set(task.y) == {0, 1}
    assert rd.build_task("pkg/t", *table(n=60))[1] == "60 rows"
    header, rows = table()
    unbalanced = [r[:2] + ["yes" if i % 20 else "no"] + r[3:] for i, r in enumerate(rows)]
    assert rd.build_task("pkg/t", header, unbalanced)[1].startswith("minority")


def test_multiclass_target_is_majority_vs_rest():
    rng = np.random.default_rng(1)
    kinds = rng.choice(["a", "b", "c"], 300, p=[0.5, 0.3, 0.2])
    rows = [[str(i), kinds[i], f"{rng.standard_normal():.5f}", f"{rng.standard_normal():.5f}", f"{i % 7}"]
            for i in range(300)]
    task, reason = rd.build_task("pkg/m", ["", "kind", "x1", "x2", "x3"], rows)
    assert reason == "kept" and task.target == "kind"
    np.testing.assert_array_equal(task.y, (kinds != "a").astype(int))


def test_multiclass_task_keeps_the_classes_and_drops_rare_ones_and_leaks():
    rng = np.random.default_rng(2)
    kinds = rng.choice(["a", "b", "c", "d"], 400, p=[0.5, 0.3, 0.18, 0.02])   # "d": under 10 rows
    order = {"a": 0.0, "b": 1.0, "c": 2.0, "d": 3.0}
    rows = [[str(i), f"{rng.standard_normal():.5f}", kinds[i], "yes" if i % 3 else "no",
             f"{order[kinds[i]] * 10 + rng.random():.4f}",                    # a cut of the target: leaks
             f"{rng.standard_normal() + order[kinds[i]]:.5f}"] for i in range(400)]
    header = ["", "x1", "kind", "flag", "cut", "x2"]
    binary, reason = rd.build_task("pkg/m", header, rows)
    assert reason == "kept" and binary.target == "flag" and binary.num_classes == 2
    task, reason = rd.build_task("pkg/m", header, rows, multiclass=True)
    assert reason == "kept" and task.name == "pkg/m" + rd.MULTICLASS_SUFFIX and task.target == "kind"
    keep = kinds != "d"
    np.testing.assert_array_equal(task.y, np.array([order[k] for k in kinds[keep]], dtype=int))
    assert task.num_classes == 3 and task.features == ["x1", "flag", "x2"]   # the binary target is a feature
    assert task.key() == (int(keep.sum()), 3, tuple(sorted(np.bincount(task.y).tolist())))
    two = [r[:2] + [{"c": "b", "d": "b"}.get(r[2], r[2])] + r[3:] for r in rows]
    assert rd.build_task("pkg/m", header, two, multiclass=True)[0] is None   # 2 classes: no multiclass task


def test_prepare_select_and_cache_from_an_archive(tmp_path):
    header, rows = table()
    archive = archive_of({"P/one": (header, rows), "P/two": table(seed=1), "P/three": table(seed=2),
                          "Q/copy": (header, rows), "Q/small": table(n=50)}, tmp_path / "resources.tar.gz")
    tasks, reasons = rd.select_tasks(archive=archive)
    multi = [f"P/one{rd.MULTICLASS_SUFFIX}", f"P/three{rd.MULTICLASS_SUFFIX}"]   # "colour": 3 levels
    assert [t.name for t in tasks] == ["P/one", "P/three", *multi]   # sorted, at most 2 per package, then multiclass
    assert reasons["P/two"].startswith("2 tasks of P") and reasons["Q/copy"] == "duplicate of an earlier task"
    assert reasons["Q/small"] == "50 rows" and reasons[multi[0]] == "kept"
    assert [t.num_classes for t in tasks] == [2, 2, 3, 3] and tasks[2].target == "colour"
    for t in tasks[2:]:
        for train, test in t.splits:
            assert set(t.y[train]) == set(t.y[test]) == {0, 1, 2} and not set(train) & set(test)
    for t in tasks[:2]:
        assert len(t.splits) == rd.NUM_SPLITS
        for train, test in t.splits:
            assert len(train) == 100 and len(test) == 100 and not set(train) & set(test)
            assert abs(t.y[train].mean() - t.y.mean()) < 0.02               # stratified
    path = str(tmp_path / "suite.npz")
    loaded = rd.load_suite(path, archive=archive)
    assert [t.name for t in loaded] == ["P/one", "P/three", *multi]
    np.testing.assert_array_equal(loaded[0].X, tasks[0].X)
    np.testing.assert_array_equal(loaded[0].splits[3][1], tasks[0].splits[3][1])
    np.testing.assert_array_equal(loaded[3].y, tasks[3].y)
    assert rd.tasks_digest(loaded) == rd.tasks_digest(tasks) != rd.tasks_digest(loaded[:3])
    # A second load reads the cache (no archive needed); another selection rebuilds it.
    assert [t.name for t in rd.load_suite(path, archive=str(tmp_path / "absent.tar.gz"))] == ["P/one", "P/three",
                                                                                               *multi]
    assert [t.name for t in rd.read_cache(path)] == ["P/one", "P/three", *multi]
    assert [t.name for t in rd.load_suite(path, items={"P/two"}, archive=archive)] == ["P/two", "P/two:multiclass"]
    # The held-out tasks: the tables the cap set aside (P/two), with their multiclass tasks.
    heldout = rd.load_heldout(str(tmp_path / "heldout.npz"), archive=archive)
    assert [t.name for t in heldout] == ["P/two", "P/two:multiclass"]
    report = rd.suite_report(loaded, heldout)
    assert "## Rule" in report and "| P/one | outcome | 200 | 3 | 2 | 1 |" in report
    assert "4 tasks (2 binary, 2 multiclass)" in report and "## Held-out tasks" in report
    with pytest.raises(ValueError, match="no readable real-data cache"):
        rd.read_cache(str(tmp_path / "absent.npz"))


def test_one_real_task_end_to_end(tmp_path):
    """From the installed package: prepare one task, run our classifier and every baseline, report."""
    path = str(tmp_path / "suite.npz")
    tasks = rd.load_suite(path, items={"MASS/Pima.tr"})
    assert [t.name for t in tasks] == ["MASS/Pima.tr"]
    task = tasks[0]
    assert task.X.shape == (200, 7) and task.target == "type" and len(task.splits) == 5
    ours = ev.evaluate_suite(tiny_classifier, tasks, splits_per_task=2)
    assert ours["splits"] == 2 and 0 <= ours["roc_auc"] <= 1 and set(ours["per_task"]) == {"MASS/Pima.tr"}
    assert 0 < ours["log_loss"] and set(ours["per_split_log_loss"]) == set(ours["per_split"])
    cache = str(tmp_path / "baselines.json")
    baselines = ev.baseline_scores(tasks, path=cache, splits_per_task=2)   # two splits keep the test fast
    assert set(baselines) == set(ev.BASELINE_SETTINGS)
    assert all(r["splits"] == 2 and r["roc_auc"] > 0.7 and r["log_loss"] < 1.0 for r in baselines.values())
    with pytest.MonkeyPatch.context() as mp:   # the second call reads the cache
        mp.setattr(ev, "make_baseline", lambda *a, **k: pytest.fail("baselines recomputed"))
        assert ev.baseline_scores(tasks, path=cache, splits_per_task=2) == baselines
        with pytest.raises(ValueError, match="lacks baseline"):
            ev.baseline_scores(tasks, path=cache, compute=False)          # all splits were never computed
    n = len(ev.BASELINE_SETTINGS) + 1
    summary = ev.compare({"nanotabpfn": ours, **baselines}, "nanotabpfn")
    assert summary["splits"] == 2 and set(summary["methods"]) == {"nanotabpfn", *ev.BASELINE_SETTINGS}
    ranks = [e["mean_rank"] for e in summary["methods"].values()]
    assert sum(ranks) == pytest.approx(sum(range(1, n + 1))) and all(1 <= r <= n for r in ranks)
    assert summary["methods"]["knn"]["log_loss"] == baselines["knn"]["log_loss"]
    assert summary["methods"]["knn"]["wins"] in (0, 1) and set(summary["per_task"]["nanotabpfn"]) == {"MASS/Pima.tr"}
    quick = ev.suite_eval(tiny_classifier(), tasks, baselines)
    assert set(quick) >= {"roc_auc", "log_loss", "rank", "per_task", "seconds", "baselines_roc_auc"}
    assert quick["rank"] + sum(quick["baselines_rank"].values()) == pytest.approx(sum(range(1, n + 1)))
    one = ev.baseline_scores(tasks, path=cache, splits_per_task=1, compute=False)   # cut from the 2-split results
    assert one["knn"]["per_split"] == {"MASS/Pima.tr#0": baselines["knn"]["per_split"]["MASS/Pima.tr#0"]}
    evaluate_now = ev.make_suite_eval(tasks, splits_per_task=1, baselines_path=cache)
    scores = evaluate_now(tiny_classifier())
    assert scores["rank"] is not None and scores["baselines_roc_auc"]["knn"] == one["knn"]["roc_auc"]
    # The cache is keyed on the tasks' content: other splits make it stale.
    other = rd.Task(task.name, task.target, task.X, task.y, task.features, task.categorical, task.splits[::-1])
    assert ev.read_baselines([other], cache) == {} and ev.read_baselines(tasks, cache)


def test_split_scores_binary_multiclass_and_a_missing_class():
    from sklearn.metrics import log_loss, roc_auc_score
    rng = np.random.default_rng(0)
    y = np.array([0, 1, 2, 0, 1, 2, 2, 1])
    p = rng.dirichlet(np.ones(3), len(y))
    auc, loss = ev.split_scores(y, p, [0, 1, 2], 3)
    assert auc == pytest.approx(roc_auc_score(y, p, multi_class="ovr")) and loss == pytest.approx(log_loss(y, p))
    binary = (y > 0).astype(int)
    q = np.stack([1 - p[:, 0], p[:, 0]], axis=1)
    assert ev.split_scores(binary, q, [0, 1], 2) == pytest.approx((roc_auc_score(binary, q[:, 1]),
                                                                   log_loss(binary, q)))
    # A test split without class 2: the macro mean over the classes present; labels say where columns go.
    present = y < 2
    auc, _ = ev.split_scores(y[present], p[present], [0, 1, 2], 3)
    assert auc == pytest.approx(np.mean([roc_auc_score(y[present] == c, p[present, c]) for c in (0, 1)]))
    # A classifier that never saw class 1 (two columns): probability 0 there, clipped in the log loss.
    auc, loss = ev.split_scores(np.array([0, 1, 2]), np.array([[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]]), [0, 2], 3)
    assert loss == pytest.approx(-(np.log(0.9) + np.log(ev.MIN_PROBABILITY) + np.log(0.8)) / 3)


def test_multiclass_suite_with_a_10_output_model_and_the_boosted_baselines():
    """A 3-class task (a multiclass table of the installed package), two splits, our 10-output model, XGBoost and
    CatBoost with missing cells: ROC AUC one-vs-rest; a 2-output model's suite_eval skips the task."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((150, 4)).astype(np.float32)
    y = np.repeat([0, 1, 2], 50)
    X[:, 0] += 2 * y
    X[rng.random(X.shape) < 0.1] = np.nan
    task = rd.Task("toy:multiclass", "class", X, y, ["a", "b", "c", "d"], np.zeros(4, bool), rd.make_splits(y))
    for make in (lambda: tiny_classifier(num_outputs=10), lambda: ev.make_baseline("xgboost"),
                 lambda: ev.make_baseline("catboost")):
        result = ev.evaluate_suite(make, [task], splits_per_task=2)
        assert result["splits"] == 2 and 0 <= result["roc_auc"] <= 1 and result["log_loss"] > 0
    boosted = ev.evaluate_suite(lambda: ev.make_baseline("catboost"), [task], splits_per_task=1)
    assert boosted["roc_auc"] > 0.7                                            # feature 0 carries the class
    binary = rd.Task("toy", "c", X, (y > 0).astype(int), ["a", "b", "c", "d"], np.zeros(4, bool),
                     rd.make_splits((y > 0).astype(int)))
    baselines = {"catboost": ev.evaluate_suite(lambda: ev.make_baseline("catboost"), [binary, task], 1)}
    scores = ev.suite_eval(tiny_classifier(), [binary, task], baselines)
    assert scores["skipped_tasks"] == 1 and set(scores["per_task"]) == {"toy"}


def test_compare_ranks_and_wins():
    per_split = {"ours": {"t1#0": 0.9, "t2#0": 0.6, "t3#0": 0.7},
                 "rf": {"t1#0": 0.8, "t2#0": 0.7, "t3#0": 0.7},
                 "lr": {"t1#0": 0.5, "t2#0": 0.5, "t3#0": 0.5}}
    results = {m: ev.summarize(s, seconds=1.5) for m, s in per_split.items()}
    summary = ev.compare(results, "ours")
    rf = summary["methods"]["rf"]
    assert (rf["wins"], rf["ties"], rf["losses"]) == (1, 1, 1)
    assert summary["methods"]["lr"]["wins"] == 3
    assert summary["methods"]["ours"]["mean_rank"] == pytest.approx((1 + 2 + 1.5) / 3)
    assert summary["methods"]["lr"]["mean_rank"] == 3
    assert summary["methods"]["ours"]["seconds_per_split"] == pytest.approx(0.5)
    only = ev.compare(results, "ours", task_names={"t1", "t2"})
    assert only["tasks"] == 2 and only["methods"]["ours"]["mean_rank"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="no split common"):
        ev.compare(results, "ours", task_names={"absent"})


def test_a_stored_result_gives_back_the_result_exactly():
    """stored() keeps each task's split scores in split order (no means); from_stored() rebuilds evaluate_suite's
    result bit for bit; a record written before (per_split) passes as it is; splits out of order are refused."""
    result = ev.summarize({"a/x#0": 0.1 + 0.2, "a/x#1": 1 / 3, "b:multiclass#0": 0.7},
                          2.5, {"a/x#0": 0.6931471805599453, "a/x#1": 0.1, "b:multiclass#0": 1e-15})
    kept = ev.stored(result)
    assert kept == {"seconds": 2.5, "roc_auc_per_split": {"a/x": [0.1 + 0.2, 1 / 3], "b:multiclass": [0.7]},
                    "log_loss_per_split": {"a/x": [0.6931471805599453, 0.1], "b:multiclass": [1e-15]}}
    assert ev.from_stored(kept) == result and ev.from_stored(result) is result
    no_loss = ev.summarize({"t#0": 0.5}, 1.0)
    assert ev.from_stored(ev.stored(no_loss)) == no_loss and "log_loss_per_split" not in ev.stored(no_loss)
    with pytest.raises(ValueError, match="out of order"):
        ev.stored(ev.summarize({"t#1": 0.5, "t#0": 0.6}))


def test_first_time_passing():
    baselines = {"rf": {"roc_auc": 0.8}, "lr": {"roc_auc": 0.7}, "gbm": {"roc_auc": 0.95}}
    history = [{"step": 10, "train_seconds": 1.0, "scores": {"roc_auc": 0.65}},
               {"step": 20, "train_seconds": 2.0, "scores": {"roc_auc": 0.75}},
               {"step": 30, "train_seconds": 3.0, "scores": {"roc_auc": 0.85, "baselines_roc_auc": {"rf": 0.9}}},
               {"step": 40, "train_seconds": 4.0, "scores": {"roc_auc": 0.91}}]
    passed = ev.first_time_passing(history, baselines)
    assert passed["lr"] == {"step": 20, "train_seconds": 2.0, "bar": 0.7}
    assert passed["rf"] == {"step": 40, "train_seconds": 4.0, "bar": 0.8}   # step 30's same-split bar was 0.9
    assert passed["gbm"] is None


def test_toy_suite_smoke():
    splits = ev.eval_splits(max_train_rows=60, num_splits=2)
    assert [s[0] for s in splits[::2]] == list(ev.EVAL_TASKS)
    assert all(len(s[1]) <= 60 and s[1].dtype == np.float32 for s in splits)
    scores = ev.evaluate(ev.RandomForestReference(), splits[:2])
    assert scores["roc_auc"] > 0.95 and set(scores["per_task_roc_auc"]) == {"breast_cancer"}
    line = ev.format_scores("random forest", scores)
    assert line.startswith(" random forest | roc_auc") and "breast_cancer roc_auc" in line and "\n" not in line


def test_the_real_suites_reference_line_counts_every_ranked_method(monkeypatch):
    monkeypatch.setattr(ev, "make_suite_eval", lambda splits_per_task: lambda classifier: {})
    scores = {"roc_auc": 0.70, "rank": 2.5, "methods": 3, "baselines_roc_auc": {"rf": 0.72, "lr": 0.69},
              "baselines_rank": {"rf": 1.5, "lr": 2.0}}
    name, reference = ev.suite_by_name("real").reference(scores)
    assert name == "rf" and ev.format_scores(name, reference).endswith("mean rank 1.50 of 3")
    assert ev.format_scores("nanoTabPFN", scores).endswith("mean rank 2.50 of 3")
