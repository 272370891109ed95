"""The prior's batch transforms, run on each batch in the training loop's data phase (on the GPU, seeded by
(seed, step, rank) alone, so a resumed run redraws the same values): real tables' skew, levels, category codes and
missing cells, and the classifier's linear columns."""
import functools
import math

import torch
import torch.nn.functional as F


def _batch_generator(device, seed: int, step: int, rank: int, stream: int) -> torch.Generator:
    """Seeded from (seed, step, rank, stream) alone: a resumed run redraws the same values; ranks, streams differ."""
    return torch.Generator(device).manual_seed((seed * 1_000_003 + step) * 4096 + rank + (stream << 60))


def _uniform_draws(x, seed: int, step: int, rank: int, stream: int):
    """torch.rand on x's device from the batch's generator for this stream: draw(*shape)."""
    generator = _batch_generator(x.device, seed, step, rank, stream)
    return functools.partial(torch.rand, generator=generator, device=x.device)


def fill_missing_cells(batch, max_share: float, seed: int, step: int, rank: int = 0):
    """The classifier's view of a table with missing values: half the tables lose a U(0, max_share) share of their
    cells, each filled with its column's mean over the kept train rows. A new x (B, R, F); the loader's is kept."""
    x, split = batch.x, batch.split
    draw = _uniform_draws(x, seed, step, rank, 0)
    share = torch.where(draw(x.shape[0], 1, 1) < 0.5, draw(x.shape[0], 1, 1) * max_share, 0.0)   # (B, 1, 1)
    missing = draw(x.shape) < share                                                              # (B, R, F)
    kept = ~missing[:, :split]                                                                   # (B, S, F)
    mean = torch.where(kept, x[:, :split], 0.0).sum(1, keepdim=True) / kept.sum(1, keepdim=True).clamp(min=1)
    return batch._replace(x=torch.where(missing, mean, x))


def _max_levels(rows: int) -> int:
    return max(2, rows // 2)


def _num_levels(x, draw):
    """Each column's number of levels K, log-uniform in 2..R/2: (B, 1, F)."""
    num_tables, rows, features = x.shape
    return torch.exp(draw(num_tables, 1, features) * math.log(_max_levels(rows) / 2) + math.log(2)).floor()


def _rows_below(x):
    """How many rows of its column each value exceeds, ties sharing one count: (B, R, F)."""
    by_column = x.transpose(1, 2).contiguous()                                                # (B, F, R)
    return torch.searchsorted(by_column.sort(2).values, by_column).transpose(1, 2)


def _chosen_columns(x, draw, share):
    """Each non-constant column with probability share: (B, 1, F)."""
    return (draw(x.shape[0], 1, x.shape[2]) < share) & (x.amax(1, keepdim=True) > x.amin(1, keepdim=True))


def _equal_count_levels(x, draw):
    """Each column's K equal-count levels of its values: (level (B, R, F) in [0, K), K (B, 1, F))."""
    levels = _num_levels(x, draw)
    return (_rows_below(x) * levels / x.shape[1]).long(), levels


def make_categorical_columns(batch, share: float, seed: int, step: int, rank: int = 0):
    """Real tables' ordinal-coded categories, whose code order says nothing: each non-constant column becomes, with
    probability share, K equal-count levels of its values (K log-uniform in 2..R/2) numbered 0..K-1 in a random
    order. A new x (B, R, F); the loader's is kept."""
    x = batch.x
    num_tables, rows, features = x.shape
    draw = _uniform_draws(x, seed, step, rank, 1)
    chosen = _chosen_columns(x, draw, share)
    level, levels = _equal_count_levels(x, draw)
    max_levels = _max_levels(rows)
    # A random order of the K levels: rank of a random key among the keys of levels < K (the others sort last).
    key = draw(num_tables, max_levels, features) + (torch.arange(max_levels, device=x.device)[:, None] >= levels)
    code = key.argsort(1).argsort(1)                                                          # (B, K_max, F)
    return batch._replace(x=torch.where(chosen, code.gather(1, level).to(x.dtype), x))


def make_skewed_columns(batch, share: float, seed: int, step: int, rank: int = 0):
    """Real tables' right-skewed amounts and counts: each non-constant column becomes, with probability share, u^a
    of its values' mid-ranks u in (0, 1), a log-uniform in 1..16 (the prior's columns are near-symmetric; the
    suite's are not: results/cpu-2core/prior-fit). Order is kept. A new x (B, R, F); the loader's is kept."""
    x = batch.x
    draw = _uniform_draws(x, seed, step, rank, 3)
    chosen = _chosen_columns(x, draw, share)
    power = torch.exp(draw(x.shape[0], 1, x.shape[2]) * math.log(16.0))                     # (B, 1, F) in [1, 16)
    mid_rank = (_rows_below(x) + 0.5) / x.shape[1]                                            # (B, R, F) in (0, 1)
    return batch._replace(x=torch.where(chosen, mid_rank.to(x.dtype) ** power, x))


def make_ordinal_columns(batch, share: float, seed: int, step: int, rank: int = 0):
    """Real tables' counts, scores and rounded measurements: each non-constant column becomes, with probability
    share, its values cut into K equal-width levels (K log-uniform in 2..R/2) numbered 0..K-1, so a skewed column
    stays skewed. Real columns are mostly such (results/cpu-2core/prior-fit). A new x (B, R, F); the loader's is
    kept."""
    x = batch.x
    draw = _uniform_draws(x, seed, step, rank, 2)
    chosen = _chosen_columns(x, draw, share)
    levels = _num_levels(x, draw)                                                             # (B, 1, F)
    low, high = x.amin(1, keepdim=True), x.amax(1, keepdim=True)
    level = torch.minimum(((x - low) / (high - low).clamp(min=1e-12) * levels).floor(), levels - 1)   # (B, R, F)
    return batch._replace(x=torch.where(chosen, level.to(x.dtype), x))


LINEAR_FOLDS = 5       # the folds of the linear columns, here and in the classifier
LINEAR_PENALTY = 1.0   # the ridge's L2 penalty on standardised columns (the intercept is not penalised)


def linear_column_count(num_classes: int) -> int:
    """The linear columns of a table with num_classes classes (or a model of as many outputs): class 1's score for
    two, else one a class."""
    return 1 if num_classes == 2 else num_classes


def appended_columns(shares: dict, num_classes: int) -> int:
    """How many columns apply_prior_transforms appends to each table for a model of num_classes outputs."""
    return linear_column_count(num_classes) if shares.get("linear_columns") else 0


def _ridge_weights(z, targets, rows):
    """Ridge fits of targets (B, S, K) on z (B, S, P), one per row set: rows (N, S) of 0/1 -> (N, B, P, K)."""
    gram = torch.einsum("ns,bsp,bsq->nbpq", rows, z, z)                                       # (N, B, P, P)
    penalty = torch.full((z.shape[2],), LINEAR_PENALTY, device=z.device)
    penalty[0] = 0.0                                                                          # the intercept's
    factor, _ = torch.linalg.cholesky_ex(gram + torch.diag(penalty))   # _ex: no error check, so no sync
    return torch.cholesky_solve(torch.einsum("ns,bsp,bsk->nbpk", rows, z, targets), factor)


def make_linear_columns(batch, share: float, seed: int, step: int, rank: int = 0, num_classes: int = 2):
    """The classifier's linear columns, drawn as part of the prior: with probability share a table gains a ridge
    classifier's scores (class 1's, +-1 targets, for two classes; one-hot, one column a class, for more) fitted on
    the standardised train rows, out of LINEAR_FOLDS folds on them and from the fit on all of them for the test
    rows; the other tables and a binary table's spare columns get zeros. A new x (B, R, F + linear_column_count)."""
    x, y, split = batch.x, batch.y, batch.split
    num_tables, rows, _ = x.shape
    count = linear_column_count(num_classes)
    train = x[:, :split]
    z = (x - train.mean(1, keepdim=True)) / train.std(1, keepdim=True, unbiased=False).clamp(min=1e-6)
    z = torch.cat([torch.ones_like(x[..., :1]), z.clamp(-10, 10)], 2).float()                # (B, R, 1 + F)
    labels = y.long()                                                                         # (B, R)
    binary = (labels[:, :split].amax(1) <= 1)[:, None, None]                                  # (B, 1, 1)
    one_hot = F.one_hot(labels.clamp(0, num_classes - 1), num_classes).float()               # (B, R, K)
    sign = F.pad((2.0 * labels - 1.0)[..., None], (0, count - 1))                            # (B, R, count)
    targets = torch.where(binary, sign, one_hot if count > 1 else sign)[:, :split]               # (B, S, count)
    fold = torch.arange(split, device=x.device) % LINEAR_FOLDS                               # rows come in random order
    fits = (fold[None, :] != torch.arange(LINEAR_FOLDS, device=x.device)[:, None]).float()   # (folds, S)
    weights = _ridge_weights(z[:, :split], targets, torch.cat([fits, torch.ones_like(fits[:1])]))  # (folds+1, B, P, c)
    held = torch.einsum("bsp,sbpk->bsk", z[:, :split], weights[fold])                        # (B, S, count)
    values = torch.cat([held, torch.einsum("brp,bpk->brk", z[:, split:], weights[-1])], 1)   # (B, R, count)
    chosen = _uniform_draws(x, seed, step, rank, 4)(num_tables, 1, 1) < share
    return batch._replace(x=torch.cat([x, torch.where(chosen, values, 0.0).to(x.dtype)], 2))


# The prior's column transforms, in the order they run: (TrainConfig field = flag, function of (batch, share, ...)).
PRIOR_TRANSFORMS = (("skewed_columns", make_skewed_columns), ("ordinal_columns", make_ordinal_columns),
                    ("categorical_columns", make_categorical_columns), ("missing_cells", fill_missing_cells))
# Every TrainConfig field that shapes the prior's batches: the column transforms', then the linear columns'.
TRANSFORM_FIELDS = (*(name for name, _ in PRIOR_TRANSFORMS), "linear_columns")


def apply_prior_transforms(batch, shares: dict, seed: int, step: int, rank: int = 0, num_classes: int = 2):
    """The transforms whose share ({TrainConfig field: share}) is set, in PRIOR_TRANSFORMS' order, then the linear
    columns, appended last and as many as a model of num_classes outputs takes."""
    for name, transform in PRIOR_TRANSFORMS:
        if shares.get(name):
            batch = transform(batch, shares[name], seed, step, rank)
    if shares.get("linear_columns"):
        batch = make_linear_columns(batch, shares["linear_columns"], seed, step, rank, num_classes)
    return batch
