"""Exploration: the datapoint attention alone (blog shapes), fwd+bwd per kernel, CUDA-event timed."""
import time
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

N, R, H, D = 36, 5000, 4, 24
dev = "cuda"
qkv = torch.randn(N, R, 3, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
grad = torch.randn(N, H, R, D, device=dev, dtype=torch.bfloat16)


def run(kernel, S, pad=0):
    q = qkv[:, :, 0].transpose(1, 2)
    if pad:
        Sp = min(R, -(-S // pad) * pad)
        k, v = qkv[:, :Sp, 1].transpose(1, 2), qkv[:, :Sp, 2].transpose(1, 2)
        mask = (torch.arange(Sp, device=dev) < S).view(1, 1, 1, Sp)
    else:
        k, v = qkv[:, :S, 1].transpose(1, 2), qkv[:, :S, 2].transpose(1, 2)
        mask = None
    with sdpa_kernel(kernel):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.backward(grad)


def timeit(kernel, S, pad=0, reps=15):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run(kernel, S, pad)
    torch.cuda.synchronize()
    first = (time.perf_counter() - t0) * 1e3
    for _ in range(3):
        run(kernel, S, pad)
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); run(kernel, S, pad); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return first, ts[len(ts) // 2], ts[0], ts[-1]


# correctness first: padded+masked cuDNN equals sliced flash
S = 1234
q = qkv[:, :, 0].transpose(1, 2)
with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    ref = F.scaled_dot_product_attention(q, qkv[:, :S, 1].transpose(1, 2), qkv[:, :S, 2].transpose(1, 2))
Sp = 1280
mask = (torch.arange(Sp, device=dev) < S).view(1, 1, 1, Sp)
with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    got = F.scaled_dot_product_attention(q, qkv[:, :Sp, 1].transpose(1, 2), qkv[:, :Sp, 2].transpose(1, 2), attn_mask=mask)
print("check cudnn padded+mask vs flash sliced: max abs diff", (got.float() - ref.float()).abs().max().item())

print(f"{'kernel':10s} {'S':>5s} {'pad':>4s} {'first ms':>9s} {'median ms':>9s} {'min':>7s} {'max':>7s}")
for S in (663, 2500, 4500):
    for name, kernel, pad in (("flash", SDPBackend.FLASH_ATTENTION, 0), ("cudnn", SDPBackend.CUDNN_ATTENTION, 0),
                              ("cudnn+mask", SDPBackend.CUDNN_ATTENTION, 256),
                              ("efficient", SDPBackend.EFFICIENT_ATTENTION, 0)):
        try:
            first, med, lo, hi = timeit(kernel, S, pad)
            print(f"{name:10s} {S:5d} {pad:4d} {first:9.2f} {med:9.3f} {lo:7.3f} {hi:7.3f}")
        except RuntimeError as e:
            print(f"{name:10s} {S:5d} {pad:4d} error: {' '.join(str(e).split())[:150]}")
# plan cost for new S values (host), cuDNN unmasked vs masked-bucketed
for name, kernel, pad in (("cudnn", SDPBackend.CUDNN_ATTENTION, 0), ("cudnn+mask", SDPBackend.CUDNN_ATTENTION, 256),
                          ("flash", SDPBackend.FLASH_ATTENTION, 0)):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for S in range(1001, 1101, 10):
        run(kernel, S, pad)
    torch.cuda.synchronize()
    print(f"{name}: 10 new split lengths in {(time.perf_counter() - t0) * 1e3:.0f} ms (incl. GPU work)")
