"""model.py: path equivalence (torch / flash / matmul / checkpoint / padded), an upstream reference, the classifier."""
import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import ModelConfig, NanoTabPFNModel, padded_test_row_mask

SMALL = dict(embedding_size=16, num_attention_heads=4, mlp_hidden_size=24, num_layers=2, num_outputs=3)
FLEX_SIZE = dict(embedding_size=32, num_attention_heads=2)   # flex_attention needs a head size >= 16

# (B, R, F, S): odd sizes, S = 1 and S = R - 1 included.
SIZES = [(3, 37, 5, 13), (2, 11, 1, 1), (1, 17, 3, 16), (4, 9, 2, 4)]

# fp64: only summation order differs between paths, so the tolerance is near machine precision.
TOL64 = dict(rtol=1e-9, atol=1e-10)
# fp32 outputs: O(1) logits through a few layers of norms, each path with its own summation order.
TOL32 = dict(rtol=1e-4, atol=2e-5)
# fp32 parameter gradients: sums over many cells, so a looser absolute bound.
TOL32_GRAD = dict(rtol=1e-4, atol=3e-5)

UPSTREAM_LAYER_NAMES = [
    "self_attention_between_datapoints.in_proj_weight", "self_attention_between_datapoints.in_proj_bias",
    "self_attention_between_datapoints.out_proj.weight", "self_attention_between_datapoints.out_proj.bias",
    "self_attention_between_features.in_proj_weight", "self_attention_between_features.in_proj_bias",
    "self_attention_between_features.out_proj.weight", "self_attention_between_features.out_proj.bias",
    "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
    "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias",
]


def make_inputs(batch, rows, features, split, num_classes=3, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(batch, rows, features, generator=g) * 2 + 0.5).to(dtype)
    y = torch.randint(0, num_classes, (batch, rows), generator=g).to(dtype)
    return x, y


def make_model(seed=0, dtype=torch.float32, **overrides):
    torch.manual_seed(seed)
    cfg = dict(SMALL)
    cfg.update(overrides)
    model = NanoTabPFNModel(**cfg).to(dtype)
    # Non-trivial norms and biases, so a path that skipped one would show.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def loss_and_grads(model, x, y, split):
    """A loss that weighs every logit differently; returns (logits, {name: grad})."""
    model.zero_grad(set_to_none=True)
    out = model((x, y[:, :split]), split)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).view_as(out)
    (out * w).sum().backward()
    return out.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def assert_same(a, grads_a, b, grads_b, dtype):
    tol, gtol = (TOL64, TOL64) if dtype == torch.float64 else (TOL32, TOL32_GRAD)
    torch.testing.assert_close(a, b, **tol)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], **gtol, msg=lambda m: f"{name}: {m}")


# ---------------------------------------------------------------- an upstream reference, written out


def reference_attention(x_q, x_kv, prefix, sd, heads):
    """softmax(QKᵀ/sqrt(D))V with nn.MultiheadAttention's packed parameters, by explicit formulas."""
    w, b = sd[prefix + "in_proj_weight"], sd[prefix + "in_proj_bias"]
    e = x_q.shape[-1]
    d = e // heads
    q = x_q @ w[:e].T + b[:e]
    k = x_kv @ w[e:2 * e].T + b[e:2 * e]
    v = x_kv @ w[2 * e:].T + b[2 * e:]
    split_heads = lambda t: t.reshape(*t.shape[:-1], heads, d)       # (N, L, H, D)
    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    scores = torch.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(d)
    out = torch.einsum("nhqk,nkhd->nqhd", scores.softmax(-1), v).reshape(*x_q.shape)
    return out @ sd[prefix + "out_proj.weight"].T + sd[prefix + "out_proj.bias"]


def reference_forward(model, x, y_train, split):
    """Upstream nanoTabPFN's forward written naively from its description, loops over datasets."""
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    heads = model.config.num_attention_heads
    layer_norm = lambda t, p: F.layer_norm(t, t.shape[-1:], sd[p + ".weight"], sd[p + ".bias"], 1e-5)
    gelu = lambda t: 0.5 * t * (1 + torch.erf(t / math.sqrt(2)))
    linear = lambda t, p: t @ sd[p + ".weight"].T + sd[p + ".bias"]
    outputs = []
    for b in range(x.shape[0]):
        xb, yb = x[b], y_train[b]                                     # (R, F), (S,)
        mean = xb[:split].mean(0)
        std = ((xb[:split] - mean) ** 2).mean(0).sqrt() + 1e-5
        xn = ((xb - mean) / std).clamp(-100, 100)
        cells = xn.unsqueeze(-1) * sd["feature_encoder.linear_layer.weight"][:, 0] + sd["feature_encoder.linear_layer.bias"]
        y_full = torch.cat([yb, yb.mean().expand(x.shape[1] - split)])
        target = y_full.unsqueeze(-1) * sd["target_encoder.linear_layer.weight"][:, 0] + sd["target_encoder.linear_layer.bias"]
        t = torch.cat([cells, target.unsqueeze(1)], dim=1)            # (R, C, E)
        for i in range(model.config.num_layers):
            p = f"transformer_blocks.{i}."
            t = layer_norm(reference_attention(t, t, p + "self_attention_between_features.", sd, heads) + t, p + "norm1")
            cols = t.transpose(0, 1)                                  # (C, R, E)
            att = reference_attention(cols, cols[:, :split], p + "self_attention_between_datapoints.", sd, heads)
            t = layer_norm(att.transpose(0, 1) + t, p + "norm2")
            t = layer_norm(linear(gelu(linear(t, p + "linear1")), p + "linear2") + t, p + "norm3")
        outputs.append(linear(gelu(linear(t[split:, -1], "decoder.linear1")), "decoder.linear2"))
    return torch.stack(outputs)


@pytest.mark.parametrize("attention", ["mha", "sdpa"])
@pytest.mark.parametrize("size", SIZES[:3])
def test_paths_match_written_out_upstream_reference(attention, size):
    batch, rows, features, split = size
    model = make_model(dtype=torch.float64, attention=attention)
    x, y = make_inputs(batch, rows, features, split, dtype=torch.float64)
    with torch.no_grad():
        out = model((x, y[:, :split]), split)
    torch.testing.assert_close(out, reference_forward(model, x, y[:, :split], split), **TOL64)


def test_default_size_and_upstream_parameter_names():
    model = NanoTabPFNModel()
    assert dataclasses.asdict(model.config) == dict(embedding_size=96, num_attention_heads=4, mlp_hidden_size=192,
                                                   num_layers=3, num_outputs=2, attention="mha",
                                                   feature_attention="sdpa", grad_checkpoint=False,
                                                   last_layer_target_only=False, feature_embedding=False,
                                                   feature_encoding="linear")
    expected = ["feature_encoder.linear_layer.weight", "feature_encoder.linear_layer.bias",
                "target_encoder.linear_layer.weight", "target_encoder.linear_layer.bias"]
    expected += [f"transformer_blocks.{i}.{n}" for i in range(3) for n in UPSTREAM_LAYER_NAMES]
    expected += ["decoder.linear1.weight", "decoder.linear1.bias", "decoder.linear2.weight", "decoder.linear2.bias"]
    assert sorted(model.state_dict()) == sorted(expected)
    for cfg in (dict(attention="sdpa"), dict(attention="sdpa", feature_attention="matmul"), dict(grad_checkpoint=True),
                dict(attention="sdpa", feature_attention="broadcast"),
                dict(attention="flex"), dict(attention="sdpa", last_layer_target_only=True)):
        assert list(NanoTabPFNModel(**cfg).state_dict()) == list(model.state_dict())
    x, y = make_inputs(2, 30, 4, 10)
    assert model((x, y[:, :10]), 10).shape == (2, 20, 2)
    assert model((x, y[:, :10].unsqueeze(-1)), 10).shape == (2, 20, 2)  # (B, S, 1) labels as upstream


def test_config_errors():
    with pytest.raises(ValueError, match="attention"):
        NanoTabPFNModel(attention="xformers")
    with pytest.raises(ValueError, match="other than 'mha'"):
        NanoTabPFNModel(feature_attention="matmul")
    with pytest.raises(ValueError, match="feature_attention"):
        NanoTabPFNModel(attention="sdpa", feature_attention="mask")
    with pytest.raises(ValueError, match="head size"):
        NanoTabPFNModel(attention="flex", embedding_size=32, num_attention_heads=4)
    with pytest.raises(ValueError, match="divisible"):
        NanoTabPFNModel(embedding_size=10, num_attention_heads=4)
    with pytest.raises(ValueError, match="grad_checkpoint"):
        NanoTabPFNModel(grad_checkpoint="yes")
    with pytest.raises(ValueError, match="other than 'mha'"):
        NanoTabPFNModel(last_layer_target_only=True)
    with pytest.raises(ValueError, match="feature_embedding must be a bool"):
        NanoTabPFNModel(feature_embedding=1)
    with pytest.raises(ValueError, match="positive int"):
        ModelConfig(num_layers=0)
    with pytest.raises(TypeError):
        NanoTabPFNModel(flash=True)
    model = NanoTabPFNModel(**SMALL)
    x, y = make_inputs(1, 10, 2, 4)
    with pytest.raises(ValueError, match="train_test_split_index"):
        model((x, y[:, :4]), 5)   # y_train length disagrees with the split


# ---------------------------------------------------------------- path equivalence


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("size", SIZES)
def test_torch_and_flash_agree_both_ways(size, dtype):
    batch, rows, features, split = size
    x, y = make_inputs(batch, rows, features, split, dtype=dtype)
    # torch-trained weights into a flash model, and flash-trained weights into a torch model.
    for seed, source, target in ((1, "mha", "sdpa"), (2, "sdpa", "mha")):
        a = make_model(seed, dtype, attention=source)
        b = make_model(seed + 100, dtype, attention=target)
        b.load_state_dict(a.state_dict())
        out_a, grads_a = loss_and_grads(a, x, y, split)
        out_b, grads_b = loss_and_grads(b, x, y, split)
        assert_same(out_a, grads_a, out_b, grads_b, dtype)


@pytest.mark.parametrize("backend", ["flash", "math"])
def test_pinned_sdpa_kernel_changes_nothing(backend):
    """attention="flash" or "math" pins a kernel, not a function: same outputs and gradients as "sdpa"."""
    x, y = make_inputs(2, 29, 4, 11)
    a = make_model(3, attention="sdpa")
    b = make_model(3, attention=backend)
    assert_same(*loss_and_grads(a, x, y, 11), *loss_and_grads(b, x, y, 11), torch.float32)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_pinned_sdpa_kernel_is_really_applied():
    """The pin is not advisory: a kernel the CPU lacks raises instead of silently falling back."""
    x, y = make_inputs(1, 12, 3, 5)
    with pytest.raises(RuntimeError):
        make_model(3, attention="efficient")((x, y[:, :5]), 5)


def test_equivalence_check_can_fail():
    """The comparison used above sees a small perturbation of one weight."""
    x, y = make_inputs(3, 37, 5, 13)
    a = make_model(1, attention="mha")
    b = make_model(1, attention="sdpa")
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        b.transformer_blocks[1].self_attention_between_datapoints.in_proj_weight[0, 0] += 1e-2
    with pytest.raises(AssertionError):
        assert_same(*loss_and_grads(a, x, y, 13), *loss_and_grads(b, x, y, 13), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("size", SIZES[:2])
@pytest.mark.parametrize("form", ["matmul", "broadcast"])
def test_feature_attention_forms_agree_with_sdpa(size, dtype, form):
    batch, rows, features, split = size
    x, y = make_inputs(batch, rows, features, split, dtype=dtype)
    a = make_model(3, dtype, attention="sdpa", feature_attention="sdpa")
    b = make_model(3, dtype, attention="sdpa", feature_attention=form)
    assert_same(*loss_and_grads(a, x, y, split), *loss_and_grads(b, x, y, split), dtype)


def test_matmul_feature_attention_scores_in_fp32_under_bf16_autocast():
    """Under --amp bf16 the matmul form computes as the broadcast form does, in fp32 (bf16 scores let the recipe's
    loss reach NaN at step 341, results/nvidia-h100/column-count); large logits make bf16 scores differ."""
    from model import broadcast_attention, matmul_attention
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 2, 33, 32).bfloat16() * 4 for _ in range(3))   # (N, H, C, D): scores ~ 100s
    keys = torch.arange(33) != 7                                             # (C,) one padded column
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = matmul_attention(q, k, v, keys)                                # (N, H, C, D)
        wide = broadcast_attention(*(t.permute(2, 0, 1, 3).unsqueeze(0) for t in (q, k, v)), keys)  # (1, C, N, H, D)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, wide.squeeze(0).permute(1, 2, 0, 3), atol=0, rtol=0.01)


@pytest.mark.parametrize("path", [dict(attention="mha"), dict(attention="sdpa"),
                                  dict(attention="sdpa", feature_attention="matmul")])
def test_checkpointing_changes_nothing(path):
    x, y = make_inputs(3, 37, 5, 13, dtype=torch.float64)
    a = make_model(4, torch.float64, **path)
    b = make_model(4, torch.float64, grad_checkpoint=True, **path)
    assert_same(*loss_and_grads(a, x, y, 13), *loss_and_grads(b, x, y, 13), torch.float64)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("path", [dict(attention="sdpa"), dict(attention="sdpa", feature_attention="matmul"),
                                  dict(attention="sdpa", feature_attention="broadcast"),
                                  dict(attention="sdpa", grad_checkpoint=True)])
def test_last_layer_target_only_changes_nothing_and_skips_the_feature_columns(path, size):
    batch, rows, features, split = size
    x, y = make_inputs(batch, rows, features, split, dtype=torch.float64)
    a = make_model(6, torch.float64, **path)
    b = make_model(6, torch.float64, last_layer_target_only=True, **path)
    assert_same(*loss_and_grads(a, x, y, split), *loss_and_grads(b, x, y, split), torch.float64)
    shapes = []
    b.transformer_blocks[-1].register_forward_hook(lambda module, args, out: shapes.append(tuple(out.shape)))
    b((x, y[:, :split]), split)
    assert shapes == [(batch, 1, rows - split, SMALL["embedding_size"])]   # the target column's test rows only
    xp, yp = pad(x, y, rows + 2, features + 1, seed=0, garbage=True)
    t = lambda v: torch.tensor(v, dtype=torch.int64)
    b.forward_padded(xp, yp, t(split), t(rows), t(features))
    assert shapes[1] == (batch, 1, rows + 2, SMALL["embedding_size"])   # padded: the column, every row


# ---------------------------------------------------------------- static-shape forward


def pad(x, y, rows_max, features_max, seed, garbage):
    """Pads x to (B, rows_max, features_max) and y to (B, rows_max): zeros, or finite random garbage."""
    g = torch.Generator().manual_seed(seed)
    batch, rows, features = x.shape
    fill = (lambda *s: torch.randn(*s, generator=g, dtype=x.dtype) * 5) if garbage else (
        lambda *s: torch.zeros(*s, dtype=x.dtype))
    xp, yp = fill(batch, rows_max, features_max), fill(batch, rows_max)
    xp[:, :rows, :features] = x
    yp[:, :rows] = y
    return xp, yp


def padded_loss_and_grads(model, xp, yp, split, rows, features):
    model.zero_grad(set_to_none=True)
    t = lambda v: torch.tensor(v, dtype=torch.int64, device=xp.device)
    out = model.forward_padded(xp, yp, t(split), t(rows), t(features))
    real = out[:, split:rows]
    w = torch.linspace(-1, 1, real.numel(), dtype=out.dtype, device=out.device).view_as(real)
    (real * w).sum().backward()
    return out.detach(), real.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


PATHS = [dict(attention="mha"), dict(attention="sdpa"), dict(attention="sdpa", feature_attention="matmul"),
         dict(attention="sdpa", feature_attention="broadcast"), dict(attention="sdpa", grad_checkpoint=True),
         dict(attention="sdpa", feature_attention="broadcast", last_layer_target_only=True),
         dict(attention="sdpa", feature_attention="matmul", feature_embedding=True),
         dict(attention="sdpa", feature_attention="broadcast", feature_encoding="periodic")]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("garbage", [False, True])
def test_forward_padded_equals_sliced_forward(path, garbage):
    rng = np.random.default_rng(7)
    for trial in range(3):
        batch = int(rng.integers(1, 4))
        rows, features = int(rng.integers(3, 30)), int(rng.integers(1, 6))
        rows_max, features_max = rows + int(rng.integers(0, 9)), features + int(rng.integers(0, 4))
        split = int(rng.integers(1, rows))
        x, y = make_inputs(batch, rows, features, split, seed=trial, dtype=torch.float64)
        xp, yp = pad(x, y, rows_max, features_max, seed=trial, garbage=garbage)
        model = make_model(5 + trial, torch.float64, **path)
        out_ref, grads_ref = loss_and_grads(model, x, y, split)
        out, real, grads = padded_loss_and_grads(model, xp, yp, split, rows, features)
        assert_same(real, grads, out_ref, grads_ref, torch.float64)
        assert out.shape == (batch, rows_max, SMALL["num_outputs"])
        assert torch.isfinite(out).all()
        keep = padded_test_row_mask(rows_max, torch.tensor(split), torch.tensor(rows))
        assert keep.sum() == rows - split
        assert (out[:, ~keep] == 0).all()


@pytest.mark.parametrize("attention", ["mha", "sdpa"])
def test_feature_embedding_tells_columns_apart_with_fixed_codes(attention):
    """Without it the model is equivariant to a column permutation; with it the same table in another column order
    predicts otherwise. Its codes come from a fixed seed, not from torch's RNG, and leave the other weights alone."""
    x, y = make_inputs(2, 21, 4, 9, dtype=torch.float64)
    order = torch.tensor([2, 0, 3, 1])
    plain, coded = (make_model(3, torch.float64, attention=attention, feature_embedding=on) for on in (False, True))
    with torch.no_grad():
        outs = [(m((x, y[:, :9]), 9), m((x[:, :, order], y[:, :9]), 9)) for m in (plain, coded)]
    torch.testing.assert_close(outs[0][0], outs[0][1], **TOL64)
    assert (outs[1][0] - outs[1][1]).abs().max() > 1e-4
    assert set(coded.state_dict()) - set(plain.state_dict()) == {"column_codes.codes", "column_codes.linear_layer.weight",
                                                                 "column_codes.linear_layer.bias"}
    torch.manual_seed(11)
    fresh = NanoTabPFNModel(**SMALL).state_dict()
    torch.manual_seed(11)
    other = NanoTabPFNModel(**SMALL, feature_embedding=True)
    assert all(torch.equal(fresh[k], v) for k, v in other.state_dict().items() if k in fresh)
    torch.testing.assert_close(other.column_codes.codes, coded.column_codes.codes.float(), rtol=0, atol=0)
    assert other.column_codes(2 + 2000).shape == (2002, SMALL["embedding_size"])   # past the codes: cyclic


def test_periodic_encoding_adds_sin_cos_of_learned_frequencies_and_leaves_the_other_weights():
    """feature_encoding="periodic": a cell embeds as linear(z) + linear'(sin 2 pi f z, cos 2 pi f z) of its standardised
    value z; created last, so the other initial weights equal the plain model's of the same seed."""
    torch.manual_seed(11)
    plain = NanoTabPFNModel(**SMALL)
    torch.manual_seed(11)
    periodic = NanoTabPFNModel(**SMALL, feature_encoding="periodic")
    extra = set(periodic.state_dict()) - set(plain.state_dict())
    assert extra == {"feature_encoder.periodic.frequencies", "feature_encoder.periodic.linear_layer.weight",
                     "feature_encoder.periodic.linear_layer.bias"}
    assert all(torch.equal(v, periodic.state_dict()[k]) for k, v in plain.state_dict().items())
    z = torch.linspace(-3, 3, 7).view(7, 1)
    encoding = periodic.feature_encoder.periodic
    f = encoding.frequencies.detach()
    expected = torch.cat([torch.sin(2 * math.pi * z * f), torch.cos(2 * math.pi * z * f)], 1) @ \
        encoding.linear_layer.weight.detach().T + encoding.linear_layer.bias.detach()
    torch.testing.assert_close(encoding(z).detach(), expected)
    x, y = make_inputs(2, 21, 4, 9)
    with torch.no_grad():
        assert (plain((x, y[:, :9]), 9) - periodic((x, y[:, :9]), 9)).abs().max() > 1e-4   # it changes the math
    periodic((x, y[:, :9]), 9).sum().backward()
    assert encoding.frequencies.grad.abs().sum() > 0                                      # and it learns
    with pytest.raises(ValueError, match="feature_encoding must be one of"):
        NanoTabPFNModel(feature_encoding="fourier")


@pytest.mark.filterwarnings("ignore::UserWarning")  # flex_attention warns when run without torch.compile
def test_forward_padded_flex_equals_sdpa_mask_and_sliced_forward():
    """attention="flex", forward only (flex_attention has no backward on CPU; the CUDA test checks grads)."""
    x, y = make_inputs(3, 29, 4, 11, dtype=torch.float64)
    xp, yp = pad(x, y, 40, 6, seed=3, garbage=True)
    flex = make_model(14, torch.float64, attention="flex", **FLEX_SIZE).eval()
    mask = make_model(15, torch.float64, attention="sdpa", **FLEX_SIZE).eval()
    mask.load_state_dict(flex.state_dict())
    t = lambda v: torch.tensor(v)
    with torch.no_grad():
        out = flex.forward_padded(xp, yp, t(11), t(29), t(4))
        torch.testing.assert_close(out, mask.forward_padded(xp, yp, t(11), t(29), t(4)), **TOL64)
        torch.testing.assert_close(out[:, 11:29], flex((x, y[:, :11]), 11), **TOL64)
        assert (out[:, 11:29] - flex.forward_padded(xp, yp, t(12), t(29), t(4))[:, 11:29]).abs().max() > 1e-6


@pytest.mark.parametrize("path", PATHS[:3])
def test_forward_padded_is_finite_everywhere(path):
    """No NaN/Inf in any intermediate, padded cells included, nor in any gradient (fp32, zero padding)."""
    x, y = make_inputs(2, 10, 2, 3)
    xp, yp = pad(x, y, 16, 5, seed=0, garbage=False)   # three all-zero feature columns, six padded rows
    model = make_model(6, **path)
    bad = []

    def check(module, inputs, output):
        if isinstance(output, tuple):
            output = output[0]
        if not torch.isfinite(output).all():
            bad.append(type(module).__name__)

    hooks = [m.register_forward_hook(check) for m in model.modules()]
    out, _, grads = padded_loss_and_grads(model, xp, yp, 3, 10, 2)
    for h in hooks:
        h.remove()
    assert not bad, bad
    assert all(torch.isfinite(g).all() for g in grads.values())


@pytest.mark.parametrize("path", PATHS[:2])
def test_no_leak_from_test_labels_or_other_test_rows(path):
    x, y = make_inputs(2, 20, 3, 8)
    xp, yp = pad(x, y, 24, 4, seed=1, garbage=False)
    model = make_model(8, **path).eval()
    t = lambda v: torch.tensor(v)
    with torch.no_grad():
        base = model.forward_padded(xp, yp, t(8), t(20), t(3))
        y2 = yp.clone()
        y2[:, 8:] = 2 - y2[:, 8:]                       # other test labels
        torch.testing.assert_close(model.forward_padded(xp, y2, t(8), t(20), t(3)), base, rtol=0, atol=0)
        x2 = xp.clone()
        x2[:, 15] += 3.0                                # change one test row: only its own logits move
        moved = model.forward_padded(x2, yp, t(8), t(20), t(3))
    others = [r for r in range(24) if r != 15]
    torch.testing.assert_close(moved[:, others], base[:, others], **TOL32)
    assert (moved[:, 15] - base[:, 15]).abs().max() > 1e-3
    with torch.no_grad():  # and a train row does move the test rows (the masks are not too strict)
        x3 = xp.clone()
        x3[:, 2] += 3.0
        assert (model.forward_padded(x3, yp, t(8), t(20), t(3))[:, 8:20] - base[:, 8:20]).abs().max() > 1e-3


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
def test_paths_fp32_and_bf16_match_mha(device):
    """Every fast path against the mha reference with its weights, fp32 and bf16, sliced and padded. The CPU run keeps
    it checked where CI runs: the CUDA run alone broke unseen when PATHS gained paths with weights of their own."""
    device = torch.device(device)
    x, y = make_inputs(3, 301, 5, 120)
    x, y = x.to(device), y.to(device)
    xp, yp = pad(x.cpu(), y.cpu(), 320, 8, seed=0, garbage=True)
    xp, yp = xp.to(device), yp.to(device)
    t = lambda v: torch.tensor(v, device=device)
    with torch.no_grad():
        # sdpa, matmul, broadcast; the last layer's target only; column codes; periodic encoding
        for path in PATHS[1:4] + PATHS[5:]:
            own_weights = {k: v for k, v in path.items() if k in ("feature_embedding", "feature_encoding")}
            ref = make_model(9, attention="mha", **own_weights).to(device)
            base = ref((x, y[:, :120]), 120)
            model = make_model(9, **path).to(device)
            model.load_state_dict(ref.state_dict())
            torch.testing.assert_close(model((x, y[:, :120]), 120), base, rtol=1e-3, atol=1e-3)
            out = model.forward_padded(xp, yp, t(120), t(301), t(5))
            torch.testing.assert_close(out[:, 120:301], base, rtol=1e-3, atol=1e-3)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                low = model.forward_padded(xp, yp, t(120), t(301), t(5))
            assert torch.isfinite(low).all()
            torch.testing.assert_close(low[:, 120:301].float(), base, rtol=0.1, atol=0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("rows_max", [260, 1100])   # 64-row flex blocks (short tables), then 128
def test_cuda_compiled_flex_matches_sdpa_mask_with_grads(rows_max):
    device = torch.device("cuda")
    x, y = make_inputs(2, 200, 4, 70)
    xp, yp = pad(x, y, rows_max, 6, seed=1, garbage=True)
    xp, yp = xp.to(device), yp.to(device)
    flex = make_model(16, attention="flex", **FLEX_SIZE).to(device)
    mask = make_model(17, attention="sdpa", **FLEX_SIZE).to(device)
    mask.load_state_dict(flex.state_dict())
    flex.forward_padded = torch.compile(flex.forward_padded, dynamic=False)
    out_f, real_f, grads_f = padded_loss_and_grads(flex, xp, yp, 70, 200, 4)
    out_m, real_m, grads_m = padded_loss_and_grads(mask, xp, yp, 70, 200, 4)
    torch.testing.assert_close(out_f, out_m, rtol=1e-3, atol=1e-4)
    for name in grads_m:
        torch.testing.assert_close(grads_f[name], grads_m[name], rtol=1e-3, atol=1e-3, msg=lambda m: f"{name}: {m}")
