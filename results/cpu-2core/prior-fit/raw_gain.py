"""The recipe's seed-0 model at 10 and at 20 minutes, scored with the classifier's extras off (no linear columns, no
id frequencies; 4 members), first 2 splits of every task, on this CPU; beside it, the same splits of their GPU scores
with the extras on.

    python raw_gain.py OUT.json 10MIN.pt 20MIN.pt      # about 17 minutes on 2 cores
    python raw_gain.py --summary OUT.json              # means over the tasks; gains paired over tasks"""
import json
import sys

import numpy as np

ROOT = __file__.rsplit("/results/", 1)[0]
sys.path.insert(0, ROOT)
import evaluation  # noqa: E402
import quality  # noqa: E402
import real_data  # noqa: E402

GPU_SCORES = (ROOT + "/results/nvidia-h100/dp-seeds/score-recipe-s0-600s.json",        # the 10-minute model
              ROOT + "/results/nvidia-h200/recipe-30min/score-recipe-s0-1200s.json")   # the 20-minute one


def score(out, paths):
    from classifier import NanoTabPFNClassifier
    rows = {}
    for which in ("suite", "heldout"):
        tasks = real_data.read_cache(real_data.SUITES[which])
        per_model = [evaluation.evaluate_suite(lambda: NanoTabPFNClassifier.from_checkpoint(
            path, device="cpu", linear_columns=False, id_encoding=False), tasks, 2)["per_split"] for path in paths]
        rows |= {f"{which}:{key}": [scores[key] for scores in per_model] for key in per_model[0]}
        print(which, "scored", flush=True)
    json.dump({"checkpoints": paths, "roc_auc": rows}, open(out, "w"))


def gpu_splits(path):
    results = json.load(open(path))["results"]
    name = list(results)[0]
    return {f"{w}:{k}": v for w in results[name] for k, v in evaluation.from_stored(results[name][w])["per_split"].items()}


def summary(path):
    raw = json.load(open(path))["roc_auc"]
    ten, twenty = (gpu_splits(p) for p in GPU_SCORES)
    tasks = {}
    for key, (raw10, raw20) in raw.items():
        tasks.setdefault(key.split("#")[0], []).append((ten[key], twenty[key], raw10, raw20))
    m = np.array([np.mean(v, 0) for v in tasks.values()])   # (tasks, [extras 10, extras 20, raw 10, raw 20])
    print(f"{len(m)} tasks, 2 splits: with extras (GPU) 10 min {m[:, 0].mean():.4f}, 20 min {m[:, 1].mean():.4f}; "
          f"extras off (CPU) 10 min {m[:, 2].mean():.4f}, 20 min {m[:, 3].mean():.4f}")
    for name, diff in (("with extras, 20 - 10 min", m[:, 1] - m[:, 0]), ("extras off, 20 - 10 min", m[:, 3] - m[:, 2]),
                       ("extras' gain at 10 min", m[:, 0] - m[:, 2]), ("extras' gain at 20 min", m[:, 1] - m[:, 3])):
        print(f"{name}: {quality.margin_cell(diff)}")   # as `quality.py margin` gives it


if __name__ == "__main__":
    summary(sys.argv[2]) if sys.argv[1] == "--summary" else score(sys.argv[1], sys.argv[2:4])
