"""Round 3, on top of probe2's "reorder" (the backward's dP dot issued before the exponentials): tile configs of the
backward's two parts, and a software-pipelined forward (the next key block's scores issued before this block's
softmax). Same method as probe2 (check against fp32 math attention, then do_bench, two rounds).
usage: python probe3.py [product-tree]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402
import probe2  # noqa: E402

FWD_LOOP = """        for start in range(0, S_FULL, BLOCK_N):
            acc, m_i, l_i = _fwd_step(acc, m_i, l_i, q, k_ptrs, v_ptrs, start, S, offs_n, offs_d,
                                      sks, svs, QK_SCALE, D, False)
"""
FWD_PIPELINED = """        dmask = offs_d[None, :] < D
        if S_FULL > 0:
            qk = tl.dot(q, tl.trans(tl.load(k_ptrs, mask=dmask, other=0.0)))
            for start in range(BLOCK_N, S_FULL, BLOCK_N):
                qk_next = tl.dot(q, tl.trans(tl.load(k_ptrs + start * sks, mask=dmask, other=0.0)))
                v = tl.load(v_ptrs + (start - BLOCK_N) * svs, mask=dmask, other=0.0)
                m_new = tl.maximum(m_i, tl.max(qk, 1) * QK_SCALE)
                p = tl.math.exp2(qk * QK_SCALE - m_new[:, None])
                alpha = tl.math.exp2(m_i - m_new)
                l_i = l_i * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m_i = m_new
                qk = qk_next
            v = tl.load(v_ptrs + (S_FULL - BLOCK_N) * svs, mask=dmask, other=0.0)
            m_new = tl.maximum(m_i, tl.max(qk, 1) * QK_SCALE)
            p = tl.math.exp2(qk * QK_SCALE - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
"""
CONFIGS = {"kvn64": [("kv_block_n: int = 128", "kv_block_n: int = 64")],
           "kvm64": [("kv_block_m: int = 32 ", "kv_block_m: int = 64 ")],
           "kvw8": [("kv_warps: int = 4", "kv_warps: int = 8")],
           "qn64": [("q_block_n: int = 32 ", "q_block_n: int = 64 ")],
           "qm64": [("q_block_m: int = 128", "q_block_m: int = 64")],
           "kvs4": [("kv_stages: int = 3", "kv_stages: int = 4")],
           "fwdpipe": [(FWD_LOOP, FWD_PIPELINED)]}


SUBSTITUTIONS = probe2.substitutions


def substitutions(name: str) -> list[tuple[str, str]]:
    """"base", "reorder", or "reorder_<config>" (the name as load_variant passes it)."""
    if name in ("base", "reorder"):
        return SUBSTITUTIONS(name)
    return SUBSTITUTIONS("reorder") + CONFIGS[name.removeprefix("reorder_")]


def main():
    probe2.substitutions = substitutions          # probe2.variant_source reads it from its module
    run(["base", "reorder"] + [f"reorder+{c}" for c in CONFIGS])


def run(names):
    from triton.testing import do_bench
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    probe.variant_source = probe2.variant_source
    modules = {}
    for name in names:
        try:
            modules[name] = probe.load_variant(name.replace("+", "_"))
            q, k, v, dout = probe.inputs(777, seed=1)
            probe.run_variant(modules[name], q, k, v, dout)
        except Exception as e:
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
