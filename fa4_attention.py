"""The datapoint attention on FlashAttention-4 (the flash-attn-4 package: CuTe DSL kernels, warp-specialized with TMA
and wgmma on sm90), as two torch custom ops so torch.compile and the graphed step see one opaque call each way.
Imported lazily by model.py; flash-attn-4 is pinned in requirements-gpu.txt (its private entry points are used)."""
import torch


def _used_keys(num_keys, batch: int):
    """(N,) int32 key counts on the device for FlashAttention-4's seqused_k (None: every key passed is used)."""
    return None if num_keys is None else num_keys.to(torch.int32).expand(batch).contiguous()


@torch.library.custom_op("nanotabpfn::fa4_forward", mutates_args=())
def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             num_keys: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    from flash_attn.cute.interface import _flash_attn_fwd
    out, lse, *_ = _flash_attn_fwd(q, k, v, seqused_k=_used_keys(num_keys, q.shape[0]), return_lse=True)
    return out, lse                                                  # (N, R, H, D), (N, H, R) fp32


@_forward.register_fake
def _(q, k, v, num_keys):
    return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


@torch.library.custom_op("nanotabpfn::fa4_backward", mutates_args=())
def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dout: torch.Tensor,
              lse: torch.Tensor, num_keys: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from flash_attn.cute.interface import _flash_attn_bwd
    dq, dk, dv = _flash_attn_bwd(q, k, v, out, dout, lse, None, False, 0.0,
                                 seqused_k=_used_keys(num_keys, q.shape[0]))
    if num_keys is not None:
        # Why: the kernel leaves dk, dv of the keys past seqused_k unwritten (garbage, NaN seen); they are zero.
        unused = torch.arange(k.shape[1], device=k.device).view(1, -1, 1, 1) >= num_keys   # (1, S, 1, 1)
        dk, dv = dk.masked_fill(unused, 0), dv.masked_fill(unused, 0)
    return dq, dk, dv


@_backward.register_fake
def _(q, k, v, out, dout, lse, num_keys):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, num_keys = inputs
    ctx.save_for_backward(q, k, v, *output, num_keys)


def _gradients(ctx, dout, dlse):
    q, k, v, out, lse, num_keys = ctx.saved_tensors
    return (*_backward(q, k, v, out, dout, lse, num_keys), None)


_forward.register_autograd(_gradients, setup_context=_setup_context)


def datapoint_attention(q, k, v, num_keys=None):
    """softmax(q kᵀ / sqrt(D)) v: q (N, R, H, D), k and v (N, S, H, D); num_keys: a 0-dim device tensor, the keys
    are its first rows (the padded step's count, read on the GPU). Returns (N, R, H, D)."""
    return _forward(q, k, v, num_keys)[0]
