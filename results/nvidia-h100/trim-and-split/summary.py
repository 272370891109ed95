"""A README table from the run records in FOLDER/call1/ and FOLDER/call2/ (ms/step median [p10-p90] per run, by
workload and tree): python summary.py [FOLDER], this script's folder by default."""
import gzip
import json
import os
import statistics
import sys

HERE = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
runs = {}
for call in ("call1", "call2"):
    for name in sorted(os.listdir(os.path.join(HERE, call))):
        if name.endswith(".json.gz"):
            rec = json.load(gzip.open(os.path.join(HERE, call, name)))
            workload, tree, _ = name[:-8].split("-")
            s = rec["timing"]["step"]
            runs.setdefault((workload, tree), []).append((s["median"], s["p10"], s["p90"], rec["extra"]["final_loss"]))
print("| workload | tree | runs: ms/step median [p10–p90] | median of the runs | final loss |")
print("|---|---|---|---|---|")
for (workload, tree), rs in sorted(runs.items(), key=lambda kv: (kv[0][0], "old mid new".split().index(kv[0][1]))):
    cells = ", ".join(f"{m:.2f} [{a:.2f}–{b:.2f}]" for m, a, b, _ in rs)
    losses = " / ".join(dict.fromkeys(f"{loss:.4f}" for *_, loss in rs))
    print(f"| {workload} | {tree} | {cells} | {statistics.median(m for m, *_ in rs):.2f} | {losses} |")
