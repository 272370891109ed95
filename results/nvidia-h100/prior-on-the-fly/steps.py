"""The step times of call.sh's runs, from their records: median (p10-p90) ms/step, data share, steps, last loss."""
import json
import os
import sys

print("| run | loader | ms/step median (p10-p90) | data wait | measured steps | last loss |\n|---|---|---|---|---|---|")
for path in sorted(sys.argv[1:]):
    record = json.load(open(path))
    timing, extra = record["timing"], record["extra"]
    step = timing["step"]
    ms = "n/a (no timed steps)" if step["median"] is None else f"{step['median']:.2f} ({step['p10']:.2f}-{step['p90']:.2f})"
    share = "n/a" if timing.get("data_share") is None else f"{100 * timing['data_share']:.1f}%"
    print(f"| {os.path.basename(path)[:-5]} | {extra['data_path']} | {ms} | {share} | {timing['measured_steps']} "
          f"| {extra.get('final_loss') or float('nan'):.4f} |")
