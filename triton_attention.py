"""Datapoint attention for small head sizes (D = 16..64) in Triton: forward and backward, no mask.

D is padded to a power of two (>= 16) by masked loads; the key length S is a run-time argument (one compilation
serves every split) or a device scalar (num_keys: the padded step of a CUDA graph, keys a prefix); the scale is a
constexpr carrying log2(e) (one exp2 per score); fp32 accumulation. The backward is FlashAttention-2's:
delta = rowsum(dO * O), then programs that own a key block (dK, dV) and programs that own a query block (dQ), in two
launches of separately compiled kernels, so each part gets its own registers and occupancy; optionally dQ by fp32
atomics in the first. Both are torch.library triton_ops (nanotabpfn::datapoint_attention_fwd, _bwd), which
torch.compile traces without a graph break. Importing needs neither triton nor a GPU.
"""
import hashlib
import math
import os
from dataclasses import dataclass, fields

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # the module still imports (and validates inputs); launching needs triton
    triton = None

LOG2E = 1.4426950408889634
# torch.compile's AOTAutograd cache keys on the traced graph, which holds the ops' arguments but not the kernels'
# text: this file's digest rides in the ops' config list, so an edited kernel compiles again instead of running stale.
SOURCE_DIGEST = int(hashlib.sha256(open(__file__, "rb").read()).hexdigest()[:8], 16)


@dataclass(frozen=True)
class KernelConfig:
    """Tile shapes and launch parameters of the three kernels (one compilation per config and D)."""
    fwd_block_m: int = 128       # queries per forward program
    fwd_block_n: int = 32        # keys per forward iteration
    fwd_warps: int = 4
    fwd_stages: int = 3
    kv_block_m: int = 32         # queries per dK/dV iteration
    kv_block_n: int = 128        # keys per dK/dV program
    q_block_m: int = 128         # queries per dQ program
    q_block_n: int = 32          # keys per dQ iteration
    kv_warps: int = 4
    kv_stages: int = 3
    q_warps: int = 4
    q_stages: int = 3
    atomic_dq: bool = False      # dQ by fp32 atomics inside the dK/dV programs (no dQ launch)


DEFAULT_CONFIG = KernelConfig()

if triton is not None:
    @triton.jit
    def _head(ptr, n, h, stride_n, stride_h, ALIGN: tl.constexpr):
        """Pointer to one (sequence, head); ALIGN (elements) lets the row loads vectorize."""
        return ptr + tl.multiple_of(n * stride_n + h * stride_h, ALIGN)

    @triton.jit
    def _tile(ptr, n, h, stride_n, stride_h, rows, stride_r, stride_d, R, offs_d,
              D: tl.constexpr, ALIGN: tl.constexpr):
        """The given rows (those < R) of one (sequence, head): a (rows, BLOCK_D) tile, D zero-padded."""
        mask = (rows[:, None] < R) & (offs_d[None, :] < D)
        ptrs = _head(ptr, n, h, stride_n, stride_h, ALIGN) + rows[:, None] * stride_r + offs_d[None, :] * stride_d
        return tl.load(ptrs, mask=mask, other=0.0)

    @triton.jit
    def _fwd_step(acc, m_i, l_i, q, k_ptrs, v_ptrs, start, S, offs_n, offs_d, sks, svs,
                  QK_SCALE: tl.constexpr, D: tl.constexpr, TAIL: tl.constexpr):
        """One key block of the online softmax (log2 domain)."""
        keys = start + offs_n
        kmask = (keys[:, None] < S) & (offs_d[None, :] < D)
        k = tl.load(k_ptrs + start * sks, mask=kmask, other=0.0)
        v = tl.load(v_ptrs + start * svs, mask=kmask, other=0.0)
        qk = tl.dot(q, tl.trans(k))
        if TAIL:
            qk = tl.where(keys[None, :] < S, qk, float("-inf"))
        # the max of the raw scores, scaled once per row: the scale then rides in the exponent's FMA
        m_new = tl.maximum(m_i, tl.max(qk, 1) * QK_SCALE)
        p = tl.math.exp2(qk * QK_SCALE - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        return acc, m_new, l_i

    # The lengths vary every step: no specialization on their values (1, multiples of 16), one compilation.
    @triton.jit(do_not_specialize=["R", "S", "S_FULL"])
    def _fwd_kernel(Q, K, V, O, LSE, NUM_KEYS, R, S, S_FULL, H,
                   sqn, sqh, sqr, sqd, skn, skh, sks, skd, svn, svh, svs, svd, son, soh, sor, sod,
                   QK_SCALE: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, ALIGN: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KEYS_IN_MEMORY: tl.constexpr,
                   TEST_ROWS_ONLY: tl.constexpr):
        """out[n, h, rows] = softmax(q k^T * scale) v; LSE (N*H, R) keeps the log2-domain logsumexp.
        KEYS_IN_MEMORY: the keys are the first *NUM_KEYS (at most S) rows of K, V. TEST_ROWS_ONLY (with it): query
        rows below the key count output zero."""
        pid_m = tl.program_id(0)
        s_end = S
        if KEYS_IN_MEMORY:
            S = tl.minimum(tl.load(NUM_KEYS).to(tl.int32), S)
            s_end = S
            if TEST_ROWS_ONLY:   # a block of train rows only: no work, zeros out
                s_end = tl.where(pid_m * BLOCK_M + BLOCK_M <= S, 0, S)
            S_FULL = s_end // BLOCK_N * BLOCK_N
        pid_nh = tl.program_id(1)
        n = pid_nh // H
        h = pid_nh % H
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        q = _tile(Q, n, h, sqn, sqh, offs_m, sqr, sqd, R, offs_d, D, ALIGN)
        k_ptrs = _head(K, n, h, skn, skh, ALIGN) + offs_n[:, None] * sks + offs_d[None, :] * skd
        v_ptrs = _head(V, n, h, svn, svh, ALIGN) + offs_n[:, None] * svs + offs_d[None, :] * svd
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for start in range(0, S_FULL, BLOCK_N):
            acc, m_i, l_i = _fwd_step(acc, m_i, l_i, q, k_ptrs, v_ptrs, start, S, offs_n, offs_d,
                                      sks, svs, QK_SCALE, D, False)
        for start in range(S_FULL, s_end, BLOCK_N):
            acc, m_i, l_i = _fwd_step(acc, m_i, l_i, q, k_ptrs, v_ptrs, start, S, offs_n, offs_d,
                                      sks, svs, QK_SCALE, D, True)
        out = acc / l_i[:, None]
        lse = m_i + tl.math.log2(l_i)
        if TEST_ROWS_ONLY:   # skipped blocks divided 0 by 0: where() drops those rows
            out = tl.where(offs_m[:, None] >= S, out, 0.0)
            lse = tl.where(offs_m >= S, lse, 0.0)
        tl.store(_head(O, n, h, son, soh, ALIGN) + offs_m[:, None] * sor + offs_d[None, :] * sod,
                 out.to(O.dtype.element_ty), mask=(offs_m[:, None] < R) & (offs_d[None, :] < D))
        tl.store(LSE + pid_nh * R + offs_m, lse, mask=offs_m < R)

    @triton.jit(do_not_specialize=["R"])
    def _delta_kernel(O, DO, DELTA, R, H, son, soh, sor, sod, sdn, sdh, sdr, sdd,
                     D: tl.constexpr, BLOCK_D: tl.constexpr, ALIGN: tl.constexpr, BLOCK_M: tl.constexpr):
        """DELTA (N*H, R) = rowsum(dO * O) in fp32."""
        pid_nh = tl.program_id(1)
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        o = _tile(O, pid_nh // H, pid_nh % H, son, soh, offs_m, sor, sod, R, offs_d, D, ALIGN).to(tl.float32)
        do = _tile(DO, pid_nh // H, pid_nh % H, sdn, sdh, offs_m, sdr, sdd, R, offs_d, D, ALIGN).to(tl.float32)
        tl.store(DELTA + pid_nh * R + offs_m, tl.sum(o * do, 1), mask=offs_m < R)

    @triton.jit
    def _dkdv(Q, DO, DQ, LSE, DELTA, k, v, n, h, pid_nh, R, R_LOOP, Q_START,
              sqn, sqh, sqr, sqd, sdn, sdh, sdr, sdd, sqa_n, sqa_h, sqa_r,
              QK_SCALE: tl.constexpr, SM_SCALE: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
              ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ATOMIC_DQ: tl.constexpr,
              TEST_ROWS_ONLY: tl.constexpr):
        """dK, dV of one key block (k, v already loaded): loops over the query blocks below R_LOOP (R, or 0), from
        the one holding Q_START with TEST_ROWS_ONLY (rows below it load as 0, like rows past R)."""
        offs_d = tl.arange(0, BLOCK_D)
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        q_base = _head(Q, n, h, sqn, sqh, ALIGN) + offs_d[None, :] * sqd
        do_base = _head(DO, n, h, sdn, sdh, ALIGN) + offs_d[None, :] * sdd
        lo = 0
        if TEST_ROWS_ONLY:
            lo = Q_START // BLOCK_M * BLOCK_M
        for start in range(lo, R_LOOP, BLOCK_M):
            rows = start + tl.arange(0, BLOCK_M)
            valid = rows < R
            if TEST_ROWS_ONLY:
                valid = valid & (rows >= Q_START)
            rmask = valid[:, None] & (offs_d[None, :] < D)
            q = tl.load(q_base + rows[:, None] * sqr, mask=rmask, other=0.0)
            do = tl.load(do_base + rows[:, None] * sdr, mask=rmask, other=0.0)
            lse = tl.load(LSE + pid_nh * R + rows, mask=valid, other=0.0)
            delta = tl.load(DELTA + pid_nh * R + rows, mask=valid, other=0.0)
            # Transposed scores (keys x queries): rows not valid have q = dO = 0, so they add nothing. dP does not
            # need P: issued before the exponentials, the tensor cores run it while they are computed.
            qk_t = tl.dot(k, tl.trans(q))
            dp_t = tl.dot(v, tl.trans(do))
            # A score never exceeds its row's logsumexp, so min(., 0) changes no valid p; keys past S load as 0
            # and score 0, and without it exp2(-lse) overflows to inf once a row's scores all sit below -128
            # (log2 units): inf * 0 = NaN in dQ (results/nvidia-h100/nan-triton).
            p_t = tl.math.exp2(tl.minimum(qk_t * QK_SCALE - lse[None, :], 0.0))
            dv += tl.dot(p_t.to(do.dtype), do)
            ds_t = p_t * (dp_t - delta[None, :])
            dk += tl.dot(ds_t.to(q.dtype), q)
            if ATOMIC_DQ:
                dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k) * SM_SCALE
                dq_ptrs = _head(DQ, n, h, sqa_n, sqa_h, ALIGN) + rows[:, None] * sqa_r + offs_d[None, :]
                tl.atomic_add(dq_ptrs, dq, mask=rmask, sem="relaxed")
        return dk * SM_SCALE, dv

    @triton.jit
    def _dq(K, V, q, do, lse, delta, n, h, S, skn, skh, sks, skd, svn, svh, svs, svd,
            QK_SCALE: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, ALIGN: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """dQ of one query block: loops over every key block (keys past S load as 0 and add nothing)."""
        offs_d = tl.arange(0, BLOCK_D)
        offs_n = tl.arange(0, BLOCK_N)
        dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        k_ptrs = _head(K, n, h, skn, skh, ALIGN) + offs_n[:, None] * sks + offs_d[None, :] * skd
        v_ptrs = _head(V, n, h, svn, svh, ALIGN) + offs_n[:, None] * svs + offs_d[None, :] * svd
        for start in range(0, S, BLOCK_N):
            kmask = ((start + offs_n)[:, None] < S) & (offs_d[None, :] < D)
            k = tl.load(k_ptrs + start * sks, mask=kmask, other=0.0)
            v = tl.load(v_ptrs + start * svs, mask=kmask, other=0.0)
            qk = tl.dot(q, tl.trans(k))
            dp = tl.dot(do, tl.trans(v))   # before the exponentials, as in _dkdv
            p = tl.math.exp2(tl.minimum(qk * QK_SCALE - lse[:, None], 0.0))   # bounded, as in _dkdv
            ds = p * (dp - delta[:, None])
            dq += tl.dot(ds.to(k.dtype), k)
        return dq

    # KEY_PART is a constexpr, not a branch on the program id: each part compiles alone, and the dQ programs
    # do not inherit the dK/dV programs' registers (180 against 122 at D = 24), which would halve their occupancy.
    @triton.jit(do_not_specialize=["R", "S"])
    def _bwd_kernel(Q, K, V, DO, DQ, DK, DV, LSE, DELTA, NUM_KEYS, R, S, H,
                   sqn, sqh, sqr, sqd, skn, skh, sks, skd, svn, svh, svs, svd, sdn, sdh, sdr, sdd,
                   sqa_n, sqa_h, sqa_r, skan, skah, skas, svan, svah, svas,
                   QK_SCALE: tl.constexpr, SM_SCALE: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
                   ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KEY_PART: tl.constexpr,
                   ATOMIC_DQ: tl.constexpr, KEYS_IN_MEMORY: tl.constexpr, TEST_ROWS_ONLY: tl.constexpr):
        """KEY_PART: each program writes dK, dV of one key block; else dQ of one query block. KEYS_IN_MEMORY: the
        keys are the first *NUM_KEYS of the S rows of K, V; the rows past them get zero dK, dV. TEST_ROWS_ONLY (with
        it): query rows below the key count output zero, so they pass no gradient and get zero dQ."""
        S_ROWS = S
        if KEYS_IN_MEMORY:
            S = tl.minimum(tl.load(NUM_KEYS).to(tl.int32), S)
        pid = tl.program_id(0)
        pid_nh = tl.program_id(1)
        n = pid_nh // H
        h = pid_nh % H
        offs_d = tl.arange(0, BLOCK_D)
        if KEY_PART:
            keys = pid * BLOCK_N + tl.arange(0, BLOCK_N)
            kmask = (keys[:, None] < S_ROWS) & (offs_d[None, :] < D)
            k = _tile(K, n, h, skn, skh, keys, sks, skd, S, offs_d, D, ALIGN)
            v = _tile(V, n, h, svn, svh, keys, svs, svd, S, offs_d, D, ALIGN)
            r_loop = R
            if KEYS_IN_MEMORY:
                r_loop = tl.where(pid * BLOCK_N < S, R, 0)   # a block of padding rows only: no work, zeros out
            dk, dv = _dkdv(Q, DO, DQ, LSE, DELTA, k, v, n, h, pid_nh, R, r_loop, S,
                           sqn, sqh, sqr, sqd, sdn, sdh, sdr, sdd, sqa_n, sqa_h, sqa_r,
                           QK_SCALE, SM_SCALE, D, BLOCK_D, ALIGN, BLOCK_M, BLOCK_N, ATOMIC_DQ, TEST_ROWS_ONLY)
            if KEYS_IN_MEMORY:   # rows past the keys loaded as 0 but their scores are not: zero them here
                dk = tl.where(keys[:, None] < S, dk, 0.0)
                dv = tl.where(keys[:, None] < S, dv, 0.0)
            tl.store(_head(DK, n, h, skan, skah, ALIGN) + keys[:, None] * skas + offs_d[None, :],
                     dk.to(DK.dtype.element_ty), mask=kmask)
            tl.store(_head(DV, n, h, svan, svah, ALIGN) + keys[:, None] * svas + offs_d[None, :],
                     dv.to(DV.dtype.element_ty), mask=kmask)
        else:
            rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
            rmask = (rows[:, None] < R) & (offs_d[None, :] < D)
            q = _tile(Q, n, h, sqn, sqh, rows, sqr, sqd, R, offs_d, D, ALIGN)
            do = _tile(DO, n, h, sdn, sdh, rows, sdr, sdd, R, offs_d, D, ALIGN)
            valid = rows < R
            s_loop = S
            if TEST_ROWS_ONLY:   # train rows as 0, so their dQ is 0; a block of them only skips the loop
                valid = valid & (rows >= S)
                q = tl.where(valid[:, None], q, 0.0)
                do = tl.where(valid[:, None], do, 0.0)
                s_loop = tl.where(pid * BLOCK_M + BLOCK_M <= S, 0, S)
            lse = tl.load(LSE + pid_nh * R + rows, mask=valid, other=0.0)
            delta = tl.load(DELTA + pid_nh * R + rows, mask=valid, other=0.0)
            dq = _dq(K, V, q, do, lse, delta, n, h, s_loop, skn, skh, sks, skd, svn, svh, svs, svd,
                     QK_SCALE, D, BLOCK_D, ALIGN, BLOCK_M, BLOCK_N)
            tl.store(_head(DQ, n, h, sqa_n, sqa_h, ALIGN) + rows[:, None] * sqa_r + offs_d[None, :],
                     (dq * SM_SCALE).to(DQ.dtype.element_ty), mask=rmask)


def _block_d(head_size: int) -> int:
    """The head size padded to a power of two >= 16 (tl.dot's smallest reduction)."""
    return max(16, 1 << (head_size - 1).bit_length())


def _align(*tensors: torch.Tensor) -> int:
    """Largest of 8/4/2/1 dividing every sequence and head stride (elements): a vectorization hint."""
    strides = [s for t in tensors for s in t.stride()[:2]]
    return next(a for a in (8, 4, 2, 1) if all(s % a == 0 for s in strides))


def _rows_major(n: int, rows: int, heads: int, d: int, like: torch.Tensor, dtype=None) -> torch.Tensor:
    """An (N, H, rows, D) tensor laid out as (N, rows, H, D) memory: the layout the model reshapes for free."""
    return torch.empty_strided((n, heads, rows, d), (rows * heads * d, d, heads * d, 1), device=like.device,
                               dtype=dtype or like.dtype)


def _config_ints(cfg: KernelConfig) -> list[int]:
    """The config as the ops' schema takes it: its fields in order, as ints, then SOURCE_DIGEST."""
    return [int(getattr(cfg, f.name)) for f in fields(cfg)] + [SOURCE_DIGEST]


def _config(ints: list[int]) -> KernelConfig:
    """The config back from _config_ints (the digest dropped)."""
    return KernelConfig(*(f.type(x) for f, x in zip(fields(KernelConfig), ints[:-1])))


if triton is not None:
    from torch.library import register_autograd, triton_op

    # torch < 2.13's wrap_triton refuses the interpreter's kernels; there they launch as they are.
    wrap_triton = (lambda kernel: kernel) if os.environ.get("TRITON_INTERPRET") == "1" else torch.library.wrap_triton

    @triton_op("nanotabpfn::datapoint_attention_fwd", mutates_args=())
    def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_keys: torch.Tensor | None,
                       test_rows_only: bool, scale: float, config: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """out (N, H, R, D) and the log2-domain logsumexp lse (N*H, R) fp32 that the backward needs."""
        cfg = _config(config)
        n, heads, rows, d = q.shape
        keys = k.shape[2]
        out = _rows_major(n, rows, heads, d, q)
        lse = torch.empty(n * heads, rows, device=q.device, dtype=torch.float32)
        grid = (triton.cdiv(rows, cfg.fwd_block_m), n * heads)
        full = keys // cfg.fwd_block_n * cfg.fwd_block_n   # keys in whole blocks: no masking needed there
        # Without num_keys, lse stands in for its pointer: KEYS_IN_MEMORY=False never reads it.
        wrap_triton(_fwd_kernel)[grid](
            q, k, v, out, lse, num_keys if num_keys is not None else lse, rows, keys, full, heads, *q.stride(),
            *k.stride(), *v.stride(), *out.stride(), QK_SCALE=scale * LOG2E, D=d, BLOCK_D=_block_d(d),
            ALIGN=_align(q, k, v, out), BLOCK_M=cfg.fwd_block_m, BLOCK_N=cfg.fwd_block_n,
            KEYS_IN_MEMORY=num_keys is not None, TEST_ROWS_ONLY=test_rows_only, num_warps=cfg.fwd_warps,
            num_stages=cfg.fwd_stages)
        return out, lse

    @triton_op("nanotabpfn::datapoint_attention_bwd", mutates_args=())
    def _attention_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                       dout: torch.Tensor, num_keys: torch.Tensor | None, test_rows_only: bool, scale: float,
                       config: list[int]
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """dq (N, H, R, D), dk and dv (N, H, S, D), each laid out rows-major."""
        cfg = _config(config)
        n, heads, rows, d = q.shape
        keys = k.shape[2]
        block_d = _block_d(d)
        delta = torch.empty_like(lse)
        wrap_triton(_delta_kernel)[(triton.cdiv(rows, 128), n * heads)](
            out, dout, delta, rows, heads, *out.stride(), *dout.stride(), D=d, BLOCK_D=block_d,
            ALIGN=_align(out, dout), BLOCK_M=128)
        dq = _rows_major(n, rows, heads, d, q, torch.float32 if cfg.atomic_dq else None)
        if cfg.atomic_dq:
            dq.zero_()   # the dK/dV programs add their dQ shares into it
        dk = _rows_major(n, keys, heads, d, k)
        dv = _rows_major(n, keys, heads, d, v)
        args = (q, k, v, dout, dq, dk, dv, lse, delta, num_keys if num_keys is not None else lse, rows, keys, heads,
                *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *dq.stride()[:3], *dk.stride()[:3],
                *dv.stride()[:3])
        meta = dict(QK_SCALE=scale * LOG2E, SM_SCALE=scale, D=d, BLOCK_D=block_d,
                    ALIGN=_align(q, k, v, dout, dq, dk, dv), ATOMIC_DQ=cfg.atomic_dq,
                    KEYS_IN_MEMORY=num_keys is not None, TEST_ROWS_ONLY=test_rows_only)
        wrap_triton(_bwd_kernel)[(triton.cdiv(keys, cfg.kv_block_n), n * heads)](
            *args, **meta, BLOCK_M=cfg.kv_block_m, BLOCK_N=cfg.kv_block_n, KEY_PART=True,
            num_warps=cfg.kv_warps, num_stages=cfg.kv_stages)
        if not cfg.atomic_dq:
            wrap_triton(_bwd_kernel)[(triton.cdiv(rows, cfg.q_block_m), n * heads)](
                *args, **meta, BLOCK_M=cfg.q_block_m, BLOCK_N=cfg.q_block_n, KEY_PART=False,
                num_warps=cfg.q_warps, num_stages=cfg.q_stages)
        return dq.to(q.dtype), dk, dv

    def _setup_context(ctx, inputs, output):
        q, k, v, num_keys, ctx.test_rows_only, ctx.scale, ctx.config = inputs
        ctx.save_for_backward(q, k, v, *output, num_keys)

    def _backward(ctx, dout, _dlse):
        *saved, num_keys = ctx.saved_tensors
        grads = torch.ops.nanotabpfn.datapoint_attention_bwd(*saved, dout, num_keys, ctx.test_rows_only, ctx.scale,
                                                             ctx.config)
        return *grads, None, None, None, None

    register_autograd("nanotabpfn::datapoint_attention_fwd", _backward, setup_context=_setup_context)


def datapoint_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                        config: KernelConfig = DEFAULT_CONFIG, num_keys: torch.Tensor | None = None,
                        test_rows_only: bool = False) -> torch.Tensor:
    """softmax(q kᵀ * scale) v, differentiable: q (N, H, R, D), k and v (N, H, S, D), any strides, one dtype
    (bf16/fp16; fp32 runs tl.dot in tf32); scale defaults to 1/sqrt(D). num_keys, a 1-element integer tensor on
    q's device, makes only the first num_keys (1..S) rows of k, v keys, read by the kernels (no host sync; a CUDA
    graph replays it); their other rows get zero gradients. test_rows_only (with num_keys, q's rows the same rows as
    k's): query rows below num_keys output zero (so they pass no gradient), and the kernels skip them: the padded last
    layer, whose train rows nobody reads. Returns (N, H, R, D), a transposed view of
    (N, R, H, D) memory, so the model's transpose(1, 2).reshape(N, R, H * D) is free."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"datapoint_attention wants 4-d (N, H, rows, D) tensors, got {q.dim()}/{k.dim()}/{v.dim()}-d")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"datapoint_attention shapes disagree: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if not 1 <= q.shape[3] <= 128:
        raise ValueError(f"datapoint_attention supports head sizes 1..128, got {q.shape[3]}")
    if k.shape[2] < 1:
        raise ValueError("datapoint_attention needs at least one key")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"datapoint_attention wants one float dtype for q, k, v, got {q.dtype}/{k.dtype}/{v.dtype}")
    for t in (q, k, v):
        if sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride())) >= 2 ** 31:
            raise ValueError(f"datapoint_attention indexes with int32: a {tuple(t.shape)} tensor spans too much memory")
    if not q.device == k.device == v.device:
        raise ValueError(f"datapoint_attention wants q, k, v on one device, got {q.device}/{k.device}/{v.device}")
    if num_keys is not None and (num_keys.numel() != 1 or num_keys.dtype.is_floating_point
                                 or num_keys.dtype == torch.bool or num_keys.device != q.device):
        raise ValueError(f"datapoint_attention's num_keys must be one integer on {q.device}, got a "
                         f"{num_keys.dtype} tensor of shape {tuple(num_keys.shape)} on {num_keys.device}")
    if test_rows_only and (num_keys is None or q.shape[2] != k.shape[2]):
        raise ValueError(f"datapoint_attention's test_rows_only needs num_keys and as many query rows as key "
                         f"rows, got num_keys {'None' if num_keys is None else 'given'}, q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if scale is not None and not scale > 0:   # the forward scales the row max once: it needs a positive scale
        raise ValueError(f"datapoint_attention needs a positive scale, got {scale}")
    if triton is None:
        raise RuntimeError("datapoint_attention needs triton (pip install triton)")
    if q.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"datapoint_attention runs on CUDA tensors (or on the CPU under TRITON_INTERPRET=1), "
                         f"got {q.device}")
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[3])
    num_keys = None if num_keys is None else num_keys.reshape(())
    return torch.ops.nanotabpfn.datapoint_attention_fwd(q, k, v, num_keys, test_rows_only, scale,
                                                        _config_ints(config))[0]
