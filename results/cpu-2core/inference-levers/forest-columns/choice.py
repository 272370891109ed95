"""Forest columns: a random forest's class probabilities appended as columns, out of bag on the training rows (each
row scored by the trees whose bootstrap left it out) and from the whole forest on the test rows. Where CatBoost or a
forest beats the recipe (a class decided by a threshold of one column, interactions), the model gets the trees'
summary as a column, as the linear columns give it logistic regression's. The columns join X first, so the linear
columns, the id encoding and the members see them as any other column. Scored on a task set's first SPLITS splits,
ranked among itself and the 7 baselines. From the repository root:
    python results/cpu-2core/inference-levers/forest-columns/choice.py CKPT suite|heldout SPLITS on|off"""
import json, os, sys, time, warnings
sys.path.insert(0, os.getcwd())
import numpy as np
import torch
torch.set_num_threads(2)
import evaluation, quality
from classifier import NanoTabPFNClassifier, model_from_checkpoint

TREES = 100


class ForestColumns(NanoTabPFNClassifier):
    def fit(self, X, y):
        from sklearn.ensemble import RandomForestClassifier
        X = np.asarray(X, dtype=np.float64)
        X = np.where(np.isfinite(X), X, np.nan)
        self.rf_ = RandomForestClassifier(TREES, oob_score=True, n_jobs=2, random_state=self.random_state).fit(X, y)
        oob = self.rf_.oob_decision_function_                            # (n, K), NaN where never out of bag
        prior = np.bincount(np.searchsorted(self.rf_.classes_, y)) / len(y)
        oob = np.where(np.isnan(oob), prior, oob)
        return super().fit(np.concatenate([X, self._columns(oob)], axis=1), y)

    def _columns(self, probabilities):
        return probabilities[:, 1:] if probabilities.shape[1] == 2 else probabilities   # class 1's for two classes

    def predict_proba(self, X):
        X = np.asarray(X, dtype=np.float64)
        X = np.where(np.isfinite(X), X, np.nan)
        return super().predict_proba(np.concatenate([X, self._columns(self.rf_.predict_proba(X))], axis=1))


if __name__ == "__main__":
    ckpt, which, splits, lever = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    tasks, baselines = quality.load_cached(splits)
    model = model_from_checkpoint(ckpt)
    warnings.simplefilter("ignore")
    t = time.time()
    usable = evaluation.usable_tasks(tasks[which], 10)
    kind = ForestColumns if lever == "on" else NanoTabPFNClassifier
    res = evaluation.evaluate_suite(lambda: kind(model, device="cpu"), usable, splits)
    cmp = evaluation.compare({"m": res, **baselines[which]}, "m")["methods"]
    print(json.dumps({"ckpt": os.path.basename(ckpt), "which": which, "lever": lever, "roc_auc": round(res["roc_auc"], 5),
                      "rank": round(cmp["m"]["mean_rank"], 3), "log_loss": round(res["log_loss"], 5),
                      "catboost": round(cmp["catboost"]["roc_auc"], 5),
                      "per_task": {k: round(v, 4) for k, v in res["per_task"].items()}, "s": round(time.time() - t)}),
          flush=True)
