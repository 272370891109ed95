"""Fault injection on the training side: outputs checked before any work, non-finite training stops
without a checkpoint, full disks and kills never leave a partial file, bad checkpoints are refused in one line."""
import os
import random
import resource
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import write_tiny_dump

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUIET = ["--no-eval", "--log-every", "1000", "--timing-warmup", "0", "--batch-size", "4"]


def script(args, timeout=240, **kw):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kw)


def one_line_error(p, code=2):
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and p.stderr.strip().count("\n") == 0 and p.stderr.startswith("error:"), \
        p.stderr[-2000:]
    return p.stderr


@pytest.fixture
def dump(tmp_path):
    return write_tiny_dump(tmp_path / "d.h5", num_datasets=48, rows=40, features=5, seed=3)


def test_outputs_that_would_destroy_inputs_are_refused_before_any_work(dump, tmp_path):
    data_before = open(dump, "rb").read()
    ck = tmp_path / "a.pt"
    err = one_line_error(script(["train_optimized.py", "--data", dump, "--steps", "2", *QUIET,
                                 "--ckpt", str(ck), "--record", str(ck)]))
    assert "same file" in err and not ck.exists()
    err = one_line_error(script(["train.py", "--data", dump, "--steps", "2", *QUIET, "--record", dump]))
    assert "reads" in err and open(dump, "rb").read() == data_before
    x_bin = dump + ".X.bin"
    err = one_line_error(script(["train.py", "--data", dump, "--steps", "2", *QUIET, "--ckpt", x_bin]))
    assert "reads" in err and not os.path.exists(x_bin)


def test_impossible_output_paths_fail_at_start_not_after_training(dump, tmp_path):
    parent_is_file = tmp_path / "file"
    parent_is_file.write_text("x")
    started = time.perf_counter()
    err = one_line_error(script(["train.py", "--data", dump, "--steps", "100000", *QUIET,
                                 "--ckpt", str(parent_is_file / "c.pt")]))
    assert "not a folder" in err and time.perf_counter() - started < 60
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user that writes anywhere (root): the permission case cannot be made")
        err = one_line_error(script(["train.py", "--data", dump, "--steps", "100000", *QUIET,
                                     "--record", str(locked / "r.json")]))
        assert "not writable" in err
    finally:
        locked.chmod(0o700)


def _nan_from(step_index):
    import train
    real, calls = train.loss_on_batch, [0]

    def loss(*a, **k):
        calls[0] += 1
        value = real(*a, **k)
        return value * float("nan") if calls[0] >= step_index else value
    return loss


@pytest.mark.parametrize("flags", [[], ["--async-loss", "--log-every", "3"]])
def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(flags, dump, tmp_path, monkeypatch,
                                                                          capsys):
    import train
    import train_optimized
    ck = tmp_path / "good.pt"
    common = ["--data", dump, *QUIET, "--ckpt", str(ck), *flags]
    assert train_optimized.main([*common, "--steps", "3"]) == 0
    good = ck.read_bytes()
    monkeypatch.setattr(train, "loss_on_batch", _nan_from(2))   # the 5th step of the resumed run is NaN
    code = train_optimized.main([*common, "--steps", "20", "--resume", "--save-every", "1" if not flags else "3"])
    err = capsys.readouterr().err
    assert code == 1 and "nan" in err.lower() and "step 5" in err and err.strip().count("\n") == 0, err
    state = torch.load(str(ck), weights_only=True)
    assert all(torch.isfinite(t).all() for t in state["train_state"]["model"].values())
    if not flags:
        assert state["step"] == 4                      # step 4 was saved; step 5 is the first NaN
    else:
        assert ck.read_bytes() == good                 # the NaN is seen at the first save point: nothing written


def test_resume_with_another_lr_is_refused(dump, tmp_path):
    ck = tmp_path / "c.pt"
    common = ["train_optimized.py", "--data", dump, *QUIET, "--ckpt", str(ck)]
    assert script([*common, "--steps", "2", "--lr", "1e-3"]).returncode == 0
    before = ck.read_bytes()
    err = one_line_error(script([*common, "--steps", "4", "--resume"]))
    assert "--lr" in err and "0.001" in err and ck.read_bytes() == before
    assert script([*common, "--steps", "4", "--resume", "--lr", "1e-3"]).returncode == 0


def test_resume_with_another_seed_is_refused_and_older_checkpoints_still_resume(dump, tmp_path, capsys):
    import train_optimized
    ck = tmp_path / "s.pt"
    common = ["--data", dump, *QUIET, "--ckpt", str(ck), "--categorical-columns", "0.5"]
    assert train_optimized.main([*common, "--steps", "2", "--seed", "1"]) == 0
    before = ck.read_bytes()
    assert train_optimized.main([*common, "--steps", "4", "--resume", "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert "--seed 2 differs from the checkpoint's 1" in err and err.strip().count("\n") == 0, err
    assert ck.read_bytes() == before
    state = torch.load(str(ck), weights_only=True)
    assert set(state["hparams"]) == {"lr", "seed", "missing_cells", "categorical_columns"}
    state["hparams"] = {"lr": state["hparams"]["lr"]}   # as written before the seed was stored
    torch.save(state, str(ck))
    assert train_optimized.main([*common, "--steps", "4", "--resume", "--seed", "2"]) == 0


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ.get("EVIL_MARKER", "/tmp/evil-marker"),))


def test_a_checkpoint_holding_code_is_refused_and_never_run(dump, tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    ck = tmp_path / "evil.pt"
    torch.save({"format": 1, "model": {}, "model_config": {}, "train_state": Evil()}, ck)
    err = one_line_error(script(["train_optimized.py", "--data", dump, *QUIET, "--steps", "2", "--ckpt", str(ck),
                                 "--resume"], env=dict(os.environ, EVIL_MARKER=str(marker))))
    assert "holds code or unknown objects and is refused" in err and "weights_only" not in err
    assert not marker.exists()


def _limit_file_size(limit):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_disk_full_while_saving_is_one_line_and_leaves_no_temp(dump, tmp_path):
    ck = tmp_path / "c.pt"
    p = script(["train_optimized.py", "--data", dump, *QUIET, "--steps", "2", "--ckpt", str(ck)],
               preexec_fn=_limit_file_size(64 * 1024))   # the checkpoint is ~1 MB: the write hits the limit
    err = one_line_error(p, code=1)
    assert "disk full" in err and not ck.exists()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_sigkill_during_checkpoint_writes_never_leaves_a_partial_checkpoint(tmp_path):
    path = write_tiny_dump(tmp_path / "k.h5", num_datasets=64, rows=40, features=5, seed=2)
    ck = tmp_path / "k.pt"
    rng = random.Random(0)
    for trial in range(3):
        proc = subprocess.Popen([sys.executable, "train_optimized.py", "--data", path, *QUIET, "--steps", "100000",
                                 "--save-every", "1", "--ckpt", str(ck), *(["--resume"] if ck.exists() else [])],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not ck.exists() and time.time() < deadline:   # wait for the first save, then kill at a random point
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = torch.load(str(ck), weights_only=True)     # the final name holds a whole checkpoint
        assert state["step"] >= 1
    # The next run cleans the temp files the kills left behind.
    p = script(["train_optimized.py", "--data", path, *QUIET, "--steps", str(state["step"] + 1), "--ckpt", str(ck),
                "--resume"])
    assert p.returncode == 0, p.stderr
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_a_checkpoint_whose_tensors_disagree_with_its_config_is_one_line(dump, tmp_path):
    ck = tmp_path / "c.pt"
    common = ["train_optimized.py", "--data", dump, *QUIET, "--ckpt", str(ck)]
    assert script([*common, "--steps", "2"]).returncode == 0
    state = torch.load(str(ck), weights_only=True)
    name = next(k for k in state["train_state"]["model"] if k.endswith("linear1.weight"))
    state["train_state"]["model"][name] = state["train_state"]["model"][name][:, :-1]   # a wrong shape
    torch.save(state, ck)
    err = one_line_error(script([*common, "--steps", "4", "--resume"]))   # refused at start, naming the tensor
    assert "do not match" in err and f"tensor '{name}' has shape" in err and ck.stat().st_size
