"""Members capped at the prior's widest table (32 features): the tables of both sets with more than 28 features, where
the cleaned width (id frequencies appended) can pass 32. From the repository root:
    python results/cpu-2core/inference-levers/prior-width/width.py NAME=JSON ... -- CKPT ...
Per setting and set: mean ROC AUC over the checkpoints (all 5 splits), per task, and the mean rank among the setting
and the 7 baselines."""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np, torch
torch.set_num_threads(2)
import evaluation, real_data
from classifier import NanoTabPFNClassifier, model_from_checkpoint

settings = dict(a.split("=", 1) for a in sys.argv[1:sys.argv.index("--")])
models = [model_from_checkpoint(c) for c in sys.argv[sys.argv.index("--") + 1:]]
for scope in ("suite", "heldout"):
    every = real_data.load_suite() if scope == "suite" else real_data.load_heldout()
    baselines = evaluation.baseline_scores(every, evaluation.BASELINES_PATHS[scope], compute=False)
    tasks = [t for t in every if t.X.shape[1] > 28]
    print(f"{scope}: {', '.join(f'{t.name} ({t.X.shape[1]})' for t in tasks)}; catboost "
          + " ".join(f"{baselines['catboost']['per_task'][t.name]:.4f}" for t in tasks), flush=True)
    for name, spec in settings.items():
        start, results, ranks = time.time(), [], []
        for model in models:
            result = evaluation.evaluate_suite(lambda: NanoTabPFNClassifier(model, device="cpu", **json.loads(spec)), tasks)
            compared = evaluation.compare({**baselines, name: result}, name, [t.name for t in tasks])
            results.append(result); ranks.append(compared["methods"][name]["mean_rank"])
        per_task = " ".join(f"{np.mean([r['per_task'][t.name] for r in results]):.4f}" for t in tasks)
        print(f"{scope} {name:8s} {spec:45s} ROC AUC {np.mean([r['roc_auc'] for r in results]):.4f} | rank "
              f"{np.mean(ranks):.2f} | per task {per_task} | {time.time() - start:.0f} s", flush=True)
