"""The table of a call's run records: python table.py FOLDER (every *.json run record in it, by name)."""
import json
import os
import sys

out = sys.argv[1]
print("| run | ms/step median | p10 | p90 | peak GiB | final loss | steps | datapoint attention |")
print("|---|---|---|---|---|---|---|---|")
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    try:
        r = json.load(open(os.path.join(out, name + ".json")))
        e, s = r.get("extra", r), r["timing"]["step"]
        print(f"| {name} | {s['median']:.3f} | {s['p10']:.3f} | {s['p90']:.3f} | {e['peak_memory_bytes'] / 2**30:.2f} | "
              f"{e['final_loss']:.4f} | {e['steps_done']} | {(e.get('attention_kernel') or '')[:50]} |")
    except Exception as exc:   # a run cut off or failed: say so in its row
        print(f"| {name} | unreadable: {type(exc).__name__}: {exc} |")
