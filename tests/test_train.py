"""The shared training loop: learning, baseline equivalence of both scripts, flags on CPU, checkpoints,
resume, signals and a 2-process gloo DDP run."""
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import write_tiny_dump
from train import fill_model_size  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = ["--no-eval", "--log-every", "5", "--timing-warmup", "1"]


def run_main(module, argv):
    """Runs train.main / train_optimized.main in-process; returns (exit code, record dict or None)."""
    import importlib
    mod = importlib.import_module(module)
    code = mod.main(argv)
    record = None
    if "--record" in argv:
        path = argv[argv.index("--record") + 1]
        if os.path.exists(path):
            with open(path) as f:
                record = json.load(f)
            record = {**record, **record.get("extra", {})}  # run fields live under "extra"
    return code, record


def script(args, timeout=240, **kw):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def dump(tmp_path):
    return write_tiny_dump(tmp_path / "d.h5", num_datasets=48, rows=40, features=5, seed=3)


def test_loss_falls_on_a_learnable_prior(tmp_path):
    path = write_tiny_dump(tmp_path / "learn.h5", num_datasets=256, rows=60, features=3, seed=1, ragged=False)
    code, rec = run_main("train", ["--data", path, "--steps", "120", "--batch-size", "8", "--lr", "3e-3",
                                   "--record", str(tmp_path / "r.json"), *FAST])
    assert code == 0
    losses = rec["losses"]
    assert len(losses) == 120
    first, last = sum(losses[:15]) / 15, sum(losses[-15:]) / 15
    assert last < 0.8 * first, (first, last)  # the labels are a function of feature 0: learnable
    assert rec["stalled_at_step"] is None


def test_loss_at_chance_needs_a_full_window_at_ln_k():
    import math
    from loss_health import STALLED_STEPS as n, loss_at_chance
    assert loss_at_chance([math.log(2)] * n, 2) and loss_at_chance([9.0] + [math.log(10)] * n, 10)
    assert not loss_at_chance([math.log(2)] * (n - 1), 2)          # too few steps yet
    assert not loss_at_chance([math.log(2) + 0.01] * n, 2)         # near chance, still moving
    assert not loss_at_chance([0.3, 1.1] * (n // 2), 2)            # averages 0.7, but far from it


def test_a_loss_that_rises_above_its_best_window_warns():
    import math
    from loss_health import RISEN_BY, STALLED_STEPS as n, learning_warning
    best = math.inf
    for losses in ([1.8] * (n - 1), [1.8] * n, [1.8] * n + [1.62] * n):   # too few, then the best windows so far
        warning, best = learning_warning(losses, 10, best)
        assert warning is None
    assert best == pytest.approx(1.62)
    assert learning_warning([1.62] * n + [1.62 + RISEN_BY / 2] * n, 10, best) == (None, best)   # noise of a healthy run
    warning, _ = learning_warning([1.62] * n + [2.03] * n, 10, best)                          # small at --lr 4e-3
    assert warning.startswith("the loss averaged 2.030 over the last 200 steps, up from 1.620")


def test_a_run_stuck_at_chance_warns_once_and_records_the_step(dump, tmp_path, monkeypatch, capsys):
    import math
    import loss_health
    import train
    monkeypatch.setattr(loss_health, "STALLED_STEPS", 10)
    # Uniform predictions: the loss is ln 2 at every step, as in the blog runs that stopped learning.
    monkeypatch.setattr(train, "loss_on_batch", lambda model, batch, *a: sum(p.sum() for p in model.parameters())
                        * 0 + math.log(2))
    code, rec = run_main("train", ["--data", dump, "--steps", "30", "--batch-size", "4",
                                   "--record", str(tmp_path / "r.json"), *FAST])
    out = capsys.readouterr().out
    assert code == 0 and out.count("warning: the loss has averaged ln 2 = 0.693") == 1 and "--lr 2e-3" in out
    assert rec["stalled_at_step"] == 10                                  # the first log point with 10 losses


def test_both_scripts_give_the_same_losses_with_no_flags(dump, tmp_path):
    common = ["--data", dump, "--steps", "12", "--batch-size", "4", "--seed", "7", *FAST]
    code_a, rec_a = run_main("train", [*common, "--record", str(tmp_path / "a.json")])
    code_b, rec_b = run_main("train_optimized", [*common, "--record", str(tmp_path / "b.json")])
    assert code_a == code_b == 0
    assert rec_a["losses"] == rec_b["losses"]          # bit for bit: same batches, same arithmetic
    assert len(rec_a["losses"]) == 12


@pytest.mark.parametrize("flags", [["--pinned"], ["--streams"], ["--pinned", "--streams", "--prefetch", "3"],
                                   ["--gds-bin"], ["--resident"], ["--flash"], ["--flash", "--gds-bin"]])
def test_every_flag_runs_on_cpu_and_matches_the_baseline_data(flags, dump, tmp_path):
    common = ["--data", dump, "--steps", "6", "--batch-size", "4", "--seed", "1", *FAST]
    _, base = run_main("train_optimized", [*common, "--record", str(tmp_path / "base.json")])
    code, rec = run_main("train_optimized", [*common, *flags, "--record", str(tmp_path / "f.json")])
    assert code == 0
    # Same batches reach the model on every data path (fingerprints of the first batches' x).
    assert rec["per_rank"][0]["batch_fingerprints"] == base["per_rank"][0]["batch_fingerprints"]
    if "--flash" not in flags:
        assert rec["losses"] == base["losses"]
    else:
        assert rec["losses"] == pytest.approx(base["losses"], rel=1e-4, abs=1e-5)


def test_pinned_and_streams_say_they_do_nothing_without_cuda(dump, capsys):
    if torch.cuda.is_available():
        pytest.skip("CPU-only behaviour")
    code, _ = run_main("train_optimized", ["--data", dump, "--steps", "2", "--batch-size", "4",
                                           "--pinned", "--streams", *FAST])
    out = capsys.readouterr().out
    assert code == 0
    assert "no effect" in out and "--pinned" in out and "--streams" in out


def test_flash_reports_the_sdpa_kernel(dump, capsys):
    code, _ = run_main("train_optimized", ["--data", dump, "--steps", "2", "--batch-size", "4", "--flash", *FAST])
    out = capsys.readouterr().out
    assert code == 0
    assert "--flash" in out and "kernel:" in out
    if not torch.cuda.is_available():
        assert "flash kernels need CUDA" in out  # never implies flash ran on a CPU


@pytest.mark.parametrize("flags", [[], ["--gds-bin", "--prefetch", "3"], ["--streams", "--pinned"],
                                   ["--warmup-steps", "8"], ["--warmup-steps", "8", "--fused-optimizer"]])
def test_resume_continues_exactly(flags, dump, tmp_path):
    """2K steps straight == K steps, then resumed for K more: same losses, same parameters."""
    common = ["--data", dump, "--batch-size", "4", "--seed", "5", *FAST, *flags]
    _, full = run_main("train_optimized", [*common, "--steps", "10", "--ckpt", str(tmp_path / "full.pt"),
                                           "--record", str(tmp_path / "full.json")])
    ck = str(tmp_path / "half.pt")
    code1, _ = run_main("train_optimized", [*common, "--steps", "5", "--ckpt", ck])
    code2, resumed = run_main("train_optimized", [*common, "--steps", "10", "--ckpt", ck, "--resume",
                                                  "--record", str(tmp_path / "res.json")])
    assert code1 == code2 == 0
    assert resumed["losses"] == full["losses"]
    a = torch.load(str(tmp_path / "full.pt"), weights_only=False)
    b = torch.load(ck, weights_only=False)
    assert a["step"] == b["step"] == 10
    for k in a["train_state"]["model"]:
        assert torch.equal(a["train_state"]["model"][k], b["train_state"]["model"][k]), k
    assert full["per_rank"][0]["param_sha256"] == resumed["per_rank"][0]["param_sha256"]



def test_a_resumed_run_inside_the_warm_up_says_so_about_its_own_steps(dump, tmp_path, capsys):
    common = ["--data", dump, "--batch-size", "4", "--no-eval", "--timing-warmup", "5"]
    ck = str(tmp_path / "c.pt")
    assert run_main("train_optimized", [*common, "--steps", "8", "--ckpt", ck])[0] == 0
    capsys.readouterr()
    assert run_main("train_optimized", [*common, "--steps", "10", "--ckpt", ck, "--resume"])[0] == 0
    done = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("done:"))
    assert done.startswith("done: 10 steps") and "this run's steps all fell within --timing-warmup 5" in done

def test_bad_checkpoints_get_one_line_errors_and_are_not_overwritten(dump, tmp_path):
    common = ["--data", dump, "--batch-size", "4", "--steps", "3", *FAST]
    ck = tmp_path / "c.pt"
    assert script(["train_optimized.py", *common, "--ckpt", str(ck)]).returncode == 0
    good = ck.read_bytes()

    def fails(path, extra, expect):
        before = open(path, "rb").read()
        p = script(["train_optimized.py", *common, "--ckpt", str(path), "--resume", *extra])
        assert p.returncode == 2, p.stderr
        assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1 and expect in p.stderr, p.stderr
        assert open(path, "rb").read() == before

    truncated = tmp_path / "t.pt"
    truncated.write_bytes(good[: len(good) // 2])
    fails(truncated, [], "corrupt or truncated")
    garbage = tmp_path / "g.pt"
    garbage.write_bytes(b"not a checkpoint at all" * 10)
    fails(garbage, [], "corrupt or truncated")
    other = write_tiny_dump(tmp_path / "other.h5", num_datasets=48, rows=40, features=5, seed=99)
    p = script(["train_optimized.py", "--data", other, "--batch-size", "4", "--steps", "3", *FAST,
                "--ckpt", str(ck), "--resume"])
    assert p.returncode == 2 and "different dump" in p.stderr and "Traceback" not in p.stderr
    fails(ck, ["--batch-size", "8"], "global batch")
    # A different model size: rewrite the stored config to a larger embedding.
    state = torch.load(str(ck), weights_only=False)
    state["model_config"]["embedding_size"] = 128
    wrong = tmp_path / "w.pt"
    torch.save(state, wrong)
    fails(wrong, [], "embedding_size=128")
    # A fresh run never overwrites an existing checkpoint.
    p = script(["train_optimized.py", *common, "--ckpt", str(ck)])
    assert p.returncode == 2 and "--resume" in p.stderr and ck.read_bytes() == good


def test_sigterm_writes_a_checkpoint_then_resume_finishes(tmp_path):
    path = write_tiny_dump(tmp_path / "big.h5", num_datasets=64, rows=60, features=5, seed=2)
    ck = tmp_path / "s.pt"
    args = ["train_optimized.py", "--data", path, "--batch-size", "4", "--steps", "100000", "--no-eval",
            "--log-every", "2", "--ckpt", str(ck)]
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    seen = []
    for line in proc.stdout:  # wait until training runs (the handler is installed), then signal
        seen.append(line)
        if line.startswith("step"):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    out = "".join(seen) + out
    assert proc.returncode == 143, err
    assert "SIGTERM" in out and ck.exists()
    step = torch.load(str(ck), weights_only=False)["step"]
    assert step > 0
    p = script(["train_optimized.py", "--data", path, "--batch-size", "4", "--steps", str(step + 3), "--no-eval",
                "--log-every", "1000", "--ckpt", str(ck), "--resume"])
    assert p.returncode == 0, p.stderr
    assert torch.load(str(ck), weights_only=False)["step"] == step + 3


def test_checkpoint_loads_into_the_classifier(dump, tmp_path):
    from classifier import NanoTabPFNClassifier
    ck = tmp_path / "m.pt"
    code, _ = run_main("train_optimized", ["--data", dump, "--batch-size", "4", "--steps", "3", *FAST,
                                           "--ckpt", str(ck)])
    assert code == 0
    clf = NanoTabPFNClassifier.from_checkpoint(str(ck))
    import numpy as np
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    clf.fit(X[:20], y[:20])
    proba = clf.predict_proba(X[20:])
    assert proba.shape == (10, 2) and np.allclose(proba.sum(1), 1, atol=1e-5)
    # the inference copy: a third of the file, the same predictions, and no resume from it
    from checkpoint import write_inference_copy
    copy = tmp_path / "m-weights.pt"
    write_inference_copy(str(ck), str(copy))
    assert os.path.getsize(copy) < 0.5 * os.path.getsize(ck)
    same = NanoTabPFNClassifier.from_checkpoint(str(copy)).fit(X[:20], y[:20]).predict_proba(X[20:])
    assert np.array_equal(same, proba)
    code = run_main("train_optimized", ["--data", dump, "--batch-size", "4", "--steps", "5", *FAST, "--ckpt",
                                        str(copy), "--resume"])[0]
    assert code == 2 and os.path.getsize(copy) < 0.5 * os.path.getsize(ck)


def test_ddp_gloo_two_ranks_disjoint_data_identical_parameters(dump, tmp_path):
    rec_path = tmp_path / "ddp.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "train_optimized.py", "--data", dump, "--batch-size", "4", "--steps", "6", "--device", "cpu",
                        "--log-every", "5", "--timing-warmup", "1", "--eval-every", "3",  # rank 0 evaluates mid-run
                        "--record", str(rec_path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads(rec_path.read_text())
    rec = {**rec, **rec["extra"]}
    assert rec["world_size"] == 2 and rec["global_batch"] == 8
    r0, r1 = rec["per_rank"]
    assert r0["param_sha256"] == r1["param_sha256"]                       # identical parameters
    # Disjoint data: rank r's batch k is datasets [8k + 4r, 8k + 4r + 4); compare with a direct read.
    import h5py
    with h5py.File(dump, "r") as f:
        X = f["X"][:]
        nf, nd = f["num_features"][:], f["num_datapoints"][:]
    for rank, fp in ((0, r0["batch_fingerprints"]), (1, r1["batch_fingerprints"])):
        for k, value in enumerate(fp):
            lo = 8 * k + 4 * rank
            want = X[lo:lo + 4, :nd[lo:lo + 4].max(), :nf[lo:lo + 4].max()].astype("float64").sum()
            assert value == pytest.approx(want, rel=1e-9), (rank, k)
    assert r0["batch_fingerprints"] != r1["batch_fingerprints"]
    assert p.stdout.count("done:") == 1  # only rank 0 prints
    assert [e["step"] for e in rec["eval_history"]] == [3, 6]  # evals mid-run did not desync the ranks
    assert rec["eval"] == rec["eval_history"][-1]["scores"]     # the final eval is the one at the last step


def test_ddp_time_budget_and_save_at_land_between_log_points(dump, tmp_path):
    """Under torchrun the ranks plan the steps at which the budget and a --save-at time pass, so both land near
    their time with no log point in the run (before: at the first log point past them, here never)."""
    rec_path, ckpt = tmp_path / "ddp.json", tmp_path / "c.pt"
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "train_optimized.py", "--data", dump, "--batch-size", "4", "--device", "cpu",
                        "--time-budget", "4", "--save-at", "2", "--log-every", "100000", "--no-eval",
                        "--timing-warmup", "0", "--ckpt", str(ckpt), "--record", str(rec_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads(rec_path.read_text())["extra"]
    assert 3.5 <= rec["train_seconds"] < 8 and rec["steps_done"] < 100000
    r0, r1 = rec["per_rank"]
    assert r0["param_sha256"] == r1["param_sha256"]
    saved = torch.load(tmp_path / "c-2s.pt", map_location="cpu", weights_only=False)["train_state"]
    assert 1.5 <= saved["train_seconds"] < 4


@pytest.mark.parametrize("flags", [["--cuda-graphs"], ["--cuda-graphs", "--fused-optimizer", "--async-loss"]])
def test_static_padded_step_matches_the_sliced_step(flags, dump, tmp_path):
    """The --cuda-graphs step (zero-padded buffers, masked attention and loss) computes the same losses
    as the sliced step; on CPU it runs eagerly, on CUDA tests/test_gpu_train.py covers the graph."""
    common = ["--data", dump, "--steps", "8", "--batch-size", "4", "--seed", "2", "--flash", *FAST]
    _, base = run_main("train_optimized", [*common, "--record", str(tmp_path / "a.json")])
    code, rec = run_main("train_optimized", [*common, *flags, "--record", str(tmp_path / "b.json")])
    assert code == 0
    assert rec["losses"] == pytest.approx(base["losses"], rel=1e-4, abs=1e-5)
    assert base["losses"][0] != pytest.approx(base["losses"][-1], abs=1e-3)  # training moved: not vacuous


def test_time_budget_stops_the_run(dump, tmp_path):
    code, rec = run_main("train_optimized", ["--data", dump, "--batch-size", "4", "--time-budget", "2",
                                             "--log-every", "1", "--no-eval", "--timing-warmup", "0",
                                             "--record", str(tmp_path / "t.json")])
    assert code == 0
    assert 2.0 <= rec["train_seconds"] < 30 and rec["steps_done"] >= 1


def test_eval_time_is_not_training_time_when_a_budget_ends_the_run(dump):
    """The clock pauses for evaluation, also on the step where the time budget stops the run."""
    import time as _time
    import train as T
    from loaders import LoaderConfig, make_loader
    from model import NanoTabPFNModel
    from train_config import TrainConfig
    torch.manual_seed(0)
    model = NanoTabPFNModel()
    loader = make_loader(dump, 4, torch.device("cpu"), LoaderConfig())
    config = TrainConfig(batch_size=4, time_budget=3.0, eval_every="1", log_every=2, timing_warmup=0)
    calls = []

    def slow_eval(model, optimizer):   # the first eval takes 6 s, twice the whole budget
        calls.append(1)
        _time.sleep(6.0 if len(calls) == 1 else 0.0)
        return {"roc_auc": 0.5, "acc": 0.5, "balanced_acc": 0.5}

    result = T.train(model, loader, config, eval_fn=slow_eval)
    assert result.eval_history, "the slow eval ran"
    assert 3.0 <= result.train_seconds < 6.0, result.train_seconds   # no 6 s eval counted as training


@pytest.mark.parametrize("flags, expect", [
    (["--flash", "--attention", "flex"], "--cuda-graphs"),
    (["--flash", "--cuda-graphs", "--optimizer", "adamw"], "schedule-free"),
    (["--log-every", "0"], "--log-every"),
    (["--feature-attention", "matmul"], "add --flash"),
    (["--last-layer-target-only"], "add --flash"),
    (["--attention", "flash"], "--amp bf16"),
    (["--attention", "flash", "--amp", "bf16", "--cuda-graphs"], "key mask"),
    (["--attention", "cudnn", "--device", "cpu"], "CUDA kernel"),   # a CPU run: on CUDA it is allowed
    (["--lr", "nan"], "--lr"), (["--lr", "inf"], "--lr"), (["--lr", "-1e-3"], "--lr"), (["--lr", "0"], "--lr"),
    (["--steps", "0"], "--steps"), (["--time-budget", "-5"], "--time-budget"), (["--save-every", "-1"], "--save-every"),
    (["--require-gds"], "--loader bin"), (["--compile-tuning"], "add --compile"),
    (["--embedding-size", "50"], "divisible"), (["--num-layers", "0"], "--num-layers"),
    (["--sf-average-scale", "4"], "--fused-optimizer"), (["--sf-average-scale", "nan"], "--sf-average-scale"),
])
def test_flag_combinations_that_cannot_work_are_refused(flags, expect, dump):
    p = script(["train_optimized.py", "--data", dump, "--steps", "2", "--batch-size", "4", "--no-eval", *flags])
    assert p.returncode == 2 and expect in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr


def test_triton_attention_is_refused_before_any_work_where_it_cannot_run(monkeypatch):
    import train_optimized
    from runtime import UsageError
    args = fill_model_size(train_optimized.build_parser().parse_args(["--attention", "triton", "--amp", "bf16"]))
    monkeypatch.setattr(train_optimized, "triton_kernel_runs", lambda: False)
    with pytest.raises(UsageError, match="needs the triton package"):
        train_optimized.check_flags(args, on_cuda=True)
    monkeypatch.setattr(train_optimized, "triton_kernel_runs", lambda: True)
    train_optimized.check_flags(args, on_cuda=True)                    # where it runs, nothing is refused


def test_model_size_flags_reach_the_model_and_its_checkpoint(dump, tmp_path):
    ck = tmp_path / "m.pt"
    size = dict(embedding_size=48, num_attention_heads=2, mlp_hidden_size=64, num_layers=2)
    flags = [x for k, v in size.items() for x in ("--" + k.replace("_", "-"), str(v))]
    code, rec = run_main("train_optimized", ["--data", dump, "--steps", "2", "--batch-size", "4", *flags,
                                             "--ckpt", str(ck), "--record", str(tmp_path / "r.json"), *FAST])
    assert code == 0
    assert {k: rec["config"]["model"][k] for k in size} == size
    from classifier import model_from_checkpoint
    model = model_from_checkpoint(ck)
    assert model.config.embedding_size == 48 and len(model.transformer_blocks) == 2


def test_notices_only_claim_what_runs(dump, capsys):
    code, _ = run_main("train_optimized", ["--data", dump, "--steps", "2", "--batch-size", "4", "--flash",
                                           "--cuda-graphs", *FAST])
    out = capsys.readouterr().out
    assert code == 0
    assert "--async-loss" not in out                      # not requested: the loss is read every step
    assert "--fused-optimizer" in out and "required by --cuda-graphs" in out


def test_resume_with_another_optimizer_is_a_one_line_error(dump, tmp_path):
    ck = tmp_path / "o.pt"
    common = ["train_optimized.py", "--data", dump, "--batch-size", "4", "--steps", "3", *FAST]
    assert script([*common, "--ckpt", str(ck), "--fused-optimizer"]).returncode == 0
    p = script([*common, "--steps", "5", "--ckpt", str(ck), "--resume"])
    assert p.returncode == 2 and "optimizer" in p.stderr.replace(str(tmp_path), "") and "Traceback" not in p.stderr, \
        p.stderr                                                            # the word, not tmp_path's test name
    # a speed-only switch (--flash, --feature-attention) is not a different model: resuming works
    p = script([*common, "--steps", "5", "--ckpt", str(ck), "--resume", "--fused-optimizer", "--flash",
                "--feature-attention", "matmul"])
    assert p.returncode == 0, p.stderr


def test_eval_copy_leaves_the_kernel_to_pytorch_and_keeps_the_weights():
    """A kernel pinned for the bf16 step (flash has no fp32 kernel) must not reach the fp32 eval."""
    from model import NanoTabPFNModel
    from train import eval_classifier
    model = NanoTabPFNModel(attention="flash")
    copy = eval_classifier(model, model.state_dict(), torch.device("cpu")).model
    assert copy.config.attention == "sdpa" and model.config.attention == "flash"
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), copy.state_dict().values()))
    mha = NanoTabPFNModel()
    assert eval_classifier(mha, mha.state_dict(), torch.device("cpu")).model.config.attention == "mha"


def test_pinned_flash_kernel_trains_and_evaluates(dump, tmp_path):
    common = ["--data", dump, "--steps", "4", "--batch-size", "4", "--seed", "2", "--flash", "--amp", "bf16",
              "--log-every", "2", "--timing-warmup", "1", "--eval-every", "4"]
    _, auto = run_main("train_optimized", [*common, "--record", str(tmp_path / "a.json")])
    code, pinned = run_main("train_optimized", [*common, "--attention", "flash", "--record", str(tmp_path / "p.json")])
    assert code == 0
    assert pinned["losses"] == pytest.approx(auto["losses"], rel=1e-2, abs=1e-3)
    assert pinned["eval"] and "pinned by --attention" in pinned["attention_kernel"]


def test_last_layer_target_only_trains_the_same_losses(dump, tmp_path, capsys):
    common = ["--data", dump, "--steps", "5", "--batch-size", "4", "--seed", "3", "--flash", "--log-every", "5",
              "--timing-warmup", "1", "--no-eval"]
    _, full = run_main("train_optimized", [*common, "--record", str(tmp_path / "f.json")])
    capsys.readouterr()
    code, target = run_main("train_optimized", [*common, "--last-layer-target-only", "--record",
                                                str(tmp_path / "t.json")])
    assert code == 0 and "computes the target column only" in capsys.readouterr().out
    assert target["losses"] == pytest.approx(full["losses"], rel=1e-4)
    assert target["losses"] != pytest.approx([full["losses"][0]] * 5)   # the weights moved: the steps differ


def test_the_start_block_says_the_graphed_ddp_step_runs_under_torchrun():
    import types
    import torch
    import train_optimized
    from model import ModelConfig
    from train_config import TrainConfig
    loader = types.SimpleNamespace(describe=lambda: {"path": "resident-cuda", "loader": "resident", "notes": []})
    for world_size, said in ((1, False), (2, True)):
        session = types.SimpleNamespace(config=TrainConfig(cuda_graphs=True, fused_optimizer=True), world_size=world_size,
                                        model_config=ModelConfig(), device=torch.device("cuda"), loader=loader)
        args = types.SimpleNamespace(loader="resident", pinned=False, streams=False)
        line = next(l for l in train_optimized.optimizations_block(session, args) if "--cuda-graphs" in l)
        assert ("all-reduce runs inside it (graphed DDP step" in line) == said, line


def test_static_features_give_compile_a_concrete_feature_count():
    """With static_features every graph dynamo builds has a fixed feature count (a graph per count)
    while the split stays symbolic; without it the feature count turns symbolic after it changes."""
    import torch._dynamo
    from loaders import Batch
    from model import NanoTabPFNModel
    import train

    def feature_dims(static):
        torch._dynamo.reset()
        dims = []

        def backend(gm, example_inputs):
            for node in gm.graph.nodes:
                value = node.meta.get("example_value")
                if node.op == "placeholder" and isinstance(value, torch.Tensor) and value.dim() == 3:
                    dims.append(value.shape[2])                       # x: (B, R, F)
            return gm.forward

        torch.manual_seed(0)
        model = torch.compile(NanoTabPFNModel(attention="sdpa", feature_attention="broadcast",
                                              embedding_size=16, mlp_hidden_size=16, num_layers=1),
                              backend=backend)
        for features, split in ((5, 9), (5, 11), (4, 10), (5, 12), (4, 13)):
            x, y = torch.randn(2, 20, features), torch.randint(0, 2, (2, 20)).float()
            train.loss_on_batch(model, Batch(x, y, split, False), "off", static_features=static).backward()
        return dims

    static = feature_dims(True)
    assert static and all(isinstance(d, int) for d in static) and {4, 5} <= set(static)
    assert not all(isinstance(d, int) for d in feature_dims(False))   # the test can tell the difference


def test_graphed_step_buffers_are_zero_beyond_every_batch():
    """load() skips the zeroing for a full-size batch; a smaller batch after it must still see zeros
    (not the previous batch) in the padding."""
    from loaders import Batch
    from model import NanoTabPFNModel
    from graphed_step import FusedScheduleFreeAdamW, GraphedTrainStep
    model = NanoTabPFNModel(attention="sdpa", embedding_size=16, mlp_hidden_size=16, num_layers=1)
    optimizer = FusedScheduleFreeAdamW(model.parameters(), lr=1e-3)
    step = GraphedTrainStep(model, optimizer, batch_size=2, rows=10, features=4, device=torch.device("cpu"))
    full = Batch(torch.full((2, 10, 4), 7.0), torch.ones(2, 10), 5, False)
    step.load(full)
    assert (step.x == 7).all() and (step.y == 1).all()
    for rows, features in ((10, 3), (6, 4), (6, 2)):
        step.load(full)
        step.load(Batch(torch.full((2, rows, features), 3.0), torch.full((2, rows), 2.0), 4, False))
        assert (step.x[:, :rows, :features] == 3).all() and (step.y[:, :rows] == 2).all()
        assert step.x.sum() == 3 * 2 * rows * features and step.y.sum() == 2 * 2 * rows
        assert int(step.num_rows) == rows and int(step.num_features) == features and int(step.split) == 4


def test_tensorboard_event_file_holds_the_loss_scalars(dump, tmp_path):
    """--tensorboard writes an event file whose train/loss scalars equal the record's logged losses."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    log_dir = tmp_path / "tb"
    code, rec = run_main("train_optimized", ["--data", dump, "--steps", "6", "--batch-size", "4", "--no-eval",
                                             "--log-every", "2", "--timing-warmup", "0", "--tensorboard", str(log_dir),
                                             "--record", str(tmp_path / "r.json")])
    assert code == 0
    events = EventAccumulator(str(log_dir))
    events.Reload()
    scalars = events.Scalars("train/loss")
    assert [e.step for e in scalars] == [2, 4, 6]
    assert [e.value for e in scalars] == pytest.approx([rec["losses"][i - 1] for i in (2, 4, 6)], rel=1e-6)
    assert {"time/step_ms", "time/data_ms"} <= set(events.Tags()["scalars"])


def test_cpu_run_without_a_schedule_gets_a_short_budget_and_says_so():
    from train import _schedule
    from train_config import CPU_DEFAULT_BUDGET, UPSTREAM_STEPS, TrainConfig
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    config = TrainConfig()
    notices = _schedule(config, cpu)
    assert config.time_budget == CPU_DEFAULT_BUDGET and notices and "--steps" in notices[0]
    config = TrainConfig()
    assert _schedule(config, cuda) == [] and config.steps == UPSTREAM_STEPS and config.time_budget == 0
    config = TrainConfig(steps=7)
    assert _schedule(config, cpu) == [] and config.steps == 7 and config.time_budget == 0   # an explicit choice wins
    config = TrainConfig(time_budget=5.0)
    assert _schedule(config, cpu) == [] and config.time_budget == 5.0


def test_compile_time_is_reported_and_kept_out_of_the_budget():
    from train import Clock
    clock = Clock(budget=10.0)
    clock.exclude(100.0)     # a step that spent 100 s compiling
    assert not clock.over_budget() and clock.compile_seconds == 100.0


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_node_c10d_rendezvous_and_graphed_ddp_step_match_ddp(dump, tmp_path):
    """Two torchrun agents (--nnodes=2, one gloo process each, c10d rendezvous on localhost) train with the
    graphed step's own gradient all-reduce (eager on CPU); losses equal a standalone DDP run's."""
    common = ["train_optimized.py", "--data", dump, "--batch-size", "4", "--steps", "6", "--device", "cpu",
              "--no-eval", "--log-every", "3", "--timing-warmup", "1", "--flash"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = [sys.executable, "-m", "torch.distributed.run"]
    ddp = subprocess.run([*run, "--standalone", "--nproc_per_node=2", *common, "--record", str(tmp_path / "a.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert ddp.returncode == 0, ddp.stderr[-3000:]

    def two_agents():
        port = _free_port()
        agents = [subprocess.Popen([*run, "--nnodes=2", "--nproc_per_node=1", f"--node_rank={i}", "--rdzv_backend=c10d",
                                    f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=test", *common, "--cuda-graphs",
                                    "--record", str(tmp_path / "b.json")], cwd=ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
        outs = [a.communicate(timeout=300) for a in agents]
        if not all(a.returncode == 0 for a in agents):   # whole stderr of both agents: pytest shows captured output
            print(*(f"--- agent {i} (exit {a.returncode}) stderr ---\n{o[1]}" for i, (a, o) in enumerate(zip(agents, outs))))
        return [a.returncode for a in agents], "".join(o[1] for o in outs)

    codes, stderr = two_agents()
    # A worker SIGABRT after the run finished and wrote its record: 2 of 7 full-suite runs, never in 40 runs alone,
    # cause not found (docs/reliability.md). Rerun once; a second failure, no record or wrong losses fail.
    if any(codes) and "SIGABRT" in stderr and (tmp_path / "b.json").exists():
        (tmp_path / "b.json").unlink()
        codes, stderr = two_agents()
    assert not any(codes), codes
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    a, b = {**a, **a["extra"]}, {**b, **b["extra"]}
    assert b["world_size"] == 2 and b["config"]["train"]["cuda_graphs"]
    assert b["per_rank"][0]["param_sha256"] == b["per_rank"][1]["param_sha256"]   # ranks stay identical
    assert b["losses"] == pytest.approx(a["losses"], rel=1e-4, abs=1e-5)             # = DDP's averaged gradients


def test_eval_every_takes_steps_or_seconds():
    from train_config import eval_interval
    assert eval_interval("2000") == (2000, 0.0) and eval_interval("30s") == (0, 30.0) and eval_interval("0") == (0, 0.0)
    for bad in ("-1", "xs", "nan"):
        with pytest.raises(ValueError):
            eval_interval(bad)


@pytest.mark.parametrize("suite, splits", [("real", 1), ("real-all", None)])
def test_eval_suite_real_picks_the_splits_per_task(suite, splits, monkeypatch):
    import evaluation
    asked = []

    def fake_make_suite_eval(splits_per_task):
        asked.append(splits_per_task)
        return lambda classifier: {}
    monkeypatch.setattr(evaluation, "make_suite_eval", fake_make_suite_eval)
    assert callable(evaluation.suite_by_name(suite).reference) and asked == [splits]


def test_prior_transform_flags_train_reproducibly_and_are_checked(dump, tmp_path, capsys):
    common = ["--data", dump, "--steps", "4", "--batch-size", "4", "--log-every", "4", "--timing-warmup", "1",
              "--no-eval", "--missing-cells", "0.5"]
    _, a = run_main("train", [*common, "--record", str(tmp_path / "a.json")])
    _, b = run_main("train", [*common, "--record", str(tmp_path / "b.json")])
    _, off = run_main("train", [*common[:-2], "--record", str(tmp_path / "c.json")])
    assert a["losses"] == b["losses"] and a["losses"] != off["losses"] and a["config"]["train"]["missing_cells"] == 0.5
    _, cat = run_main("train", [*common, "--categorical-columns", "0.5", "--record", str(tmp_path / "d.json")])
    assert "prior: the dump's tables transformed per batch by --categorical-columns 0.5, --missing-cells 0.5" \
        in capsys.readouterr().out
    assert cat["losses"] != a["losses"] and cat["config"]["train"]["categorical_columns"] == 0.5
    _, ordinal = run_main("train", [*common, "--ordinal-columns", "0.5", "--record", str(tmp_path / "e.json")])
    assert ordinal["losses"] != a["losses"] and ordinal["config"]["train"]["ordinal_columns"] == 0.5
    _, skewed = run_main("train", [*common, "--skewed-columns", "0.5", "--record", str(tmp_path / "f.json")])
    assert skewed["losses"] != a["losses"] and skewed["config"]["train"]["skewed_columns"] == 0.5
    _, linear = run_main("train", [*common, "--linear-columns", "1", "--record", str(tmp_path / "g.json")])
    assert linear["losses"] != a["losses"] and linear["config"]["train"]["linear_columns"] == 1.0   # every table
    for flag, bad in (("--missing-cells", "1"), ("--categorical-columns", "1"), ("--ordinal-columns", "1"),
                      ("--skewed-columns", "1"), ("--linear-columns", "1.5")):
        p = script(["train.py", "--data", dump, "--steps", "2", flag, bad])
        assert p.returncode == 2 and flag in p.stderr and p.stderr.count("\n") == 1


def test_model_presets_and_size_flags(dump, tmp_path):
    """--model-preset sets the four size fields; a size flag given as well wins; the checkpoint holds the sizes,
    --feature-embedding with its codes and --feature-encoding periodic with its frequencies, which the classifier
    loads."""
    from classifier import NanoTabPFNClassifier
    from model import MODEL_PRESETS
    from train import build_parser
    args = fill_model_size(build_parser().parse_args(["--model-preset", "small", "--num-layers", "2"]))
    assert (args.embedding_size, args.num_attention_heads, args.num_layers) == (128, 4, 2)
    assert fill_model_size(build_parser().parse_args([])).embedding_size == MODEL_PRESETS["nano"]["embedding_size"]
    assert MODEL_PRESETS["large"]["num_layers"] == 12 and all(
        p["embedding_size"] // p["num_attention_heads"] in (24, 32) for p in MODEL_PRESETS.values())
    ck = tmp_path / "m.pt"
    code, _ = run_main("train_optimized", ["--data", dump, "--steps", "2", "--batch-size", "4", "--no-eval",
                                           "--model-preset", "small", "--num-layers", "1", "--ckpt", str(ck),
                                           "--feature-embedding", "--feature-encoding", "periodic"])
    state = torch.load(str(ck), weights_only=True, map_location="cpu")   # as the classifier does
    config = state["model_config"]
    assert code == 0 and config["embedding_size"] == 128 and config["num_layers"] == 1 and config["feature_embedding"]
    loaded = NanoTabPFNClassifier.from_checkpoint(str(ck)).model
    assert loaded.config.feature_embedding and torch.equal(loaded.column_codes.codes, state["model"]["column_codes.codes"])
    assert config["feature_encoding"] == loaded.config.feature_encoding == "periodic" and torch.equal(
        loaded.feature_encoder.periodic.frequencies, state["model"]["feature_encoder.periodic.frequencies"])


def test_save_at_keeps_the_model_at_each_time_and_needs_a_ckpt(dump, tmp_path, capsys):
    from classifier import NanoTabPFNClassifier
    ck = tmp_path / "run.pt"
    code, _ = run_main("train_optimized", ["--data", dump, "--steps", "6", "--batch-size", "4", "--no-eval",
                                           "--log-every", "4", "--ckpt", str(ck), "--save-at", "1e-9,2e-9"])
    out = capsys.readouterr().out
    assert code == 0 and "(--save-at 1e-09, " in out and "(--save-at 2e-09, " in out
    for path in (tmp_path / "run-1e-09s.pt", tmp_path / "run-2e-09s.pt", ck):
        assert NanoTabPFNClassifier.from_checkpoint(str(path)).model is not None
    steps = [torch.load(str(p), weights_only=True)["step"] for p in (tmp_path / "run-1e-09s.pt", ck)]
    assert steps == [1, 6]             # the first step past the time (not the next log point), and the end
    code, _ = run_main("train_optimized", ["--data", dump, "--steps", "2", "--save-at", "60"])
    assert code == 2 and "--save-at keeps copies of --ckpt" in capsys.readouterr().err
    code, _ = run_main("train_optimized", ["--data", dump, "--time-budget", "30", "--save-at", "10,30",
                                           "--ckpt", str(tmp_path / "late.pt")])
    assert code == 2 and "--save-at 30 is not before --time-budget 30" in capsys.readouterr().err
    code, _ = run_main("train_optimized", ["--data", dump, "--steps", "2", "--batch-size", "4", "--no-eval",
                                           "--save-at", "3600", "--ckpt", str(tmp_path / "short.pt")])
    assert code == 0 and "--save-at 3600: not reached" in capsys.readouterr().out   # said, not silently skipped
    assert not (tmp_path / "short-3600s.pt").exists()
    with pytest.raises(SystemExit) as exit_info:
        run_main("train_optimized", ["--data", dump, "--steps", "2", "--save-at", "-1", "--ckpt", str(ck)])
    assert exit_info.value.code == 2 and "--save-at: '-1' is not seconds > 0" in capsys.readouterr().err


def test_warm_up_needs_the_schedule_free_optimizer(dump, capsys):
    code, _ = run_main("train_optimized", ["--data", dump, "--steps", "2", "--warmup-steps", "3",
                                           "--optimizer", "adamw"])
    err = capsys.readouterr().err
    assert code == 2 and "--warmup-steps is schedule-free's" in err and err.strip().count("\n") == 0, err


def test_the_in_training_eval_stays_fp32_on_every_device():
    """The classifier runs bf16 on a GPU by default; the eval of a training run keeps the fp32 of its records."""
    import train
    from model import ModelConfig, NanoTabPFNModel
    model = NanoTabPFNModel(ModelConfig(embedding_size=16, num_attention_heads=2, mlp_hidden_size=16, num_layers=1))
    classifier = train.eval_classifier(model, model.state_dict(), "cpu")
    assert classifier.autocast == "off" and classifier.model is not model


def test_training_on_the_fly_equals_the_dump_and_resumes_across(tmp_path):
    """--data prior:nano:N trains on the batches of the file prior_dump.py writes for it (--fast picks --loader
    prior), and a run started on the file resumes on the fly: one data identity."""
    import prior_dump
    path = str(tmp_path / "nano.h5")
    prior_dump.write_dump(path, 200, 150, 5, 2, seed=0, device="cpu", progress=False)
    common = ["--fast", "--batch-size", "4", "--seed", "2", "--device", "cpu", *FAST]   # the dump is the CPU's
    _, full = run_main("train_optimized", [*common, "--data", path, "--steps", "8", "--record", str(tmp_path / "a.json")])
    ckpt = str(tmp_path / "c.pt")
    assert run_main("train_optimized", [*common, "--data", path, "--steps", "4", "--ckpt", ckpt])[0] == 0
    code, resumed = run_main("train_optimized", [*common, "--data", "prior:nano:200", "--steps", "8", "--ckpt", ckpt,
                                                 "--resume", "--record", str(tmp_path / "b.json")])
    assert code == 0 and resumed["data_path"] == "prior-cpu" and full["data_path"] == "resident-host"
    assert resumed["losses"] == full["losses"]
