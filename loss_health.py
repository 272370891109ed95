"""Whether a run is still learning, from its per-step losses: the warnings the training log prints at log points."""
import math

STALLED_STEPS = 200   # losses per window
RISEN_BY = 0.15       # a window this far above the best earlier one: the run got worse (healthy runs rose <= 0.042)


def loss_at_chance(losses: list, num_outputs: int) -> bool:
    """Whether the last STALLED_STEPS losses average ln(num_outputs) within 0.002: the class prior, nothing learned."""
    recent = losses[-STALLED_STEPS:]
    return len(recent) == STALLED_STEPS and abs(sum(recent) / STALLED_STEPS - math.log(num_outputs)) < 0.002


def learning_warning(losses: list, num_outputs: int, best_window: float) -> tuple:
    """(warning or None, the lowest window mean so far) at a log point; best_window starts at math.inf."""
    if loss_at_chance(losses, num_outputs):
        return (f"the loss has averaged ln {num_outputs} = {math.log(num_outputs):.3f} (uniform predictions) over the "
                f"last {STALLED_STEPS} steps: the model has stopped learning", best_window)
    if len(losses) < STALLED_STEPS:
        return None, best_window
    window = sum(losses[-STALLED_STEPS:]) / STALLED_STEPS
    if window > best_window + RISEN_BY:   # small at --lr 4e-3 on the real prior: 1.62 -> 2.03, never learned
        return (f"the loss averaged {window:.3f} over the last {STALLED_STEPS} steps, up from {best_window:.3f}: the "
                f"run is getting worse", best_window)
    return None, min(best_window, window)
