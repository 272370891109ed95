"""The curve of this record from the score records of two calls: each checkpoint becomes one point (label, training
minutes, seed), then `quality.write_curve`. Run from the repository root: python results/nvidia-h100/real-curve10/curve/make.py"""
import copy
import json
import os
import sys

sys.path.insert(0, os.getcwd())
import quality  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CHOICE, CURVE = os.path.join(HERE, "..", "..", "real-choice"), os.path.join(HERE, "..")
# (record, checkpoint name in it, label, minutes of training as its log says, seed)
POINTS = [(f"{CHOICE}/score-small.json", "small-60s", "recipe (small)", 109 / 60, 0),
          (f"{CHOICE}/score-small.json", "small-180s", "recipe (small)", 3.0, 0),
          (f"{CURVE}/score-s0-10m.json", "s0-10m", "recipe (small)", 10.0, 0),
          (f"{CURVE}/score-s1-10m.json", "s1-10m", "recipe (small)", 10.0, 1),
          (f"{CURVE}/score-dp-s1-5m.json", "dp-s1-5m", "recipe (small), 2 GPUs", 5.1, 1),
          (f"{CHOICE}/score-nano.json", "nano-60s", "last recipe (nano)", 63 / 60, 0),
          (f"{CHOICE}/score-nano.json", "nano-180s", "last recipe (nano)", 183 / 60, 0),
          (f"{CHOICE}/score-nano.json", "nano-258s", "last recipe (nano)", 258 / 60, 0)]


def point(path, name, label, minutes, seed):
    record = json.load(open(path))
    summary = json.loads(json.dumps(record["summary"][name]).replace(json.dumps(name), json.dumps(label)))
    return dict(copy.deepcopy(record), minutes=round(minutes, 2), seed=seed, summary={label: summary})


if __name__ == "__main__":
    records = [point(*p) for p in POINTS]
    print("\n".join(quality.write_curve(os.path.join(HERE, "curve"), records, sorted({p[0] for p in POINTS}),
                                        "python results/nvidia-h100/real-curve10/curve/make.py")))
