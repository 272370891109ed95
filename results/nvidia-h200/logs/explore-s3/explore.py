"""Exploration (not product code): one train_optimized run per variant, with monkeypatches selected by
name, printing ms/step (median, p10, p90), peak memory and the profiler's kernel / shape tables.

    python .plan/explore.py WORKLOAD VARIANT [extra train_optimized flags...]
Variants: comma list of patches: enc (elementwise encoders), ma (compile max-autotune-no-cudagraphs),
          none.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import model as M  # noqa: E402
import profile_utils  # noqa: E402

workload, variant, *flags = sys.argv[1:]
patches = set(variant.split(","))

if "enc" in patches:
    def _embed(self, x, mean, std):
        std = std + 1e-5
        std = torch.where(std < 1e-5, torch.ones_like(std), std)
        x = (x - mean) / std
        x = torch.clip(x, min=-100, max=100)
        return x * self.linear_layer.weight.view(-1) + self.linear_layer.bias   # (B, R, F, E)
    M.FeatureEncoder._embed = _embed
    orig_tf, orig_tfp = M.TargetEncoder.forward, M.TargetEncoder.forward_padded

    def tfwd(self, y_train, num_rows):
        mean = torch.mean(y_train, dim=1, keepdim=True)
        padding = mean.repeat(1, num_rows - y_train.shape[1], 1)
        y = torch.cat([y_train, padding], dim=1)
        return y.unsqueeze(-1) * self.linear_layer.weight.view(-1) + self.linear_layer.bias
    M.TargetEncoder.forward = tfwd

if "ma" in patches:
    orig_compile = torch.compile

    def compile_ma(*a, **k):
        k.setdefault("mode", "max-autotune-no-cudagraphs")
        return orig_compile(*a, **k)
    torch.compile = compile_ma

if "static" in patches:
    import train as T
    orig_lob = T.loss_on_batch

    def lob(model, batch, amp):
        torch._dynamo.mark_static(batch.x, 2)   # one graph per feature count: static C in the kernels
        return orig_lob(model, batch, amp)
    T.loss_on_batch = lob

if "bucket" in patches:
    BUCKET = 256

    def _attend_datapoints(self, src, split, row_keys, row_block_mask=None):
        batch_size, columns, rows, embedding = src.shape
        attention = self.self_attention_between_datapoints
        seqs = src.reshape(batch_size * columns, rows, embedding)
        q, k, v = M._in_projection(attention, seqs)
        if row_keys is None:
            padded = min(rows, -(-split // BUCKET) * BUCKET)
            k, v = k[:, :, :padded], v[:, :, :padded]
            mask = (torch.arange(padded, device=src.device) < split).view(1, 1, 1, padded)
            out = self._sdpa(q, k, v, mask)
        else:
            out = self._sdpa(q, k, v, row_keys.view(1, 1, 1, rows))
        out = out.transpose(1, 2).reshape(batch_size, columns, rows, embedding)
        return torch.nn.functional.linear(out, attention.out_proj.weight, attention.out_proj.bias)
    M.TransformerEncoderLayer._attend_datapoints = _attend_datapoints

if "flex64" in patches:
    import functools
    import torch.nn.attention.flex_attention as FA
    orig_cbm, orig_fa = FA.create_block_mask, FA.flex_attention
    FA.create_block_mask = functools.partial(orig_cbm, BLOCK_SIZE=64)
    FA.flex_attention = functools.partial(orig_fa, kernel_options={"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_M1": 32,
                                                                   "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 32})

tables = {}


def on_ready(self, prof):
    ka = prof.key_averages()
    kernels = sorted((e for e in ka if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: -e.self_device_time_total)
    tot = sum(e.self_device_time_total for e in kernels)
    lines = [f"GPU total {tot / 1e3 / self.active:.2f} ms/step over {self.active} steps"]
    for e in kernels[:45]:
        lines.append(f"{e.self_device_time_total / 1e3 / self.active:8.3f} ms {e.count / self.active:5.1f}x  {e.key[:150]}")
    lines.append("--- ops by shape (device time incl. children) ---")
    kb = prof.key_averages(group_by_input_shape=True)
    ops = sorted((e for e in kb if e.key.startswith("aten::") and e.device_time_total > 0
                  and e.key in ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention",
                                "aten::_flash_attention_backward", "aten::_scaled_dot_product_flash_attention_backward",
                                "aten::baddbmm", "aten::linear", "aten::matmul")),
                 key=lambda e: -e.device_time_total)
    for e in ops[:40]:
        lines.append(f"{e.device_time_total / 1e3 / self.active:8.3f} ms {e.count / self.active:5.1f}x  {e.key} {str(e.input_shapes)[:160]}")
    tables["text"] = "\n".join(lines)


profile_utils.TrainingProfiler._on_trace_ready = on_ready

import train_optimized  # noqa: E402

data = {"blog": "/tmp/blog.h5", "upstream": "/tmp/upstream.h5"}[workload]
bs = {"blog": "6", "upstream": "32"}[workload]
rec = f"/tmp/rec-{workload}-{variant}-{os.getpid()}.json"
argv = ["--data", data, "--batch-size", bs, "--no-eval", "--record", rec, "--profile",
        "--profile-dir", f"/tmp/prof-{os.getpid()}", *flags]
t0 = time.time()
rc = train_optimized.main(argv)
wall = time.time() - t0
r = json.load(open(rec))
t = r["timing"]
print(tables.get("text", "(no profile)"))
print("PHASES", json.dumps({k: round(v["median"], 3) for k, v in t["phases"].items()}),
      "host_step", round(t["host_step"]["median"], 2), "launch_ratio", round(t.get("launch_ratio") or 0, 3))
s = t["step"]
print(f"RESULT {workload:8s} {variant:10s} {' '.join(flags):40s} | {s['median']:.2f} ms [{s['p10']:.2f}-{s['p90']:.2f}]"
      f" | rc {rc} | wall {wall:.0f} s | peak "
      f"{torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0:.2f} GiB")
