"""Classifier settings on the tables with >= 20 features only, against CatBoost on the same splits. From the repository
root:  python results/cpu-2core/inference-levers/wide/wide.py suite|heldout NAME=JSON ... -- CKPT ...
Each setting's mean ROC AUC over the checkpoints (all 5 splits), and its mean rank among itself and the 7 baselines."""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np, torch
torch.set_num_threads(2)
import evaluation, quality, real_data
from classifier import NanoTabPFNClassifier, model_from_checkpoint

scope, rest = sys.argv[1], sys.argv[2:]
settings = dict(a.split("=", 1) for a in rest[:rest.index("--")])
checkpoints = rest[rest.index("--") + 1:]
tasks = real_data.load_suite() if scope == "suite" else real_data.load_heldout()
wide = [t for t in tasks if t.X.shape[1] >= quality.WIDE_FEATURES]
path = evaluation.BASELINES_PATHS[scope]
baselines = evaluation.baseline_scores(tasks, path, compute=False)
for name, spec in settings.items():
    aucs, ranks, start = [], [], time.time()
    for ckpt in checkpoints:
        model = model_from_checkpoint(ckpt)
        result = evaluation.evaluate_suite(lambda: NanoTabPFNClassifier(model, device="cpu", **json.loads(spec)), wide)
        table = {**{b: r for b, r in baselines.items()}, name: result}
        compared = evaluation.compare(table, name, [t.name for t in wide])
        aucs.append(result["roc_auc"]); ranks.append(compared["methods"][name]["mean_rank"])
    print(f"{scope} {name:12s} {spec:50s} ROC AUC {np.mean(aucs):.4f} (per checkpoint {' '.join(f'{a:.4f}' for a in aucs)})"
          f" | rank {np.mean(ranks):.2f} | {time.time() - start:.0f} s", flush=True)
