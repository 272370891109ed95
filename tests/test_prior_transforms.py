"""The prior's batch transforms (prior_transforms.py): what each does to a batch, on the CPU and on a GPU."""
import pytest
import torch

def test_fill_missing_cells_fills_with_the_kept_train_mean_and_leaves_the_batch_alone():
    from loaders import Batch
    from prior_transforms import fill_missing_cells
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 30, 4, generator=g) * 3 + 1
    batch = Batch(x.clone(), torch.zeros(64, 30), 12, False)
    out = fill_missing_cells(batch, 0.5, seed=1, step=0)
    assert torch.equal(batch.x, x) and out.split == 12 and out.y is batch.y   # the loader's tensor is untouched
    changed = (out.x != x).flatten(1).any(1)
    assert 16 < int(changed.sum()) < 48                                      # about half the tables
    for b in torch.nonzero(changed).flatten().tolist():
        missing = out.x[b] != x[b]                                           # (R, F); a fill never equals the value
        for f in range(4):
            kept = ~missing[:12, f]
            if missing[:, f].any() and kept.any():
                assert torch.allclose(out.x[b, missing[:, f], f], x[b, :12, f][kept].mean(), atol=1e-5)
    share = (out.x != x)[changed].float().mean()
    assert 0.1 < share < 0.4                                                 # U(0, 0.5) per table, 0.25 on average
    assert torch.equal(fill_missing_cells(batch, 0.5, seed=1, step=0).x, out.x)
    assert not torch.equal(fill_missing_cells(batch, 0.5, seed=1, step=1).x, out.x)   # each step its own cells


# The column transforms run in the data phase on the training device: their tests run on the CPU and on a GPU.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


def _columns_changed(transform, x, padded: int, device: str = "cpu"):
    """A column transform on a batch of x (on device) at share 0.5: the input batch, split, y and the padded column
    left alone, about half the others changed, the same draw again. Returns (its x on the CPU, changed (B, F))."""
    from loaders import Batch
    batch = Batch(x.clone().to(device), torch.zeros(x.shape[:2], device=device), 16, False)
    out = transform(batch, 0.5, seed=1, step=0)
    assert torch.equal(batch.x.cpu(), x) and out.split == 16 and out.y is batch.y and out.x.device == batch.x.device
    changed = (out.x.cpu() != x).any(1)                                      # (B, F)
    assert not changed[:, padded].any() and 0.3 < changed[:, :padded].float().mean() < 0.7
    assert torch.equal(transform(batch, 0.5, seed=1, step=0).x, out.x)
    return out.x.cpu(), changed


@pytest.mark.parametrize("device", DEVICES)
def test_categorical_columns_are_shuffled_codes_of_equal_count_levels(device):
    from loaders import Batch
    from prior_transforms import make_categorical_columns
    x = torch.randn(64, 40, 4, generator=torch.Generator().manual_seed(0))
    x[:, :, 2] = torch.floor(x[:, :, 2] * 2)          # an ordinal column: its ties must keep one code
    x[:, :, 3] = 0.0                                   # a padded feature: never touched
    out, changed = _columns_changed(make_categorical_columns, x, 3, device)
    orders = set()
    for b, f in torch.nonzero(changed).tolist():
        codes = out[b, :, f]
        levels = int(codes.max()) + 1
        assert 2 <= levels <= 20 and torch.equal(codes, codes.round()) and codes.min() >= 0
        for value in x[b, :, f].unique():                                    # equal values, one code
            assert len(codes[x[b, :, f] == value].unique()) == 1
        if f < 2:   # distinct values: K levels of R/K rows each, numbered in a random order
            counts = torch.bincount(codes.long(), minlength=levels)
            assert counts.min() > 0 and counts.max() - counts.min() <= 1
            order = tuple(codes[x[b, :, f].argsort()].unique_consecutive().tolist())
            orders.add(order == tuple(sorted(order)))
    assert orders == {True, False}                                           # not always in the values' order
    batch = Batch(x.clone().to(device), torch.zeros(64, 40, device=device), 16, False)
    assert not torch.equal(make_categorical_columns(batch, 0.5, seed=1, step=1).x.cpu(), out)


@pytest.mark.parametrize("device", DEVICES)
def test_ordinal_columns_are_equal_width_levels_in_value_order(device):
    from prior_transforms import make_ordinal_columns
    x = torch.randn(64, 40, 3, generator=torch.Generator().manual_seed(0))
    x[:, :, 2] = 0.0                                   # a padded feature: never touched
    out, changed = _columns_changed(make_ordinal_columns, x, 2, device)
    for b, f in torch.nonzero(changed).tolist():
        codes, values = out[b, x[b, :, f].argsort(), f], x[b, :, f].sort().values        # in the values' order
        assert torch.all(codes[1:] >= codes[:-1]) and codes.min() == 0 and 1 <= codes.max() < 20
        width = (values[-1] - values[0]) / (codes.max() + 1)                 # K equal-width levels, K - 1 the top
        offset = values - values[0]
        assert torch.all((offset >= codes * width - 1e-4) & (offset <= (codes + 1) * width + 1e-4))


@pytest.mark.parametrize("device", DEVICES)
def test_skewed_columns_keep_the_order_and_skew_right(device):
    from scipy.stats import skew
    from prior_transforms import make_skewed_columns
    x = torch.randn(64, 40, 3, generator=torch.Generator().manual_seed(0))
    x[:, :, 2] = 0.0                                   # a padded feature: never touched
    out, changed = _columns_changed(make_skewed_columns, x, 2, device)
    skews = []
    for b, f in torch.nonzero(changed).tolist():
        order = x[b, :, f].argsort()
        column = out[b, order, f]                                            # in the values' order
        assert torch.all(column[1:] > column[:-1]) and 0 < column[0] and column[-1] < 1
        skews.append(skew(out[b, :, f].numpy()))
    assert min(skews) > -0.1 and sorted(skews)[len(skews) // 2] > 0.5               # a in 1..16: right-skewed


@pytest.mark.parametrize("device", DEVICES)
def test_linear_columns_are_out_of_fold_ridge_scores(device):
    from loaders import Batch
    from prior_transforms import LINEAR_FOLDS, LINEAR_PENALTY, make_linear_columns
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 40, 3, generator=g, dtype=torch.float64)
    y = (x[..., 0] + 0.5 * torch.randn(6, 40, generator=g, dtype=torch.float64) > 0).double()   # (B, R)
    y[3:] = torch.randint(0, 4, (3, 40), generator=g).double()               # three 4-class tables
    batch = Batch(x.to(device), y.to(device), 25, False)
    out = make_linear_columns(batch, 1.0, seed=1, step=0, num_classes=4).x.cpu()
    assert out.shape == (6, 40, 7) and torch.equal(out[..., :3], x) and torch.equal(batch.x.cpu(), x)
    assert torch.equal(out[:3, :, 4:], torch.zeros(3, 40, 3))               # a binary table: class 1's score alone
    for b in (0, 4):   # the fit by hand: the ridge's normal equations in float64
        train = x[b, :25]
        standardised = (x[b] - train.mean(0)) / train.std(0, unbiased=False)
        z = torch.cat([torch.ones(40, 1, dtype=torch.float64), standardised], 1)
        targets = (2 * y[b] - 1)[:, None] if b < 3 else torch.nn.functional.one_hot(y[b].long(), 4).double()
        penalty = torch.diag(torch.tensor([0.0] + [LINEAR_PENALTY] * 3, dtype=torch.float64))
        fit = lambda rows: torch.linalg.solve(z[rows].T @ z[rows] + penalty, z[rows].T @ targets[rows])
        expected = torch.cat([z[s:25:LINEAR_FOLDS] @ fit([r for r in range(25) if r % LINEAR_FOLDS != s])
                              for s in range(LINEAR_FOLDS)])                 # held rows, fold by fold
        order = torch.cat([torch.arange(s, 25, LINEAR_FOLDS) for s in range(LINEAR_FOLDS)])
        width = 1 if b < 3 else 4
        assert torch.allclose(out[b, order, 3:3 + width], expected, atol=1e-4)
        assert torch.allclose(out[b, 25:, 3:3 + width], z[25:] @ fit(list(range(25))), atol=1e-4)
    none = make_linear_columns(batch, 0.0, seed=1, step=0, num_classes=4).x.cpu()
    assert torch.equal(none[..., 3:], torch.zeros(6, 40, 4))                 # share 0: zero columns
    assert make_linear_columns(batch, 1.0, seed=1, step=0, num_classes=2).x.shape == (6, 40, 4)
