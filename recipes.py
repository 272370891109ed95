"""The recipes: the train_optimized.py flags that `--recipe NAME` fills for a time budget (docs/real-data.md).

One rule for two users: train_optimized.py applies it; `quality.py run` trains one run per model it picks."""

# real-tables: the flags it fills when not given (results/nvidia-h100/real-*). Its data are the prior's "real" preset,
# made on the fly (prior:real:N; results/nvidia-h100/prior-on-the-fly).
RECIPES = {"real-tables": dict(fast=True, batch_size=16, categorical_columns=0.2, missing_cells=0.1)}
BUDGET_S = 600.0            # --time-budget when neither it nor --steps is given
CPU_BATCH = 4
DUMP_DATASETS = {"cuda": 100_000, "cpu": 4_000}   # N of prior:real:N (a file of them took 39 s on an H100)
# Each model's learning rate on one GPU; another preset given by the user gets small's. Medium at 2e-3 without
# warm-up stalled at chance (results/nvidia-h100/real-medium); with 1,000 warm-up steps it scored as 1e-3 at 10
# minutes (one seed, results/nvidia-h200/medium-lr). Large trains faster at 1e-3 than at 5e-4 and levels with medium
# at 20 minutes (results/nvidia-h100/large-depth), so the recipe never picks it.
MODELS = {"small": dict(model_preset="small", lr=2e-3),
          "medium": dict(model_preset="medium", lr=1e-3, warmup_steps=500),
          "large": dict(model_preset="large", lr=1e-3, warmup_steps=500)}
# One GPU and a budget of 10 minutes or more: medium. At 10 minutes it led small on both halves, two seeds each
# (0.7619 against 0.7605); at 1 minute small leads (0.7553 against 0.7492), at 3 they are level
# (results/nvidia-h100/curve-matmul).
LONG_FROM_S = 600.0
# Under torchrun: small at lr x ranks with this warm-up; on two H100s 6 minutes matched one H100's 10 of medium
# (0.7646 against 0.7643, two seeds each: results/nvidia-h100/dp-seeds); medium there is level with small at 10 minutes
# (0.7649 both, two H200s a seed: results/nvidia-h200/ddp-medium), so two GPUs train small at every budget
DDP_WARMUP_STEPS = 500


def recipe_model(time_budget: float, ranks: int, on_cuda: bool) -> str:
    """The preset the recipe trains in `time_budget` seconds (0: a --steps run) on `ranks` processes."""
    return "medium" if on_cuda and ranks == 1 and time_budget >= LONG_FROM_S else "small"


def recipe_flags(name: str, time_budget: float, ranks: int, on_cuda: bool, model_preset: str | None = None) -> dict:
    """The flags recipe `name` fills; model_preset: the user's, whose learning rate it then picks."""
    model = model_preset or recipe_model(time_budget, ranks, on_cuda)
    chosen = {**RECIPES[name], **MODELS.get(model, MODELS["small"]), "model_preset": model}
    if ranks > 1:   # the global batch grows with the ranks: lr x ranks, warmed up (docs/multi-gpu.md)
        chosen["lr"] *= ranks
        chosen["warmup_steps"] = max(chosen.get("warmup_steps", 0), DDP_WARMUP_STEPS)
    if not on_cuda:
        chosen["batch_size"] = CPU_BATCH
    return chosen
