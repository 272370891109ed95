"""FlashAttention-4 (--attention fa4) against SDPA in fp32 on awkward shapes, in the model and in the graphed step.
GPU-only: flash-attn-4 runs on sm90+; without it these skip, and the CPU test checks the refusal."""
import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from model import FA4_HEAD_DIMS, ModelConfig  # noqa: E402
from test_gpu_train import dump, losses  # noqa: E402,F401  (the fixture and the run helper)
from test_triton_attention import make_qkv, model_against_sdpa, relative_error  # noqa: E402
from train_optimized import fa4_kernel_runs  # noqa: E402

needs_fa4 = pytest.mark.skipif(not fa4_kernel_runs(), reason="needs flash-attn-4 and an sm90+ GPU")
# (N, H, R, S, D, layout) as in test_triton_attention; "num-keys": all R rows passed, the count S on the device.
CASES = [(36, 4, 5000, 2500, 24, "views"), (3, 4, 4999, 1, 24, "views"), (3, 4, 4999, 1237, 24, "views"),
         (2, 2, 777, 4097, 64, "views"), (2, 4, 1000, 517, 24, "contiguous"), (1, 1, 1, 1, 24, "views"),
         (6, 4, 5000, 2500, 24, "num-keys"), (3, 4, 4999, 1, 24, "num-keys"), (2, 4, 777, 777, 24, "num-keys"),
         (2, 4, 4999, 2501, 24, "num-keys")]
# Every head size --attention fa4 accepts, sliced and padded (flash-attn-4 4.0.0b36 returned a wrong dq at 8, 16,
# 40 and 48 on an H100 and an H200: refused).
HEAD_DIM_CASES = [(2, 2, 777, 333, d, layout) for d in FA4_HEAD_DIMS for layout in ("views", "num-keys")]


@needs_fa4
@pytest.mark.parametrize("case", CASES + HEAD_DIM_CASES)
def test_gpu_matches_sdpa(case):
    from model import datapoint_attention
    n, heads, rows, keys, d, layout = case
    q, k, v = make_qkv(n, heads, rows, keys, d, layout, torch.bfloat16, "cuda")
    key_mask = torch.arange(rows, device="cuda") < keys if layout == "num-keys" else None
    out = datapoint_attention(q, k, v, "fa4", key_mask=key_mask)
    assert out.shape == q.shape and out.dtype == torch.bfloat16
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to("cuda")
    grads = torch.autograd.grad(out, (q, k, v), grad.to(torch.bfloat16))
    ref_in = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(ref_in[0], ref_in[1][:, :, :keys], ref_in[2][:, :, :keys])
    ref_grads = torch.autograd.grad(ref, ref_in, grad)
    for t in (out, *grads):
        assert torch.isfinite(t).all()
    assert not grads[1][:, :, keys:].any() and not grads[2][:, :, keys:].any()   # rows that are no keys: exactly 0
    errors = {name: relative_error(a, b) for name, a, b in zip(("out", "dq", "dk", "dv"), (out, *grads),
                                                               (ref, *ref_grads))}
    assert max(errors.values()) < 2e-2, errors


@needs_fa4
def test_gpu_model_with_fa4_matches_sdpa():
    """The whole model in bf16, fa4 against SDPA: logits and every parameter's gradient."""
    logits, logits_ref, grads, grads_ref = model_against_sdpa("fa4")
    assert logits.shape == (2, 3001 - 1237, 2)
    assert relative_error(logits, logits_ref) < 2e-2 and relative_error(grads, grads_ref) < 5e-2


@needs_fa4
def test_graphs_with_fa4_read_the_key_count_on_the_gpu(tmp_path, dump):  # noqa: F811
    """The padded graphed step on fa4 (keys counted on the device), compiled, against the sliced eager one."""
    flags = ("--attention", "fa4", "--amp", "bf16", "--fused-optimizer", "--last-layer-target-only")
    base = losses(tmp_path, dump, *flags)["losses"]
    for extra in ([], ["--compile"]):
        rec = losses(tmp_path, dump, *flags, "--cuda-graphs", *extra)
        assert rec["losses"] == pytest.approx(base, rel=2e-2, abs=2e-3), extra
        assert rec["attention_kernel"].startswith("FlashAttention-4 (flash-attn-4, CuTe DSL), key count")


def test_fa4_is_refused_where_it_cannot_run(capsys):
    import train_optimized
    assert train_optimized.main(["--attention", "fa4", "--amp", "bf16", "--device", "cpu", "--steps", "1"]) == 2
    assert "--attention fa4 is a CUDA kernel and this run is on the CPU" in capsys.readouterr().err
    assert train_optimized.main(["--attention", "fa4", "--steps", "1"]) == 2
    assert "--attention fa4 needs --amp bf16" in capsys.readouterr().err
    assert train_optimized.main(["--attention", "fa4", "--amp", "bf16", "--embedding-size", "64", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "--attention fa4 runs at head sizes" in err and "not 16" in err, err
    with pytest.raises(ValueError, match="runs at head sizes"):
        ModelConfig(attention="fa4", embedding_size=64)   # head size 16: refused for every caller, not only the CLI
