"""Loss windows and speed of every run record in a folder: python table.py FOLDER [FOLDER ...].

A run counts as stuck when its mean loss over steps 901-1000 is above 0.45: the runs that learn end near 0.33;
stuck ones sit on the early plateau near 0.57 or have collapsed to ln 2 = 0.693 (the class prior)."""
import json
import os
import sys

STUCK = 0.45
rows = []
for folder in sys.argv[1:]:
    for name in sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".json")):
        try:
            r = json.load(open(os.path.join(folder, name + ".json")))
            e, s = r.get("extra", r), r["timing"]["step"]
            losses = e["losses"]
            window = lambda a, b: sum(losses[a - 1:b]) / len(losses[a - 1:b])
            rows.append((name, s["median"], window(1, 100), window(451, 550), window(901, 1000), len(losses)))
        except Exception as exc:   # a run cut off or failed: say so in its row
            print(f"| {name} | unreadable: {type(exc).__name__}: {exc} |")
print("| run | ms/step median (4 runs share the GPU) | steps 1-100 | 451-550 | 901-1000 | steps |")
print("|---|---|---|---|---|---|")
for name, ms, a, b, c, n in rows:
    mark = " **stuck**" if c > STUCK else ""
    print(f"| {name} | {ms:.2f} | {a:.4f} | {b:.4f} | {c:.4f}{mark} | {n} |")
configs = sorted({name.rsplit("-s", 1)[0] for name, *_ in rows})
for config in configs:
    ends = [c for name, _, _, _, c, n in rows if name.rsplit("-s", 1)[0] == config and n >= 1000]
    stuck = sum(c > STUCK for c in ends)
    print(f"{config}: {stuck} of {len(ends)} runs stuck at steps 901-1000; "
          f"the others' mean {sum(c for c in ends if c <= STUCK) / max(1, len(ends) - stuck):.4f}")
