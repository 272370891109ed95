"""Where the triton datapoint kernels' time goes, and whether packed bf16 exponentials help (blog shape, one layer).

1. The special-function unit: throughput of ex2.approx.f32 against ex2.approx.ftz.bf16x2 and ex2.approx.f16x2
   (one result per lane per instruction, or two?), in long independent chains.
2. Variants of triton_attention.py made by text substitution (each written to its own file and imported under its
   own op namespace): base; "bf16x2-bwd" (the backward's recomputed P from packed bf16 exponentials); "bf16x2-fwd"
   (the forward's P likewise); "bf16x2-all"; "no-exp" (every exp2 replaced by one FMA: wrong results, a timing
   bound only). Each correct variant is checked against fp32 math attention before timing; do_bench, L2 flushed.
usage: python probe.py [product-tree]   (the tree holding triton_attention.py; default: the repository root)
"""
import importlib.util
import os
import sys
import tempfile

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "..")
SOURCE = open(os.path.join(ROOT, "triton_attention.py")).read()


# --- 1. special-function unit throughput -------------------------------------------------------------------------
@triton.jit
def _chain(X, Y, ITERS: tl.constexpr, BLOCK: tl.constexpr, ASM: tl.constexpr, PACK: tl.constexpr):
    """x <- -exp2(x), ITERS times, per element: stays in [-1, 0) (the negation is one xor inside the asm)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    for _ in range(ITERS):
        x = tl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=x.dtype, is_pure=True, pack=PACK)
    tl.store(Y + offs, x)


def sfu_table():
    n, block, iters = 132 * 64 * 1024, 1024, 512
    rows = []
    for name, dtype, pack, sign in (("ex2.approx.f32", torch.float32, 1, "0x80000000"),
                                    ("ex2.approx.ftz.bf16x2", torch.bfloat16, 2, "0x80008000"),
                                    ("ex2.approx.f16x2", torch.float16, 2, "0x80008000")):
        asm = f"{{ .reg .b32 t; {name} t, $1; xor.b32 $0, t, {sign}; }}"
        x = -torch.rand(n, device="cuda").to(dtype)
        y = torch.empty_like(x)
        kw = dict(ITERS=iters, BLOCK=block, ASM=asm, PACK=pack, num_warps=4)
        grid = (n // block,)
        fn = _chain
        fn[grid](x, y, **kw)
        ref = x.float()
        for _ in range(iters):
            ref = -torch.exp2(ref)
        err = (y.float() - ref).abs().max().item()
        ms = do_bench(lambda: fn[grid](x, y, **kw), warmup=10, rep=100)
        rows.append((name, ms, n * iters / ms / 1e9, err))
    print("| instruction | ms | exponentials / s (1e12) | max abs error vs torch after the chain |")
    print("|---|---|---|---|")
    for name, ms, rate, err in rows:
        print(f"| {name} | {ms:.3f} | {rate:.2f} | {err:.2e} |")


# --- 2. kernel variants ------------------------------------------------------------------------------------------
PACKED = '''
    @triton.jit
    def _exp2_bf16(x):
        """exp2 of x rounded to bf16, two per instruction: bf16 out."""
        return tl.inline_asm_elementwise("ex2.approx.ftz.bf16x2 $0, $1;", "=r,r", [x.to(tl.bfloat16)],
                                         dtype=tl.bfloat16, is_pure=True, pack=2)

    @triton.jit
    def _head('''

FWD_OLD = """        p = tl.math.exp2(qk * QK_SCALE - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)"""
FWD_NEW = """        p = _exp2_bf16(qk * QK_SCALE - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p.to(tl.float32), 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)"""
KV_OLD = """            p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * QK_SCALE - lse[None, :])
            dv += tl.dot(p_t.to(do.dtype), do)
            dp_t = tl.dot(v, tl.trans(do))
            ds_t = p_t * (dp_t - delta[None, :])"""
KV_NEW = """            p_b = _exp2_bf16(tl.dot(k, tl.trans(q)) * QK_SCALE - lse[None, :])
            dv += tl.dot(p_b, do)
            dp_t = tl.dot(v, tl.trans(do))
            ds_t = p_b.to(tl.float32) * (dp_t - delta[None, :])"""
Q_OLD = "            p = tl.math.exp2(tl.dot(q, tl.trans(k)) * QK_SCALE - lse[:, None])"
Q_NEW = "            p = _exp2_bf16(tl.dot(q, tl.trans(k)) * QK_SCALE - lse[:, None]).to(tl.float32)"


def variant_source(name: str) -> str:
    src = SOURCE.replace("nanotabpfn::", f"probe_{name.replace('-', '_')}::")
    src = src.replace("torch.ops.nanotabpfn.", f"torch.ops.probe_{name.replace('-', '_')}.")
    if name.startswith("bf16x2"):
        src = src.replace("\n    @triton.jit\n    def _head(", PACKED, 1)
    for old, new, on in ((FWD_OLD, FWD_NEW, name in ("bf16x2-fwd", "bf16x2-all")),
                         (KV_OLD, KV_NEW, name in ("bf16x2-bwd", "bf16x2-all")),
                         (Q_OLD, Q_NEW, name in ("bf16x2-bwd", "bf16x2-all"))):
        if on:
            assert src.count(old) == 1, (name, old)
            src = src.replace(old, new)
    if name == "no-exp":
        src = src.replace("tl.math.exp2(", "_fma_(")
        src = src.replace("\n    @triton.jit\n    def _head(",
                          "\n    @triton.jit\n    def _fma_(x):\n        return x * 0.001 + 0.5\n\n"
                          "    @triton.jit\n    def _head(", 1)
    return src


def load_variant(name: str):
    path = os.path.join(tempfile.mkdtemp(), f"ta_{name.replace('-', '_')}.py")
    with open(path, "w") as f:
        f.write(variant_source(name))
    spec = importlib.util.spec_from_file_location(f"ta_{name.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


N, H, R, D = 36, 4, 5000, 24


def inputs(S, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    qkv = torch.randn(N, R, 3, H, D, device="cuda", generator=g).to(torch.bfloat16)   # the model's in-projection
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))                               # (N, H, R, D) views
    dout = torch.randn(N, R, H, D, device="cuda", generator=g).to(torch.bfloat16).transpose(1, 2)  # model layout
    return q, k[:, :, :S], v[:, :, :S], dout


def reference(q, k, v, dout):
    q32, k32, v32 = (t.float().requires_grad_() for t in (q, k, v))
    out = torch.softmax(q32 @ k32.transpose(-1, -2) * D ** -0.5, -1) @ v32
    out.backward(dout.float())
    return out, q32.grad, k32.grad, v32.grad


def run_variant(module, q, k, v, dout):
    cfg = module._config_ints(module.DEFAULT_CONFIG)
    ops = getattr(torch.ops, module.__name__.replace("ta_", "probe_"))
    fwd = lambda: ops.datapoint_attention_fwd(q, k, v, None, D ** -0.5, cfg)
    out, lse = fwd()
    bwd = lambda: ops.datapoint_attention_bwd(q, k, v, out, lse, dout, None, D ** -0.5, cfg)
    return fwd, bwd, (out, *bwd())


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    try:
        sfu_table()
    except Exception as e:   # an assembler refusal is itself the answer
        print(f"sfu table failed: {type(e).__name__}: {str(e)[:300]}")
    names = ("base", "bf16x2-bwd", "bf16x2-fwd", "bf16x2-all", "no-exp")
    modules = {name: load_variant(name) for name in names}
    print("\n| variant | S | max abs error / base's: out, dq, dk, dv |")
    print("|---|---|---|")
    for S in (1, 777, 2500):
        q, k, v, dout = inputs(S, seed=S)
        ref = reference(q, k, v, dout)
        errs = {}
        for name in names[:-1]:
            got = run_variant(modules[name], q, k, v, dout)[2]
            errs[name] = [(a.float() - b).abs().max().item() for a, b in zip(got, ref)]
            ratio = ", ".join(f"{e:.2e} ({e / max(b, 1e-12):.2f}x)" for e, b in zip(errs[name], errs["base"]))
            print(f"| {name} | {S} | {ratio} |", flush=True)
    print("\n| variant | S | round | fwd (ms) | bwd (ms) | fwd + bwd (ms) |")
    print("|---|---|---|---|---|---|")
    for S in (900, 2500, 4100):
        q, k, v, dout = inputs(S)
        for rnd in range(2):
            for name in names:
                fwd, bwd, _ = run_variant(modules[name], q, k, v, dout)
                f = do_bench(fwd, warmup=20, rep=200)
                b = do_bench(bwd, warmup=20, rep=200)
                print(f"| {name} | {S} | {rnd} | {f:.3f} | {b:.3f} | {f + b:.3f} |", flush=True)


if __name__ == "__main__":
    main()
