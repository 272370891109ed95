"""Is FlashAttention-4's gradient right where the blog trains? Two checks on one GPU, run before the seed study.

  sweep OUT:      model.datapoint_attention at the blog's shape (N = 6 tables x 6 columns, H 4, R 5000, D 24) for key
                  counts 1..5000: out, dq, dk, dv of fa4 (sliced keys, and the padded step's seqused_k), triton
                  (padded) and FlashAttention-2 (sliced) against an fp32 reference (SDPA's efficient kernel in fp32).
  lockstep OUT SEED STEPS:
                  one training trajectory driven by fa4's padded step (eager, bf16 autocast, the fused schedule-free
                  optimizer, lr 4e-3, clip 1, --last-layer-target-only); at every step the whole model's gradient is
                  also computed on the same weights and batch by triton (padded) and FlashAttention-2 (sliced), every
                  10th step by fa4 sliced too. Cosine and relative difference to FlashAttention-2's gradient.
"""
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import model as M
from graphed_step import FusedScheduleFreeAdamW
from loaders import LoaderConfig, make_loader
from runtime import set_seed

dev = torch.device("cuda")


def rel(a, ref):
    return ((a.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


def sweep(out):
    N, H, R, D = 36, 4, 5000, 24
    rows = []
    for keys in (1, 2, 3, 7, 31, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257, 500, 777, 1000, 1023, 1024, 1025,
                 1999, 2047, 2048, 2049, 2500, 3001, 3333, 4095, 4096, 4097, 4500, 4999, 5000):
        torch.manual_seed(keys)
        qkv = (torch.randn(N, R, 3, H, D, device=dev) * 1.5).to(torch.bfloat16).requires_grad_()
        g = torch.randn(N, R, H, D, device=dev).to(torch.bfloat16)           # upstream gradient, (N, R, H, D)
        row_keys = torch.arange(R, device=dev) < keys                          # (R,) the padded step's key mask

        def run(kernel, padded, dtype=torch.bfloat16):
            q, k, v = (qkv[:, :, i].to(dtype).transpose(1, 2) for i in range(3))   # (N, H, R, D) views
            if padded:
                o = M.datapoint_attention(q, k, v, kernel, key_mask=row_keys)
            else:
                o = M.datapoint_attention(q, k[:, :, :keys], v[:, :, :keys], kernel)
            o = o.transpose(1, 2)                                              # (N, R, H, D)
            o.backward(g.to(o.dtype))
            grad, qkv.grad = qkv.grad.float(), None
            return o.float(), grad

        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            o_ref, g_ref = run("sdpa", False, torch.float32)
        row = {"keys": keys}
        for name, kernel, padded in (("fa4", "fa4", False), ("fa4-padded", "fa4", True),
                                     ("triton-padded", "triton", True), ("flash", "flash", False)):
            o, gr = run(kernel, padded)
            row[name] = {"out": rel(o, o_ref), "dq": rel(gr[:, :, 0], g_ref[:, :, 0]),
                         "dk": rel(gr[:, :keys, 1], g_ref[:, :keys, 1]), "dv": rel(gr[:, :keys, 2], g_ref[:, :keys, 2]),
                         "finite": bool(torch.isfinite(o).all() and torch.isfinite(gr).all()),
                         "unused_kv_grad_max": gr[:, keys:, 1:].abs().max().item() if keys < R else 0.0}
        rows.append(row)
        print(json.dumps(row), flush=True)
    json.dump(rows, open(f"{out}/sweep.json", "w"), indent=1)
    worst = {name: {t: max(r[name][t] for r in rows) for t in ("out", "dq", "dk", "dv")}
             for name in ("fa4", "fa4-padded", "triton-padded", "flash")}
    print("| kernel | worst rel. error out | dq | dk | dv | all finite | unused-key grads |\n|---|---|---|---|---|---|---|")
    for name, w in worst.items():
        print(f"| {name} | {w['out']:.2e} | {w['dq']:.2e} | {w['dk']:.2e} | {w['dv']:.2e} | "
              f"{all(r[name]['finite'] for r in rows)} | {max(r[name]['unused_kv_grad_max'] for r in rows):.1e} |")


def padded_loss(model, b):
    R = b.x.shape[1]
    split = torch.tensor(b.split, device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        logits = model.forward_padded(b.x, b.y, split, torch.tensor(R, device=dev),
                                      torch.tensor(b.x.shape[2], device=dev))          # (B, R, O)
    logits = logits[:, b.split:].float()                                               # test rows
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b.y[:, b.split:].reshape(-1).long())


def sliced_loss(model, b):
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        logits = model((b.x, b.y[:, :b.split]), train_test_split_index=b.split)         # (B, R-S, O)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), b.y[:, b.split:].reshape(-1).long())


def gradient(model, loss_fn, b):
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model, b)
    loss.backward()
    return loss.item(), torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def lockstep(out, seed, steps):
    set_seed(seed)
    cfg = M.ModelConfig(attention="fa4", last_layer_target_only=True)
    driver = M.NanoTabPFNModel(cfg).to(dev)
    others = {name: M.NanoTabPFNModel(cfg, attention=kernel).to(dev)
              for name, kernel in (("triton", "triton"), ("flash", "flash"), ("fa4-sliced", "fa4"))}
    optimizer = FusedScheduleFreeAdamW(driver.parameters(), lr=4e-3)
    loader = make_loader("data/blog1200.h5", 6, dev, LoaderConfig(kind="resident"))
    log, t0 = [], time.time()
    for step, b in zip(range(1, steps + 1), loader):
        loss, g = gradient(driver, padded_loss, b)
        row = {"step": step, "split": b.split, "loss_fa4": loss, "finite": bool(torch.isfinite(g).all())}
        state = driver.state_dict()
        for name, other in others.items():
            if name == "fa4-sliced" and step % 10:
                continue
            other.load_state_dict(state)
            other_loss, other_g = gradient(other, padded_loss if name == "triton" else sliced_loss, b)
            row[f"loss_{name}"] = other_loss
            row[f"g_{name}"] = other_g
        ref = row.pop("g_flash")
        row["cos_fa4_flash"] = F.cosine_similarity(g, ref, dim=0).item()
        row["rel_fa4_flash"] = rel(g, ref)
        t = row.pop("g_triton")
        row["cos_triton_flash"] = F.cosine_similarity(t, ref, dim=0).item()
        row["rel_triton_flash"] = rel(t, ref)
        if "g_fa4-sliced" in row:
            s = row.pop("g_fa4-sliced")
            row["rel_fa4sliced_flash"] = rel(s, ref)
        log.append(row)
        # The driver's step, as the graphed step does it: clip, then the fused schedule-free update.
        torch.nn.utils.clip_grad_norm_(driver.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0:
            w = log[-50:]
            print(f"steps {step - 49:4d}-{step:4d} loss fa4 {statistics.mean(r['loss_fa4'] for r in w):.4f} "
                  f"flash {statistics.mean(r['loss_flash'] for r in w):.4f} | rel to FA2 grad: fa4 median "
                  f"{statistics.median(r['rel_fa4_flash'] for r in w):.4f} max {max(r['rel_fa4_flash'] for r in w):.4f}"
                  f", triton median {statistics.median(r['rel_triton_flash'] for r in w):.4f} max "
                  f"{max(r['rel_triton_flash'] for r in w):.4f} | min cos fa4 {min(r['cos_fa4_flash'] for r in w):.4f}"
                  f" triton {min(r['cos_triton_flash'] for r in w):.4f} | {time.time() - t0:.0f}s", flush=True)
    loader.close()
    json.dump(log, open(f"{out}/lockstep-s{seed}.json", "w"))
    fa4, tri = [r["rel_fa4_flash"] for r in log], [r["rel_triton_flash"] for r in log]
    print(f"seed {seed}, {len(log)} steps: rel. difference to FlashAttention-2's gradient, median / p90 / max: "
          f"fa4 {statistics.median(fa4):.4f} / {sorted(fa4)[int(0.9 * len(fa4))]:.4f} / {max(fa4):.4f}, "
          f"triton {statistics.median(tri):.4f} / {sorted(tri)[int(0.9 * len(tri))]:.4f} / {max(tri):.4f}; "
          f"non-finite fa4 gradients: {sum(not r['finite'] for r in log)}")


if __name__ == "__main__":
    if sys.argv[1] == "sweep":
        sweep(sys.argv[2])
    else:
        lockstep(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
