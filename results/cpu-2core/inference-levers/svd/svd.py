"""TabPFN v2's SVD columns as a probe: the first k principal components of the training rows (mean-filled,
standardised) appended as columns before the classifier, on the tables with >= 20 features only (all 5 splits).
From the repository root:  python results/cpu-2core/inference-levers/svd/svd.py suite|heldout NAME=JSON ... -- CKPT ...
Each setting's mean ROC AUC over the checkpoints, its mean rank among itself and the 7 baselines, and each table's."""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np, torch
torch.set_num_threads(2)
import evaluation, quality, real_data
from classifier import NanoTabPFNClassifier, model_from_checkpoint


class SVDClassifier(NanoTabPFNClassifier):
    def __init__(self, model, svd_k=0, **params):
        super().__init__(model, **params)
        self.svd_k = svd_k

    def _components(self, X):
        filled = np.where(np.isfinite(X), X, self.svd_mean_)
        return ((filled - self.svd_mean_) / self.svd_std_) @ self.svd_v_

    def fit(self, X, y):
        X = np.asarray(X, dtype=np.float64)
        if self.svd_k:
            finite = np.where(np.isfinite(X), X, np.nan)
            self.svd_mean_ = np.nan_to_num(np.nanmean(finite, axis=0))
            filled = np.where(np.isfinite(X), X, self.svd_mean_)
            std = filled.std(axis=0)
            self.svd_std_ = np.where(std > 0, std, 1.0)
            _, _, vt = np.linalg.svd((filled - self.svd_mean_) / self.svd_std_, full_matrices=False)
            self.svd_v_ = vt[:self.svd_k].T
            X = np.concatenate([X, self._components(X)], axis=1)
        return super().fit(X, y)

    def predict_proba(self, X):
        X = np.asarray(X, dtype=np.float64)
        if self.svd_k:
            X = np.concatenate([X, self._components(X)], axis=1)
        return super().predict_proba(X)


scope, rest = sys.argv[1], sys.argv[2:]
settings = dict(a.split("=", 1) for a in rest[:rest.index("--")])
checkpoints = rest[rest.index("--") + 1:]
tasks = real_data.load_suite() if scope == "suite" else real_data.load_heldout()
wide = [t for t in tasks if t.X.shape[1] >= quality.WIDE_FEATURES]
baselines = evaluation.baseline_scores(tasks, evaluation.BASELINES_PATHS[scope], compute=False)
for name, spec in settings.items():
    aucs, ranks, per, start = [], [], [], time.time()
    for ckpt in checkpoints:
        model = model_from_checkpoint(ckpt)
        result = evaluation.evaluate_suite(lambda: SVDClassifier(model, device="cpu", **json.loads(spec)), wide)
        compared = evaluation.compare({**baselines, name: result}, name, [t.name for t in wide])
        aucs.append(result["roc_auc"]); ranks.append(compared["methods"][name]["mean_rank"]); per.append(result["per_task"])
    tasks_line = " ".join(f"{t.name.split('/')[-1][:10]}={np.mean([p[t.name] for p in per]):.4f}" for t in wide)
    print(f"{scope} {name:8s} {spec:30s} ROC AUC {np.mean(aucs):.4f} ({' '.join(f'{a:.4f}' for a in aucs)}) rank {np.mean(ranks):.2f} {time.time() - start:.0f} s | {tasks_line}", flush=True)
