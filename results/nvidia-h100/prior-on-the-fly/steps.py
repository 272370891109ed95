"""The step times of call.sh's runs, from their records: median (p10-p90) and mean ms/step, data share, steps trained
in the budget, last loss. From the repository root: python results/nvidia-h100/prior-on-the-fly/steps.py RECORDS"""
import json
import os
import sys

print("| run | data path | ms/step median (p10-p90) | mean | data wait | steps in the budget | last loss |\n"
      "|---|---|---|---|---|---|---|")
for path in sorted(sys.argv[1:]):
    record = json.load(open(path))
    timing, extra = record["timing"], record["extra"]
    step = timing["step"]
    ms = "n/a (no timed steps)" if step["median"] is None else f"{step['median']:.2f} ({step['p10']:.2f}-{step['p90']:.2f})"
    mean = "n/a" if step["mean"] is None else f"{step['mean']:.2f}"
    share = "n/a" if timing.get("data_share") is None else f"{100 * timing['data_share']:.1f}%"
    print(f"| {os.path.basename(path)[:-5]} | {extra['data_path']} | {ms} | {mean} | {share} | {extra['steps_done']} "
          f"| {extra.get('final_loss') or float('nan'):.4f} |")
