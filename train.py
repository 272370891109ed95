"""The blog's baseline nanoTabPFN training loop, and the shared `train()` every script runs.

Baseline, as upstream (automl/nanoTabPFN train.py) has it: an h5py read per step, a synchronous
`.to(device)`, `loss.item()` every step, grad clipping at 1.0, schedule-free AdamW at lr 4e-3.
`train_optimized.py` calls the same `train()` with a different loader and config; with every
optimization off it is exactly this loop (tests/test_train.py compares the loss sequences).

    python train.py                          # small default dump under data/, CPU or GPU
    python train.py --data dump.h5 --steps 2500 --profile
"""
import argparse
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from loaders import DumpError, make_loader, open_dump
from model import ModelConfig, NanoTabPFNClassifier, NanoTabPFNModel
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
    if config.optimizer == "schedulefree":
        import schedulefree  # lazily: only the schedule-free path needs it
        return schedulefree.AdamWScheduleFree(model.parameters(), lr=config.lr, weight_decay=0.0)
    if config.optimizer == "adamw":
        fused = next(model.parameters()).is_cuda  # one kernel for the whole update on CUDA
        return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0, fused=fused)
    raise ValueError(f"unknown optimizer {config.optimizer!r} (choose schedulefree or adamw)")


def set_optimizer_mode(optimizer, training: bool):
    # Schedule-free AdamW keeps two weight sequences; .train()/.eval() swaps which one the model holds.
    if hasattr(optimizer, "train"):
        optimizer.train() if training else optimizer.eval()


def loss_on_batch(model, batch, amp: str):
    """Cross-entropy of the test rows given the train rows, as upstream computes it.

    Args:
        batch: loaders.Batch with x (B, R, F), y (B, R) class indices as float, split S.
    Returns:
        scalar fp32 loss over the B*(R-S) test cells.
    """
    split = batch.split
    with torch.autocast(batch.x.device.type, dtype=torch.bfloat16, enabled=(amp == "bf16")):
        logits = model((batch.x, batch.y[:, :split]), train_test_split_index=split)  # (B, R-S, O)
    targets = batch.y[:, split:].reshape(-1).long()                                   # (B*(R-S),)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets)


def train(model: torch.nn.Module, loader, config: TrainConfig, eval_fn=None) -> TrainResult:
    """Trains `model` on batches from `loader` (an iterator of loaders.Batch).

    Every step is timed from the request for the batch to the end of the optimizer step, so the
    data fetch and its host-to-device copy are inside the clock. eval_fn(classifier) -> scores runs
    every `config.eval_every` steps with the clock paused. Returns a TrainResult.
    """
    device = next(model.parameters()).device
    optimizer = make_optimizer(model, config)
    timer = StepTimer(device, warmup_steps=config.timing_warmup)
    profiler = TrainingProfiler(device, out_dir=config.profile_dir) if config.profile else None
    log = (lambda *a: None) if config.quiet else print
    model.train()
    set_optimizer_mode(optimizer, True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    losses, eval_history = [], []
    pending = []            # (step, loss tensor) not yet read back when sync_every_step is off
    train_seconds, step = 0.0, 0
    it = iter(loader)
    clock = time.perf_counter()

    def read_back():
        # One host-device sync for all pending losses (the fast path reads them every log_every steps).
        if pending:
            values = torch.stack([loss for _, loss in pending]).float().cpu().tolist()
            losses.extend(values)
            pending.clear()

    def run_eval():
        model.eval()
        set_optimizer_mode(optimizer, False)
        scores = eval_fn(NanoTabPFNClassifier(model, device))
        model.train()
        set_optimizer_mode(optimizer, True)
        return scores

    if profiler:
        profiler.__enter__()
    try:
        while True:
            if config.time_budget > 0:
                if train_seconds >= config.time_budget:
                    break
            elif step >= config.steps:
                break
            timer.start_step()
            with timer.phase("data"):
                batch = next(it)
            with timer.phase("forward"):
                loss = loss_on_batch(model, batch, config.amp)
            with timer.phase("backward"):
                loss.backward()
                if config.sync_every_step:
                    losses.append(loss.item())  # upstream's per-step read: the host waits for the GPU here
                else:
                    pending.append((step, loss.detach()))
            with timer.phase("optimizer"):
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            timer.end_step()
            if profiler:
                profiler.step()
            step += 1

            at_log = step % config.log_every == 0 or step == config.steps
            at_eval = eval_fn is not None and config.eval_every > 0 and step % config.eval_every == 0
            if at_log or at_eval or config.time_budget > 0:
                if at_log or at_eval:
                    read_back()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)  # the training clock must include queued GPU work
                now = time.perf_counter()
                train_seconds += now - clock
                if at_log and losses:
                    recent = timer.recent(config.log_every)
                    log(f"step {step:6d} | loss {losses[-1]:.4f} | step {recent['step_ms']:.1f} ms"
                        f" | data {recent['data_ms']:.1f} ms | {train_seconds:.1f} s")
                if at_eval:
                    scores = run_eval()
                    eval_history.append({"step": step, "train_seconds": train_seconds, "scores": scores})
                    log(f"eval   {step:6d} | roc_auc {scores['roc_auc']:.4f} | acc {scores['acc']:.4f}"
                        f" | balanced_acc {scores['balanced_acc']:.4f}")
                clock = time.perf_counter()  # restart after logging/eval: they are not training time
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
    result = TrainResult(model=model, losses=losses, timing=summary, eval_history=eval_history,
                         steps_done=step, train_seconds=train_seconds, diagnosis=diagnose(summary))
    if profiler:
        result.profile_tables = profiler.tables_markdown()
    if device.type == "cuda":
        result.peak_memory_bytes = torch.cuda.max_memory_allocated(device)
    model.eval()
    set_optimizer_mode(optimizer, False)  # leave the schedule-free averaged weights in the model
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
    parser.add_argument("--optimizer", choices=["schedulefree", "adamw"], default=d.optimizer,
                        help="schedule-free AdamW (upstream) or torch AdamW")
    parser.add_argument("--profile", action="store_true",
                        help="torch.profiler over a few steps: the blog's four tables and a trace")
    parser.add_argument("--profile-dir", default=d.profile_dir, help="where the profiler trace goes")
    parser.add_argument("--no-eval", action="store_true", help="skip the final sklearn evaluation")
    parser.add_argument("--record", default=None, help="write the run record (JSON) to this path")
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
    lines.append(f"done: {result.steps_done} steps in {result.train_seconds:.1f} s | "
                 f"{step['median']:.2f} ms/step (p10 {step['p10']:.2f}, p90 {step['p90']:.2f}) | "
                 f"data wait {data['median']:.2f} ms/step ({100 * timing['data_share']:.1f}%) | "
                 f"peak GPU memory {peak} | final loss {result.losses[-1]:.4f}")
    lines.append(f"diagnosis: {result.diagnosis}")
    if scores is not None:
        lines.append(format_scores("nanoTabPFN", scores))
    if reference is not None:
        lines.append(format_scores("random forest", reference))
    return lines


def run(args, *, model_overrides=None, config_overrides=None, loader_kwargs=None, describe=None):
    """Everything after argument parsing, shared by train.py and train_optimized.py.

    describe(device, info, model, loader) -> list of lines printed before training (the
    optimizations block of train_optimized.py) and a dict merged into the run record.
    Returns the process exit code.
    """
    try:
        device = resolve_device(args.device)
        data = resolve_data(args.data)
        info = open_dump(data)
        if args.batch_size > info.num_datasets:
            raise DumpError(f"--batch-size {args.batch_size} is larger than the dump "
                            f"({info.num_datasets} datasets)")
        config = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                             device=str(device), optimizer=args.optimizer, eval_every=args.eval_every,
                             log_every=args.log_every, profile=args.profile, profile_dir=args.profile_dir,
                             **(config_overrides or {}))
        set_seed(args.seed)
        model_config = ModelConfig(num_outputs=max(2, info.max_num_classes), **(model_overrides or {}))
        model = NanoTabPFNModel(model_config).to(device)
        loader = make_loader(info, args.batch_size, device, **(loader_kwargs or {"kind": "h5"}))
    except (DumpError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"data: {info.path} ({info.num_datasets} datasets of {info.rows} rows x {info.features} features)"
          f" | device {device}")
    extra = {}
    if describe is not None:
        lines, extra = describe(device, info, model, loader)
        for line in lines:
            print(line)
    splits = None if args.no_eval else eval_splits()
    result = train(model, loader, config, eval_fn=(lambda c: evaluate(c, splits)) if splits else None)
    if result.profile_tables:
        print(result.profile_tables)
    scores = reference = None
    if splits:
        scores = evaluate(NanoTabPFNClassifier(model, device), splits)
        reference = evaluate(RandomForestReference(), splits)
    for line in final_report(result, scores, reference):
        print(line)
    if args.record:
        from profile_utils import environment_record, make_run_record, write_json_atomic
        record = make_run_record(
            config={"train": asdict(config), "model": asdict(model_config), "data": info.path,
                    "num_datasets": info.num_datasets, "rows": info.rows, "features": info.features},
            flags=vars(args), timer_summary=result.timing,
            extra={"environment": environment_record(device), "loader": loader.describe(),
                   "losses": result.losses, "final_loss": result.losses[-1] if result.losses else None,
                   "eval": scores, "random_forest": reference, "eval_history": result.eval_history,
                   "steps_done": result.steps_done, "train_seconds": result.train_seconds,
                   "peak_memory_bytes": result.peak_memory_bytes, "diagnosis": result.diagnosis,
                   **extra})
        write_json_atomic(args.record, record)
    return 0


def main(argv=None):
    parser = add_common_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
