"""A run's per-step losses: kept (LossLog, which stops the run at a non-finite one) and judged (whether the run is
still learning: the warnings the training log prints at log points)."""
import math

import torch
import torch.distributed as dist

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


class NonFiniteLoss(RuntimeError):
    """Training produced a NaN/inf loss at (1-based) `step`: the run stops without writing a checkpoint."""
    def __init__(self, message: str, step: int = 0):
        super().__init__(message)
        self.step = step


class LossLog:
    """Losses of every step: read at once (upstream's per-step sync) or kept on the device until flush()."""

    def __init__(self, sync_every_step: bool, world_size: int, losses=()):
        self.sync_every_step, self.world_size = sync_every_step and world_size == 1, world_size
        self.values, self.pending = list(losses), []

    def add(self, loss: torch.Tensor):
        if self.sync_every_step:
            self._extend([loss.item()])
        else:
            self.pending.append(loss.detach())

    def flush(self):
        """One host-device sync for all pending losses; under DDP the mean over ranks. Raises NonFiniteLoss."""
        if self.pending:
            values = torch.stack(self.pending).float()
            if self.world_size > 1:
                dist.all_reduce(values)
                values /= self.world_size
            self.pending.clear()
            self._extend(values.cpu().tolist())

    def _extend(self, values: list):
        for value in values:
            self.values.append(value)
            if not math.isfinite(value):
                raise NonFiniteLoss(f"loss is {value} at step {len(self.values)}", len(self.values))
