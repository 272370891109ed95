"""The blog's baseline nanoTabPFN training loop, and the shared `train()` every script runs.

Baseline, as upstream (automl/nanoTabPFN train.py) has it: an h5py read per step, a synchronous
`.to(device)`, `loss.item()` every step, grad clipping at 1.0, schedule-free AdamW at lr 4e-3.
`train_optimized.py` calls the same `train()` with a different loader and config; with every
optimization off it is exactly this loop (tests/test_train.py compares the loss sequences).

    python train.py                          # small default dump under data/, CPU or GPU
    python train.py --data dump.h5 --steps 2500 --profile
"""
import argparse
import dataclasses
import math
import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from loaders import DumpError, make_loader, metadata_sha256, open_dump
from model import ModelConfig, NanoTabPFNClassifier, NanoTabPFNModel, padded_test_row_mask
from profile_utils import StepTimer, TrainingProfiler, diagnose


@dataclass
class TrainConfig:
    steps: int = 2500
    batch_size: int = 32
    lr: float = 4e-3
    seed: int = 0
    device: str = "auto"
    optimizer: str = "schedulefree"   # "schedulefree" (upstream) or "adamw" (torch.optim.AdamW)
    grad_clip: float = 1.0
    eval_every: int = 0               # evaluate on the sklearn suite every N steps (0: only at the end)
    log_every: int = 25               # one log line every N steps
    timing_warmup: int = 5            # steps excluded from the timing statistics
    sync_every_step: bool = True      # upstream reads loss.item() every step (a host-device sync)
    amp: str = "off"                  # "off" or "bf16": autocast the forward, loss and master weights fp32
    time_budget: float = 0.0          # seconds of training (clock paused during eval); 0: use --steps
    profile: bool = False
    profile_dir: str = "runs/profile"
    quiet: bool = False
    fused_optimizer: bool = False     # schedule-free AdamW as device-scalar foreach kernels (graph-safe)
    compile: bool = False             # torch.compile the model (dynamic shapes: split and widths vary)
    cuda_graphs: bool = False         # capture forward+backward+optimizer in one CUDA graph (static shapes)
    pad_rows: int = 0                 # static shape for --cuda-graphs: the dump's stored rows ...
    pad_features: int = 0             # ... and features
    ckpt: str = ""                    # checkpoint path ('' = none)
    save_every: int = 0               # checkpoint every N steps (0: only at the end / on a signal)


@dataclass
class TrainResult:
    model: torch.nn.Module
    losses: list                      # loss of every step, in order
    timing: dict                      # StepTimer.summary()
    eval_history: list = field(default_factory=list)   # [{"step", "train_seconds", "scores"}]
    steps_done: int = 0
    train_seconds: float = 0.0
    diagnosis: str = ""
    profile_tables: str = ""
    peak_memory_bytes: int = 0
    stopped_by: object = None         # signal name when SIGINT/SIGTERM ended the run
    batch_fingerprints: list = field(default_factory=list)
    step_times_ms: list = field(default_factory=list)   # every timed step, for pooled percentiles


def set_seed(seed: int):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available on this machine")
    return device


def make_optimizer(model: torch.nn.Module, config: TrainConfig):
    if config.optimizer == "schedulefree" and config.fused_optimizer:
        return FusedScheduleFreeAdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    if config.optimizer == "schedulefree":
        import schedulefree  # lazily: only the schedule-free path needs it
        return schedulefree.AdamWScheduleFree(model.parameters(), lr=config.lr, weight_decay=0.0)
    if config.optimizer == "adamw":
        fused = next(model.parameters()).is_cuda  # one kernel for the whole update on CUDA
        return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0, fused=fused)
    raise ValueError(f"unknown optimizer {config.optimizer!r} (choose schedulefree or adamw)")


class FusedScheduleFreeAdamW(torch.optim.Optimizer):
    """Schedule-free AdamW with every per-step scalar in a device tensor: no host arithmetic per step.

    Same math as schedulefree.AdamWScheduleFree(lr, weight_decay) with its defaults (no warm-up,
    r=0, weight_lr_power=2), for which the averaging weight ckp1 = weight/weight_sum is 1/(k+1).
    The package computes ckp1 and the bias correction as Python floats each step, which a CUDA graph
    would freeze at their capture-time values; here they are computed on the device from a step
    tensor, so the whole update can be captured and replayed (--cuda-graphs), and it runs as a few
    multi-tensor (foreach) kernels. tests/test_train.py checks it against the package.
    """

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        # capturable=True: Optimizer.load_state_dict then keeps each 'step' tensor on its parameter's
        # device (otherwise a resumed step counter lands on the CPU, outside any CUDA graph).
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, train_mode=True,
                                      capturable=True))
        for group in self.param_groups:  # state allocated up front: graph capture needs it to exist
            for p in group["params"]:
                self.state[p].update(z=p.detach().clone(), exp_avg_sq=torch.zeros_like(p),
                                     step=torch.zeros((), dtype=torch.float32, device=p.device))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            if not group["train_mode"]:
                raise RuntimeError("optimizer.step() in eval mode: call optimizer.train() first")
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            states = [self.state[p] for p in params]
            ys, grads = params, [p.grad for p in params]
            zs, sqs = [s["z"] for s in states], [s["exp_avg_sq"] for s in states]
            torch._foreach_add_([s["step"] for s in states], 1.0)
            k = states[0]["step"]                                   # (), k+1 in the package's notation
            ckp1 = 1.0 / k                                          # weight / weight_sum
            bias_correction2 = 1.0 - torch.pow(beta2, k)
            torch._foreach_mul_(sqs, beta2)
            torch._foreach_addcmul_(sqs, grads, grads, value=1 - beta2)
            denom = torch._foreach_mul(sqs, 1.0 / bias_correction2)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, eps)
            normed = torch._foreach_div(grads, denom)
            if group["weight_decay"]:
                torch._foreach_add_(normed, ys, alpha=group["weight_decay"])
            # y <- y + ckp1 * (z - y) + lr * (beta1 * (1 - ckp1) - 1) * g   (the package's lerp + add)
            towards_z = torch._foreach_sub(zs, ys)
            torch._foreach_mul_(towards_z, ckp1)
            torch._foreach_add_(ys, towards_z)
            step_y = torch._foreach_mul(normed, lr * (beta1 * (1.0 - ckp1) - 1.0))
            torch._foreach_add_(ys, step_y)
            torch._foreach_add_(zs, normed, alpha=-lr)            # z <- z - lr * g
        return None

    @torch.no_grad()
    def _swap(self, to_train: bool):
        for group in self.param_groups:
            if group["train_mode"] != to_train:
                beta1 = group["betas"][0]
                weight = (1 - beta1) if to_train else (1 - 1 / beta1)
                for p in group["params"]:
                    p.lerp_(self.state[p]["z"], weight)
                group["train_mode"] = to_train

    def train(self):
        self._swap(True)

    def eval(self):
        self._swap(False)


def set_optimizer_mode(optimizer, training: bool):
    # Schedule-free AdamW keeps two weight sequences; .train()/.eval() swaps which one the model holds.
    if hasattr(optimizer, "train"):
        optimizer.train() if training else optimizer.eval()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The NanoTabPFNModel inside DistributedDataParallel / torch.compile wrappers."""
    model = getattr(model, "module", model)          # DDP
    return getattr(model, "_orig_mod", model)       # torch.compile


def eval_copy(model: torch.nn.Module, state_dict: dict) -> NanoTabPFNModel:
    """A separate eval model holding state_dict, with the SDPA kernel left to PyTorch's dispatcher.

    Eval runs in fp32 without autocast, where a kernel pinned for the bf16 training step
    (ModelConfig.sdpa_backend="flash") has no fp32 variant; the kernel choice never changes the math.
    """
    config = dataclasses.replace(unwrap(model).config, sdpa_backend="auto")
    device = next(unwrap(model).parameters()).device
    eval_model = NanoTabPFNModel(config).to(device)
    eval_model.load_state_dict(state_dict)
    return eval_model


@torch.no_grad()
def inference_state_dict(model: torch.nn.Module, optimizer) -> dict:
    """The weights to evaluate with, computed out of place so training state is untouched.

    Schedule-free AdamW trains at y and evaluates at x = lerp(y, z, 1 - 1/beta1) (its .eval());
    swapping in place and back is not bit-exact in floating point, which would make an eval or a
    checkpoint perturb training. For torch AdamW the weights are the model's own.
    """
    model = unwrap(model)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if not hasattr(optimizer, "train"):
        return state
    for name, p in model.named_parameters():
        for group in optimizer.param_groups:
            if group.get("train_mode", True) and "z" in optimizer.state.get(p, {}):
                beta1 = group["betas"][0]
                state[name] = torch.lerp(p.detach(), optimizer.state[p]["z"], 1 - 1 / beta1)
    return state


# torch.compile keeps the feature count static (one graph per count, so Inductor's kernels reduce over a
# row's C cells with a fixed size) while a dump has at most this many features; above it, a graph per count
# would run into dynamo's recompile limit (8), so the count stays a dynamic dimension. H200, blog workload
# with the broadcast feature attention: 25.7 ms/step static vs 28.8 ms dynamic.
STATIC_FEATURE_COUNTS_MAX = 6


def loss_on_batch(model, batch, amp: str, static_features: bool = False):
    """Cross-entropy of the test rows given the train rows, as upstream computes it.

    Args:
        batch: loaders.Batch with x (B, R, F), y (B, R) class indices as float, split S.
        static_features: mark x's feature dimension static for torch.compile (a graph per feature count;
            the split and row count stay dynamic). No effect without compile.
    Returns:
        scalar fp32 loss over the B*(R-S) test cells.
    """
    if static_features:
        from torch._dynamo import mark_static  # loaded by torch.compile already
        mark_static(batch.x, 2)
    split = batch.split
    with torch.autocast(batch.x.device.type, dtype=torch.bfloat16, enabled=(amp == "bf16")):
        logits = model((batch.x, batch.y[:, :split]), train_test_split_index=split)  # (B, R-S, O)
    targets = batch.y[:, split:].reshape(-1).long()                                   # (B*(R-S),)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets)


class GraphedTrainStep:
    """The whole training step (static-shape forward, masked loss, backward, clipping, optimizer)
    captured once as a CUDA graph and replayed: one launch instead of hundreds per step.

    A graph needs fixed shapes and addresses, but the split and the batch's rows/features vary, so
    each batch is copied into zero-padded static buffers (B, R_max, F_max) and the model's
    forward_padded masks the padding; the split and sizes are device tensors, so a new value is a
    new buffer content, not a new graph. The loss is the baseline's mean over the real test cells
    [split, num_rows) of every dataset (tests check it equals the sliced step). The first steps run
    eagerly on a side stream (CUDA graphs require warm-up there), then one capture and replays.
    Without CUDA the same padded step runs eagerly, so CPU tests cover its arithmetic.
    """

    WARMUP_STEPS = 3

    def __init__(self, model, optimizer, config: "TrainConfig", batch_size: int, rows: int, features: int,
                 device: torch.device):
        if not isinstance(optimizer, FusedScheduleFreeAdamW):
            # schedulefree's step computes its scalars in Python: a graph would freeze them at capture.
            raise ValueError("--cuda-graphs needs the graph-safe optimizer (--fused-optimizer, schedule-free)")
        self.model, self.optimizer, self.config, self.device = model, optimizer, config, device
        self.x = torch.zeros(batch_size, rows, features, device=device)      # (B, R_max, F_max)
        self.y = torch.zeros(batch_size, rows, device=device)                # (B, R_max)
        self.split, self.num_rows, self.num_features = (torch.ones((), dtype=torch.long, device=device)
                                                        for _ in range(3))
        self.use_graph = device.type == "cuda"
        self.graph, self.static_loss, self.eager_steps = None, None, 0
        forward = unwrap(model).forward_padded
        self.forward = torch.compile(forward, dynamic=False) if config.compile else forward

    def load(self, batch):
        """Copies a batch into the static buffers (device-to-device), zero padding where it is smaller."""
        b, r, f = batch.x.shape
        rows_max, features_max = self.x.shape[1:]
        # Zeros only where the batch leaves padding: a full-size batch (the common case, e.g. every batch
        # of a dump without ragged rows) overwrites the buffers, and 2 of the 7 small kernels of this
        # data phase are saved (H200, upstream workload: ~1% of a 2 ms step).
        if r < rows_max or f < features_max:
            self.x.zero_()
        self.x[:, :r, :f].copy_(batch.x)
        if r < rows_max:
            self.y.zero_()
        self.y[:, :r].copy_(batch.y)
        self.split.fill_(batch.split)
        self.num_rows.fill_(r)
        self.num_features.fill_(f)

    def _body(self):
        # cache_enabled=False: autocast's weight-cast cache would hold tensors from outside the graph.
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=(self.config.amp == "bf16"),
                            cache_enabled=False):
            logits = self.forward(self.x, self.y, self.split, self.num_rows, self.num_features)  # (B, R, O)
        batch_size, rows, outputs = logits.shape
        test = padded_test_row_mask(rows, self.split, self.num_rows).to(torch.float32)      # (R,)
        cells = F.cross_entropy(logits.float().reshape(-1, outputs), self.y.long().reshape(-1),
                                reduction="none").view(batch_size, rows)                     # (B, R)
        loss = (cells * test).sum() / (test.sum() * batch_size)   # mean over real test cells, as sliced
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        return loss.detach()

    def run(self) -> torch.Tensor:
        """One training step on the loaded batch; returns its loss (a device tensor)."""
        if not self.use_graph:
            self.optimizer.zero_grad(set_to_none=True)
            return self._body()
        if self.eager_steps < self.WARMUP_STEPS:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))  # the buffers were filled on the main stream
            with torch.cuda.stream(side):
                self.optimizer.zero_grad(set_to_none=True)
                loss = self._body()
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.eager_steps += 1
            return loss
        if self.graph is None:
            # Grads set to None before capture: backward then writes (not accumulates) them from the
            # graph's own pool, so a replay needs no zero_grad.
            self.optimizer.zero_grad(set_to_none=True)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_loss = self._body()
        self.graph.replay()
        return self.static_loss.clone()  # the next replay overwrites static_loss


# ---------------------------------------------------------------------------------------------
# Checkpoints: everything needed to continue bit for bit, written atomically.

CHECKPOINT_FORMAT = 1
# Model fields that change how the same function is computed, not the parameters: a checkpoint
# trained with one setting resumes with another.
SPEED_ONLY_MODEL_FIELDS = ("attention", "feature_attention", "padded_attention", "checkpoint", "sdpa_backend")


class CheckpointError(ValueError):
    """A checkpoint that is corrupt, truncated or does not match this run (one-line message)."""


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
    """Writes model, optimizer (schedule-free state included), loader position, RNG and step.

    Temp name in the same folder, fsync, then os.replace: the previous checkpoint stays whole until
    the new one is. "model" holds the inference weights (what NanoTabPFNClassifier.from_checkpoint
    loads); "train_state" holds what resuming needs.
    """
    state = {"format": CHECKPOINT_FORMAT, "model_config": meta["model_config"],
             "model": inference_state_dict(model, optimizer), "data": meta["data"], "optimizer": meta["optimizer"],
             "global_batch": meta["global_batch"], "step": step,
             "train_state": {"model": unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
                             "loader": loader.state_dict(), "rng": rng_state(), "losses": list(losses),
                             "train_seconds": train_seconds}}
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_checkpoint(path: str, meta: dict) -> dict:
    """Reads and checks a checkpoint against this run; raises CheckpointError naming any mismatch."""
    if not os.path.exists(path):
        raise CheckpointError(f"--resume: checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # no pickle code execution
    except Exception as e:  # torch raises many types for a damaged zip/pickle
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else 'unreadable'})") from None
    if not isinstance(state, dict) or "train_state" not in state or "format" not in state:
        raise CheckpointError(f"checkpoint {path} is not a nanoTabPFN training checkpoint")
    if state["format"] > CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {state['format']}, newer than this code "
                              f"({CHECKPOINT_FORMAT})")
    diff = [f"{k}={state['model_config'].get(k)!r} (this run: {v!r})"
            for k, v in meta["model_config"].items()
            if k not in SPEED_ONLY_MODEL_FIELDS and state["model_config"].get(k) != v]
    if diff:
        raise CheckpointError(f"checkpoint {path} is for a different model: {', '.join(diff)}")
    if state.get("optimizer") != meta["optimizer"]:
        raise CheckpointError(f"checkpoint {path} was trained with optimizer {state.get('optimizer')}, this run "
                              f"uses {meta['optimizer']}: its state cannot continue in another optimizer")
    if state["data"] != meta["data"]:
        raise CheckpointError(f"checkpoint {path} was trained on a different dump: {state['data']} "
                              f"(this run: {meta['data']})")
    if state["global_batch"] != meta["global_batch"]:
        raise CheckpointError(f"checkpoint {path} used a global batch of {state['global_batch']} datasets,"
                              f" this run {meta['global_batch']}: the loader position would not match")
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


def distributed_rank_world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train(model: torch.nn.Module, loader, config: TrainConfig, eval_fn=None, checkpoint_meta=None,
          resume_state=None) -> TrainResult:
    """Trains `model` on batches from `loader` (an iterator of loaders.Batch).

    Every step is timed from the request for the batch to the end of the optimizer step, so the
    data fetch and its host-to-device copy are inside the clock. eval_fn(classifier) -> scores runs
    every `config.eval_every` steps with the clock paused, on rank 0 only. With config.ckpt set, a
    checkpoint is written every `config.save_every` steps, at the end, and on SIGINT/SIGTERM;
    resume_state (from load_checkpoint) continues a run exactly. Returns a TrainResult.
    """
    device = next(model.parameters()).device
    rank, world_size = distributed_rank_world()
    optimizer = make_optimizer(model, config)
    graphed = None
    if config.cuda_graphs:
        graphed = GraphedTrainStep(model, optimizer, config, config.batch_size, config.pad_rows,
                                   config.pad_features, device)
    phases = ("data", "step") if graphed else ("data", "forward", "backward", "optimizer")
    static_features = config.compile and 0 < config.pad_features <= STATIC_FEATURE_COUNTS_MAX
    timer = StepTimer(device, warmup_steps=config.timing_warmup, phases=phases,
                      compute_phases=("step",) if graphed else None)
    # The profiled window starts after the timing warm-up, so compilation, recompiles and graph capture
    # (all in the first steps) stay out of the tables, as they stay out of the step timer.
    profiler = (TrainingProfiler(device, out_dir=config.profile_dir, wait=max(1, config.timing_warmup))
                if config.profile else None)
    log = print if (rank == 0 and not config.quiet) else (lambda *a: None)
    model.train()
    set_optimizer_mode(optimizer, True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    losses, eval_history = [], []
    pending = []            # loss tensors not yet read back when sync_every_step is off
    fingerprints = []       # sums of the first batches' x: lets tests see which data each rank got
    train_seconds, step = 0.0, 0
    if resume_state is not None:
        train_state = resume_state["train_state"]
        unwrap(model).load_state_dict(train_state["model"])
        optimizer.load_state_dict(train_state["optimizer"])
        set_rng_state(train_state["rng"])
        losses, train_seconds, step = list(train_state["losses"]), train_state["train_seconds"], resume_state["step"]
        log(f"resumed from {config.ckpt} at step {step}")

    def read_back():
        # One host-device sync for all pending losses (the fast path reads them every log_every steps);
        # under DDP the logged loss is the mean over ranks.
        if pending:
            values = torch.stack(pending).float()
            if world_size > 1:
                dist.all_reduce(values)
                values /= world_size
            losses.extend(values.cpu().tolist())
            pending.clear()

    def run_eval():
        return eval_fn(NanoTabPFNClassifier(eval_copy(model, inference_state_dict(model, optimizer)), device))

    def save(reason: str):
        if config.ckpt and rank == 0:
            save_checkpoint(config.ckpt, model, optimizer, loader, step, losses, train_seconds, checkpoint_meta)
            log(f"checkpoint: step {step} written to {config.ckpt} ({reason})")

    it = iter(loader)
    stop = StopRequest(enabled=bool(config.ckpt))
    if profiler:
        profiler.__enter__()
    clock = time.perf_counter()
    try:
        with stop:
            while True:
                if config.time_budget <= 0 and step >= config.steps:
                    break  # with a time budget the run ends at a check point below instead
                timer.start_step()
                with timer.phase("data"):
                    batch = next(it)
                    if graphed is not None:
                        graphed.load(batch)  # into the static buffers: part of moving the data
                if len(fingerprints) < 4:
                    fingerprints.append(batch.x.double().sum())  # kept on device: no sync on the hot path
                if graphed is not None:
                    with timer.phase("step"):
                        loss = graphed.run()
                        if config.sync_every_step and world_size == 1:
                            losses.append(loss.item())
                        else:
                            pending.append(loss)
                else:
                    with timer.phase("forward"):
                        loss = loss_on_batch(model, batch, config.amp, static_features)
                    with timer.phase("backward"):
                        loss.backward()
                        if config.sync_every_step and world_size == 1:
                            losses.append(loss.item())  # upstream's per-step read: the host waits for the GPU
                        else:
                            pending.append(loss.detach())
                    with timer.phase("optimizer"):
                        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                timer.end_step()
                if profiler:
                    profiler.step()
                step += 1

                at_log = step % config.log_every == 0 or step == config.steps
                # Eval points depend on the config only, so they are the same step on every rank (only
                # rank 0 evaluates, but every rank joins the collectives below at that step).
                at_eval = config.eval_every > 0 and step % config.eval_every == 0
                at_save = bool(config.ckpt) and config.save_every > 0 and step % config.save_every == 0
                at_check = at_log or at_eval or at_save
                stop_now = stop.requested is not None
                if world_size == 1:
                    # Host clock, no sync: cheap enough to check every step (exact time is taken below).
                    budget_hit = (config.time_budget > 0 and
                                  train_seconds + time.perf_counter() - clock >= config.time_budget)
                else:
                    budget_hit = (config.time_budget > 0 and at_check and
                                  train_seconds + time.perf_counter() - clock >= config.time_budget)
                    if at_check:
                        # Every rank must stop at the same step: agree where the ranks sync anyway (MAX).
                        flag = torch.tensor([float(stop_now), float(budget_hit)], device=device)
                        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                        stop_now, budget_hit = bool(flag[0] > 0), bool(flag[1] > 0)
                    else:
                        stop_now = False
                if at_check or stop_now or budget_hit:
                    read_back()
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)  # the training clock must include queued GPU work
                    train_seconds += time.perf_counter() - clock
                    if at_log and losses:
                        recent = timer.recent(config.log_every)
                        ms = lambda v: "-" if v is None or math.isnan(v) else f"{v:.1f}"  # nan: still warming up
                        log(f"step {step:6d} | loss {losses[-1]:.4f} | step {ms(recent['step_ms'])} ms"
                            f" | data {ms(recent['data_ms'])} ms | {train_seconds:.1f} s")
                    if at_eval and eval_fn is not None and rank == 0:
                        scores = run_eval()
                        eval_history.append({"step": step, "train_seconds": train_seconds, "scores": scores})
                        log(f"eval   {step:6d} | roc_auc {scores['roc_auc']:.4f} | acc {scores['acc']:.4f}"
                            f" | balanced_acc {scores['balanced_acc']:.4f}")
                    if at_save:
                        save("every %d steps" % config.save_every)
                    if stop_now:
                        save(f"{stop.requested or 'stop'} received")
                        log(f"stopping at step {step} on {stop.requested or 'a stop request on another rank'}")
                    elif budget_hit:
                        log(f"time budget of {config.time_budget:.0f} s reached at step {step}")
                    clock = time.perf_counter()  # restart after logging/eval/saves: they are not training time
                    if stop_now or budget_hit:
                        break
        if config.ckpt and stop.requested is None and (config.save_every == 0 or step % config.save_every):
            read_back()
            save("end of run")
    except KeyboardInterrupt:
        log(f"interrupted at step {step}; evaluating what was trained")
    finally:
        if profiler:
            profiler.__exit__(None, None, None)
        if hasattr(loader, "close"):
            loader.close()
    read_back()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    train_seconds += time.perf_counter() - clock

    summary = timer.summary()
    step_times = timer.step_times_ms()
    result = TrainResult(model=model, losses=losses, timing=summary, eval_history=eval_history,
                         steps_done=step, train_seconds=train_seconds, diagnosis=diagnose(summary))
    result.stopped_by = stop.requested
    result.batch_fingerprints = [float(f) for f in fingerprints]
    result.step_times_ms = step_times
    if profiler:
        result.profile_tables = profiler.tables_markdown()
    if device.type == "cuda":
        result.peak_memory_bytes = torch.cuda.max_memory_allocated(device)
    # Training is over: leave the inference weights (schedule-free's x) in the model.
    unwrap(model).load_state_dict(inference_state_dict(model, optimizer))
    unwrap(model).eval()
    return result


# ---------------------------------------------------------------------------------------------
# Evaluation on real datasets shipped with scikit-learn, with a Random Forest for reference.

EVAL_TASKS = ("breast_cancer", "wine_0_vs_1", "iris_versicolor_vs_virginica", "digits_3_vs_8")


def eval_splits(max_train_rows: int = 200, num_splits: int = 5):
    """Binary tasks from sklearn's bundled datasets, each cut into `num_splits` stratified splits
    with at most `max_train_rows` training rows. Returns [(task, X_train, X_test, y_train, y_test)]."""
    from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
    from sklearn.model_selection import train_test_split

    def binary(X, y, a, b):
        keep = (y == a) | (y == b)
        return X[keep], (y[keep] == b).astype(np.int64)

    tasks = {
        "breast_cancer": load_breast_cancer(return_X_y=True),
        "wine_0_vs_1": binary(*load_wine(return_X_y=True), 0, 1),
        "iris_versicolor_vs_virginica": binary(*load_iris(return_X_y=True), 1, 2),
        "digits_3_vs_8": binary(*load_digits(return_X_y=True), 3, 8),
    }
    splits = []
    for name in EVAL_TASKS:
        X, y = tasks[name]
        train_size = min(max_train_rows, len(y) // 2)
        for seed in range(num_splits):
            X_tr, X_te, y_tr, y_te = train_test_split(X.astype(np.float32), y, train_size=train_size,
                                                      stratify=y, random_state=seed)
            splits.append((name, X_tr, X_te, y_tr, y_te))
    return splits


def evaluate(classifier, splits=None) -> dict:
    """Mean ROC AUC / accuracy / balanced accuracy over every (task, split); per-task ROC AUC too."""
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, roc_auc_score
    splits = eval_splits() if splits is None else splits
    rows = []
    for name, X_tr, X_te, y_tr, y_te in splits:
        classifier.fit(X_tr, y_tr)
        prob = classifier.predict_proba(X_te)
        pred = prob.argmax(axis=1)
        rows.append((name, roc_auc_score(y_te, prob[:, 1]), accuracy_score(y_te, pred),
                     balanced_accuracy_score(y_te, pred)))
    scores = {"roc_auc": float(np.mean([r[1] for r in rows])), "acc": float(np.mean([r[2] for r in rows])),
              "balanced_acc": float(np.mean([r[3] for r in rows]))}
    scores["per_task_roc_auc"] = {n: float(np.mean([r[1] for r in rows if r[0] == n])) for n in EVAL_TASKS}
    return scores


class RandomForestReference:
    """sklearn's RandomForestClassifier on the same splits, fixed seed: the bar to reach."""

    def __init__(self, seed: int = 0):
        from sklearn.ensemble import RandomForestClassifier
        self.model = RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=-1)

    def fit(self, X, y):
        self.model.fit(X, y)

    def predict_proba(self, X):
        return self.model.predict_proba(X)


def format_scores(name: str, scores: dict) -> str:
    return (f"{name:>14s} | roc_auc {scores['roc_auc']:.4f} | acc {scores['acc']:.4f} | "
            f"balanced_acc {scores['balanced_acc']:.4f} | breast_cancer roc_auc "
            f"{scores['per_task_roc_auc']['breast_cancer']:.4f}")


# ---------------------------------------------------------------------------------------------
# Command line: the baseline.

def add_common_arguments(parser: argparse.ArgumentParser):
    """Flags shared by train.py and train_optimized.py (one definition, so defaults never drift)."""
    d = TrainConfig()
    parser.add_argument("--data", default=None, help="nanoTabPFN HDF5 dump (default: a small one under data/)")
    parser.add_argument("--steps", type=int, default=d.steps, help="training steps")
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help="datasets per step")
    parser.add_argument("--lr", type=float, default=d.lr, help="learning rate")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed for weights and torch RNG")
    parser.add_argument("--device", default=d.device, help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--eval-every", type=int, default=d.eval_every,
                        help="evaluate on the sklearn suite every N steps (0: only at the end)")
    parser.add_argument("--log-every", type=int, default=d.log_every, help="one log line every N steps")
    parser.add_argument("--timing-warmup", type=int, default=d.timing_warmup,
                        help="first N steps excluded from the timing statistics (reported apart)")
    parser.add_argument("--optimizer", choices=["schedulefree", "adamw"], default=d.optimizer,
                        help="schedule-free AdamW (upstream) or torch AdamW")
    parser.add_argument("--profile", action="store_true",
                        help="torch.profiler over a few steps: the blog's four tables and a trace")
    parser.add_argument("--profile-dir", default=d.profile_dir, help="where the profiler trace goes")
    parser.add_argument("--time-budget", type=float, default=d.time_budget,
                        help="train for this many seconds (clock paused during eval) instead of --steps")
    parser.add_argument("--no-eval", action="store_true", help="skip the final sklearn evaluation")
    parser.add_argument("--record", default=None, help="write the run record (JSON) to this path")
    parser.add_argument("--ckpt", default=None, help="checkpoint file (written atomically)")
    parser.add_argument("--save-every", type=int, default=0,
                        help="checkpoint every N steps (and always at the end and on SIGINT/SIGTERM)")
    parser.add_argument("--resume", action="store_true", help="continue the run stored in --ckpt exactly")
    return parser


def resolve_data(path):
    """The dump to train on; with none given, a small default prior dump generated once under data/."""
    if path is not None:
        return path
    from prior_dump import ensure_default_dump  # lazily: only needed when no dump is given
    return ensure_default_dump()


def final_report(result: TrainResult, scores=None, reference=None) -> list:
    lines = []
    timing = result.timing
    step, data = timing["step"], timing["phases"]["data"]
    peak = f"{result.peak_memory_bytes / 2**30:.2f} GiB" if result.peak_memory_bytes else "n/a (CPU)"
    if step["median"] is None:  # stopped before the timing warm-up was over
        speed = f"no timed steps (all {result.steps_done} within the warm-up)"
    else:
        speed = (f"{step['median']:.2f} ms/step (p10 {step['p10']:.2f}, p90 {step['p90']:.2f}) | "
                 f"data wait {data['median']:.2f} ms/step ({100 * timing['data_share']:.1f}%)")
    final_loss = f"{result.losses[-1]:.4f}" if result.losses else "n/a"
    lines.append(f"done: {result.steps_done} steps in {result.train_seconds:.1f} s | {speed} | "
                 f"peak GPU memory {peak} | final loss {final_loss}")
    lines.append(f"diagnosis: {result.diagnosis}")
    if scores is not None:
        lines.append(format_scores("nanoTabPFN", scores))
    if reference is not None:
        lines.append(format_scores("random forest", reference))
    return lines


def dump_identity(info) -> dict:
    """What a checkpoint must match to resume on a dump: shapes and a hash of the per-dataset metadata
    (the same checksum the .bin sidecar carries)."""
    digest = metadata_sha256(info.num_features, info.num_datapoints, info.splits)
    return {"num_datasets": int(info.num_datasets), "rows": int(info.rows), "features": int(info.features),
            "metadata_sha256": digest[:16]}


def parameter_digest(model: torch.nn.Module) -> str:
    """sha256 of every parameter's bytes: equal digests mean bit-identical weights (DDP ranks, resume)."""
    import hashlib
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def init_distributed(requested_device: str):
    """Starts torch.distributed when launched by torchrun (WORLD_SIZE > 1): NCCL on GPUs, gloo on CPU.

    Returns (rank, world_size, device). Each process drives the GPU of its LOCAL_RANK.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return 0, 1, resolve_device(requested_device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and requested_device != "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off: required on shared hosts
    dist.init_process_group("nccl" if use_cuda else "gloo")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    return dist.get_rank(), dist.get_world_size(), device


def run(args, *, model_overrides=None, config_overrides=None, loader_kwargs=None, describe=None,
        prepare_model=None):
    """Everything after argument parsing, shared by train.py and train_optimized.py.

    describe(device, info, model, loader) -> (lines printed before training, dict for the record).
    prepare_model(model, device) -> model wraps the model (e.g. torch.compile) after DDP.
    Returns the process exit code.
    """
    rank, world_size = 0, 1
    try:
        rank, world_size, device = init_distributed(args.device)
        if rank != 0:
            sys.stdout = open(os.devnull, "w")  # only rank 0 prints; errors still reach stderr
        for flag in ("steps", "batch_size", "log_every"):
            if getattr(args, flag) < 1:
                raise ValueError(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
        data = resolve_data(args.data)
        info = open_dump(data)
        if args.batch_size * world_size > info.num_datasets:
            raise DumpError(f"--batch-size {args.batch_size} x {world_size} rank(s) is larger than the dump "
                            f"({info.num_datasets} datasets)")
        config = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                             device=str(device), optimizer=args.optimizer, eval_every=args.eval_every,
                             log_every=args.log_every, profile=args.profile, profile_dir=args.profile_dir,
                             timing_warmup=args.timing_warmup, ckpt=args.ckpt or "", save_every=args.save_every,
                             pad_rows=int(info.num_datapoints.max()), pad_features=int(info.num_features.max()),
                             time_budget=args.time_budget,
                             **(config_overrides or {}))
        set_seed(args.seed)
        model_config = ModelConfig(num_outputs=max(2, info.max_num_classes), **(model_overrides or {}))
        checkpoint_meta = {"model_config": asdict(model_config), "data": dump_identity(info),
                           "global_batch": args.batch_size * world_size,
                           "optimizer": f"{config.optimizer}{'+fused' if config.fused_optimizer else ''}"}
        resume_state = None
        if args.resume:
            if not args.ckpt:
                raise CheckpointError("--resume needs --ckpt PATH")
            resume_state = load_checkpoint(args.ckpt, checkpoint_meta)
        elif args.ckpt and os.path.exists(args.ckpt):
            raise CheckpointError(f"--ckpt {args.ckpt} exists; pass --resume to continue it or choose another path")
        model = NanoTabPFNModel(model_config).to(device)
        consumed = resume_state["train_state"]["loader"]["consumed"] if resume_state else 0
        loader = make_loader(info, args.batch_size, device, rank=rank, world_size=world_size, consumed=consumed,
                             **(loader_kwargs or {"kind": "h5"}))
    except (DumpError, CheckpointError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        if world_size > 1 and dist.is_initialized():
            dist.destroy_process_group()
        return 2
    print(f"data: {info.path} ({info.num_datasets} datasets of {info.rows} rows x {info.features} features)"
          f" | device {device}" + (f" | {world_size} ranks x batch {args.batch_size}" if world_size > 1 else ""))
    extra = {}
    if describe is not None:
        lines, extra = describe(device, info, model, loader)
        for line in lines:
            print(line)
    if world_size > 1:
        from torch.nn.parallel import DistributedDataParallel
        # Gradients are averaged over ranks inside backward; every rank then takes the same step.
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if prepare_model is not None:
        model = prepare_model(model, device)
    splits = None if (args.no_eval or rank != 0) else eval_splits()
    result = train(model, loader, config, eval_fn=(lambda c: evaluate(c, splits)) if splits else None,
                   checkpoint_meta=checkpoint_meta, resume_state=resume_state)
    per_rank = [{"rank": rank, "step_ms_median": result.timing["step"]["median"],
                 "batch_fingerprints": result.batch_fingerprints, "param_sha256": parameter_digest(unwrap(model)),
                 "data_share": result.timing["data_share"], "peak_memory_bytes": result.peak_memory_bytes}]
    if world_size > 1:
        gathered = [None] * world_size
        dist.all_gather_object(gathered, per_rank[0])
        per_rank = gathered
    if result.profile_tables:
        print(result.profile_tables)
    scores = reference = None
    if splits:
        scores = evaluate(NanoTabPFNClassifier(eval_copy(model, unwrap(model).state_dict()), device), splits)
        reference = evaluate(RandomForestReference(), splits)
    for line in final_report(result, scores, reference):
        print(line)
    if args.record and rank == 0:
        from profile_utils import environment_record, make_run_record, write_json_atomic
        step_ms = result.timing["step"]["median"] or 0
        record = make_run_record(
            config={"train": asdict(config), "model": asdict(model_config), "data": info.path,
                    "num_datasets": info.num_datasets, "rows": info.rows, "features": info.features},
            flags=vars(args), timer_summary=result.timing,
            extra={"environment": environment_record(device), "loader": loader.describe(),
                   "losses": result.losses, "final_loss": result.losses[-1] if result.losses else None,
                   "eval": scores, "random_forest": reference, "eval_history": result.eval_history,
                   "steps_done": result.steps_done, "train_seconds": result.train_seconds,
                   "peak_memory_bytes": result.peak_memory_bytes, "diagnosis": result.diagnosis,
                   "profile_tables": result.profile_tables, "world_size": world_size, "per_rank": per_rank,
                   "step_times_ms": result.step_times_ms,
                   "global_batch": args.batch_size * world_size,
                   "datasets_per_second": (args.batch_size * world_size * 1000.0 / step_ms) if step_ms else None,
                   **extra})
        write_json_atomic(args.record, record)
    if world_size > 1:
        dist.destroy_process_group()
    # A run ended by a signal exits 128+signum after checkpointing, as the shell convention expects.
    return {"SIGINT": 130, "SIGTERM": 143}.get(result.stopped_by, 0)


def main(argv=None):
    parser = add_common_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
