"""triton_attention against F.scaled_dot_product_attention in fp32/fp64: outputs and gradients, awkward shapes.

Without a GPU the kernels run under Triton's interpreter (TRITON_INTERPRET=1, numpy on the CPU) in a
subprocess, with fp16/fp32 inputs: the interpreter's tl.dot mishandles bf16 (it multiplies the raw bits).
"""
import importlib.util
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import triton_attention as ta  # noqa: E402

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_GPU = HAS_TRITON and torch.cuda.is_available()

# (N, H, R, S, D, layout): "views" = the model's transposed q/k/v views of one (N, R, 3, H, D) buffer with
# sliced keys; "test-rows" = the same with queries from row S on (the last layer's shortcut); "padded" = views
# of a (N, R, 3, H, D + 3) buffer (odd strides: no vector loads); "contiguous" = separate (N, H, rows, D) tensors;
# "num-keys" = all R rows of k, v passed, the key count S in a device tensor (the padded step of --cuda-graphs);
# "test-rows-only" = the same with test_rows_only (rows below S output zero: the padded last layer). A "-far" suffix
# shifts q to -5 and k to +5 (noise 1): every score sits far below 0, where exp2(-lse) of a key past S overflows
# (the NaN of long --fast runs, results/nvidia-h100/nan-triton).
CPU_CASES = [(2, 2, 37, 19, 24, "views"), (1, 2, 70, 1, 16, "views"), (1, 1, 33, 65, 64, "contiguous"),
             (1, 2, 45, 45, 40, "padded"), (2, 2, 37, 19, 24, "test-rows"), (2, 2, 37, 19, 24, "num-keys"),
             (1, 2, 40, 1, 16, "num-keys"), (1, 1, 33, 33, 24, "num-keys"), (2, 2, 37, 19, 24, "test-rows-only"),
             (1, 2, 40, 1, 16, "test-rows-only"), (1, 1, 33, 33, 24, "test-rows-only"), (2, 2, 37, 19, 24, "views-far"),
             (2, 2, 37, 19, 24, "num-keys-far"), (2, 2, 37, 19, 24, "test-rows-only-far")]
GPU_CASES = [(36, 4, 5000, 2500, 24, "views"), (3, 4, 4999, 1, 24, "views"), (3, 4, 4999, 1237, 24, "views"),
             (2, 2, 777, 333, 16, "views"), (2, 2, 777, 4097, 64, "views"), (2, 3, 300, 129, 40, "padded"),
             (2, 4, 1000, 517, 24, "contiguous"), (1, 1, 1, 1, 24, "views"), (6, 4, 5000, 2500, 24, "test-rows"),
             (2, 4, 999, 998, 24, "test-rows"), (6, 4, 5000, 2500, 24, "num-keys"), (3, 4, 4999, 1, 24, "num-keys"),
             (2, 4, 777, 777, 24, "num-keys"), (6, 4, 5000, 2500, 24, "test-rows-only"),
             (3, 4, 4999, 1, 24, "test-rows-only"), (2, 4, 777, 700, 24, "test-rows-only"), (3, 4, 999, 333, 24, "views-far"),
             (3, 4, 999, 333, 24, "num-keys-far"), (3, 4, 999, 333, 24, "test-rows-only-far"), (3, 4, 150, 75, 24, "num-keys-far")]
# Small tiles (many blocks, tails on every side) with other dQ warps and stages, and the atomic dQ path.
SMALL = dict(fwd_block_m=16, fwd_block_n=16, kv_block_m=16, kv_block_n=16, q_block_m=16, q_block_n=16)
CPU_CONFIGS = [ta.KernelConfig(), ta.KernelConfig(**SMALL, q_warps=8, q_stages=2),
               ta.KernelConfig(**SMALL, atomic_dq=True)]


def make_qkv(n, heads, rows, keys, d, layout, dtype, device, seed=0):
    """q (N, H, R, D) (rows S.. with "test-rows"), k and v (N, H, S, D) (R rows with "num-keys") leaves in the given
    layout, random normal."""
    gen = torch.Generator().manual_seed(seed)
    far, layout = layout.endswith("-far"), layout.removesuffix("-far")
    if layout == "contiguous":
        return [torch.randn(n, heads, length, d, generator=gen).to(device, dtype).requires_grad_()
                for length in (rows, keys, keys)]
    width = d + 3 if layout == "padded" else d
    base = torch.randn(n, rows, 3, heads, width, generator=gen)
    if far:
        base[:, :, :2] = base[:, :, :2] + torch.tensor([-5.0, 5.0]).view(1, 1, 2, 1, 1)
    base = base.to(device, dtype)[..., :d]
    q, k, v = (t.transpose(1, 2) for t in base.unbind(2))                 # (N, H, R, D) strided views
    q = q[:, :, keys:] if layout == "test-rows" else q
    if layout not in ("num-keys", "test-rows-only"):
        k, v = k[:, :, :keys], v[:, :, :keys]
    return [t.detach().requires_grad_() for t in (q, k, v)]


def relative_error(a: torch.Tensor, ref: torch.Tensor) -> float:
    """‖a - ref‖ / ‖ref‖, the norm floored (with one key dQ and dK are 0 up to rounding)."""
    a, ref = a.detach().float(), ref.detach().float()
    return float((a - ref).norm()) / max(float(ref.norm()), 1e-2 * ref.numel() ** 0.5)


def errors_against_sdpa(case, dtype, device, config=ta.DEFAULT_CONFIG, seed=0):
    """{name: relative error} of out, dq, dk, dv against SDPA in fp32 on the same (rounded) inputs."""
    n, heads, rows, keys, d, layout = case
    q, k, v = make_qkv(n, heads, rows, keys, d, layout, dtype, device, seed)
    layout = layout.removesuffix("-far")
    test_rows_only = layout == "test-rows-only"
    num_keys = torch.tensor(keys, device=device) if layout in ("num-keys", "test-rows-only") else None
    out = ta.datapoint_attention(q, k, v, config=config, num_keys=num_keys, test_rows_only=test_rows_only)
    assert out.shape == q.shape and out.dtype == dtype
    assert out.transpose(1, 2).is_contiguous()                             # (N, R, H, D) memory
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1)).to(device)
    grads = torch.autograd.grad(out, (q, k, v), grad.to(dtype))
    # fp64 on the CPU; fp32 on the GPU, where SDPA's fp32 kernels need no (R, S) matrix in memory.
    ref_dtype = torch.float64 if device == "cpu" else torch.float32
    ref_in = [t.detach().to(ref_dtype).requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(ref_in[0], ref_in[1][:, :, :keys], ref_in[2][:, :, :keys])
    if test_rows_only:   # the function the flag defines: rows below the keys are zero
        ref = ref * (torch.arange(rows, device=device) >= keys).view(1, 1, -1, 1)
    ref_grads = torch.autograd.grad(ref, ref_in, grad.to(ref_dtype))   # zero past the keys
    for t in (out, *grads):
        assert torch.isfinite(t).all()
    assert not grads[1][:, :, keys:].any() and not grads[2][:, :, keys:].any()   # rows that are no keys: exactly 0
    if test_rows_only:
        assert not out[:, :, :keys].any() and not grads[0][:, :, :keys].any()   # train rows: exactly 0
    return {name: relative_error(a, b) for name, a, b in zip(("out", "dq", "dk", "dv"), (out, *grads),
                                                                 (ref, *ref_grads))}


def _patch_interpreter():
    """Triton 3.6's interpreter int()s 1-element arrays, which numpy >= 2.4 refuses (fixed in Triton 3.7+)."""
    import triton.runtime.interpreter as interp
    original = getattr(interp, "_patch_lang_tensor", None)
    if original is None:
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    interp._patch_lang_tensor = patched


def run_interpreter_cases():
    """Entry point of the interpreter subprocess: every CPU case under every CPU config."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    _patch_interpreter()
    runs = [(case, CPU_CONFIGS[0], dtype) for case in CPU_CASES for dtype in (torch.float16, torch.float32)]
    small_tile_cases = CPU_CASES[:2] + [case for case in CPU_CASES if case[5] == "test-rows-only"][:1] + CPU_CASES[-2:-1]
    runs += [(case, config, torch.float16) for config in CPU_CONFIGS[1:] for case in small_tile_cases]
    for case, config, dtype in runs:
        errors = errors_against_sdpa(case, dtype, "cpu", config)
        assert max(errors.values()) < (1e-2 if dtype == torch.float16 else 1e-4), (case, config, dtype, errors)
    print("interpreter cases passed")


def test_block_d_and_alignment_hint():
    assert [ta._block_d(d) for d in (8, 16, 24, 32, 40, 64)] == [16, 16, 32, 32, 64, 64]
    q, k, v = make_qkv(2, 4, 10, 5, 24, "views", torch.float32, "cpu")
    assert ta._align(q, k, v) == 8                       # head stride 24 elements
    q, k, v = make_qkv(2, 4, 10, 5, 24, "padded", torch.float32, "cpu")
    assert ta._align(q, k, v) == 1                       # head stride 27


def test_rejects_bad_inputs():
    q = torch.zeros(2, 4, 10, 24)
    kv = torch.zeros(2, 4, 5, 24)
    with pytest.raises(ValueError, match="4-d"):
        ta.datapoint_attention(q[0], kv[0], kv[0])
    with pytest.raises(ValueError, match="disagree"):
        ta.datapoint_attention(q, kv[:, :2], kv)
    with pytest.raises(ValueError, match="disagree"):
        ta.datapoint_attention(q, kv[..., :16], kv[..., :16])
    with pytest.raises(ValueError, match="at least one key"):
        ta.datapoint_attention(q, kv[:, :, :0], kv[:, :, :0])
    with pytest.raises(ValueError, match="dtype"):
        ta.datapoint_attention(q.long(), kv.long(), kv.long())
    with pytest.raises(ValueError, match="one device"):
        ta.datapoint_attention(q, kv, kv.to("meta"))
    for bad in (torch.tensor([3, 4]), torch.tensor(3.0), torch.tensor(True), torch.tensor(3, device="meta")):
        with pytest.raises(ValueError, match="num_keys"):
            ta.datapoint_attention(q, kv, kv, num_keys=bad)
    with pytest.raises(ValueError, match="test_rows_only needs num_keys"):
        ta.datapoint_attention(q, q, q, test_rows_only=True)
    with pytest.raises(ValueError, match="as many query rows"):
        ta.datapoint_attention(q, kv, kv, num_keys=torch.tensor(3), test_rows_only=True)
    with pytest.raises(ValueError, match="int32"):
        big = torch.empty(2 ** 16, 2 ** 16, 16, device="meta").unsqueeze(1)     # no memory behind it
        ta.datapoint_attention(big, big, big)
    with pytest.raises(ValueError, match="head sizes"):
        ta.datapoint_attention(torch.zeros(1, 1, 2, 256), torch.zeros(1, 1, 2, 256), torch.zeros(1, 1, 2, 256))
    for scale in (-0.2, 0.0, float("nan")):
        with pytest.raises(ValueError, match="positive scale"):
            ta.datapoint_attention(q, kv, kv, scale=scale)


def test_import_needs_no_triton():
    code = ("import sys, torch; sys.modules['triton'] = None; import triton_attention as ta\n"
            "try:\n    ta.datapoint_attention(*[torch.zeros(1, 1, 2, 8)] * 3)\n"
            "except RuntimeError as e:\n    print('ok' if 'needs triton' in str(e) else e)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_interpreter_matches_sdpa():
    env = dict(os.environ, TRITON_INTERPRET="1")
    code = "import tests.test_triton_attention as t; t.run_interpreter_cases()"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and "interpreter cases passed" in result.stdout, result.stderr[-3000:]


@pytest.mark.skipif(not HAS_GPU, reason="needs CUDA and triton")
@pytest.mark.parametrize("case", GPU_CASES)
def test_gpu_matches_sdpa(case):
    errors = errors_against_sdpa(case, torch.bfloat16, "cuda")
    print(case, errors)
    # "-far": dQ sums dS * k with k near +5 while the dS sum to 0, so bf16's rounding of dS is multiplied by 5
    # (fp16 on the CPU: 4e-3 where the other layouts give 3e-4).
    assert max(errors.values()) < (8e-2 if case[5].endswith("-far") else 2e-2), errors


@pytest.mark.skipif(not HAS_GPU, reason="needs CUDA and triton")
@pytest.mark.parametrize("config", CPU_CONFIGS[1:], ids=["split-dq", "atomic-dq"])
def test_gpu_configs_match_sdpa(config):
    errors = errors_against_sdpa((3, 4, 999, 333, 24, "views"), torch.bfloat16, "cuda", config)
    assert max(errors.values()) < 2e-2, errors


@pytest.mark.skipif(not HAS_GPU, reason="needs CUDA and triton")
def test_gpu_key_length_is_a_runtime_argument():
    """A new split must not compile new kernels (the key length changes every step)."""
    def compiled():
        # Triton keeps one kernel cache per device: (kernel_cache, key_cache, target, backend, binder).
        return {name: sum(len(c[0]) for c in kernel.device_caches.values())
                for name, kernel in (("fwd", ta._fwd_kernel), ("delta", ta._delta_kernel), ("bwd", ta._bwd_kernel))}
    errors_against_sdpa((2, 4, 500, 100, 24, "views"), torch.bfloat16, "cuda")
    before = compiled()
    errors_against_sdpa((2, 4, 500, 333, 24, "views"), torch.bfloat16, "cuda")
    assert compiled() == before and sum(before.values()) >= 3


def model_against_sdpa(attention: str):
    """The whole model in bf16 on CUDA, `attention` with the last layer on the target's test rows against SDPA with
    full layers, the same weights: (logits, logits_ref, gradients, gradients_ref), logits (B, R-S, 2)."""
    from model import ModelConfig, NanoTabPFNModel
    torch.manual_seed(0)
    ref = NanoTabPFNModel(ModelConfig(attention="sdpa")).cuda()
    mine = NanoTabPFNModel(ModelConfig(attention=attention, last_layer_target_only=True)).cuda()
    mine.load_state_dict(ref.state_dict())
    x, y = torch.randn(2, 3001, 5, device="cuda"), (torch.rand(2, 1237, device="cuda") < 0.5).float()
    results = []
    for model in (mine, ref):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model((x, y), train_test_split_index=1237).float()             # (B, R-S, 2)
        (logits * torch.linspace(-1, 1, logits.numel(), device="cuda").view_as(logits)).sum().backward()
        results.append((logits, torch.cat([p.grad.flatten() for p in model.parameters()])))
    (logits, grads), (logits_ref, grads_ref) = results
    return logits, logits_ref, grads, grads_ref


@pytest.mark.skipif(not HAS_GPU, reason="needs CUDA and triton")
def test_gpu_model_with_triton_and_the_last_layer_shortcut_matches_sdpa():
    logits, logits_ref, grads, grads_ref = model_against_sdpa("triton")
    assert logits.shape == (2, 3001 - 1237, 2)
    assert relative_error(logits, logits_ref) < 2e-2 and relative_error(grads, grads_ref) < 5e-2


def test_source_digest_reaches_the_ops_arguments():
    """The config list the ops take ends with this file's digest (the compile caches' key), and reads back."""
    ints = ta._config_ints(ta.DEFAULT_CONFIG)
    assert ints[-1] == ta.SOURCE_DIGEST and ta._config(ints) == ta.DEFAULT_CONFIG


# Edits of a helper each part calls, and the sum they scale: (old text, new text, printed sum, factor).
KERNEL_EDITS = {"forward": ("l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i * alpha + tl.sum(p, 1) * 0.5", 0, 2.0),
                "backward": ("return dk * SM_SCALE, dv", "return dk * SM_SCALE, dv * 2.0", 1, 2.0)}


@pytest.mark.skipif(not HAS_GPU, reason="needs CUDA and triton")
@pytest.mark.parametrize("part", KERNEL_EDITS)
def test_gpu_compiled_op_follows_an_edited_kernel(tmp_path, part):
    """One Inductor cache, the same compiled forward + backward on triton_attention.py and on a copy with one
    helper edited: the copy's output (or dV) must change by the edit's factor, not come back from the cache."""
    old, new, which, factor = KERNEL_EDITS[part]
    source = open(os.path.join(ROOT, "triton_attention.py")).read()
    assert source.count(old) == 1
    script = ("import torch, triton_attention as ta\n"
              "torch.manual_seed(0)\n"
              "q, k, v = (torch.randn(2, 4, 300, 24, device='cuda', dtype=torch.bfloat16, requires_grad=True)\n"
              "           for _ in range(3))\n"
              "step = torch.compile(lambda q, k, v: ta.datapoint_attention(q, k[:, :, :100], v[:, :, :100]))\n"
              "out = step(q, k, v)\n"
              "out.float().sum().backward()\n"
              "print(float(out.float().abs().sum()), float(v.grad.float().abs().sum()))\n")
    sums = []
    for name, text in (("first", source), ("edited", source.replace(old, new))):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "triton_attention.py").write_text(text)
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PYTHONPATH=str(folder))
        result = subprocess.run([sys.executable, "-c", script], cwd=folder, env=env, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        sums.append(float(result.stdout.split()[-2 + which]))
    assert sums[1] == pytest.approx(factor * sums[0], rel=1e-2), sums
