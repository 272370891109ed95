"""Composite keys: the columns whose joint value names an entity (a patient = id within centre, sex, age, ...), found
by forward selection on the training rows, and their leave-one-out label frequencies appended, as the classifier's
id rule does for one column. A NanoTabPFNClassifier subclass (the id rule kept on), scored on a suite. From the root:
    python results/cpu-2core/inference-levers/composite-keys/choice.py CKPT suite|heldout SPLITS SPEC  (SPEC: JSON or null)
SPEC: {"gain": min label gain over chance, "share": min share of rows with a partner, "max_cols": key size cap}: this
subclass on the classifier with its own composite key off; null: the classifier with its key off; "on": the classifier
as it is (its KEY_* rule, since this choice)."""
import json, os, sys, time, warnings
sys.path.insert(0, os.getcwd())
import numpy as np, torch
torch.set_num_threads(2)
import evaluation, quality
from classifier import NanoTabPFNClassifier, _as_features, _labels, ID_SMOOTHING


def row_groups(X):
    """Group index (n,) of each row's exact values (NaN equal to NaN)."""
    filled = np.where(np.isnan(X), np.inf, X)
    return np.unique(filled, axis=0, return_inverse=True)[1].reshape(-1)


def key_score(X, y, K):
    """(share of rows with a partner, mean share of partners with the row's label minus chance) of the key X (n, s)."""
    group = row_groups(X)
    counts = np.zeros((group.max() + 1, K)); np.add.at(counts, (group, y), 1)
    partners = counts[group].sum(1) - 1
    paired = partners > 0
    if not paired.any():
        return 0.0, 0.0, counts.shape[0]
    same = (counts[group, y] - 1)[paired] / partners[paired]
    chance = np.square(np.bincount(y, minlength=K) / y.size).sum()
    return paired.mean(), same.mean() - chance, counts.shape[0]


def find_key(X, y, K, gain, share, max_cols):
    """Forward selection of columns while share x gain rises; the key if it has >= 2 columns and passes, else None."""
    chosen, best = [], 0.0
    while len(chosen) < max_cols:
        scores = []
        for j in range(X.shape[1]):
            if j in chosen:
                continue
            s, g, groups = key_score(X[:, chosen + [j]], y, K)
            scores.append((s * g if 8 <= groups <= 0.9 * len(y) else 0.0, j))
        if not scores:
            break
        value, j = max(scores)
        if value <= best + 0.01:
            break
        chosen, best = chosen + [j], value
    if len(chosen) < 2:
        return None
    s, g, _ = key_score(X[:, chosen], y, K)
    return chosen if s >= share and g >= gain else None


class Keys(NanoTabPFNClassifier):
    def __init__(self, model, gain=0.2, share=0.2, max_cols=6, **kw):
        super().__init__(model, **kw); self.gain = gain; self.share = share; self.max_cols = max_cols

    def _encode(self, X, own=None):
        if self.key_ is None:
            return X
        filled = np.where(np.isnan(X[:, self.key_]), np.inf, X[:, self.key_])
        enc = np.tile(self.key_prior_, (X.shape[0], 1))
        for i, row in enumerate(map(bytes, filled)):
            counts = self.key_table_.get(row)
            if counts is None:
                continue
            counts = counts.copy()
            if own is not None:
                counts[own[i]] -= 1
            enc[i] = (counts + ID_SMOOTHING * self.key_prior_) / (counts.sum() + ID_SMOOTHING)
        return np.concatenate([X, enc[:, 1:2] if enc.shape[1] == 2 else enc], axis=1)

    def fit(self, X, y):
        X = _as_features(X, "X_train"); classes, yi = _labels(y, X.shape[0]); K = len(classes)
        self.key_ = find_key(X, yi, K, self.gain, self.share, self.max_cols) if X.shape[1] >= 2 else None
        self.key_prior_ = np.bincount(yi, minlength=K) / len(yi)
        self.key_table_ = {}
        if self.key_ is not None:
            filled = np.where(np.isnan(X[:, self.key_]), np.inf, X[:, self.key_])
            for row, c in zip(map(bytes, filled), yi):
                self.key_table_.setdefault(row, np.zeros(K))[c] += 1
        return super().fit(self._encode(X, yi), y)

    def predict_proba(self, X):
        return super().predict_proba(self._encode(_as_features(X, "X_test")))


if __name__ == "__main__":
    ckpt, which, splits, spec = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    tasks, baselines = quality.load_cached(splits)
    from classifier import model_from_checkpoint
    model = model_from_checkpoint(ckpt)
    warnings.simplefilter("ignore")
    keys = {}
    import classifier
    if spec != "on":
        classifier._find_key = lambda *args: None    # the classifier's own composite key off
    def make():
        return Keys(model, device="cpu", **spec) if isinstance(spec, dict) else NanoTabPFNClassifier(model, device="cpu")
    t = time.time()
    usable = evaluation.usable_tasks(tasks[which], 10)
    res = evaluation.evaluate_suite(make, usable, splits)
    cmp = evaluation.compare({"m": res, **baselines[which]}, "m")["methods"]
    if spec is not None:   # which tasks got a key (first split's training rows); "on": the classifier's rule
        if spec == "on":
            spec = {"gain": classifier.KEY_MIN_GAIN, "share": classifier.KEY_MIN_SHARE, "max_cols": classifier.KEY_MAX_COLUMNS}
        for task in usable:
            train = task.splits[0][0]
            X = task.X[train]; classes, yi = _labels(task.y[train], len(train))
            key = find_key(X, yi, len(classes), spec.get("gain", 0.2), spec.get("share", 0.2), spec.get("max_cols", 6))
            if key is not None:
                keys[task.name] = key
    print(json.dumps({"which": which, "spec": json.loads(sys.argv[4]), "roc_auc": round(res["roc_auc"], 5),
                      "rank": round(cmp["m"]["mean_rank"], 3), "log_loss": round(res["log_loss"], 5),
                      "catboost": round(cmp["catboost"]["roc_auc"], 5),
                      "keyed": {k: round(res["per_task"][k], 3) for k in keys},
                      "keys": {k: list(map(int, v)) for k, v in keys.items()}, "s": round(time.time() - t)}), flush=True)
