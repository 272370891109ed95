"""The ensemble's second view: the classifier's quantile-normal columns against Yeo-Johnson power-transformed ones
(sklearn's PowerTransformer, standardised, fitted on the training rows). From the repository root:
    python results/cpu-2core/inference-levers/power/views.py suite|heldout SPLITS CKPT ...
Per view: mean ROC AUC over the checkpoints on the first SPLITS splits of every task, and the mean rank among the
view and the 7 baselines on the same splits."""
import os, sys, time, warnings
sys.path.insert(0, os.getcwd())
import numpy as np, torch
torch.set_num_threads(2)
from sklearn.preprocessing import PowerTransformer
import classifier, evaluation, real_data
from classifier import NanoTabPFNClassifier, model_from_checkpoint

def power_view(train, x):
    """(n, f) training columns, (m, f) columns to map -> (m, f) Yeo-Johnson transformed, standardised, finite."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = PowerTransformer(method="yeo-johnson", standardize=True).fit(train).transform(x)
    return np.clip(np.nan_to_num(out, nan=0.0, posinf=10.0, neginf=-10.0), -10.0, 10.0)

scope, splits, checkpoints = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
tasks = real_data.load_suite() if scope == "suite" else real_data.load_heldout()
baselines = evaluation.baseline_scores(tasks, evaluation.BASELINES_PATHS[scope], splits, compute=False)
quantile_view = classifier._quantile_normal
for name, view in (("quantile", quantile_view), ("power", power_view)):
    classifier._quantile_normal = view          # the odd members' view (classifier._ensemble looks it up here)
    aucs, ranks, start = [], [], time.time()
    for ckpt in checkpoints:
        model = model_from_checkpoint(ckpt)
        result = evaluation.evaluate_suite(lambda: NanoTabPFNClassifier(model, device="cpu"), tasks, splits)
        compared = evaluation.compare({**baselines, name: result}, name)
        aucs.append(result["roc_auc"]); ranks.append(compared["methods"][name]["mean_rank"])
    print(f"{scope} {name:9s} ROC AUC {np.mean(aucs):.4f} (per checkpoint {' '.join(f'{a:.4f}' for a in aucs)}) "
          f"| rank {np.mean(ranks):.2f} | {time.time() - start:.0f} s", flush=True)
classifier._quantile_normal = quantile_view
