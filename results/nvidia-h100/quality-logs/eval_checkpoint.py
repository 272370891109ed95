"""Full real-suite comparison of checkpoints against the cached baselines (all 5 splits of every task).

    python results/quality-logs/eval_checkpoint.py OUT.json NAME=CKPT [NAME=CKPT ...]
"""
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import evaluation   # noqa: E402
import real_data    # noqa: E402
import torch   # noqa: E402
from classifier import NanoTabPFNClassifier   # noqa: E402

out, pairs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
tasks = real_data.load_suite()
baselines = evaluation.baseline_scores(tasks)
results = dict(baselines)
for name, ckpt in pairs:
    classifier = NanoTabPFNClassifier.from_checkpoint(ckpt, device="cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    results[name] = evaluation.evaluate_suite(lambda: classifier, tasks)
    print(f"{name}: {results[name]['roc_auc']:.4f} in {time.perf_counter() - start:.1f} s", flush=True)
summaries = {name: evaluation.compare({name: results[name], **baselines}, name) for name, _ in pairs}
with open(out, "w") as f:
    json.dump({"summaries": summaries, "results": results}, f)
print("| model | mean ROC AUC | mean rank vs 5 baselines | best baseline AUC | best baseline rank |")
print("|---|---|---|---|---|")
for name, s in summaries.items():
    m = s["methods"]
    others = {k: v for k, v in m.items() if k != name}
    best_auc = max(others, key=lambda k: others[k]["roc_auc"])
    best_rank = min(others, key=lambda k: others[k]["mean_rank"])
    print(f"| {name} | {m[name]['roc_auc']:.4f} | {m[name]['mean_rank']:.2f} | {best_auc} {others[best_auc]['roc_auc']:.4f}"
          f" | {best_rank} {others[best_rank]['mean_rank']:.2f} |")
