"""Structural variants of the triton datapoint kernels, by text substitution on triton_attention.py (probe.py's
loader): each variant is checked against fp32 math attention, then timed (do_bench, L2 flushed), two rounds.

- reorder: in both backward loops, the dot that does not need P (dP = dO vᵀ) is issued before the exponentials,
  so the tensor cores can run it while the special-function unit works;
- unroll2: every key/query loop unrolled twice (tl.range loop_unroll_factor=2);
- ftz: exp2 as ex2.approx.ftz.f32 (no subnormal handling around the instruction);
- ws: the forward's main loop under tl.range(warp_specialize=True) (may not compile on Hopper);
- combined: reorder + ftz.
usage: python probe2.py [product-tree]
"""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402

KV_OLD = """            p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * QK_SCALE - lse[None, :])
            dv += tl.dot(p_t.to(do.dtype), do)
            dp_t = tl.dot(v, tl.trans(do))"""
KV_NEW = """            qk_t = tl.dot(k, tl.trans(q))
            dp_t = tl.dot(v, tl.trans(do))
            p_t = tl.math.exp2(qk_t * QK_SCALE - lse[None, :])
            dv += tl.dot(p_t.to(do.dtype), do)"""
Q_OLD = """            p = tl.math.exp2(tl.dot(q, tl.trans(k)) * QK_SCALE - lse[:, None])
            ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])"""
Q_NEW = """            qk = tl.dot(q, tl.trans(k))
            dp = tl.dot(do, tl.trans(v))
            p = tl.math.exp2(qk * QK_SCALE - lse[:, None])
            ds = p * (dp - delta[:, None])"""
LOOPS = ["        for start in range(0, S_FULL, BLOCK_N):", "        for start in range(0, R_LOOP, BLOCK_M):",
         "        for start in range(0, S, BLOCK_N):"]
FTZ = '''
    @triton.jit
    def _exp2_ftz(x):
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                         is_pure=True, pack=1)

    @triton.jit
    def _head('''


def substitutions(name: str) -> list[tuple[str, str]]:
    subs = []
    if name in ("reorder", "combined"):
        subs += [(KV_OLD, KV_NEW), (Q_OLD, Q_NEW)]
    if name == "unroll2":
        subs += [(loop, loop.replace("range(", "tl.range(").replace("):", ", loop_unroll_factor=2):"))
                 for loop in LOOPS]
    if name == "ws":
        subs += [(LOOPS[0], LOOPS[0].replace("range(", "tl.range(").replace("):", ", warp_specialize=True):"))]
    if name in ("ftz", "combined"):
        subs += [("\n    @triton.jit\n    def _head(", FTZ), ("tl.math.exp2(", "_exp2_ftz(")]
    return subs


def variant_source(name: str) -> str:
    tag = f"probe_{name.replace('-', '_')}"
    src = probe.SOURCE.replace("nanotabpfn::", f"{tag}::").replace("torch.ops.nanotabpfn.", f"torch.ops.{tag}.")
    for old, new in substitutions(name):
        count = src.count(old)
        assert count >= 1, (name, old)
        src = src.replace(old, new, 1 if old.startswith("\n") else count)
    return src


def main():
    probe.variant_source = variant_source
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    names = ["base", "reorder", "unroll2", "ftz", "combined", "ws"]
    modules = {}
    for name in names:
        try:
            modules[name] = probe.load_variant(name)
            q, k, v, dout = probe.inputs(777, seed=1)
            probe.run_variant(modules[name], q, k, v, dout)
        except Exception as e:   # a variant Triton refuses is itself an answer
            print(f"{name}: does not run: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            modules.pop(name, None)
    print("\n| variant | S | max abs error / base's: out, dq, dk, dv |")
    print("|---|---|---|")
    for S in (1, 777, 2500):
        q, k, v, dout = probe.inputs(S, seed=S)
        ref = probe.reference(q, k, v, dout)
        errs = {}
        for name in modules:
            got = probe.run_variant(modules[name], q, k, v, dout)[2]
            errs[name] = [(a.float() - b).abs().max().item() for a, b in zip(got, ref)]
            ratio = ", ".join(f"{e:.2e} ({e / max(b, 1e-12):.2f}x)" for e, b in zip(errs[name], errs["base"]))
            print(f"| {name} | {S} | {ratio} |", flush=True)
    print("\n| variant | S | round | fwd (ms) | bwd (ms) | fwd + bwd (ms) |")
    print("|---|---|---|---|---|---|")
    for S in (900, 2500, 4100):
        q, k, v, dout = probe.inputs(S)
        for rnd in range(2):
            for name in modules:
                fwd, bwd, _ = probe.run_variant(modules[name], q, k, v, dout)
                f = do_bench(fwd, warmup=20, rep=200)
                b = do_bench(bwd, warmup=20, rep=200)
                print(f"| {name} | {S} | {rnd} | {f:.3f} | {b:.3f} | {f + b:.3f} |", flush=True)


if __name__ == "__main__":
    main()
