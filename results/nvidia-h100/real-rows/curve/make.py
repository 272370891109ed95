"""The curve of this record: each checkpoint of the score records becomes one point (label, training minutes as its
log says, seed), beside the shipped recipe's points from ../real-curve10, then `quality.write_curve`.
Run from the repository root: python results/nvidia-h100/real-rows/curve/make.py"""
import copy
import json
import os
import sys

sys.path.insert(0, os.getcwd())
import quality  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS, OLD = os.path.join(HERE, ".."), os.path.join(HERE, "..", "..", "real-curve10", "curve")
B16, B32, DP = "512 rows, batch 16", "512 rows, batch 32", "512 rows, batch 16, 2 GPUs, lr x sqrt(2)"
EARLY = ((60, 1.0), (180, 3.0), (300, 5.0))
POINTS = ([(f"{ROWS}/score-{run}-s{seed}-early.json", f"{run}-s{seed}-{s}s", label, minutes, seed)
           for run, label in (("r512b16", B16), ("r512", B32)) for seed in (0, 1) for s, minutes in EARLY]
          + [(f"{ROWS}/score-r512b16-s{seed}.json", f"r512b16-s{seed}", B16, 10.0, seed) for seed in (0, 1, 2, 3)]
          + [(f"{ROWS}/score-r512-s{seed}.json", f"r512-s{seed}", B32, 10.0, seed) for seed in (0, 1)]
          + [(f"{ROWS}/score-dp-r512b16-s0.json", "dp-r512b16-s0", DP, 310 / 60, 0)])


def point(path, name, label, minutes, seed):
    record = json.load(open(path))
    summary = json.loads(json.dumps(record["summary"][name]).replace(json.dumps(name), json.dumps(label)))
    return dict(copy.deepcopy(record), minutes=round(minutes, 2), seed=seed, summary={label: summary})


def old_points():
    """The 256-row recipe (batch 32) as ../real-curve10/curve/make.py labels it."""
    sys.path.insert(0, OLD)
    import make as old   # noqa: E402 (the older record's generator, for its POINTS)
    return [(*p[:2], "256 rows, batch 32 (recipe before)", *p[3:]) for p in old.POINTS if p[2] == "recipe (small)"]


if __name__ == "__main__":
    points = POINTS + old_points()
    records = [point(*p) for p in points]
    print("\n".join(quality.write_curve(os.path.join(HERE, "curve"), records, sorted({p[0] for p in points}),
                                        "python results/nvidia-h100/real-rows/curve/make.py")))
