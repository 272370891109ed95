"""The backward's two launches (dK/dV programs, dQ programs) are independent: run side by side on two streams, each
keeps its own registers (180 / 122 at D = 24) and an SM can hold programs of both. This probe times the op as it is
beside the same launches forked onto a side stream, in either order, eager (do_bench) and in a CUDA graph, at the
blog's shape (N = 36, H = 4, R = 5000, D = 24), after checking that every variant gives the op's bits.
usage: PYTHONPATH=<tree> python probe.py
"""
import statistics

import torch
import triton
from triton.testing import do_bench

import triton_attention as ta

N, H, R, D = 36, 4, 5000, 24


def inputs(S, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    qkv = torch.randn(N, R, 3, H, D, device="cuda", generator=g).to(torch.bfloat16)   # the model's in-projection
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))                               # (N, H, R, D) views
    dout = torch.randn(N, R, H, D, device="cuda", generator=g).to(torch.bfloat16).transpose(1, 2)
    return q, k[:, :, :S], v[:, :, :S], dout


def bwd(q, k, v, out, lse, dout, order, side, cfg=ta.DEFAULT_CONFIG):
    """_attention_bwd's launches; order "kv-q" or "q-kv"; side: the second launch on a side stream."""
    scale = D ** -0.5
    n, heads, rows, d = q.shape
    keys = k.shape[2]
    block_d = ta._block_d(d)
    delta = torch.empty_like(lse)
    ta._delta_kernel[(triton.cdiv(rows, 128), n * heads)](
        out, dout, delta, rows, heads, *out.stride(), *dout.stride(), D=d, BLOCK_D=block_d,
        ALIGN=ta._align(out, dout), BLOCK_M=128)
    dq = ta._rows_major(n, rows, heads, d, q)
    dk = ta._rows_major(n, keys, heads, d, k)
    dv = ta._rows_major(n, keys, heads, d, v)
    args = (q, k, v, dout, dq, dk, dv, lse, delta, lse, rows, keys, heads,
            *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *dq.stride()[:3], *dk.stride()[:3],
            *dv.stride()[:3])
    meta = dict(QK_SCALE=scale * ta.LOG2E, SM_SCALE=scale, D=d, BLOCK_D=block_d,
                ALIGN=ta._align(q, k, v, dout, dq, dk, dv), ATOMIC_DQ=False, KEYS_IN_MEMORY=False,
                TEST_ROWS_ONLY=False)

    def kv():
        ta._bwd_kernel[(triton.cdiv(keys, cfg.kv_block_n), n * heads)](
            *args, **meta, BLOCK_M=cfg.kv_block_m, BLOCK_N=cfg.kv_block_n, KEY_PART=True,
            num_warps=cfg.kv_warps, num_stages=cfg.kv_stages)

    def qq():
        ta._bwd_kernel[(triton.cdiv(rows, cfg.q_block_m), n * heads)](
            *args, **meta, BLOCK_M=cfg.q_block_m, BLOCK_N=cfg.q_block_n, KEY_PART=False,
            num_warps=cfg.q_warps, num_stages=cfg.q_stages)

    first, second = (kv, qq) if order == "kv-q" else (qq, kv)
    first()
    if side:
        main = torch.cuda.current_stream()
        SIDE.wait_stream(main)          # the side launch reads delta: it waits for the delta kernel
        with torch.cuda.stream(SIDE):
            second()
        main.wait_stream(SIDE)          # join: the caller's stream sees dK, dV, dQ complete
    else:
        second()
    return dq, dk, dv


SIDE = None


def main():
    global SIDE
    SIDE = torch.cuda.Stream()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    cfg = ta._config_ints(ta.DEFAULT_CONFIG)
    variants = {"op": None, "serial kv-q": ("kv-q", False), "streams kv-q": ("kv-q", True),
                "streams q-kv": ("q-kv", True)}
    for S in (1, 777, 2500):
        q, k, v, dout = inputs(S, seed=S)
        out, lse = torch.ops.nanotabpfn.datapoint_attention_fwd(q, k, v, None, False, D ** -0.5, cfg)
        ref = torch.ops.nanotabpfn.datapoint_attention_bwd(q, k, v, out, lse, dout, None, False, D ** -0.5, cfg)
        for name, spec in variants.items():
            if spec:
                got = bwd(q, k, v, out, lse, dout, *spec)
                torch.cuda.synchronize()
                same = all(torch.equal(a, b) for a, b in zip(got, ref))
                print(f"S={S} {name}: same bits as the op: {same}")
                assert same
    print("\n| variant | S | eager ms (median of 3 do_bench) | graph ms (median of 3 x 50 replays) |")
    print("|---|---|---|---|")
    for S in (900, 2500, 4100):
        q, k, v, dout = inputs(S)
        out, lse = torch.ops.nanotabpfn.datapoint_attention_fwd(q, k, v, None, False, D ** -0.5, cfg)
        for name, spec in variants.items():
            if spec:
                fn = lambda: bwd(q, k, v, out, lse, dout, *spec)
            else:
                fn = lambda: torch.ops.nanotabpfn.datapoint_attention_bwd(q, k, v, out, lse, dout, None, False,
                                                                          D ** -0.5, cfg)
            eager = [do_bench(fn, warmup=20, rep=200) for _ in range(3)]
            for _ in range(3):
                fn()                     # warm: compiled, and the side stream used once outside capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            times = []
            for _ in range(3):
                for _ in range(5):
                    graph.replay()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(50):
                    graph.replay()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 50)
            print(f"| {name} | {S} | {statistics.median(eager):.3f} ({min(eager):.3f}-{max(eager):.3f}) | "
                  f"{statistics.median(times):.3f} ({min(times):.3f}-{max(times):.3f}) |", flush=True)


if __name__ == "__main__":
    main()
