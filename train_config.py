"""A training run's settings: `TrainConfig`, whose `_flag` fields are train.py's flags (default, help and checked type
in one place), and the step flags train_optimized.py sets on it. Every default is the blog's baseline."""
import math
from dataclasses import dataclass, field

import evaluation
from checkpoint import save_times
from runtime import checked_type

UPSTREAM_STEPS = 2500      # upstream's schedule, run on a GPU (and on a CPU when --steps is given)
CPU_DEFAULT_BUDGET = 90.0  # seconds of training for a CPU run that names neither --steps nor --time-budget


def eval_interval(text: str):
    """--eval-every: "N" -> (N steps, 0), "Ns" -> (0, N seconds of training)."""
    text = str(text).strip()
    value = float(text[:-1]) if text.endswith("s") else int(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(text)
    return (0, float(value)) if text.endswith("s") else (int(value), 0.0)


positive_float = checked_type(float, "a finite number > 0", lambda v: 0 < v < math.inf)   # NaN fails both tests
nonnegative_float = checked_type(float, "a finite number >= 0", lambda v: 0 <= v < math.inf)
share_flag = checked_type(float, "a share in [0, 1)", lambda v: 0 <= v < 1)
fraction_flag = checked_type(float, "a share in [0, 1]", lambda v: 0 <= v <= 1)
positive_int = checked_type(int, "an integer >= 1", lambda v: v >= 1)
nonnegative_int = checked_type(int, "an integer >= 0", lambda v: v >= 0)
seed_flag = checked_type(int, "an integer in 0..2**32-1 (numpy's seed range)", lambda v: 0 <= v < 2**32)
# eval_interval raises on bad text, so the lambda is never False
eval_every_flag = checked_type(str, "N steps or Ns seconds", lambda text: eval_interval(text) is not None)


def _flag(default, help: str, **argparse):
    """A TrainConfig field that is also the flag --field-name of train.py: default, help and type in one place."""
    return field(default=default, metadata={"help": help, **argparse})


@dataclass
class TrainConfig:
    """Every default is the baseline. The _flag fields are train.py's flags; the step flags are train_optimized.py's."""
    data: str | None = _flag(None, "nanoTabPFN HDF5 dump (default: a small one made under data/)")
    steps: int | None = _flag(None, f"training steps (default: {UPSTREAM_STEPS} on a GPU, {CPU_DEFAULT_BUDGET:.0f} s "
                                    "on a CPU)", type=positive_int)
    batch_size: int = _flag(32, "datasets per step (per rank)", type=positive_int)
    lr: float = _flag(4e-3, "learning rate (finite, > 0)", type=positive_float)
    seed: int = _flag(0, "seed for the weights, torch RNG and the batch transforms", type=seed_flag)
    device: str = _flag("auto", "auto, cpu, cuda or cuda:N")
    optimizer: str = _flag("schedulefree", "schedule-free AdamW (upstream) or torch AdamW",
                           choices=["schedulefree", "adamw"])
    warmup_steps: int = _flag(0, "schedule-free's linear lr warm-up over the first N steps (0: none)",
                              type=nonnegative_int)
    grad_clip: float = 1.0
    missing_cells: float = _flag(0.0, "half the prior's tables lose up to this share of cells, filled with the "
                                      "train mean (0: off)", type=share_flag)
    categorical_columns: float = _flag(0.0, "this share of the prior's columns become category codes in a random "
                                            "order (0: off)", type=share_flag)
    skewed_columns: float = _flag(0.0, "this share of the prior's columns made right-skewed (0: off)", type=share_flag)
    ordinal_columns: float = _flag(0.0, "this share of the prior's columns become equal-width levels numbered in "
                                        "value order, as counts and scores are (0: off)", type=share_flag)
    linear_columns: float = _flag(0.0, "this share of the prior's tables gain a ridge classifier's out-of-fold scores "
                                       "as columns, as the classifier adds logistic regression's (0: off)",
                                  type=fraction_flag)
    time_budget: float = _flag(0.0, "seconds of training instead of --steps (compiling, evals, saves not counted)",
                               type=nonnegative_float)
    eval_every: str = _flag("0", "evaluate every N steps or Ns seconds of training, clock paused (0: only at the "
                                 "end)", type=eval_every_flag)
    eval_suite: str = _flag("toy", "toy: four sklearn tasks (a smoke check); real: 1 split of each real-data task; "
                                   "real-all: all of its splits", choices=evaluation.EVAL_SUITES)
    log_every: int = _flag(25, "one log line every N steps", type=positive_int)
    timing_warmup: int = _flag(5, "first N steps excluded from the timing statistics", type=nonnegative_int)
    no_eval: bool = _flag(False, "skip the final evaluation", action="store_true")
    profile: bool = _flag(False, "torch.profiler over a few steps: four tables and a trace", action="store_true")
    profile_dir: str = _flag("runs/profile", "where the profiler trace goes")
    record: str | None = _flag(None, "write the run record (JSON) to this path")
    tensorboard: str | None = _flag(None, "TensorBoard event files in DIR, with the profiler trace under --profile",
                                    metavar="DIR")
    ckpt: str | None = _flag(None, "checkpoint file (written atomically)")
    save_every: int = _flag(0, "checkpoint every N steps (and always at the end and on SIGINT/SIGTERM)",
                            type=nonnegative_int)
    save_at: str = _flag("", "also keep the model at these seconds of training: --save-at 60,180 writes "
                             "<ckpt>-60s.pt and <ckpt>-180s.pt (a time-to-quality curve from one run)",
                         type=checked_type(str, "seconds > 0, comma-separated", lambda t: save_times(t) is not None))
    resume: bool = _flag(False, "continue the run stored in --ckpt exactly", action="store_true")
    init_from: str = _flag("", "start from this checkpoint's model (fine-tuning: a new optimizer, so add "
                               "--warmup-steps; this run's data from its start); the model flags must match; "
                               "--resume reads --ckpt only", metavar="CKPT")
    # train_optimized.py's step flags (off: the baseline step)
    amp: str = "off"                 # "bf16": autocast the forward; weights and loss stay fp32
    compile: bool = False
    compile_tuning: bool = False     # Inductor's coordinate-descent tuning of its kernels for --compile
    cuda_graphs: bool = False
    fused_optimizer: bool = False
    sf_average_scale: float = 1.0    # the fused schedule-free optimizer's average_scale (graphed_step.py)
    async_loss: bool = False         # read the loss back every log_every steps instead of every step
