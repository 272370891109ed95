"""The blog's baseline nanoTabPFN training loop, and the `train()` every script runs.

As upstream (automl/nanoTabPFN): an h5py read per step, a synchronous `.to(device)`, `loss.item()` every step,
grad clipping at 1.0, schedule-free AdamW at lr 4e-3. train_optimized.py adds flags; all off, it is this loop.
"""
import contextlib
import gc
import hashlib
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields

import torch
import torch.distributed as dist
import torch.nn.functional as F

from checkpoint import (CheckpointError, StopRequest, check_tensors, dump_identity, load_checkpoint, load_weights,
                        save_at_path, save_checkpoint, save_times, set_rng_state)
from dump_format import DumpError, batch_position, bin_paths, dump_content_digest, one_line
import evaluation
from graphed_step import GraphedTrainStep, inference_state_dict, make_optimizer, unwrap
from loaders import LoaderConfig, make_loader, open_data
from loss_health import LossLog, NonFiniteLoss, learning_warning
from model import MODEL_PRESETS, ModelConfig, NanoTabPFNModel
from prior_transforms import TRANSFORM_FIELDS, appended_columns, apply_prior_transforms
from profile_utils import StepTimer, TrainingProfiler, diagnose, environment_record, format_duration, make_run_record
from runtime import (ArgumentParser, UsageError, fail, init_distributed, memory_error_line, out_of_memory, quiet_other_ranks,
                     rank_and_world, set_seed)
from safe_io import OutputError, check_outputs, hold_lock, write_json_atomic
from train_config import CPU_DEFAULT_BUDGET, UPSTREAM_STEPS, TrainConfig, eval_interval, positive_int

NO_OPTIMIZATIONS = "optimizations: none (the baseline: h5py read per step, synchronous .to(), loss.item() every step)"


@dataclass
class TrainResult:
    losses: list                     # loss of every step, in order
    timing: dict                     # StepTimer.summary()
    eval_history: list               # [{"step", "train_seconds", "scores"}]
    steps_done: int
    train_seconds: float
    compile_seconds: float
    profile_tables: str
    peak_memory_bytes: int
    stopped_by: str | None           # signal name when SIGINT/SIGTERM ended the run
    stalled_at: int | None           # the step of a learning warning: loss at ln(num_outputs), or risen (loss_health)
    batch_fingerprints: list         # sum of x of the first 4 batches: equal on every data path
    step_times_ms: list


def run_memory_line(exc, model, config) -> str:
    """The one line for running out of memory in this run: its kernel and batch size say what to lower."""
    return memory_error_line(exc, unwrap(model).config.attention, config.batch_size)


class RunFailed(RuntimeError):
    """An error ended the run mid-way (data, a write, memory): one line, saying what became of the checkpoint."""


# torch.compile keeps the feature count static up to this many features (one graph per count, so the
# feature-attention kernels reduce over a fixed size); above it dynamo's recompile limit would be hit.
STATIC_FEATURE_COUNTS_MAX = 6


def loss_on_batch(model, batch, amp: str = "off", static_features: bool = False):
    """Upstream's cross-entropy of the test rows given the train rows: x (B, R, F), y (B, R) -> scalar fp32."""
    if static_features:
        from torch._dynamo import mark_static  # loaded by torch.compile already
        mark_static(batch.x, 2)
    split = batch.split
    with torch.autocast(batch.x.device.type, dtype=torch.bfloat16, enabled=(amp == "bf16")):
        logits = model((batch.x, batch.y[:, :split]), train_test_split_index=split)  # (B, R-S, O)
    targets = batch.y[:, split:].reshape(-1).long()                                   # (B*(R-S),)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets)


# The flags that shape the loss sequence: a checkpoint stores them and --resume refuses other values.
RUN_FIELDS = ("lr", "seed", "warmup_steps", "sf_average_scale", *TRANSFORM_FIELDS)


def transform_shares(config: TrainConfig) -> dict:
    """{TrainConfig field: share} of the prior's batch transforms (apply_prior_transforms' shares)."""
    return {name: getattr(config, name) for name in TRANSFORM_FIELDS}


def baseline_step(model, optimizer, batch, config: TrainConfig, timer, losses, static_features=False):
    """Forward, backward, clip, optimizer step: upstream's step, each phase timed."""
    with timer.phase("forward"):
        loss = loss_on_batch(model, batch, config.amp, static_features)
    with timer.phase("backward"):
        loss.backward()
        losses.add(loss)    # upstream reads loss.item() here: the host waits for the GPU
    with timer.phase("optimizer"):
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


class Clock:
    """Training seconds: paused for evals, saves and logging; steps that compiled are counted apart."""

    def __init__(self, budget: float, train_seconds: float = 0.0):
        self.budget, self.train_seconds, self.compile_seconds = budget, train_seconds, 0.0
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return self.train_seconds + time.perf_counter() - self.start

    def over_budget(self) -> bool:
        return self.budget > 0 and self.elapsed() >= self.budget

    def pause(self, device):
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the training clock must include the queued GPU work
        self.train_seconds += time.perf_counter() - self.start

    def resume(self):
        self.start = time.perf_counter()

    def exclude(self, seconds: float):
        """A step spent `seconds` compiling: not training time (--time-budget does not count it)."""
        self.compile_seconds += seconds
        self.start += seconds


def _compiled_graphs() -> int:
    from torch._dynamo.utils import counters  # torch.compile's own count of the graphs it compiled
    return counters["stats"]["unique_graphs"]


@dataclass
class _Run:
    """What the interval points of a run read and write: the log, evals, checkpoints and stop requests.
    Only rank 0 prints (runtime.quiet_other_ranks) and only rank 0 has an eval_fn."""
    config: TrainConfig
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loader: object
    losses: LossLog
    clock: Clock
    timer: StepTimer
    eval_fn: object
    scalars: object
    checkpoint_meta: dict | None
    device: torch.device
    rank: int
    world_size: int
    history: list = field(default_factory=list)
    stalled_at: int | None = None
    best_window: float = math.inf   # the lowest mean loss over STALLED_STEPS steps so far (loss_health)
    updating: bool = False   # inside optimizer.step(): weights may be half updated
    paced_at: tuple | None = None   # under torchrun: (step, training seconds) at the last sync, and the plan made there
    planned_budget: int | None = None
    planned_save: int | None = None

    def __post_init__(self):
        self.total = self.config.steps or UPSTREAM_STEPS
        self.eval_steps, self.eval_seconds = eval_interval(self.config.eval_every)
        self.stop = StopRequest(enabled=bool(self.config.ckpt))
        self.save_times = [t for t in save_times(self.config.save_at) if t > self.clock.train_seconds]
        # Whether an error came in the middle of an update (no checkpoint can be made of that state) or outside one.
        self.optimizer.register_step_pre_hook(lambda *_: setattr(self, "updating", True))
        self.optimizer.register_step_post_hook(lambda *_: setattr(self, "updating", False))

    def scalar(self, tag, value, step):
        if self.scalars and value is not None and math.isfinite(value):
            self.scalars.add_scalar(tag, value, step)

    def save(self, step, reason, path=None, last=False):
        if self.config.ckpt and self.rank == 0:
            save_checkpoint(path or self.config.ckpt, self.model, self.optimizer, self.loader, step,
                            self.losses.values[:step], self.clock.train_seconds, self.checkpoint_meta)
            print(f"checkpoint: step {step} written to {path or self.config.ckpt} ({reason})")
            if last and self.save_times:   # a --steps run that ended first: say so, no silent no-op
                print(f"--save-at {','.join(f'{t:g}' for t in self.save_times)}: not reached (the run trained "
                      f"{self.clock.train_seconds:.0f} s), so not written")

    def interrupted(self, step):
        self.stop.requested = "SIGINT"   # exits 130, as a run that checkpointed does
        print(f"interrupted at step {step}; evaluating what was trained")

    def failure(self, step: int, exc: BaseException) -> BaseException:
        """RunFailed with the user's line for an error that ended the run after `step` whole steps (`exc` itself, a
        bug, for a RuntimeError other than out of memory); a checkpoint of `step` is written first when the state
        is whole (not mid optimizer step) and finite."""
        if isinstance(exc, RuntimeError) and not out_of_memory(exc):
            return exc
        what = run_memory_line(exc, self.model, self.config) if out_of_memory(exc) else one_line(exc)
        ckpt = self.config.ckpt
        why_not = ("no --ckpt given" if not ckpt else
                   "the error was writing it" if isinstance(exc, OutputError) else
                   "the optimizer step was cut short" if self.updating else
                   "the other ranks cannot join the save" if self.world_size > 1 else None)
        if why_not:
            kept = f"; {ckpt} keeps the last good checkpoint" if ckpt and os.path.exists(ckpt) else ""
            return RunFailed(f"{what}; stopped at step {step}, no checkpoint written ({why_not}){kept}")
        try:
            self.losses.flush()
            self.clock.pause(self.device)
            self.save(step, "before stopping on an error")
        except (NonFiniteLoss, CheckpointError, OutputError) as e:
            return RunFailed(f"{what}; stopped at step {step}; {ckpt} keeps the last good checkpoint ({one_line(e)})")
        return RunFailed(f"{what}; stopped at step {step}, its checkpoint written to {ckpt} (--resume continues it)")

    def at_interval(self, step) -> bool:
        """Logging, eval, checkpoints and stop requests at the steps where they are due; True ends the run."""
        c = self.config
        at_log = step % c.log_every == 0 or step == self.total
        # Eval and save points depend on the config only, so they are the same step on every rank; an eval
        # every N seconds happens at the first log point past each N seconds.
        at_eval = self.eval_steps > 0 and step % self.eval_steps == 0
        if self.eval_seconds > 0 and at_log:
            at_eval = self.clock.elapsed() >= self.eval_seconds * (len(self.history) + 1)
        at_save = bool(c.ckpt) and c.save_every > 0 and step % c.save_every == 0
        due = at_log or at_eval or at_save
        stop_now, budget_hit = self.stop.requested is not None, self.clock.over_budget()
        at_time = bool(self.save_times) and self.clock.elapsed() >= self.save_times[0]   # --save-at: first step past
        if self.world_size > 1:   # the loss flush is a collective: every rank takes the same branch at each step
            at_time, budget_hit, stop_now = self._agree(step, due or (step & (step - 1)) == 0, at_time, budget_hit,
                                                        stop_now)
        if not (due or at_time or stop_now or budget_hit):
            return False
        self.losses.flush()                 # raises NonFiniteLoss before anything is saved
        self.clock.pause(self.device)
        if at_log and self.losses.values:
            self._log(step)
        if at_eval and self.eval_fn is not None:
            scores = self.eval_fn(self.model, self.optimizer)
            self.history.append({"step": step, "train_seconds": self.clock.train_seconds, "scores": scores})
            print(f"eval   {step:6d} " + evaluation.format_scores("", scores).strip())
            self.scalar("eval/roc_auc", scores["roc_auc"], step)
        planned = at_time and self.world_size > 1   # the ranks planned this step for the next time
        while at_time and self.save_times and (planned or self.clock.train_seconds >= self.save_times[0]):
            seconds, planned = self.save_times.pop(0), False
            self.save(step, f"--save-at {seconds:g}, {self.clock.train_seconds:.0f} s", save_at_path(c.ckpt, seconds))
        if at_save:
            self.save(step, f"every {c.save_every} steps")
        if stop_now:
            self.save(step, f"{self.stop.requested or 'stop'} received")
            print(f"stopping at step {step} on {self.stop.requested or 'a stop request on another rank'}")
        elif budget_hit:
            print(f"time budget of {c.time_budget:.0f} s reached at step {step}")
        self.clock.resume()
        return stop_now or budget_hit

    def _agree(self, step, sync, at_time, budget_hit, stop_now):
        """Under torchrun, where the ranks sync (due points and each power of two) they agree (MAX) on a stop, the
        budget and a passed --save-at time, and plan the steps at which the budget and the next --save-at time pass,
        from the pace since the last sync (the rank that gets there first). Between syncs they follow the plan."""
        if not sync:
            return step == self.planned_save, step == self.planned_budget, False
        elapsed, never = self.clock.elapsed(), 1e18
        last_step, last_elapsed = self.paced_at or (step, elapsed)
        pace, self.paced_at = (elapsed - last_elapsed) / max(step - last_step, 1), (step, elapsed)
        targets = (self.config.time_budget or never, self.save_times[0] if self.save_times else never)
        steps_to = [(t - elapsed) / pace if pace > 0 and t < never else never for t in targets]
        agreed = torch.tensor([float(stop_now), float(budget_hit), float(at_time), -steps_to[0], -steps_to[1]],
                              dtype=torch.float64, device=self.device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)   # a small host sync at each such step
        stop_now, budget_hit, at_time, to_budget, to_save = agreed.tolist()
        self.planned_budget, self.planned_save = (step + max(1, math.ceil(-v)) if -v < never else None
                                                  for v in (to_budget, to_save))
        return at_time > 0, budget_hit > 0, stop_now > 0

    def _log(self, step):
        """The log line (`step | loss | step ms | data ms | progress | ETA`), its scalars, and the stall warning."""
        loss, recent = self.losses.values[-1], self.timer.recent(self.config.log_every)
        seconds, budget = self.clock.train_seconds, self.config.time_budget
        ms = lambda v: "-" if v is None or math.isnan(v) else f"{v:.1f}"  # nan: still warming up
        if budget > 0:
            where, left = f"{seconds:.0f}/{budget:.0f} s", budget - seconds
        else:
            where, left = f"{step}/{self.total}", (self.total - step) * seconds / max(step, 1)
        print(f"step {step:6d} | loss {loss:.4f} | step {ms(recent['step_ms'])} ms"
              f" | data {ms(recent['data_ms'])} ms | {where} | ETA {format_duration(max(left, 0))}")
        for tag, value in (("train/loss", loss), ("time/step_ms", recent["step_ms"]),
                           ("time/data_ms", recent["data_ms"])):
            self.scalar(tag, value, step)
        outputs = unwrap(self.model).config.num_outputs
        warning, self.best_window = learning_warning(self.losses.values, outputs, self.best_window)
        if warning and self.stalled_at is None:
            self.stalled_at = step
            print(f"warning: {warning}. A lower --lr avoided this where measured (--lr 2e-3 on the blog's tables and "
                  f"for the small preset, 1e-3 for a wider model; README)")


def _step_machinery(model, config: TrainConfig, shape, device):
    """(optimizer, the graphed step or None, the step timer, the profiler or None) for train()."""
    optimizer = make_optimizer(model, config.optimizer, config.lr, config.fused_optimizer, config.warmup_steps,
                               config.sf_average_scale)
    graphed = (GraphedTrainStep(model, optimizer, config.batch_size, *shape, device, amp=config.amp,
                                grad_clip=config.grad_clip, compile=config.compile) if config.cuda_graphs else None)
    timer = StepTimer(device, warmup_steps=config.timing_warmup,
                      phases=("data", "step") if graphed else ("data", "forward", "backward", "optimizer"),
                      compute_phases=("step",) if graphed else None)
    # The profiled window starts after the timing warm-up: compilation and graph capture stay out of it.
    profiler = (TrainingProfiler(device, out_dir=config.profile_dir, log_dir=config.tensorboard,
                                 wait=max(1, config.timing_warmup)) if config.profile else None)
    return optimizer, graphed, timer, profiler


def _resume(model, optimizer, resume_state, ckpt):
    """Loads a checkpoint's weights, optimizer and RNG state; returns (step, losses so far, train seconds so far),
    (0, [], 0.0) for a new run (resume_state None)."""
    if resume_state is None:
        return 0, [], 0.0
    saved = resume_state["train_state"]
    try:
        unwrap(model).load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:
        raise CheckpointError(f"checkpoint {ckpt}: its tensors do not match its model_config or "
                              f"optimizer ({str(e).splitlines()[0][:120]})") from None
    set_rng_state(saved["rng"])
    print(f"resumed from {ckpt} at step {resume_state['step']}")
    return resume_state["step"], saved["losses"], saved["train_seconds"]


def train(model, loader, config: TrainConfig, *, shape=(0, 0), eval_fn=None, checkpoint_meta=None,
          resume_state=None, scalars=None) -> TrainResult:
    """Trains on loaders.Batch items, each step timed from the request for its batch; shape: (R_max, F_max);
    eval_fn(model, optimizer) -> scores runs with the clock paused; scalars: a TensorBoard SummaryWriter or None."""
    device = next(model.parameters()).device
    rank, world_size = rank_and_world()
    optimizer, graphed, timer, profiler = _step_machinery(model, config, shape, device)
    static_features = config.compile and 0 < shape[1] <= STATIC_FEATURE_COUNTS_MAX
    model.train()
    if hasattr(optimizer, "train"):
        optimizer.train()   # schedule-free keeps two weight sequences: the model holds the training one
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    step, past_losses, past_seconds = _resume(model, optimizer, resume_state, config.ckpt)
    losses = LossLog(not config.async_loss, world_size, past_losses)
    clock = Clock(config.time_budget, past_seconds)
    run = _Run(config, model, optimizer, loader, losses, clock, timer, eval_fn, scalars, checkpoint_meta, device,
               rank, world_size)
    fingerprints, batches = [], iter(loader)
    shares = transform_shares(config)
    num_classes = unwrap(model).config.num_outputs   # the prior transforms' linear columns need it
    try:
        with run.stop, (profiler or contextlib.nullcontext()):
            while config.time_budget > 0 or step < run.total:
                graphs_before = _compiled_graphs() if config.compile else 0
                started = time.perf_counter()
                timer.start_step()
                with timer.phase("data"):
                    batch = next(batches)          # the read and the host-to-device copy are inside the clock
                    batch = apply_prior_transforms(batch, shares, config.seed, step, rank, num_classes)
                    if graphed is not None:
                        graphed.load(batch)        # into the static buffers: part of moving the data
                if len(fingerprints) < 4:
                    fingerprints.append(batch.x.double().sum())  # kept on device: no sync on the hot path
                if graphed is not None:
                    with timer.phase("step"):
                        losses.add(graphed.run())
                else:
                    baseline_step(model, optimizer, batch, config, timer, losses, static_features)
                timer.end_step()
                if profiler:
                    profiler.step()
                step += 1
                if config.compile and _compiled_graphs() != graphs_before:
                    seconds = time.perf_counter() - started
                    clock.exclude(seconds)
                    print(f"compile: step {step} compiled for {seconds:.1f} s (not counted as training time; "
                          f"{clock.compile_seconds:.1f} s in all)")
                if run.at_interval(step):
                    break
        if config.ckpt and run.stop.requested is None and (config.save_every == 0 or step % config.save_every):
            losses.flush()
            run.save(step, "end of run", last=True)
    except KeyboardInterrupt:   # SIGINT without --ckpt (with one, StopRequest turns it into a flag)
        run.interrupted(step)
    except (DumpError, OutputError, MemoryError, RuntimeError) as exc:   # a RuntimeError other than OOM: a bug
        raise run.failure(step, exc) from None
    finally:
        if hasattr(loader, "close"):
            loader.close()
    losses.flush()
    clock.pause(device)
    result = TrainResult(
        losses=losses.values, timing=timer.summary(), eval_history=run.history, steps_done=step,
        train_seconds=clock.train_seconds, compile_seconds=clock.compile_seconds,
        profile_tables=profiler.tables_markdown() if profiler else "",
        peak_memory_bytes=torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0,
        stopped_by=run.stop.requested, stalled_at=run.stalled_at,
        batch_fingerprints=[float(f) for f in fingerprints], step_times_ms=timer.step_times_ms())
    # Training is over: leave the inference weights (schedule-free's x) in the model.
    unwrap(model).load_state_dict(inference_state_dict(model, optimizer))
    unwrap(model).eval()
    return result


# ---------------------------------------------------------------------------------------------
# A run: set-up, training, evaluation, report. train_optimized.py runs the same three calls.

@dataclass
class Session:
    config: TrainConfig
    model_config: ModelConfig
    loader_config: LoaderConfig
    device: torch.device
    rank: int
    world_size: int
    info: object
    model: torch.nn.Module
    loader: object
    checkpoint_meta: dict
    resume_state: dict | None
    notices: list
    attention_kernel: str | None = None   # filled by train_optimized's start block
    lock: object = None                   # safe_io.HeldLock on --ckpt, released when execute() ends


SETUP_ERRORS = (DumpError, CheckpointError, OutputError, UsageError, ValueError, OSError)


def prepare(config: TrainConfig, model_config: ModelConfig, loader_config: LoaderConfig) -> Session:
    """Checks every input and output, then builds the model and the loader. Raises SETUP_ERRORS (one line)."""
    quiet_other_ranks()
    rank, world_size, device = init_distributed(config.device)
    notices = _schedule(config, device)
    info = open_data(resolve_data(config.data), device)
    if config.batch_size * world_size > info.num_datasets:
        raise DumpError(f"--batch-size {config.batch_size} x {world_size} rank(s) is larger than the dump "
                        f"({info.num_datasets} datasets)")
    if config.warmup_steps and config.optimizer != "schedulefree":
        raise UsageError("--warmup-steps is schedule-free's warm-up; --optimizer adamw has none")
    # Before any work: a bad output path must not cost the run, and no output may be a file it reads.
    late = [t for t in save_times(config.save_at) if 0 < config.time_budget <= t]
    if (config.save_at and not config.ckpt) or late:
        raise UsageError(f"--save-at {late[0]:g} is not before --time-budget {config.time_budget:g}: it would "
                         "never be written" if late else "--save-at keeps copies of --ckpt; add --ckpt PATH")
    at_times = {f"--save-at {t:g}": save_at_path(config.ckpt, t) for t in save_times(config.save_at)}
    check_outputs({"--ckpt": config.ckpt, **at_times, "--record": config.record,
                   "--profile-dir": config.profile_dir if config.profile and not config.tensorboard else None,
                   "--tensorboard dir": config.tensorboard},
                  inputs=[info.path, *bin_paths(info.path, loader_config.bin_dir)])
    # Held for the whole run: a second run on this --ckpt is refused here, before it does any work.
    lock = hold_lock(config.ckpt, "--ckpt") if config.ckpt and rank == 0 else None
    try:
        model_config, model, loader, meta, resume_state = _build(config, model_config, loader_config, info, device,
                                                                 rank, world_size)
    except BaseException:
        if lock:
            lock.release()
        raise
    return Session(config, model_config, loader_config, device, rank, world_size, info, model, loader, meta,
                   resume_state, notices, lock=lock)


def _build(config: TrainConfig, model_config: ModelConfig, loader_config: LoaderConfig, info, device, rank: int,
           world_size: int):
    """(model config, model, loader, checkpoint meta, resume state) of a run whose inputs and outputs were checked."""
    set_seed(config.seed)
    model_config = ModelConfig(**{**asdict(model_config), "num_outputs": max(2, info.max_num_classes)})
    model = NanoTabPFNModel(model_config).to(device)
    consumed, resume_state = 0, None
    meta = {"model_config": asdict(model_config), "global_batch": config.batch_size * world_size,
            "data": dump_identity(info, dump_content_digest(info)),
            "optimizer": f"{config.optimizer}{'+fused' if config.fused_optimizer else ''}",
            "hparams": {name: getattr(config, name) for name in RUN_FIELDS}}
    if config.resume:
        if not config.ckpt:
            raise CheckpointError("--resume needs --ckpt PATH")
        resume_state = load_checkpoint(config.ckpt, meta)
        check_tensors(config.ckpt, model.state_dict(), resume_state["train_state"]["model"])
        consumed = resume_state["train_state"]["loader"]["consumed"]
    elif config.ckpt and os.path.exists(config.ckpt):
        raise CheckpointError(f"--ckpt {config.ckpt} exists; pass --resume to continue it or choose another path")
    if config.init_from and not config.resume:
        load_weights(config.init_from, model)
    loader = make_loader(info, config.batch_size, device, loader_config, rank=rank, world_size=world_size,
                         consumed=consumed)
    return model_config, model, loader, meta, resume_state


def _schedule(config: TrainConfig, device) -> list:
    """Fills config.steps; a CPU run naming neither --steps nor --time-budget gets a short budget."""
    short = config.steps is None and config.time_budget <= 0 and device.type != "cuda"
    config.steps = config.steps or UPSTREAM_STEPS
    if not short:
        return []
    config.time_budget = CPU_DEFAULT_BUDGET
    return [f"schedule: no CUDA here, so a {CPU_DEFAULT_BUDGET:.0f} s run instead of upstream's {UPSTREAM_STEPS} "
            f"steps (about an hour on 2 cores); pass --steps {UPSTREAM_STEPS} for the full schedule"]


def resolve_data(path):
    """The dump to train on; with none given, a small default prior dump generated once under data/."""
    if path is not None:
        return path
    from prior_dump import ensure_default_dump  # lazily: only needed when no dump is given
    return ensure_default_dump()   # torchrun: one rank makes the file, the others wait; rank 0 reports it


def nonfinite_line(session: Session, error: NonFiniteLoss) -> str:
    """The non-finite guard's one line: the step, its global batch's datasets, and the checkpoint left on disk."""
    ckpt, size = session.config.ckpt, session.loader.batch_size * session.world_size
    first = batch_position(max(error.step - 1, 0), session.loader.start, size, session.info.num_datasets)
    kept = f"{ckpt} keeps the last good checkpoint" if ckpt and os.path.exists(ckpt) else "no checkpoint was kept"
    return f"{error} (datasets {first}..{first + size - 1} of {session.info.path}); training stopped; {kept}"


def start_lines(session: Session) -> list:
    """What the run will do, before it does it: data, device, schedule and its expected length."""
    c, info = session.config, session.info
    ranks = f" | {session.world_size} ranks x batch {c.batch_size}" if session.world_size > 1 else ""
    plan = (f"{c.time_budget:.0f} s of training (compiling, evals and saves not counted)" if c.time_budget > 0
            else f"{c.steps} steps (ETA on each log line)")
    transforms = [f"--{name.replace('_', '-')} {getattr(c, name):g}"
                  for name in TRANSFORM_FIELDS if getattr(c, name)]
    before = [f"prior: the dump's tables transformed per batch by {', '.join(transforms)} (in the data phase, "
              f"inside the clock)"] if transforms else []
    if c.init_from and not c.resume:   # a fresh optimizer at full lr jolts trained weights (init-from's GPU record)
        before.append(f"init: the model starts from {c.init_from}'s weights, with a new optimizer"
                     + ("" if c.warmup_steps else "; no --warmup-steps, so its first steps take the full lr"))
    return [f"data: {info.path} ({info.num_datasets} datasets of {info.rows} rows x {info.features} features)"
            f" | device {session.device}{ranks}", *before, f"plan: {plan}; log every {c.log_every} steps",
            *session.notices]


def execute(session: Session) -> int:
    """Trains, evaluates on rank 0, prints the report, writes the record. Returns the exit code; errors of the
    run (RunFailed, a checkpoint or record that cannot be written) are one line and exit 1."""
    try:
        return _execute(session)
    except (RunFailed, CheckpointError, OutputError) as e:
        return fail(e, 1)
    except (MemoryError, RuntimeError) as e:   # out of memory outside the loop: the final evaluation
        if not out_of_memory(e):
            raise
        return fail(run_memory_line(e, session.model, session.config), 1)
    except KeyboardInterrupt:   # in the final evaluation or report: training itself turns SIGINT into a stop
        return fail("interrupted after training", 130)
    finally:
        if session.lock is not None:
            session.lock.release()


def _execute(session: Session) -> int:
    c, device, model = session.config, session.device, session.model
    if session.world_size > 1 and not c.cuda_graphs:   # the graphed step averages gradients itself
        from torch.nn.parallel import DistributedDataParallel
        # Gradients are averaged over ranks inside backward (bucketed, overlapping it): every rank takes the same step.
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if c.compile_tuning:   # read when the first step compiles: each generated kernel's launch config is timed
        import torch._inductor.config as inductor
        inductor.coordinate_descent_tuning = True
    if c.compile and not c.cuda_graphs:     # the graphed step compiles forward_padded itself
        model = torch.compile(model)
    suite = None if (c.no_eval or session.rank != 0) else evaluation.suite_by_name(c.eval_suite)
    eval_fn = (lambda m, opt: suite(eval_classifier(m, inference_state_dict(m, opt), device))) if suite else None
    scalars = None
    if session.rank == 0 and c.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter   # lazily: an optional dependency
        except ImportError:
            return fail("--tensorboard needs the tensorboard package (pip install tensorboard)")
        scalars = SummaryWriter(c.tensorboard)
    try:
        appended = appended_columns(transform_shares(c), session.model.config.num_outputs)
        result = train(model, session.loader, c, shape=(int(session.info.num_datapoints.max()),
                                                        int(session.info.num_features.max()) + appended),
                       eval_fn=eval_fn, checkpoint_meta=session.checkpoint_meta,
                       resume_state=session.resume_state, scalars=scalars)
    except NonFiniteLoss as e:
        return fail(nonfinite_line(session, e), 1)
    finally:
        if scalars:
            scalars.close()
    scores = reference = None
    if suite:   # an eval due at the last step already scored these weights (out of place): not twice
        last = result.eval_history[-1] if result.eval_history else None
        scores = (last["scores"] if last and last["step"] == result.steps_done
                  else suite(eval_classifier(model, session.model.state_dict(), device)))
        reference = suite.reference(scores)
    _report(session, result, scores, reference)
    if session.world_size > 1:
        del model   # DDP's reducer holds the gloo group: left to interpreter exit, it aborted 10 of 55 CPU runs
        gc.collect()
        dist.barrier()   # every rank is past its last collective before any tears its connections down
        dist.destroy_process_group()
    # A run ended by a signal exits 128+signum after checkpointing, as the shell convention expects.
    return {"SIGINT": 130, "SIGTERM": 143}.get(result.stopped_by, 0)


def eval_classifier(model, state_dict: dict, device):
    """A classifier on an fp32 copy of the weights with the attention kernel left to PyTorch (a kernel pinned
    for the bf16 step may have no fp32 form; the kernel never changes the math)."""
    from classifier import NanoTabPFNClassifier
    config = unwrap(model).config
    attention = "mha" if config.attention == "mha" else "sdpa"
    eval_model = NanoTabPFNModel(ModelConfig(**{**asdict(config), "attention": attention})).to(device)
    eval_model.load_state_dict(state_dict)
    return NanoTabPFNClassifier(eval_model, device, autocast="off")   # the eval in fp32 on any device, as recorded


def _report(session, result, scores, reference):
    """The final lines on stdout (rank 0 prints) and the JSON run record (rank 0 writes)."""
    c, info, timing, diagnosis = session.config, session.info, result.timing, diagnose(result.timing)
    own = {"rank": session.rank, "step_ms_median": timing["step"]["median"],
           "batch_fingerprints": result.batch_fingerprints, "param_sha256": parameter_digest(session.model),
           "data_share": timing["data_share"], "peak_memory_bytes": result.peak_memory_bytes}
    per_rank = [own]
    if session.world_size > 1:
        per_rank = [None] * session.world_size
        dist.all_gather_object(per_rank, own)
    if result.profile_tables:
        print(result.profile_tables)
    step, data = timing["step"], timing["phases"]["data"]
    peak = f"{result.peak_memory_bytes / 2**30:.2f} GiB" if result.peak_memory_bytes else "n/a (CPU)"
    if step["median"] is None:  # stopped before the timing warm-up was over
        speed = f"no timed steps (this run's steps all fell within --timing-warmup {c.timing_warmup})"
    else:
        speed = (f"{step['median']:.2f} ms/step (p10 {step['p10']:.2f}, p90 {step['p90']:.2f}) | "
                 f"data wait {data['median']:.2f} ms/step ({100 * timing['data_share']:.1f}%)")
    final_loss = result.losses[-1] if result.losses else None
    compiled = f" (+{result.compile_seconds:.1f} s compiling)" if result.compile_seconds else ""
    print(f"done: {result.steps_done} steps in {result.train_seconds:.1f} s{compiled} | {speed} | "
          f"peak GPU memory {peak} | final loss {'n/a' if final_loss is None else f'{final_loss:.4f}'}")
    print(f"diagnosis: {diagnosis}")
    if scores is not None:
        print(evaluation.format_scores("nanoTabPFN", scores))
        print(evaluation.format_scores(*reference))
    if not c.record or session.rank != 0:
        return
    global_batch, step_ms = c.batch_size * session.world_size, step["median"] or 0
    record = make_run_record(
        config={"train": asdict(c), "model": asdict(session.model_config), "loader": asdict(session.loader_config),
                "data": info.path, "num_datasets": info.num_datasets, "rows": info.rows, "features": info.features},
        flags=asdict(c), timer_summary=timing,
        extra={"environment": environment_record(session.device), "loader": session.loader.describe(),
               "data_path": session.loader.describe()["path"], "losses": result.losses, "final_loss": final_loss,
               "eval": scores, "reference": {"name": reference[0], "scores": reference[1]} if reference else None,
               "random_forest": reference[1] if reference and reference[0] == "random forest" else None,
               "eval_suite": c.eval_suite, "eval_history": result.eval_history, "steps_done": result.steps_done,
               "train_seconds": result.train_seconds, "compile_seconds": result.compile_seconds,
               "peak_memory_bytes": result.peak_memory_bytes, "diagnosis": diagnosis,
               "profile_tables": result.profile_tables, "world_size": session.world_size, "per_rank": per_rank,
               "step_times_ms": result.step_times_ms, "global_batch": global_batch,
               "datasets_per_second": (global_batch * 1000.0 / step_ms) if step_ms else None,
               "attention_kernel": session.attention_kernel, "stalled_at_step": result.stalled_at})
    write_json_atomic(c.record, record)


def parameter_digest(model: torch.nn.Module) -> str:
    """sha256 of every parameter's bytes: equal digests mean bit-identical weights (DDP ranks, resume)."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Command line: the baseline's flags (train_optimized.py adds its own to the same parser).

def build_parser(description=None) -> ArgumentParser:
    p = ArgumentParser(description=description or __doc__.split("\n")[0])
    for f in fields(TrainConfig):
        if f.metadata:
            p.add_argument("--" + f.name.replace("_", "-"), default=f.default, **f.metadata)
    p.add_argument("--model-preset", choices=list(MODEL_PRESETS),
                   help="model size (model.MODEL_PRESETS; default nano = upstream's); the four size flags override it")
    p.add_argument("--embedding-size", type=positive_int, help="model width E (default: the preset's)")
    p.add_argument("--num-attention-heads", type=positive_int, help="attention heads (E must divide by it)")
    p.add_argument("--mlp-hidden-size", type=positive_int, help="MLP hidden width")
    p.add_argument("--num-layers", type=positive_int, help="transformer layers")
    return p


def fill_model_size(args):
    """The size flags left out take --model-preset's values (in place; returns args)."""
    args.model_preset = args.model_preset or "nano"
    for name, value in MODEL_PRESETS[args.model_preset].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def from_flags(cls, args, **given):
    """A config dataclass from parsed flags: each field's flag has the field's name; `given` sets the others."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}, **given)


def main(argv=None):
    args = fill_model_size(build_parser().parse_args(argv))
    try:
        session = prepare(from_flags(TrainConfig, args), from_flags(ModelConfig, args), LoaderConfig())
    except SETUP_ERRORS as e:
        return fail(e)
    except KeyboardInterrupt:
        return fail("interrupted before training started", 130)
    for line in start_lines(session) + [NO_OPTIMIZATIONS]:
        print(line)
    return execute(session)


if __name__ == "__main__":
    sys.exit(main())
