"""Checkpoints: everything needed to continue a run bit for bit, written atomically, read without pickled code."""
import io
import math
import os
import pickle
import pickletools
import random
import re
import signal
import warnings
from dataclasses import asdict

import numpy as np
import torch

from dump_format import metadata_sha256
from graphed_step import inference_state_dict, unwrap
from model import SPEED_ONLY_FIELDS, ModelConfig
from safe_io import write_bytes_atomic

CHECKPOINT_FORMAT = 2   # 2 adds "hparams" (train.RUN_FIELDS; lr only at first) and the dump's content digest to "data"
# RUN_FIELDS added after a value existed in every run: a checkpoint without one ran with this value
ABSENT_MEANS = {"sf_average_scale": 1.0}


class CheckpointError(ValueError):
    """A checkpoint that is unreadable, refused, or does not match this run (one-line message)."""


def read_checkpoint(path) -> dict:
    """torch.load with weights_only=True (pickled code never runs); every bad file is one CheckpointError."""
    path = os.fspath(path)
    problem = ("does not exist" if not os.path.exists(path) else "is not a file" if not os.path.isfile(path)
               else "is empty" if os.path.getsize(path) == 0 else None)
    if problem:
        raise CheckpointError(f"checkpoint {path} {problem}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # torch's notes on pickle protocols are not the user's concern
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a damaged file makes torch.load raise any of a dozen types
        if isinstance(e, pickle.UnpicklingError) and ("global" in str(e).lower() or _names_objects(path)):
            raise CheckpointError(f"checkpoint {path} holds code or unknown objects and is refused "
                                  "(only tensors and plain values are loaded)") from None
        raise CheckpointError(f"checkpoint {path} is not a PyTorch checkpoint, or is corrupt or truncated") from None
    if not isinstance(state, dict) or not isinstance(state.get("model_config"), dict) \
            or not isinstance(state.get("model"), dict):
        found = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"checkpoint {path}: expected a dict with 'model_config' and 'model', found {found}")
    if state.get("format", 1) > CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {state['format']}, newer than this code "
                              f"({CHECKPOINT_FORMAT})")
    return state


def _names_objects(path) -> bool:
    """Whether a raw pickle names a class or function (read with pickletools: nothing is executed)."""
    try:
        with open(path, "rb") as f:
            return any(op.name in ("GLOBAL", "STACK_GLOBAL", "INST", "OBJ") for op, _, _ in pickletools.genops(f))
    except Exception:  # not a pickle at all
        return False


def dump_identity(info, content_digest: str) -> dict:
    """What a checkpoint must match to resume on a dump: shapes, a metadata hash and a values digest."""
    return {"num_datasets": int(info.num_datasets), "rows": int(info.rows), "features": int(info.features),
            "metadata_sha256": metadata_sha256(info.num_features, info.num_datapoints, info.splits)[:16],
            "content": content_digest}


def rng_state() -> dict:
    np_state = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
            "python": random.getstate()}


def set_rng_state(state: dict):
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    random.setstate(tuple(tuple(x) if isinstance(x, list) else x for x in state["python"]))


def save_checkpoint(path: str, model, optimizer, loader, step: int, losses: list, train_seconds: float,
                    meta: dict):
    """Writes `meta` (model_config, data, optimizer, global_batch, hparams), the inference weights ("model") and
    everything resume needs ("train_state"), atomically."""
    weights = unwrap(model).state_dict()
    # One host sync per save: a checkpoint must never hold NaN/inf, the last good one stays instead.
    if not torch.stack([t.isfinite().all() for t in weights.values() if t.is_floating_point()]).all():
        raise CheckpointError(f"parameters are not finite at step {step}; {path} keeps the last good checkpoint")
    state = {"format": CHECKPOINT_FORMAT, **meta, "model": inference_state_dict(model, optimizer), "step": step,
             "train_state": {"model": weights, "optimizer": optimizer.state_dict(), "loader": loader.state_dict(),
                             "rng": rng_state(), "losses": list(losses), "train_seconds": train_seconds}}
    buffer = io.BytesIO()
    torch.save(state, buffer)   # serialised in memory: torch's writer hides disk-full errors as RuntimeError
    write_bytes_atomic(path, buffer.getbuffer(), "checkpoint")


def write_inference_copy(path, out) -> None:
    """`path` without its resume state ("train_state", about two thirds of the file) to `out`, atomically: the model
    that NanoTabPFNClassifier and quality.py read, as a file to keep or ship. Resuming from it is refused."""
    state = read_checkpoint(path)
    state.pop("train_state", None)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_bytes_atomic(out, buffer.getbuffer(), "checkpoint")


# What --resume reads, and its type: a file missing one, or holding another type, is refused before any work.
RESUME_KEYS = {"data": dict, "global_batch": int, "optimizer": str, "step": int, "train_state": dict}
TRAIN_STATE_KEYS = {"model": dict, "optimizer": dict, "loader": dict, "rng": dict, "losses": list,
                    "train_seconds": float}


def _is(value, kind) -> bool:
    """isinstance where a bool is no number and an int is a float."""
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, (int, float) if kind is float else kind)


def _check_types(path, where: str, given: dict, expected: dict) -> None:
    for key, kind in expected.items():
        if key not in given:
            raise CheckpointError(f"checkpoint {path} lacks {where}'{key}' (not written by train.py, or damaged); "
                                  "it cannot be resumed")
        if not _is(given[key], kind):
            raise CheckpointError(f"checkpoint {path}: {where}'{key}' is a {type(given[key]).__name__}, expected "
                                  f"{kind.__name__}; it cannot be resumed")


def check_resumable(path, state: dict) -> None:
    """The checks classifier.model_from_checkpoint makes, for a training state: keys and their types, step and
    loader position >= 0, numeric hparams and losses, finite weights. CheckpointError (one line) otherwise."""
    if "train_state" not in state:
        raise CheckpointError(f"checkpoint {path} holds weights only (no training state to resume)")
    _check_types(path, "", state, RESUME_KEYS)
    train_state = state["train_state"]
    _check_types(path, "train_state.", train_state, TRAIN_STATE_KEYS)
    consumed = train_state["loader"].get("consumed")
    for what, value in (("step", state["step"]), ("train_state.loader.consumed", consumed),
                        ("global_batch", state["global_batch"] - 1)):
        if not _is(value, int) or value < 0:
            raise CheckpointError(f"checkpoint {path}: {what} is {value!r}, expected an integer >= "
                                  f"{1 if what == 'global_batch' else 0}")
    hparams = state.get("hparams", {})
    bad = [f"{k}={v!r}" for k, v in (hparams.items() if isinstance(hparams, dict) else [("hparams", hparams)])
           if not _is(v, float) or not np.isfinite(v)]
    bad += [f"losses[{i}]={v!r}" for i, v in enumerate(train_state["losses"]) if not _is(v, float)][:1]
    if bad:
        raise CheckpointError(f"checkpoint {path}: {bad[0]} is not a finite number; it cannot be resumed")
    for where in ("model", "train_state.model"):
        weights = state["model"] if where == "model" else train_state["model"]
        for name, t in weights.items():
            if not isinstance(t, torch.Tensor):
                raise CheckpointError(f"checkpoint {path}: {where} '{name}' is a {type(t).__name__}, not a tensor")
        bad = first_non_finite(weights)
        if bad is not None:
            raise CheckpointError(f"checkpoint {path} holds non-finite weights ({where} '{bad}'); it cannot be resumed")


def first_non_finite(weights: dict) -> str | None:
    """The name of the first floating-point tensor of a state dict that holds NaN or inf; None when all are finite."""
    return next((name for name, t in weights.items() if t.is_floating_point() and not bool(t.isfinite().all())), None)


def check_tensors(path, expected: dict, given: dict) -> None:
    """CheckpointError naming the first tensor of `given` (a state dict) missing, extra, or of another shape or
    dtype than in `expected` (the state dict of the model this run built)."""
    for name, t in expected.items():
        other = given.get(name)
        problem = ("is missing" if other is None else
                   f"has shape {tuple(other.shape)}, this model {tuple(t.shape)}" if other.shape != t.shape else
                   f"has dtype {other.dtype}, this model {t.dtype}" if other.dtype != t.dtype else None)
        if problem:
            raise CheckpointError(f"checkpoint {path}: its tensors do not match its model_config (tensor '{name}' "
                                  f"{problem})")
    extra = sorted(set(given) - set(expected))
    if extra:
        raise CheckpointError(f"checkpoint {path}: its tensors do not match its model_config (tensor "
                              f"'{extra[0]}' is not in this model)")


def model_differences(stored: dict, current: dict) -> list:
    """'field=stored (this run: current)' for each field that changes the math and differs; a field older
    checkpoints lack takes its default."""
    default = asdict(ModelConfig())
    return [f"{k}={stored.get(k, default[k])!r} (this run: {v!r})" for k, v in current.items()
            if k not in SPEED_ONLY_FIELDS and stored.get(k, default[k]) != v]


def plain_names(weights: dict) -> dict:
    """A state dict without torch.compile's "_orig_mod." and DDP's "module." name prefixes."""
    return {re.sub(r"^(_orig_mod\.|module\.)+", "", k): v for k, v in weights.items()}


def load_weights(path: str, model) -> None:
    """--init-from: `model` takes the weights a checkpoint evaluates with ("model": schedule-free's average; an
    inference copy will do). The fields that change the math must match; CheckpointError (one line) otherwise."""
    state, model = read_checkpoint(path), unwrap(model)
    diff = model_differences(state["model_config"], asdict(model.config))
    if diff:
        raise CheckpointError(f"--init-from {path} is a different model: {', '.join(diff)}")
    weights = plain_names(state["model"])
    check_tensors(path, model.state_dict(), weights)
    bad = first_non_finite(weights)
    if bad is not None:
        raise CheckpointError(f"--init-from {path} holds non-finite weights ('{bad}')")
    model.load_state_dict(weights)


def load_checkpoint(path: str, meta: dict) -> dict:
    """Reads a checkpoint, checks it can be resumed (check_resumable) and matches this run (`meta` as
    save_checkpoint takes it)."""
    state = read_checkpoint(path)
    check_resumable(path, state)
    diff = model_differences(state["model_config"], meta["model_config"])
    if diff:
        raise CheckpointError(f"checkpoint {path} is for a different model: {', '.join(diff)}")
    if state.get("optimizer") != meta["optimizer"]:
        raise CheckpointError(f"checkpoint {path} was trained with optimizer {state.get('optimizer')}, this run "
                              f"uses {meta['optimizer']}: its state cannot continue in another optimizer")
    stored_data = state["data"]
    if any(stored_data[k] != v for k, v in meta["data"].items() if k in stored_data):
        raise CheckpointError(f"checkpoint {path} was trained on a different dump: {stored_data} "
                              f"(this run: {meta['data']})")
    if state["global_batch"] != meta["global_batch"]:
        raise CheckpointError(f"checkpoint {path} used a global batch of {state['global_batch']} datasets "
                              f"(batch x ranks), this run {meta['global_batch']}: resume with the same batch "
                              "size and number of ranks")
    stored = {**ABSENT_MEANS, **state.get("hparams", {})}   # older checkpoints store some fields: those are checked
    for name, value in meta["hparams"].items():
        if name in stored and stored[name] != value:
            # Refused, not applied: resume promises the run the checkpoint started, bit for bit.
            flag = "--" + name.replace("_", "-")   # both numbers: check_resumable made sure
            raise CheckpointError(f"{flag} {value:g} differs from the checkpoint's {stored[name]:g}; --resume "
                                  f"continues that run exactly, so pass {flag} {stored[name]:g} (or start a new run)")
    return state


class StopRequest:
    """Turns SIGINT/SIGTERM into a flag checked at step boundaries, so the run can checkpoint first."""

    def __init__(self, enabled: bool):
        self.requested, self.enabled, self.previous = None, enabled, {}

    def __enter__(self):
        if self.enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def save_times(text: str) -> list | None:
    """--save-at's seconds, ascending ([] for ""); None when malformed."""
    try:
        times = sorted(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        return None
    return times if all(0 < t < math.inf for t in times) else None


def save_at_path(ckpt: str, seconds: float) -> str:
    """Where --save-at keeps the model at `seconds` of training: <ckpt stem>-<seconds>s<ext>."""
    stem, ext = os.path.splitext(ckpt)
    return f"{stem}-{seconds:g}s{ext or '.pt'}"
