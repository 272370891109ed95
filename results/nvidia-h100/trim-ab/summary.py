"""Old (214b70e) beside new (8489454) from this folder's run records: python summary.py [FOLDER]."""
import glob
import json
import os
import statistics
import sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
groups = {"blog --fast (fa4)": ("b/blog-old-*.json", "b/blog-new-*.json"),
          "blog --fast --attention triton": ("c/blog-triton-old.json", "c/blog-triton-new.json"),
          "upstream --fast (triton), shared cache": ("c/up-old-*.json", "c/up-new-*.json"),
          "upstream --fast (triton), fresh cache each": ("d/up-old-fresh-*.json", "d/up-new-fresh-*.json")}
print("| workload | old ms/step (each run) | new ms/step (each run) | new / old (medians) | final losses old / new |")
print("|---|---|---|---|---|")
for name, patterns in groups.items():
    runs = [[json.load(open(p)) for p in sorted(glob.glob(os.path.join(here, pat)))] for pat in patterns]
    ms = [[r["timing"]["step"]["median"] for r in rs] for rs in runs]
    loss = [[round(r["extra"]["final_loss"], 4) for r in rs] for rs in runs]
    ratio = statistics.median(ms[1]) / statistics.median(ms[0])
    print(f"| {name} | {', '.join(f'{x:.3f}' for x in ms[0])} | {', '.join(f'{x:.3f}' for x in ms[1])} | "
          f"{ratio:.3f} | {loss[0]} / {loss[1]} |")
