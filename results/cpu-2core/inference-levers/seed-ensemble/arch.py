"""Two checkpoints alone and their probabilities averaged, first 2 splits of every task, on this CPU.

    python arch.py A.pt B.pt OUT.json      # scores (slow: about 22 minutes for two medium models on 2 cores)
    python arch.py --summary OUT.json      # means over the 104 tasks; the average against each, paired over tasks"""
import json
import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/results/", 1)[0])
import evaluation  # noqa: E402
import quality  # noqa: E402
import real_data  # noqa: E402


def score(paths, out):
    from classifier import NanoTabPFNClassifier
    models = [NanoTabPFNClassifier.from_checkpoint(p, device="cpu") for p in paths]
    rows, t0 = {}, time.time()
    for which in ("suite", "heldout"):
        for task in real_data.read_cache(real_data.SUITES[which]):
            k = int(task.y.max()) + 1
            for i in range(2):
                X_tr, X_te, y_tr, y_te = task.split(i)
                probs = []
                for m in models:
                    m.fit(X_tr, y_tr)
                    probs.append(np.asarray(m.predict_proba(X_te)))
                rows[f"{which}:{task.name}#{i}"] = [evaluation.split_scores(y_te, p, models[0].classes_, k)[0]
                                                    for p in probs + [np.mean(probs, 0)]]
            print(which, task.name, f"{time.time() - t0:.0f}s", flush=True)
    json.dump({"checkpoints": paths, "roc_auc": rows}, open(out, "w"))


def summary(path):
    record = json.load(open(path))
    tasks = {}
    for key, values in record["roc_auc"].items():
        tasks.setdefault(key.split("#")[0], []).append(values)
    m = np.array([np.mean(v, 0) for v in tasks.values()])                      # (tasks, [A, B, average])
    print(f"{len(m)} tasks, 2 splits: A {m[:, 0].mean():.4f}  B {m[:, 1].mean():.4f}  average {m[:, 2].mean():.4f}")
    for j, name in ((0, "A"), (1, "B")):
        print(f"average - {name}: {quality.margin_cell(m[:, 2] - m[:, j])}")   # as `quality.py margin` gives it


if __name__ == "__main__":
    summary(sys.argv[2]) if sys.argv[1] == "--summary" else score(sys.argv[1:3], sys.argv[3])
