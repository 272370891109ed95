"""The real suite (all 235 splits) for one checkpoint under several NanoTabPFNClassifier settings, on the CPU.

    python results/cpu-2core/inference-levers/eval_levers.py OUT.json CHECKPOINT NAME=JSON_PARAMS [...]
e.g. n8='{"n_estimators": 8}'. Prints one line per setting and a table against the cached baselines.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import evaluation  # noqa: E402
import real_data  # noqa: E402
from classifier import NanoTabPFNClassifier  # noqa: E402
from safe_io import write_json_atomic  # noqa: E402

out, checkpoint, pairs = sys.argv[1], sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]]
tasks = real_data.load_suite()
baselines = evaluation.baseline_scores(tasks)
results, seconds = {}, {}
for name, params in pairs:
    classifier = NanoTabPFNClassifier.from_checkpoint(checkpoint, **json.loads(params))
    start = time.perf_counter()
    results[name] = evaluation.evaluate_suite(lambda: classifier, tasks)
    seconds[name] = time.perf_counter() - start
    print(f"{name} {params}: {results[name]['roc_auc']:.4f} in {seconds[name]:.1f} s", flush=True)
summaries = {name: evaluation.compare({name: results[name], **baselines}, name) for name, _ in pairs}
write_json_atomic(out, {"checkpoint": os.path.basename(checkpoint), "params": dict(pairs), "seconds": seconds,
                        "summaries": summaries, "results": results})
print("| setting | mean ROC AUC | mean rank of 6 | suite seconds (CPU) |")
print("|---|---|---|---|")
for name, params in pairs:
    m = summaries[name]["methods"][name]
    print(f"| {name} `{params}` | {m['roc_auc']:.4f} | {m['mean_rank']:.2f} | {seconds[name]:.0f} |")
for name, m in summaries[pairs[0][0]]["methods"].items():
    if name != pairs[0][0]:
        print(f"| {name} (baseline) | {m['roc_auc']:.4f} | {m['mean_rank']:.2f} | |")
