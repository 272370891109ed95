"""Fault injection on the training side: outputs checked before any work, non-finite training stops
without a checkpoint, full disks and kills never leave a partial file, bad checkpoints are refused in one line."""
import json
import os
import random
import re
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
    import re
    from dump_format import batch_position, open_dump
    info, size = open_dump(dump), int(train_optimized.build_parser().parse_args(common).batch_size)
    first = batch_position(4, 0, size, info.num_datasets)                 # step 5 is loader batch 4
    assert f"datasets {first}..{first + size - 1} of {dump}" in err and "keeps the last good checkpoint" in err, err
    assert re.search(r"datasets \d+\.\.\d+ of ", err)
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
    assert set(state["hparams"]) == {"lr", "seed", "warmup_steps", "sf_average_scale", "missing_cells",
                                     "categorical_columns", "ordinal_columns", "skewed_columns", "linear_columns"}
    state["hparams"] = {"lr": state["hparams"]["lr"]}   # as written before the seed was stored
    torch.save(state, str(ck))
    assert train_optimized.main([*common, "--steps", "4", "--resume", "--seed", "2"]) == 0


def test_init_from_starts_a_new_run_from_the_checkpoints_weights_and_refuses_another_model(dump, tmp_path, capsys):
    """--init-from: step 1 runs on the checkpoint's evaluation weights (its first loss is the first run's model's loss
    on that batch, not a fresh model's); another model is one line and nothing is written; --resume reads --ckpt."""
    import train_optimized
    from checkpoint import write_inference_copy
    base, copy, tuned = tmp_path / "base.pt", tmp_path / "weights.pt", tmp_path / "tuned.pt"
    common = ["--data", dump, *QUIET, "--seed", "4"]
    assert train_optimized.main([*common, "--steps", "30", "--lr", "4e-3", "--ckpt", str(base)]) == 0
    write_inference_copy(str(base), str(copy))
    records = {}
    for name, extra in (("fresh", []), ("tuned", ["--init-from", str(copy), "--ckpt", str(tuned)])):
        records[name] = tmp_path / f"{name}.json"
        assert train_optimized.main([*common, "--steps", "3", *extra, "--record", str(records[name])]) == 0
    first = {name: json.loads(path.read_text())["extra"]["losses"][0] for name, path in records.items()}
    assert "init: the model starts from " in capsys.readouterr().out
    assert first["tuned"] < first["fresh"] - 0.05, first           # 30 steps of training show in the first loss
    capsys.readouterr()
    assert train_optimized.main([*common, "--steps", "6", "--init-from", "missing.pt", "--ckpt", str(tuned),
                                 "--resume"]) == 0                  # resume never reads --init-from
    other = tmp_path / "other.pt"
    assert train_optimized.main([*common, "--steps", "2", "--init-from", str(copy), "--embedding-size", "32",
                                 "--ckpt", str(other)]) == 2
    err = capsys.readouterr().err
    assert "is a different model: embedding_size=" in err and err.strip().count("\n") == 0 and not other.exists()
    state = torch.load(copy, weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name][0] = float("nan")
    torch.save(state, copy)
    assert train_optimized.main([*common, "--steps", "2", "--init-from", str(copy), "--ckpt", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"holds non-finite weights ('{name}')" in err and err.strip().count("\n") == 0 and not other.exists()


def test_a_checkpoint_from_before_sf_average_scale_resumes_only_with_scale_1(dump, tmp_path, capsys):
    """Checkpoints written before --sf-average-scale ran with 1: another scale is refused, 1 resumes."""
    import train_optimized
    ck = tmp_path / "a.pt"
    common = ["--data", dump, *QUIET, "--ckpt", str(ck), "--fused-optimizer"]
    assert train_optimized.main([*common, "--steps", "2"]) == 0
    state = torch.load(str(ck), weights_only=True)
    del state["hparams"]["sf_average_scale"]   # as written before the field existed
    for group in state["train_state"]["optimizer"]["param_groups"]:
        del group["average_scale"]
    torch.save(state, str(ck))
    before = ck.read_bytes()
    assert train_optimized.main([*common, "--steps", "4", "--resume", "--sf-average-scale", "10"]) == 2
    assert "--sf-average-scale 10 differs from the checkpoint's 1" in capsys.readouterr().err
    assert ck.read_bytes() == before
    assert train_optimized.main([*common, "--steps", "4", "--resume"]) == 0


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


# ---- The faults of issue #37: a shared checkpoint, data changing under a run, errors mid-run, bad resumes ----

def _main(argv, capsys):
    """train_optimized.main in this process: (exit code, stderr, stdout); stderr must be one `error:` line or
    empty."""
    import train_optimized
    code = train_optimized.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    err = err.rsplit("\r", 1)[-1].strip()   # after a progress bar's last redraw
    assert not err or (err.startswith("error:") and "\n" not in err and "Traceback" not in err), err
    return code, err, out


def _fail_at_call(target, n, make_exc):
    """Wraps `target` (a function) so its n-th call raises make_exc() (or runs it, when it returns None)."""
    calls = [0]

    def wrapped(*a, **k):
        calls[0] += 1
        if calls[0] == n:
            exc = make_exc()
            if exc is not None:
                raise exc
        return target(*a, **k)
    return wrapped


def test_a_second_run_on_a_checkpoint_in_use_is_refused_before_any_work(dump, tmp_path, capsys):
    ck = tmp_path / "same.pt"
    # Another process holds the checkpoint's lock, as a training on the same --ckpt does for its whole length.
    holder = subprocess.Popen([sys.executable, "-c", "import safe_io, sys, time; lock = safe_io.hold_lock(sys.argv[1], "
                               "'--ckpt'); print('held', flush=True); time.sleep(120)", str(ck)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, err, _ = _main(["--data", dump, *QUIET, "--steps", "2", "--ckpt", ck, "--seed", "3"], capsys)
        assert code == 2 and f"in use by another run (pid {holder.pid}" in err and not ck.exists(), err
    finally:
        holder.kill()
        holder.wait()
    # Its holder gone (killed: the kernel dropped its lock), the next run takes the lock and removes it at the end.
    assert _main(["--data", dump, *QUIET, "--steps", "2", "--ckpt", ck], capsys)[0] == 0
    assert ck.exists() and not os.path.exists(f"{ck}.lock")
    assert _main(["--data", dump, *QUIET, "--steps", "3", "--ckpt", ck, "--seed", "3"], capsys)[:2] == (
        2, f"error: --ckpt {ck} exists; pass --resume to continue it or choose another path")


def _truncate_after(path, calls, target):
    return _fail_at_call(target, calls, lambda: os.truncate(path, os.path.getsize(path) // 2))


@pytest.mark.parametrize("loader", ["h5", "bin"])
def test_data_truncated_under_a_running_loader_stops_in_one_line_keeping_a_checkpoint(loader, dump, tmp_path,
                                                                                      monkeypatch, capsys):
    import dump_format
    import loaders
    ck = tmp_path / "c.pt"
    victim = dump if loader == "h5" else dump + ".X.bin"
    if loader == "h5":   # the baseline reads one batch per step: the 4th read finds the dump cut in half
        monkeypatch.setattr(loaders._H5Source, "read", _truncate_after(victim, 4, loaders._H5Source.read))
    else:                # the .bin reader thread: its 4th read of X.bin finds the file cut in half (a memmap: SIGBUS)
        monkeypatch.setattr(dump_format.BinRecords, "read", _truncate_after(victim, 7, dump_format.BinRecords.read))
    code, err, _ = _main(["--data", dump, *QUIET, "--steps", "40", "--ckpt", ck, "--save-every", "1",
                       "--loader", loader], capsys)
    assert code == 1 and victim in err and ("changed on disk" in err or "the file ends first" in err), err
    state = torch.load(str(ck), weights_only=True)
    assert 1 <= state["step"] <= 3 and "written to" in err and len(state["train_state"]["losses"]) == state["step"]
    assert all(torch.isfinite(t).all() for t in state["train_state"]["model"].values())


def test_a_bin_with_bad_labels_and_a_forged_checksum_stops_in_one_line_naming_y_bin(dump, tmp_path, capsys):
    import numpy as np

    import convert_h5
    import dump_format
    convert_h5.convert(dump, progress=False)
    info = dump_format.open_dump(dump)
    x_bin, y_bin, sidecar = dump_format.bin_paths(dump)
    labels = np.fromfile(y_bin, "<f4").reshape(info.num_datasets, -1)
    labels[30, 3] = 7.0                                     # class 7 of a 2-class dump, at dataset 30
    labels.tofile(y_bin)
    meta = json.load(open(sidecar))
    crc = dump_format.BlockChecksum()
    crc.update(open(y_bin, "rb").read())
    meta["checksum"]["y"] = crc.blocks                      # the checksum recomputed: crc32 is no signature
    open(sidecar, "w").write(json.dumps(meta))
    ck = tmp_path / "c.pt"
    code, err, _ = _main(["--data", dump, *QUIET, "--steps", "40", "--ckpt", ck, "--loader", "bin"], capsys)
    assert code == 1 and y_bin in err and "dataset 30 row 3 has 7.0" in err, err
    assert torch.load(str(ck), weights_only=True)["step"] == 30 // 4   # the steps before the bad batch


def test_an_unwritable_record_after_training_is_one_line_and_keeps_the_checkpoint(dump, tmp_path, monkeypatch,
                                                                                  capsys):
    import train
    ck, folder = tmp_path / "c.pt", tmp_path / "records"
    folder.mkdir()

    def folder_becomes_a_file():   # mid-run, after the start-up checks passed
        folder.rmdir()
        folder.write_text("x")
    monkeypatch.setattr(train, "loss_on_batch", _fail_at_call(train.loss_on_batch, 2, folder_becomes_a_file))
    code, err, _ = _main(["--data", dump, *QUIET, "--steps", "3", "--ckpt", ck, "--record", folder / "r.json"],
                         capsys)
    assert code == 1 and err.startswith(f"error: cannot write record {folder / 'r.json'}"), err
    assert torch.load(str(ck), weights_only=True)["step"] == 3


def test_out_of_memory_mid_run_names_the_memory_and_the_flags_that_fit(dump, tmp_path, monkeypatch, capsys):
    import train
    ck = tmp_path / "c.pt"

    def allocate_too_much():   # a real allocator failure (the CPU's words; CUDA's name the size alike)
        torch.empty(2**50, dtype=torch.uint8)
    monkeypatch.setattr(train, "loss_on_batch", _fail_at_call(train.loss_on_batch, 4, allocate_too_much))
    code, err, _ = _main(["--data", dump, *QUIET, "--steps", "10", "--ckpt", ck], capsys)
    assert code == 1 and "out of memory (an allocation of 1.0 PiB failed)" in err, err
    assert "--flash" in err and "--batch-size (e.g. 2)" in err and "step 3" in err
    assert torch.load(str(ck), weights_only=True)["step"] == 3
    import runtime
    cuda_oom = RuntimeError("CUDA out of memory. Tried to allocate 6.44 GiB. GPU 0 has a total capacity of 79.1 GiB")
    assert runtime.memory_error_line(cuda_oom, "sdpa", 1) == (   # --flash already, one table: no flag helps
        "out of memory (an allocation of 6.44 GiB failed); a smaller dump (fewer rows) needs less")
    other = RuntimeError("something else broke")   # not a memory error: a bug, shown as one
    monkeypatch.setattr(train, "loss_on_batch", _fail_at_call(train.loss_on_batch, 1, lambda: other))
    with pytest.raises(RuntimeError, match="something else"):
        _main(["--data", dump, *QUIET, "--steps", "2"], capsys)


def _limit_address_space(limit):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def _import_address_space(env) -> int:
    """Bytes of address space a child of this interpreter reaches importing train.py (a CUDA build maps far more)."""
    p = script(["-c", "import train; print(open('/proc/self/status').read())"], env=env)
    return int(re.search(r"VmPeak:\s+(\d+) kB", p.stdout).group(1)) * 1024


def test_a_real_memory_limit_on_the_baseline_attention_is_one_line(tmp_path):
    path = write_tiny_dump(tmp_path / "long.h5", num_datasets=8, rows=3000, features=3, seed=1, ragged=False)
    # 1.94 GB of address space beyond what importing train.py takes: the (rows x rows) attention scores of
    # --attention mha do not fit (on the 2-core CI machine, where the import takes 0.66 GB, train_optimized.py --flash
    # trains under the same limit). --device cpu and no visible GPU: the limit is on host memory.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    p = script(["train.py", "--data", path, "--steps", "2", "--device", "cpu", *QUIET], env=env,
               preexec_fn=_limit_address_space(_import_address_space(env) + 1_940_000_000))
    err = one_line_error(p, code=1)
    assert re.search(r"out of memory \(an allocation of [\d.]+ [MG]iB failed\); --flash", err), err
    assert "stopped at step 0, no checkpoint written (no --ckpt given)" in err


def test_sigint_without_a_checkpoint_exits_130(dump, monkeypatch, capsys):
    import train
    monkeypatch.setattr(train, "loss_on_batch", _fail_at_call(train.loss_on_batch, 3, KeyboardInterrupt))
    code, _, out = _main(["--data", dump, *QUIET, "--steps", "10"], capsys)
    assert code == 130 and "interrupted at step 2" in out, out


@pytest.mark.parametrize("seed", ["-1", "99999999999", "1.5"])
def test_a_bad_seed_is_refused_at_parse_time_naming_the_flag(seed, capsys):
    import train_optimized
    with pytest.raises(SystemExit) as exit_:
        train_optimized.main(["--data", "/nonexistent.h5", "--seed", seed])   # before the dump is opened
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "--seed" in err and "0..2**32-1" in err and "\n" not in err, err


def test_benchmark_out_is_checked_before_any_run(tmp_path, capsys):
    import benchmark
    (tmp_path / "file.txt").write_text("x")
    started = time.perf_counter()
    code = benchmark.main(["--quick", "--workloads", "upstream", "--out", str(tmp_path / "file.txt" / "x")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "not a folder" in err and "\n" not in err and time.perf_counter() - started < 5, err


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory):
    """A 2-step run's checkpoint and its dump, made once for the resume refusals below."""
    import train_optimized
    folder = tmp_path_factory.mktemp("resume")
    path = write_tiny_dump(folder / "d.h5", num_datasets=48, rows=40, features=5, seed=3)
    assert train_optimized.main(["--data", path, *QUIET, "--steps", "2", "--ckpt", str(folder / "good.pt")]) == 0
    return path, torch.load(str(folder / "good.pt"), weights_only=True)


def _nan_weight(state):
    name = next(k for k, t in state["train_state"]["model"].items() if t.is_floating_point())
    state["train_state"]["model"][name] = state["train_state"]["model"][name] * float("nan")
    return name


CRAFTED = {   # what is done to the checkpoint -> what the one-line refusal must say
    "no data key": (lambda s: s.pop("data"), "lacks 'data'"),
    "NaN weights": (_nan_weight, "holds non-finite weights (train_state.model '{}')"),
    "lr a string": (lambda s: s["hparams"].update(lr="4e-3"), "lr='4e-3' is not a finite number"),
    "negative step": (lambda s: s.update(step=-5), "step is -5, expected an integer >= 0"),
    "step a float": (lambda s: s.update(step=2.0), "'step' is a float, expected int"),
    "negative position": (lambda s: s["train_state"]["loader"].update(consumed=-1), "consumed is -1"),
    "extra tensor": (lambda s: s["train_state"]["model"].update(extra=torch.zeros(1)), "tensor 'extra' is not in"),
    "missing tensor": (lambda s: s["train_state"]["model"].pop("decoder.linear2.bias"),
                       "tensor 'decoder.linear2.bias' is missing"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_checkpoint_is_refused_at_resume_in_one_line(case, good_checkpoint, tmp_path, capsys):
    import copy
    path, good = good_checkpoint
    state = copy.deepcopy(good)
    edit, expected = CRAFTED[case]
    detail = edit(state)
    ck = tmp_path / "c.pt"
    torch.save(state, str(ck))
    before = ck.read_bytes()
    code, err, _ = _main(["--data", path, *QUIET, "--steps", "4", "--ckpt", ck, "--resume"], capsys)
    assert code == 2 and expected.format(detail) in err and str(ck) in err, err
    assert ck.read_bytes() == before


def test_absurd_class_counts_are_refused_in_one_line(tmp_path, capsys):
    import h5py
    path = write_tiny_dump(tmp_path / "d.h5", num_datasets=8, rows=20, features=3)
    with h5py.File(path, "r+") as f:
        f["max_num_classes"][0] = 100000
    code, err, _ = _main(["--data", path, *QUIET, "--steps", "1"], capsys)
    assert code == 2 and "'max_num_classes' is 100000; at most 100 classes" in err, err
