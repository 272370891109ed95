"""The padded step's time against the dump's widest table (F_max, so C = F_max + 1 columns): the recipe's graphed,
compiled step (model.forward_padded in graphed_step.GraphedTrainStep, bf16, triton datapoint attention) on random
tables, timed with CUDA events over graph replays, and the top kernels of one replay under torch.profiler.
Usage: python results/nvidia-h100/column-count/probe.py PRESET:F:FEATURE_ATTENTION ..."""
import statistics
import sys

import torch

from graphed_step import GraphedTrainStep, make_optimizer
from loaders import Batch
from model import MODEL_PRESETS, ModelConfig, NanoTabPFNModel

BATCH, ROWS, SPLIT, CLASSES, REPEATS, STEPS = 16, 512, 256, 10, 5, 20


def probe(preset: str, features: int, feature_attention: str) -> None:
    torch.manual_seed(0)
    device = torch.device("cuda")
    config = ModelConfig(**MODEL_PRESETS[preset], num_outputs=CLASSES, attention="triton",
                         feature_attention=feature_attention, last_layer_target_only=True)
    model = NanoTabPFNModel(config).to(device)
    optimizer = make_optimizer(model, "schedulefree", 1e-4, fused=True)
    optimizer.train()
    step = GraphedTrainStep(model, optimizer, BATCH, ROWS, features, device, amp="bf16", compile=True)
    x = torch.randn(BATCH, ROWS, features, device=device)                            # (B, R, F)
    y = torch.randint(0, CLASSES, (BATCH, ROWS), device=device).float()              # (B, R)
    step.load(Batch(x=x, y=y, split=SPLIT, wrapped=False))
    for _ in range(step.WARMUP_STEPS + 2):   # eager warm-up, compile, capture, one replay
        step.run()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(STEPS):
            step.run()
        end.record()
        end.synchronize()   # the events' time needs the replays finished
        times.append(start.elapsed_time(end) / STEPS)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step.run()
        torch.cuda.synchronize()   # the replay's kernels inside the profiled window
    print(f"{preset}:{features}:{feature_attention} C={features + 1} | {statistics.median(times):.2f} ms/step "
          f"(min {min(times):.2f}, max {max(times):.2f}, {REPEATS} x {STEPS} replays)", flush=True)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=70), flush=True)


if __name__ == "__main__":
    for case in sys.argv[1:]:
        preset, features, feature_attention = case.split(":")
        probe(preset, int(features), feature_attention)
