"""Classifier settings on the tasks whose training splits hold more rows than the prior's tables train on (> 460):
each setting's mean ROC AUC over the checkpoints on the first SPLITS splits, its mean rank among itself and the 7
baselines, and each task's. From the repository root:
  SPLITS=2 python long_rows.py suite|heldout NAME=JSON ... -- CKPT ..."""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np, torch
torch.set_num_threads(2)
import evaluation, real_data
from classifier import NanoTabPFNClassifier, model_from_checkpoint

PRIOR_MAX_TRAIN_ROWS = 460   # the real preset: 512-row tables, at most 90% of them training rows
scope, rest = sys.argv[1], sys.argv[2:]
settings = dict(a.split("=", 1) for a in rest[:rest.index("--")])
checkpoints = rest[rest.index("--") + 1:]
splits = int(os.environ.get("SPLITS", "5"))
tasks = real_data.load_suite() if scope == "suite" else real_data.load_heldout()
long = [t for t in tasks if t.split(0)[0].shape[0] > PRIOR_MAX_TRAIN_ROWS]
baselines = evaluation.baseline_scores(tasks, evaluation.BASELINES_PATHS[scope], splits_per_task=splits, compute=False)
for name, spec in settings.items():
    aucs, ranks, per, start = [], [], [], time.time()
    for ckpt in checkpoints:
        model = model_from_checkpoint(ckpt)
        result = evaluation.evaluate_suite(lambda: NanoTabPFNClassifier(model, device="cpu", **json.loads(spec)), long,
                                           splits_per_task=splits)
        compared = evaluation.compare({**baselines, name: result}, name, [t.name for t in long])
        aucs.append(result["roc_auc"]); ranks.append(compared["methods"][name]["mean_rank"]); per.append(result["per_task"])
    line = " ".join(f"{t.name.split('/')[-1][:10]}={np.mean([p[t.name] for p in per]):.4f}" for t in long)
    print(f"{scope} {len(long)} tasks x {splits} splits {name:8s} {spec:28s} ROC AUC {np.mean(aucs):.4f} "
          f"({' '.join(f'{a:.4f}' for a in aucs)}) rank {np.mean(ranks):.2f} {time.time() - start:.0f} s | {line}", flush=True)
