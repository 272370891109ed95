"""prior_dump.py: dump schema, determinism, class coverage, splits, padding, atomicity, CLI errors and
learnability of the prior. CPU only, small sizes."""
import hashlib
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

import prior_dump

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = dict(num_datasets=150, rows=60, features=5, classes=3)   # 150 = not a multiple of the batch 8
EXPECTED_KEYS = {"X", "y", "num_features", "num_datapoints", "single_eval_pos", "max_num_classes",
                 "original_batch_size", "problem_type"}


def _read(path):
    with h5py.File(path, "r") as f:
        return {key: f[key][()] for key in f.keys()}


def _concat(groups):
    groups = list(groups)
    fields = prior_dump.DumpGroup._fields[1:]
    return {field: np.concatenate([getattr(g, field) for g in groups]) for field in fields}


@pytest.fixture(scope="module")
def small_dump(tmp_path_factory):
    path = tmp_path_factory.mktemp("prior") / "small.h5"
    stats = prior_dump.write_dump(path, seed=0, progress=False, original_batch_size=8, **SHAPE)
    return path, stats


def test_schema_dtypes_and_shapes(small_dump):
    path, stats = small_dump
    n, r, f, c = SHAPE["num_datasets"], SHAPE["rows"], SHAPE["features"], SHAPE["classes"]
    with h5py.File(path, "r") as h5:
        assert set(h5.keys()) == EXPECTED_KEYS
        expected = {"X": (np.float32, (n, r, f)), "y": (np.float32, (n, r)),
                    "num_features": (np.int32, (n,)), "num_datapoints": (np.int32, (n,)),
                    "single_eval_pos": (np.int32, (n,)), "max_num_classes": (np.int64, (1,)),
                    "original_batch_size": (np.int64, (1,))}
        for key, (dtype, shape) in expected.items():
            assert h5[key].dtype == dtype, key
            assert h5[key].shape == shape, key
        assert h5["problem_type"].shape == ()
        assert h5["problem_type"].asstr()[()] == "classification"
        assert h5["max_num_classes"][0] == c and h5["original_batch_size"][0] == 8
        assert (h5["num_datapoints"][:] == r).all()
        assert h5["X"].chunks is None   # contiguous: readable with a plain offset (memmap, kvikio)
    assert stats["num_datasets"] == n and stats["datasets_per_s"] > 0 and stats["bytes"] > 0


def test_values_finite_padded_and_labels_valid(small_dump):
    data = _read(small_dump[0])
    x, y, num_features = data["X"], data["y"], data["num_features"]
    assert np.isfinite(x).all() and np.isfinite(y).all()
    assert np.abs(x).max() <= prior_dump.FEATURE_CLIP
    assert num_features.min() >= 1 and num_features.max() <= SHAPE["features"]
    assert len(np.unique(num_features)) > 1           # features 1..F vary between datasets
    column = np.arange(SHAPE["features"])
    padded = column[None, :] >= num_features[:, None]                    # (N, F)
    assert (x.transpose(0, 2, 1)[padded] == 0).all()                     # zero beyond num_features
    assert (x.std(axis=1)[~padded] > 0).mean() > 0.95                    # used features carry values
    assert (y == np.round(y)).all() and y.min() >= 0 and y.max() < SHAPE["classes"]


def test_every_class_in_train_and_test_part(small_dump):
    data = _read(small_dump[0])
    counts = []
    for labels, split in zip(data["y"].astype(int), data["single_eval_pos"]):
        present = np.unique(labels)
        counts.append(len(present))
        assert 2 <= len(present) <= SHAPE["classes"]
        assert (present == np.arange(len(present))).all()                # labels 0..k-1
        assert set(labels[:split]) == set(present) == set(labels[split:])
    assert set(counts) == {2, 3}                                         # 2..C classes occur


def test_splits_constant_in_aligned_blocks_and_in_range(small_dump):
    splits = _read(small_dump[0])["single_eval_pos"]
    rows = SHAPE["rows"]
    assert splits.min() >= int(0.1 * rows) and splits.max() <= int(0.9 * rows)
    for start in range(0, len(splits), 8):
        assert len(set(splits[start:start + 8])) == 1, start
    assert len(set(splits[::8])) > 3                                     # drawn per block


def test_tiny_tables_and_many_classes():
    # rows=8, classes=4: the split is clamped so each side holds one row per class
    data = _concat(prior_dump.generate(40, 8, 7, 4, seed=1))
    for labels, split in zip(data["y"].astype(int), data["single_eval_pos"]):
        assert split == 4
        assert set(labels[:split]) == set(labels[split:]) and len(set(labels)) >= 2


def test_deterministic_and_independent_of_group_size():
    args = dict(num_datasets=300, rows=40, features=4, classes=2)
    first = _concat(prior_dump.generate(seed=5, **args))
    again = _concat(prior_dump.generate(seed=5, group_size=1, **args))       # one chunk per group
    prefix = _concat(prior_dump.generate(seed=5, **dict(args, num_datasets=100)))
    other = _concat(prior_dump.generate(seed=6, **args))
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
        np.testing.assert_array_equal(first[key][:100], prefix[key])
    assert not np.array_equal(first["X"], other["X"])
    assert not np.array_equal(first["single_eval_pos"], other["single_eval_pos"])


def test_cpu_workers_do_not_change_the_data():
    previous = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):   # 1: chunks in sequence; 2: chunks on two single-threaded workers
            torch.set_num_threads(threads)
            results.append(_concat(prior_dump.generate(300, 40, 4, 2, seed=9)))
            assert torch.get_num_threads() == threads                     # caller's setting kept
    finally:
        torch.set_num_threads(previous)
    for key in results[0]:
        np.testing.assert_array_equal(results[0][key], results[1][key])


def test_same_seed_gives_identical_file_bytes(tmp_path):
    digests = []
    for name in ("a.h5", "b.h5"):
        prior_dump.write_dump(tmp_path / name, 40, 30, 3, 2, seed=3, progress=False)
        digests.append(hashlib.sha256((tmp_path / name).read_bytes()).hexdigest())
    assert digests[0] == digests[1]


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_interrupted_write_leaves_nothing_and_keeps_old_file(tmp_path, monkeypatch, error):
    real_generate = prior_dump.generate

    def failing_generate(*args, **kwargs):
        groups = real_generate(*args, **kwargs)
        yield next(groups)                      # one group reaches the temp file, then the run dies
        raise error

    monkeypatch.setattr(prior_dump, "generate", failing_generate)
    fresh, existing = tmp_path / "fresh.h5", tmp_path / "existing.h5"
    existing.write_bytes(b"previous dump")
    for target in (fresh, existing):
        with pytest.raises(type(error)):
            prior_dump.write_dump(target, 64, 150, 5, 2, seed=0, progress=False, group_size=1)
    assert not fresh.exists()
    assert existing.read_bytes() == b"previous dump"
    assert sorted(os.listdir(tmp_path)) == ["existing.h5"]               # no temp file left


def _main(argv, capsys):
    """Runs the CLI in-process; returns (exit code, stdout, stderr)."""
    try:
        code = prior_dump.main(argv)
    except SystemExit as exc:   # argparse's own errors
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("argv", [
    ["--num-datasets", "-5"], ["--rows", "3"], ["--classes", "1"], ["--features", "0"],
    ["--seed", "-1"], ["--rows", "5", "--classes", "3"], ["--rows", "abc"], ["--preset", "huge"],
    ["--out", "{tmp}/a_file/x.h5"], ["--out", "{tmp}"], ["--check", "{tmp}/missing.h5"],
    ["--grouped-rows", "1.5"], ["--grouped-rows", "nan"], ["--tree-share", "2"], ["--tree-depth", "1"],
    ["--noise-scale", "-1"], ["--binary-share", "2"], ["--train-law", "sqrt"], ["--dag-share", "-0.5"],
])
def test_cli_bad_input_one_line_exit_2(argv, tmp_path, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--num-datasets", "8"] * (
        "--num-datasets" not in argv)
    code, out, err = _main(argv, capsys)
    assert code == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]      # nothing written


def test_cli_error_in_a_real_process_has_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "prior_dump.py"), "--rows", "3",
                             "--out", str(tmp_path / "x.h5")], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr and not (tmp_path / "x.h5").exists()


def test_cli_writes_and_check_validates(tmp_path, capsys):
    out = tmp_path / "cli.h5"
    code, stdout, _ = _main(["--preset", "blog", "--num-datasets", "6", "--rows", "200",
                             "--out", str(out), "--no-progress", "--device", "cpu"], capsys)
    assert code == 0 and out.exists() and "datasets/s" in stdout
    with h5py.File(out, "r") as f:
        assert f["X"].shape == (6, 200, 5)
    code, stdout, _ = _main(["--check", str(out)], capsys)
    assert code == 0 and stdout.startswith("ok: ") and len(stdout.strip().splitlines()) == 1
    with h5py.File(out, "r+") as f:
        f["X"][0, 0, 0] = np.nan
    code, stdout, _ = _main(["--check", str(out)], capsys)
    assert code == 1 and stdout.strip() and "Traceback" not in stdout


def test_default_dump_generated_once_then_reused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prior_dump, "DEFAULT_DUMP_DATASETS", 64)
    path = tmp_path / "data" / "default.h5"
    made, used = "prior: no --data given, generated ", "prior: no --data given, using "   # tmp_path names "generated"
    assert prior_dump.ensure_default_dump(str(path)) == str(path)
    first = capsys.readouterr().out
    assert len(first.strip().splitlines()) == 1 and first.startswith(made)
    mtime = path.stat().st_mtime_ns
    with monkeypatch.context() as patch:   # a valid dump is used without the lock (a read-only folder's too)
        patch.setattr(prior_dump.safe_io, "file_lock", None)
        prior_dump.ensure_default_dump(str(path))
    second = capsys.readouterr().out
    assert len(second.strip().splitlines()) == 1 and second.startswith(used)
    assert path.stat().st_mtime_ns == mtime
    path.write_bytes(b"truncated")                                       # an invalid file: rebuilt
    prior_dump.ensure_default_dump(str(path))
    assert capsys.readouterr().out.startswith(made)
    with h5py.File(path, "r") as f:
        assert f["X"].shape == (64, 150, 5)
    with h5py.File(path, "r+") as f:
        f.attrs["grouped_rows"] = 0.3                                   # another prior's mix at the default path
    prior_dump.ensure_default_dump(str(path))
    assert capsys.readouterr().out.startswith(made)
    assert prior_dump.default_dump_path().endswith(".h5")


def _forest_aucs(data):
    """Per binary dataset: a small random forest fitted on its train part, ROC AUC on its test part."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.metrics import roc_auc_score
    scores = []
    for x, y, f, split in zip(data["X"], data["y"], data["num_features"], data["single_eval_pos"]):
        forest = RandomForestClassifier(n_estimators=30, random_state=0, n_jobs=1)
        forest.fit(x[:split, :f], y[:split])
        scores.append(roc_auc_score(y[split:], forest.predict_proba(x[split:, :f])[:, 1]))
    return np.array(scores)


def test_prior_is_learnable_but_not_trivial():
    """A random forest fitted on each dataset's train part must beat chance clearly on its test part."""
    scores = _forest_aucs(_concat(prior_dump.generate(30, 150, 5, 2, seed=11)))
    assert scores.mean() > 0.65, scores.round(2)
    assert scores.mean() < 0.97 and scores.std() > 0.05, scores.round(2)   # varied difficulty


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generation_is_valid_and_deterministic():
    first = _concat(prior_dump.generate(200, 150, 5, 2, seed=0, device="cuda"))
    again = _concat(prior_dump.generate(200, 150, 5, 2, seed=0, device="cuda"))
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert np.isfinite(first["X"]).all()
    for labels, split in zip(first["y"], first["single_eval_pos"]):
        assert set(labels[:split]) == set(labels[split:]) == {0.0, 1.0}


def test_absurd_size_is_refused_with_the_numbers(tmp_path, capsys):
    code, out, err = _main(["--num-datasets", str(10**12), "--out", str(tmp_path / "huge.h5"),
                            "--device", "cpu"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"error: --out {tmp_path / 'huge.h5'} needs ") and "PiB" in err and "free" in err
    assert list(tmp_path.iterdir()) == []


def test_file_size_limit_during_write_is_one_line_and_leaves_no_temp(tmp_path):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    out = tmp_path / "x.h5"
    (tmp_path / "x.h5").write_bytes(b"previous dump")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "prior_dump.py"), "--num-datasets", "3000",
                             "--rows", "40", "--features", "5", "--out", str(out), "--device", "cpu",
                             "--no-progress"], capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(f"error: cannot write dump {out}") and "disk full or file-size limit" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5"] and out.read_bytes() == b"previous dump"


def test_plan_line_and_stale_temp_of_a_dead_process_removed(tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".old.h5.{dead}.tmp"          # what a SIGKILLed writer leaves behind
    stale.write_bytes(b"partial")
    size, seconds = prior_dump.estimate(40, 30, 3, torch.device("cpu"))
    assert size == 40 * (30 * 3 * 4 + 30 * 4 + 12) + (64 << 10) and seconds > 0
    prior_dump.write_dump(tmp_path / "new.h5", 40, 30, 3, 2, seed=3, progress=True)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"prior: writing {tmp_path / 'new.h5'}: 40 datasets x 30 rows x 3 features")
    assert "KiB" in first and "ETA ~" in first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.h5"]
    assert (tmp_path / "new.h5").stat().st_size <= size


_SLOW_WRITE = """
import sys, time, prior_dump
real = prior_dump.generate
def slow(*args, **kwargs):
    for group in real(*args, **kwargs):
        yield group
        time.sleep(0.2)
prior_dump.generate = slow
prior_dump.write_dump(sys.argv[1], 400, 30, 3, 2, seed=0, device="cpu", progress=False, group_size=1)
"""


def test_sigkill_mid_write_keeps_the_old_dump_and_the_next_run_cleans_up(tmp_path):
    import signal
    import time
    out = tmp_path / "d.h5"
    out.write_bytes(b"previous dump")
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITE, str(out)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT})
    deadline = time.time() + 60
    while not any(p.name.endswith(".tmp") and p.stat().st_size > 0 for p in tmp_path.iterdir()):
        assert proc.poll() is None and time.time() < deadline, "writer ended before it was killed"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert out.read_bytes() == b"previous dump"                          # never a partial file
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    prior_dump.write_dump(out, 40, 30, 3, 2, seed=0, progress=False)      # the next run removes the litter
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5"]
    assert len(_read(out)["X"]) == 40


def test_block_log_features_are_one_count_per_aligned_block_and_the_uniform_law_is_unchanged():
    """The real preset's law: one feature count per aligned block (a batch of the block size has no all-zero
    columns), log-uniform in 2..F, so small counts are common; the default law still draws per dataset."""
    block = _concat(prior_dump.generate(256, 40, 12, 4, seed=5, original_batch_size=16, feature_law="block-log"))
    counts = block["num_features"].reshape(-1, 16)
    assert (counts == counts[:, :1]).all() and counts.min() >= 1 and counts.max() <= 12
    assert len(np.unique(counts[:, 0])) > 3 and (counts[:, 0] <= 4).mean() > 0.3     # log-uniform: many small
    active = np.abs(block["X"]).sum(1) > 0                                            # (N, F) non-zero columns
    assert (active.sum(1) == block["num_features"]).all()                             # zero beyond the count only
    uniform = _concat(prior_dump.generate(256, 40, 12, 4, seed=5, original_batch_size=16))
    assert not (uniform["num_features"].reshape(-1, 16) == uniform["num_features"].reshape(-1, 16)[:, :1]).all()
    with pytest.raises(ValueError, match="feature_law"):
        list(prior_dump.generate(8, 40, 12, 4, seed=5, feature_law="zipf"))


def _label_agreement_on_repeated_values(data):
    """(datasets whose last feature repeats values like an id, P(same label | same value there), P(same label))."""
    rows = data["X"].shape[1]
    hits = pairs = 0
    chance, count = [], 0
    for x, y, num_features in zip(data["X"], data["y"], data["num_features"]):
        column = x[:, num_features - 1]
        if num_features < 2 or len(np.unique(column)) > rows // 2:
            continue
        count += 1
        same_value = (column[:, None] == column[None, :]) & ~np.eye(rows, dtype=bool)
        same_label = y[:, None] == y[None, :]
        hits, pairs = hits + (same_value & same_label).sum(), pairs + same_value.sum()
        chance.append(same_label[~np.eye(rows, dtype=bool)].mean())
    return count, hits / max(pairs, 1), float(np.mean(chance))


def test_grouped_rows_repeat_entities_whose_rows_share_labels():
    """--grouped-rows: rows of one entity share causes, some tables an id column, some a per-entity label; the
    rows that repeat an id-like value then share labels far above chance. Invalid shares are refused."""
    args = dict(num_datasets=128, rows=60, features=6, classes=3, seed=2, original_batch_size=8,
                feature_law="block-log")
    plain = _label_agreement_on_repeated_values(_concat(prior_dump.generate(**args)))
    grouped = _concat(prior_dump.generate(mix=prior_dump.PriorMix(grouped_rows=1.0), **args))
    count, agreement, chance = _label_agreement_on_repeated_values(grouped)
    assert count > 2 * plain[0]                          # id columns on top of the prior's ordinal ones
    assert agreement > chance + 0.15 and agreement > plain[1] + 0.08
    assert np.isfinite(grouped["X"]).all() and (np.abs(grouped["X"]) <= prior_dump.FEATURE_CLIP).all()
    for share in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="grouped_rows"):
            list(prior_dump.generate(mix=prior_dump.PriorMix(grouped_rows=share), **args))


def test_tree_share_and_depth_set_the_mix_of_scms():
    """--tree-share 1 and 0 draw every table from trees or from MLPs, --tree-depth 8 deeper trees than 4: different
    data each; out of range is refused."""
    args = dict(num_datasets=768, rows=40, features=4, classes=2, seed=4, original_batch_size=8)   # 3 chunks
    Mix = prior_dump.PriorMix
    trees, mlps, deep = (_concat(prior_dump.generate(mix=mix, **args))
                         for mix in (Mix(tree_share=1.0), Mix(tree_share=0.0), Mix(tree_share=1.0, tree_depth=8)))
    assert not np.array_equal(trees["X"], mlps["X"]) and not np.array_equal(trees["y"], deep["y"])
    for mix, name in ((Mix(tree_share=-0.5), "tree_share"), (Mix(tree_share=1.01), "tree_share"),
                      (Mix(tree_depth=1), "tree_depth"), (Mix(tree_depth=11), "tree_depth"),
                      (Mix(tree_share=0.0, tree_depth=8), "no effect")):
        with pytest.raises(ValueError, match=name):
            list(prior_dump.generate(mix=mix, **args))


def test_noise_scale_sets_how_predictable_the_tables_are():
    """--noise-scale: 1 is the prior as it was (bitwise); 0.05 makes the same tables more predictable than 3 (a
    random forest's test ROC AUC); out of range is refused."""
    Mix = prior_dump.PriorMix
    args = dict(num_datasets=48, rows=120, features=4, classes=2, seed=5, original_batch_size=8)
    default, one = (_concat(prior_dump.generate(mix=mix, **args)) for mix in (Mix(), Mix(noise_scale=1.0)))
    assert all(np.array_equal(default[key], one[key]) for key in default)
    quiet, loud = (_concat(prior_dump.generate(mix=Mix(noise_scale=s), **args)) for s in (0.05, 3.0))
    assert _forest_aucs(quiet).mean() > _forest_aucs(loud).mean() + 0.03
    for scale in (-0.1, 11.0, float("nan")):
        with pytest.raises(ValueError, match="noise_scale"):
            list(prior_dump.generate(mix=Mix(noise_scale=scale), **args))


def test_proxy_share_gives_tables_a_column_that_nearly_decides_the_label():
    """--proxy-share: 0 is the prior as it was (bitwise); at 1 every table has a column that is the target plus
    noise, so its best single column separates the classes far better than the plain prior's; out of range is
    refused."""
    from sklearn.metrics import roc_auc_score
    Mix = prior_dump.PriorMix
    args = dict(num_datasets=64, rows=100, features=6, classes=2, seed=6, original_batch_size=8)

    def best_column_auc(data):
        best = [max(max(a, 1 - a) for a in (roc_auc_score(y, x[:, j]) for j in range(f)))
                for x, y, f in zip(data["X"], data["y"], data["num_features"])]
        return np.mean(best)
    default, zero = (_concat(prior_dump.generate(mix=mix, **args)) for mix in (Mix(), Mix(proxy_share=0.0)))
    assert all(np.array_equal(default[key], zero[key]) for key in default)
    proxied = _concat(prior_dump.generate(mix=Mix(proxy_share=1.0), **args))
    assert best_column_auc(proxied) > best_column_auc(default) + 0.05 and best_column_auc(proxied) > 0.85
    for share in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="proxy_share"):
            list(prior_dump.generate(mix=Mix(proxy_share=share), **args))


def test_binary_share_draws_two_classes_that_often():
    """--binary-share: 0 is the prior as it was (bitwise); at 1 every table has exactly 2 classes, at 0.5 about
    half more than the 1 in C - 1 of the plain draw; out of range is refused."""
    Mix = prior_dump.PriorMix
    args = dict(num_datasets=512, rows=60, features=3, classes=6, seed=8, original_batch_size=8)
    default, zero = (_concat(prior_dump.generate(mix=mix, **args)) for mix in (Mix(), Mix(binary_share=0.0)))
    assert all(np.array_equal(default[key], zero[key]) for key in default)

    def binary_fraction(data):
        return np.mean([len(np.unique(y)) == 2 for y in data["y"]])
    assert binary_fraction(_concat(prior_dump.generate(mix=Mix(binary_share=1.0), **args))) == 1.0
    half = binary_fraction(_concat(prior_dump.generate(mix=Mix(binary_share=0.5), **args)))
    assert abs(half - (0.5 + 0.5 / 5)) < 0.08 and binary_fraction(default) < 0.3
    for share in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="binary_share"):
            list(prior_dump.generate(mix=Mix(binary_share=share), **args))
    with pytest.raises(ValueError, match="no effect with classes 2"):   # all binary already: a flag doing nothing
        list(prior_dump.generate(mix=Mix(binary_share=0.5), **{**args, "classes": 2}))


def test_train_law_log_draws_as_many_short_training_sets_as_long_ones(tmp_path):
    """--train-law log: the training rows are log-uniform on [0.1 R, 0.9 R] per aligned block (half the blocks
    under R / 3.3), within the class bounds; "mixed" draws either law per block, and N datasets' draws are a prefix
    of M's; "uniform" is the prior as it was; the law survives the file, so the
    on-the-fly prior regenerates a log or mixed dump exactly; an unknown law is refused."""
    Mix = prior_dump.PriorMix
    rows, classes = 500, 4
    uniform, log = (prior_dump.draw_splits(3, 4000, rows, classes, 1, law) for law in ("uniform", "log"))
    assert np.array_equal(uniform, prior_dump.draw_splits(3, 4000, rows, classes, 1))
    assert log.min() >= 0.1 * rows - 1 and log.max() <= 0.9 * rows
    assert abs(np.median(log) - rows * 0.3) < 12 and abs(np.median(uniform) - rows * 0.5) < 12
    assert abs(np.mean(log < 100) - np.log(2) / np.log(9)) < 0.03 and np.mean(uniform < 100) < 0.15
    mixed = prior_dump.draw_splits(3, 4000, rows, classes, 1, "mixed")   # either law, even odds per block
    assert abs(np.mean(mixed < 100) - (np.mean(log < 100) + np.mean(uniform < 100)) / 2) < 0.03
    assert abs(np.median(mixed) - rows * 0.4) < 15 and mixed.min() >= 0.1 * rows - 1 and mixed.max() <= 0.9 * rows
    assert np.array_equal(prior_dump.draw_splits(3, 999, rows, classes, 1, "mixed"), mixed[:999])   # a prefix
    for law in ("log", "mixed"):
        path = tmp_path / f"{law}.h5"
        prior_dump.write_dump(path, 40, 60, 3, 3, seed=1, progress=False, original_batch_size=8,
                              mix=Mix(train_law=law))
        settings = prior_dump.file_settings(path)
        assert settings["mix"].train_law == law
        regenerated = prior_dump.Regenerator(settings, "cpu")
        x, y = regenerated.datasets(0, 40)
        data = _read(path)
        assert np.array_equal(data["single_eval_pos"], regenerated.splits[:40])
        assert np.array_equal(x.numpy(), data["X"]) and np.array_equal(y.numpy(), data["y"])
    for refused in (lambda: list(prior_dump.generate(40, 60, 3, 3, 1, mix=Mix(train_law="sqrt"))),
                    lambda: prior_dump.draw_splits(3, 40, rows, classes, 1, "sqrt")):
        with pytest.raises(ValueError, match="train_law"):
            refused()


def test_train_law_tasks_draws_the_real_tasks_training_rows_whatever_the_rows(tmp_path):
    """--train-law tasks: training rows log-uniform on 50-500 (the real tasks' rule 8) at any R, so R 1024 keeps >= 524
    test rows; on tables too short for 500 they are clamped to R - classes; a file regenerates exactly."""
    long = prior_dump.draw_splits(3, 4000, 1024, 10, 1, "tasks")
    assert long.min() >= 50 and long.max() <= 500
    assert abs(np.mean(long < 158) - 0.5) < 0.03 and abs(np.mean(long < 100) - np.log(2) / np.log(10)) < 0.03
    assert np.array_equal(prior_dump.draw_splits(3, 999, 1024, 10, 1, "tasks"), long[:999])   # a prefix
    short = prior_dump.draw_splits(3, 4000, 200, 10, 1, "tasks")   # the same draws, clamped to [10, 190]
    assert np.array_equal(short, np.clip(long, 10, 190))
    path = tmp_path / "tasks.h5"
    prior_dump.write_dump(path, 40, 120, 3, 3, seed=1, progress=False, original_batch_size=8,
                          mix=prior_dump.PriorMix(train_law="tasks"))
    settings = prior_dump.file_settings(path)
    regenerated, data = prior_dump.Regenerator(settings, "cpu"), _read(path)
    assert settings["mix"].train_law == "tasks" and data["single_eval_pos"].max() <= 117
    assert np.array_equal(data["single_eval_pos"], regenerated.splits[:40])
    x, y = regenerated.datasets(0, 40)
    assert np.array_equal(x.numpy(), data["X"]) and np.array_equal(y.numpy(), data["y"])


def test_dag_share_draws_random_dags_with_categorical_nodes(tmp_path):
    """--dag-share: 0 is the prior as it was (bitwise); 1 draws every table from random DAGs of mixed mechanisms: valid,
    learnable tables with more few-level integer columns (categorical nodes) than the MLP/tree prior; a file records
    the share and regenerates exactly; out of range is refused."""
    args = dict(num_datasets=128, rows=120, features=8, classes=4, seed=6, original_batch_size=8)
    Mix = prior_dump.PriorMix
    default, zero, dags = (_concat(prior_dump.generate(mix=mix, **args)) for mix in (Mix(), Mix(dag_share=0.0),
                                                                                      Mix(dag_share=1.0)))
    assert all(np.array_equal(default[key], zero[key]) for key in default)
    assert not np.array_equal(default["X"], dags["X"]) and np.isfinite(dags["X"]).all()
    for labels, split in zip(dags["y"], dags["single_eval_pos"]):
        assert set(labels[:split]) == set(labels[split:]) and len(set(labels)) >= 2

    def integer_share(data):   # active columns with at most 10 distinct values: category codes (or quantised)
        return np.mean([len(np.unique(x[:, k])) <= 10 for x, f in zip(data["X"], data["num_features"])
                        for k in range(f)])
    assert integer_share(dags) > integer_share(default) + 0.05, (integer_share(dags), integer_share(default))
    scores = _forest_aucs(_concat(prior_dump.generate(40, 150, 5, 2, seed=11, mix=Mix(dag_share=1.0))))
    assert 0.6 < scores.mean() < 0.97 and scores.std() > 0.05, scores.round(2)
    path = tmp_path / "dag.h5"
    prior_dump.main(["--dag-share", "0.5", "--num-datasets", "24", "--rows", "60", "--features", "4", "--classes", "3",
                     "--original-batch-size", "8", "--out", str(path), "--no-progress",
                     "--device", "cpu"])   # the regenerator below runs on the CPU, whose tables differ from CUDA's
    settings, data = prior_dump.file_settings(path), _read(path)
    assert settings["mix"].dag_share == 0.5
    x, y = prior_dump.Regenerator(settings, "cpu").datasets(0, 24)
    assert np.array_equal(x.numpy(), data["X"]) and np.array_equal(y.numpy(), data["y"])
    for share in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="dag_share"):
            list(prior_dump.generate(mix=Mix(dag_share=share), **args))


def test_only_rank_0_prints(monkeypatch, capsys):
    import runtime
    for rank, world, expected in (("0", "2", "rank 0 reports\n"), ("1", "2", ""), ("1", "1", "rank 0 reports\n")):
        monkeypatch.setenv("RANK", rank)   # torchrun's; a RANK without a WORLD_SIZE above 1 is not torchrun
        monkeypatch.setenv("WORLD_SIZE", world)
        with monkeypatch.context() as m:
            m.setattr(sys, "stdout", sys.stdout)   # restored afterwards (a torchrun process never needs to)
            runtime.quiet_other_ranks()
            print("rank 0 reports")
            quieted = sys.stdout if getattr(sys.stdout, "name", None) == os.devnull else None
        if quieted:
            quieted.close()
        assert capsys.readouterr().out == expected


def test_a_run_waits_for_another_making_the_default_dump_then_uses_it(tmp_path, monkeypatch, capsys):
    import threading
    import safe_io
    monkeypatch.setattr(prior_dump, "DEFAULT_DUMP_DATASETS", 64)
    path = tmp_path / "default.h5"
    with safe_io.file_lock(f"{path}.lock"):                            # another run is making the file
        waiting = threading.Thread(target=prior_dump.ensure_default_dump, args=(str(path),))
        waiting.start()
        waiting.join(1.5)
        assert waiting.is_alive() and not path.exists()                 # it neither writes nor reads yet
        prior_dump.write_dump(str(path), 64, 150, 5, 2, seed=0, progress=False)
        mtime = path.stat().st_mtime_ns
    waiting.join(60)
    assert capsys.readouterr().out.endswith(f"prior: no --data given, using the nano dump {path}\n")
    assert path.stat().st_mtime_ns == mtime                             # not written a second time
