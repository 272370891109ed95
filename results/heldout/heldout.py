"""A held-out check of the real suite: the same rule (real_data.RULE) over the tables it set aside only for its cap
of 2 tasks per R package, so each package's next tables; none was ever looked at when choosing a lever.

    python results/heldout/heldout.py build                      # data/real_heldout.npz and its baselines (CPU)
    python results/heldout/heldout.py score OUT.json NAME=CKPT [...]   # checkpoints against the cached baselines
"""
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import evaluation  # noqa: E402
import real_data  # noqa: E402
from safe_io import write_json_atomic  # noqa: E402

DATA = os.path.join(os.getcwd(), "data")
SUITE, NAMES, BASELINES = (os.path.join(DATA, f) for f in ("real_heldout.npz", "real_heldout_names.json",
                                                          "real_heldout_baselines.json"))


def build():
    suite = real_data.load_suite()
    _, reasons = real_data.select_tasks()
    set_aside = sorted(name for name, reason in reasons.items() if "already" in reason)
    keys = {(len(t.y), t.X.shape[1], int(min(t.y.sum(), len(t.y) - t.y.sum()))) for t in suite}
    tasks = real_data.load_suite(SUITE, items=set_aside)
    kept = [t.name for t in tasks if (len(t.y), t.X.shape[1], int(min(t.y.sum(), len(t.y) - t.y.sum()))) not in keys]
    write_json_atomic(NAMES, {"set_aside": set_aside, "tasks": kept})
    print(f"{len(set_aside)} tables set aside by the cap; {len(tasks)} pass the rule among them, {len(kept)} differ "
          f"from every suite task")
    start = time.perf_counter()
    evaluation.baseline_scores(load(), path=BASELINES)
    print(f"baselines in {time.perf_counter() - start:.0f} s")


def load():
    names = json.load(open(NAMES))
    return [t for t in real_data.load_suite(SUITE, items=names["set_aside"]) if t.name in names["tasks"]]


def score(out, pairs):
    from classifier import NanoTabPFNClassifier
    tasks = load()
    baselines = evaluation.baseline_scores(tasks, path=BASELINES)
    results = {}
    for name, checkpoint in pairs:
        device = "cuda" if __import__("torch").cuda.is_available() else "cpu"
        classifier = NanoTabPFNClassifier.from_checkpoint(checkpoint, device=device)
        results[name] = evaluation.evaluate_suite(lambda: classifier, tasks)
        print(f"{name}: {results[name]['roc_auc']:.4f}", flush=True)
    summaries = {name: evaluation.compare({name: results[name], **baselines}, name) for name in results}
    write_json_atomic(out, {"tasks": [t.name for t in tasks], "summaries": summaries, "results": results})
    print(f"| run | mean ROC AUC on {len(tasks)} held-out tasks | mean rank of 6 |")
    print("|---|---|---|")
    for name in results:
        m = summaries[name]["methods"][name]
        print(f"| {name} | {m['roc_auc']:.4f} | {m['mean_rank']:.2f} |")
    for name, m in summaries[next(iter(results))]["methods"].items():
        if name not in results:
            print(f"| {name} (baseline) | {m['roc_auc']:.4f} | {m['mean_rank']:.2f} |")


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build()
    else:
        score(sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]])
