"""Target encoding of id-like integer columns, as a NanoTabPFNClassifier subclass (the classifier's own id_encoding
off), scored on a suite. Run from the repository root:
    python results/cpu-2core/inference-levers/id-columns/choice.py CKPT suite|heldout SPLITS SPEC   (SPEC: JSON or null)"""
import os, sys, time, warnings, json
sys.path.insert(0, os.getcwd())   # run from the repository root
import numpy as np, torch
torch.set_num_threads(2)
import evaluation, quality
from classifier import NanoTabPFNClassifier, _as_features, _labels

def purity_gain(v, y):
    """Mean share of a row's same-value partners that share its label, minus chance; share of rows with a partner."""
    ok = ~np.isnan(v); v, y = v[ok], y[ok]
    values, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    K = y.max() + 1
    table = np.zeros((len(values), K)); np.add.at(table, (inverse, y), 1)
    partners = counts[inverse] - 1
    has = partners > 0
    if has.sum() == 0: return 0.0, 0.0
    same = (table[inverse, y] - 1)[has] / partners[has]
    chance = ((np.bincount(y, minlength=K) / len(y)) ** 2).sum()
    return float(same.mean() - chance), float(has.mean())

def id_columns(X, min_levels, max_share, min_share, y=None, gain=None, partner=0.0):
    n, cols = X.shape[0], []
    for j in range(X.shape[1]):
        v = X[:, j][~np.isnan(X[:, j])]
        if v.size < n // 2 or not np.all(v == np.round(v)):
            continue
        k = np.unique(v).size
        if k >= max(min_levels, min_share * n) and k <= max_share * n:
            if gain is not None:
                g, p = purity_gain(X[:, j], y)
                if g < gain or p < partner: continue
            cols.append(j)
    return cols

class TE(NanoTabPFNClassifier):
    def __init__(self, model, te=(8, 0.9, 0.0), smooth=1.0, gain=None, partner=0.0, **kw):
        super().__init__(model, id_encoding=False, **kw); self.te = te; self.smooth = smooth; self.gain = gain; self.partner = partner
    def _encode(self, X, train_y=None):
        out = []
        for j in self.te_cols_:
            table, prior = self.te_tables_[j], self.te_prior_
            enc = np.tile(prior, (X.shape[0], 1))
            for i, v in enumerate(X[:, j]):
                if np.isnan(v) or v not in table: continue
                counts = table[v].copy()
                if train_y is not None: counts[train_y[i]] -= 1
                total = counts.sum()
                enc[i] = (counts + self.smooth * prior) / (total + self.smooth)
            out.append(enc[:, 1:2] if len(prior) == 2 else enc)
        return np.concatenate([X] + out, axis=1) if out else X
    def fit(self, X, y):
        X = _as_features(X, "X_train"); classes, yi = _labels(y, X.shape[0])
        K = len(classes)
        self.te_cols_ = id_columns(X, *self.te, y=yi, gain=self.gain, partner=self.partner)
        self.te_prior_ = np.bincount(yi, minlength=K) / len(yi)
        self.te_tables_ = {}
        for j in self.te_cols_:
            t = {}
            for v, c in zip(X[:, j], yi):
                if np.isnan(v): continue
                t.setdefault(v, np.zeros(K))[c] += 1
            self.te_tables_[j] = t
        return super().fit(self._encode(X, yi), y)
    def predict_proba(self, X):
        return super().predict_proba(self._encode(_as_features(X, "X_test")))

if __name__ == "__main__":
    ckpt, which, splits, spec = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    tasks, baselines = quality.load_cached(splits)
    from classifier import model_from_checkpoint
    model = model_from_checkpoint(ckpt)
    warnings.simplefilter("ignore")
    make = (lambda: NanoTabPFNClassifier(model, device="cpu", id_encoding=False)) if spec is None else (lambda: TE(model, device="cpu", **spec))
    t = time.time()
    res = evaluation.evaluate_suite(make, evaluation.usable_tasks(tasks[which], 10), splits)
    cmp = evaluation.compare({"m": res, **baselines[which]}, "m")["methods"]
    worst = ["multgee/arthritis", "MASS/OME:multiclass", "geepack/ohio", "survival/bladder", "HSAUR/respiratory",
             "survival/colon", "HSAUR/epilepsy", "survival/colon:multiclass"]
    print(json.dumps({"which": which, "spec": spec, "roc_auc": round(res["roc_auc"], 5), "rank": round(cmp["m"]["mean_rank"], 3),
                      "log_loss": round(res["log_loss"], 5), "catboost": round(cmp["catboost"]["roc_auc"], 5),
                      "worst": {k: round(v, 3) for k, v in res["per_task"].items() if k in worst}, "s": round(time.time() - t)}), flush=True)
