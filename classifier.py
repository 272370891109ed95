"""NanoTabPFNClassifier: an sklearn-style classifier around a trained NanoTabPFNModel, for real tables.

Missing values, constant/duplicate columns, id-like columns and composite keys, long and wide tables and any sortable
labels are handled from the training rows, and a linear model's decision values join the columns; ensemble member k
quantile-normalises for k odd and shifts the class indices by k // 2 mod K (the view changes first, so a multiclass
table's first members see both views)."""
import contextlib
import math
import warnings
from dataclasses import fields

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import DataConversionWarning, NotFittedError
from sklearn.utils.multiclass import type_of_target

from checkpoint import first_non_finite, plain_names, read_checkpoint
from model import SIZE_FIELDS, SPEED_ONLY_FIELDS, ModelConfig, NanoTabPFNModel
from prior_transforms import LINEAR_FOLDS, linear_column_count

INFERENCE_ATTENTION = "sdpa"   # the same math as "mha", faster on CPU and GPU
# what --fast trains with past 7 columns; on a CPU as fast as SDPA (results/cpu-2core/inference)
INFERENCE_FEATURE_ATTENTION = "matmul"
OLD_SPEED_FIELDS = ("padded_attention", "checkpoint", "sdpa_backend")   # older checkpoints' kernel choices
# auto: bf16 on a GPU (half the time of fp32 with the same scores, results/nvidia-h100/latency-bf16), fp32 on a CPU,
# where bf16 is faster only with bf16 dot products (AVX512-BF16, AMX)
AUTOCASTS = ("auto", "off", "bf16")
TEST_CHUNK_ROWS = 4096      # test rows never attend to each other, so chunks agree
Z_CLIP = 1e6                # standardised values are clipped here (the model clips at 100 std itself)
# An id-like column (a subject's rows repeat its id): integer values in half the rows or more, at least
# ID_MIN_LEVELS distinct and at most ID_MAX_SHARE of the rows, so values repeat; kept when a row's same-value
# partners share its label ID_MIN_GAIN more often than chance (results/cpu-2core/inference-levers/id-columns).
ID_MIN_LEVELS, ID_MAX_SHARE, ID_MIN_GAIN = 8, 0.9, 0.2
ID_SMOOTHING = 1.0          # label frequencies are shrunk toward the training prior by this many rows
# A composite key (an entity named by several columns: id within centre, sex, age): columns added one at a time while
# (share of rows with a same-key partner) x (label gain) rises, at most KEY_MAX_COLUMNS; kept with 2 or more columns,
# ID_MIN_LEVELS..ID_MAX_SHARE distinct keys, KEY_MIN_SHARE rows with a partner, a gain of KEY_MIN_GAIN
# (results/cpu-2core/inference-levers/composite-keys).
KEY_MAX_COLUMNS, KEY_MIN_SHARE, KEY_MIN_GAIN = 6, 0.2, 0.3
# The linear columns: logistic regression's decision values, out of LINEAR_FOLDS folds on the training rows (a row's
# value never comes from a fit that saw its label) and from the fit on all of them for the test rows
# (results/cpu-2core/inference-levers/linear-feature). LINEAR_FOLDS and linear_column_count are the prior's (its
# --linear-columns draws the same columns).
# The forest columns: a random forest's class probabilities, out of bag on the training rows (a row's value comes only
# from trees whose bootstrap left it out) and from the whole forest on the test rows
# (results/cpu-2core/inference-levers/forest-columns).
FOREST_TREES = 100


def resolved_autocast(autocast: str, device_type: str) -> str:
    """The precision `autocast` runs in on a device of `device_type`: "bf16" or "off"."""
    return ("bf16" if device_type == "cuda" else "off") if autocast == "auto" else autocast


def inference_model(math_fields: dict, attention: str = INFERENCE_ATTENTION) -> NanoTabPFNModel:
    """A model of ModelConfig's math fields with the kernels this module predicts with (what a checkpoint runs)."""
    mha = attention == "mha"   # upstream's call takes neither kernel choice
    return NanoTabPFNModel(ModelConfig(**math_fields, attention=attention,
                                       feature_attention="sdpa" if mha else INFERENCE_FEATURE_ATTENTION,
                                       last_layer_target_only=not mha))


def model_from_checkpoint(path, attention: str = INFERENCE_ATTENTION) -> NanoTabPFNModel:
    """The model of a checkpoint, built from its fields that change the math; kernel choices of any version are
    ignored, and a field older checkpoints lack takes its default."""
    state = read_checkpoint(path)
    config, known = state["model_config"], {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(config) - known - set(OLD_SPEED_FIELDS))
    missing = [name for name in SIZE_FIELDS if name not in config]
    if unknown or missing:
        raise ValueError(f"checkpoint {path}: model_config has unknown field(s) {unknown} or lacks {missing}")
    try:
        model = inference_model({name: config[name] for name in known & set(config) if name not in SPEED_ONLY_FIELDS},
                                attention)
    except (ValueError, TypeError) as error:
        raise ValueError(f"checkpoint {path}: bad model_config: {error}") from None
    try:
        model.load_state_dict(plain_names(state["model"]))
    except (RuntimeError, TypeError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        detail = (lines[1:] or lines)[0].strip()
        raise ValueError(f"checkpoint {path}: its tensors do not match its model_config ({detail[:200]})") from None
    bad = first_non_finite(model.state_dict())
    if bad is not None:
        raise ValueError(f"checkpoint {path} holds non-finite weights ('{bad}')")
    return model


def _as_features(X, what: str) -> np.ndarray:
    """X as a float64 (n, f) array with n, f >= 1; ±inf becomes NaN (missing). Messages follow sklearn's."""
    X = X.to_numpy() if hasattr(X, "to_numpy") else X      # a pandas DataFrame, without importing pandas
    if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):
        raise ValueError(f"{what} is a sparse matrix: sparse input is not supported; pass X.toarray()")
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{what} must be 2-D (samples, features), got {X.ndim}-D with shape {X.shape}: "
                         f"Reshape your data with X.reshape(-1, 1) for one feature or X.reshape(1, -1) for one sample")
    if 0 in X.shape:
        count, unit = (X.shape[0], "sample") if X.shape[0] == 0 else (X.shape[1], "feature")
        raise ValueError(f"{what} is empty: Found array with {count} {unit}(s) (shape={X.shape}) while a "
                         f"minimum of 1 is required.")
    if X.dtype.kind == "c":
        raise ValueError(f"{what}: Complex data not supported; give real-valued features")
    if X.dtype.kind == "O":   # pandas' nullable dtypes (Float64, Int64, boolean) mark a missing value with pd.NA
        X = np.where(_is_na(X), np.nan, X)
    try:
        X = X.astype(np.float64)
    except ValueError:
        raise ValueError(f"{what} holds non-numeric values (strings?): encode categorical columns as numbers "
                         f"first") from None
    except TypeError:
        raise TypeError(f"{what} holds objects that are not numbers (float() argument must be a string or a "
                        f"real number)") from None
    X[np.isinf(X)] = np.nan
    return X


_is_na = np.frompyfunc(lambda v: type(v).__name__ == "NAType", 1, 1)   # pd.NA, without importing pandas


def _labels(y, num_rows: int):
    """(classes, indices) of 1-D labels of any sortable type; one-line ValueError otherwise."""
    if y is None:
        raise ValueError("NanoTabPFNClassifier requires y to be passed, but the target y is None")
    y = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y)
    if y.ndim == 2 and y.shape[1] == 1:
        warnings.warn(DataConversionWarning("A column-vector y was passed when a 1d array was expected; "
                                            "use shape (n,)"), stacklevel=3)
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != num_rows:
        raise ValueError(f"y_train must be 1-D with {num_rows} labels, got shape {y.shape}")
    if y.dtype.kind in "fc" and not np.isfinite(y).all():
        raise ValueError("y_train contains NaN or infinity")
    if y.dtype.kind == "O" and any(v is None or (isinstance(v, float) and math.isnan(v)) or _is_na(v) for v in y):
        raise ValueError("y_train contains missing labels (None or NaN)")
    if y.dtype.kind == "f" and type_of_target(y) == "continuous":
        raise ValueError("y_train: Unknown label type: continuous (class labels expected, not real values)")
    try:
        return np.unique(y, return_inverse=True)
    except TypeError as error:
        raise ValueError(f"y_train labels cannot be sorted (mixed types?): {error}") from None


def _quantile_normal(train: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each column of x through the train column's empirical CDF to normal scores. (n, f) -> (n, f)."""
    from scipy.special import ndtri
    out, n = np.empty_like(x), train.shape[0]
    for j in range(x.shape[1]):
        sorted_train = np.sort(train[:, j])
        ranks = np.searchsorted(sorted_train, x[:, j], "left") + np.searchsorted(sorted_train, x[:, j], "right")
        out[:, j] = ndtri(np.clip(ranks / (2.0 * n), 0.5 / n, 1 - 0.5 / n))
    return out


def _shared_labels(group: np.ndarray, labels: np.ndarray, num_classes: int):
    """(label counts (G, K), share of rows with a same-group partner, how much more often than chance a row's
    partners share its label) of rows in groups 0..G-1."""
    counts = np.zeros((group.max() + 1, num_classes))
    np.add.at(counts, (group, labels), 1)
    partners = counts[group].sum(1) - 1                                     # other rows of the row's group
    paired = partners > 0
    if not paired.any():
        return counts, 0.0, 0.0
    same = (counts[group, labels] - 1)[paired] / partners[paired]           # their share with the row's label
    chance = np.square(np.bincount(labels, minlength=num_classes) / labels.size).sum()
    return counts, paired.mean(), same.mean() - chance


def _id_groups(column: np.ndarray, y: np.ndarray, num_classes: int):
    """(distinct values (G,), label counts (G, K)) of a training column (n,) that is id-like and whose repeated
    values share labels (the ID_* rule); None for any other column."""
    observed = ~np.isnan(column)
    values, labels = column[observed], y[observed]
    if values.size < column.size // 2 or not np.all(values == np.round(values)):
        return None
    distinct, group = np.unique(values, return_inverse=True)
    if not ID_MIN_LEVELS <= len(distinct) <= ID_MAX_SHARE * column.size:
        return None
    counts, _, gain = _shared_labels(group, labels, num_classes)
    return (distinct, counts) if gain >= ID_MIN_GAIN else None


def _key_rows(X: np.ndarray) -> np.ndarray:
    """X (n, s) as comparable float64 rows: a missing cell equal to a missing cell, -0.0 to 0.0."""
    return np.where(np.isnan(X), np.inf, X).astype(np.float64) + 0.0


def _row_groups(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows (G, s), group index (n,)) of X (n, s), by _key_rows."""
    distinct, group = np.unique(_key_rows(X), axis=0, return_inverse=True)
    return distinct, group.reshape(-1)


def _find_key(X: np.ndarray, y: np.ndarray, num_classes: int) -> list | None:
    """The columns of a composite key (the KEY_* rule) of training rows X (n, f), or None."""
    def score(columns):
        distinct, group = _row_groups(X[:, columns])
        if not ID_MIN_LEVELS <= len(distinct) <= ID_MAX_SHARE * len(y):
            return 0.0, 0.0, 0.0
        _, share, gain = _shared_labels(group, y, num_classes)
        return share * gain, share, gain

    key, best = [], (0.0, 0.0, 0.0)
    while len(key) < min(KEY_MAX_COLUMNS, X.shape[1]):
        candidates = [(score(key + [j]), j) for j in range(X.shape[1]) if j not in key]
        value, j = max(candidates, key=lambda c: (c[0][0], c[1]))   # the best share x gain (a tie: the last column)
        if value[0] <= best[0] + 0.01:
            break
        key, best = key + [j], value
    return key if len(key) >= 2 and best[1] >= KEY_MIN_SHARE and best[2] >= KEY_MIN_GAIN else None


class _Linear:
    """Logistic regression as the baseline runs it (mean fill + missing indicators, standardised, C = 1), with the
    fill and scaling in numpy: sklearn's pipeline gives the same decision values in more time (linear-feature)."""

    def fit(self, X: np.ndarray, y: np.ndarray) -> "_Linear":
        from sklearn.linear_model import LogisticRegression
        missing = np.isnan(X)
        self.kept_ = np.flatnonzero(~missing.all(0))       # as SimpleImputer, a column with no values is dropped
        self.flagged_ = np.flatnonzero(missing.any(0))     # a missing indicator for each column missing at fit
        self.fill_ = np.nanmean(X[:, self.kept_], axis=0)
        Z = self._filled(X)
        self.mean_, scale = Z.mean(0), Z.std(0)
        self.scale_ = np.where(scale < 10 * np.finfo(Z.dtype).eps * np.maximum(1, np.abs(self.mean_)), 1.0, scale)
        self.model_ = LogisticRegression(C=1.0, max_iter=2000).fit((Z - self.mean_) / self.scale_, y)
        return self

    def _filled(self, X: np.ndarray) -> np.ndarray:
        filled = np.where(np.isnan(X[:, self.kept_]), self.fill_, X[:, self.kept_])
        return np.concatenate([filled, np.isnan(X[:, self.flagged_]).astype(X.dtype)], axis=1)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self.model_.decision_function((self._filled(X) - self.mean_) / self.scale_)


def _decision(linear, X: np.ndarray) -> np.ndarray:
    """(n, 1) class 1's logit for two classes, (n, K) for more."""
    values = linear.decision_function(X)
    return values[:, None] if values.ndim == 1 else values


def _out_of_fold_decision(X: np.ndarray, y: np.ndarray, linear, seed: int) -> np.ndarray:
    """Each training row's decision values from a fit on the other folds (stratified, so every fit sees every
    class); the full fit's where a class has a single row."""
    from sklearn.model_selection import StratifiedKFold
    folds = min(LINEAR_FOLDS, int(np.bincount(y).min()))
    if folds < 2:
        return _decision(linear, X)
    classes = int(y.max()) + 1   # y holds 0..K-1, every class present
    values = np.zeros((len(y), linear_column_count(classes)))   # _decision's columns
    for fit_rows, held in StratifiedKFold(folds, shuffle=True, random_state=seed).split(X, y):
        values[held] = _decision(_Linear().fit(X[fit_rows], y[fit_rows]), X[held])
    return values


def _forest_columns(probabilities: np.ndarray) -> np.ndarray:
    """(n, 1) class 1's probability for two classes, (n, K) for more."""
    return probabilities[:, 1:] if probabilities.shape[1] == 2 else probabilities


def _for_trees(X: np.ndarray) -> np.ndarray:
    """X within float32's range (sklearn's trees cast to it), NaN kept: the trees send missing cells down a side."""
    limit = np.finfo(np.float32).max
    return np.clip(X, -limit, limit)


def _fit_forest(X: np.ndarray, y: np.ndarray, seed: int):
    """(the forest, its out-of-bag columns on the training rows: the class prior where no tree left a row out)."""
    from sklearn.ensemble import RandomForestClassifier
    forest = RandomForestClassifier(FOREST_TREES, oob_score=True, n_jobs=-1, random_state=seed).fit(_for_trees(X), y)
    out_of_bag = forest.oob_decision_function_                              # (n, K), NaN where never out of bag
    return forest, _forest_columns(np.where(np.isnan(out_of_bag), np.bincount(y) / len(y), out_of_bag))


def _label_frequencies(column, values, counts, prior, own_labels=None) -> np.ndarray:
    """Smoothed label frequencies (m, K) of the training rows sharing each row's value (the prior where none);
    own_labels (training rows): each row's own label left out."""
    index = np.clip(np.searchsorted(values, column), 0, len(values) - 1)
    found = ~np.isnan(column) & (values[index] == column)
    shared = np.where(found[:, None], counts[index], 0.0)                   # (m, K)
    if own_labels is not None:
        shared[np.flatnonzero(found), own_labels[found]] -= 1
    return (shared + ID_SMOOTHING * prior) / (shared.sum(1, keepdims=True) + ID_SMOOTHING)


class NanoTabPFNClassifier(ClassifierMixin, BaseEstimator):
    """fit stores the cleaned training set; predict_proba runs the model on train + test rows per member.

    device None keeps the model's; missing "indicator" adds a 0/1 column per feature with missing training cells to
    the mean fill; features_per_estimator None uses all columns; random_state seeds the subsample and subsets;
    id_encoding adds to each id-like column whose repeated values share labels (ID_*), and to one composite key of
    several columns that names an entity (KEY_*), the leave-one-out label frequencies of its value's training rows,
    as CatBoost's target statistics do for categories; forest_columns True appends a random forest's class
    probabilities (out of bag on the training rows, FOREST_TREES), before linear_columns appends logistic regression's
    decision values (out of fold on the training rows, LINEAR_FOLDS); "half" averages n_estimators members without the
    forest columns and n_estimators with them (results/cpu-2core/inference-levers/forest-blend)."""

    def __init__(self, model: NanoTabPFNModel, device=None, n_estimators: int = 4,
                 features_per_estimator: int | None = None, max_train_rows: int = 1000,
                 missing: str = "mean", autocast: str = "auto", random_state: int = 0, id_encoding: bool = True,
                 linear_columns: bool = True, forest_columns: bool | str = False):
        self.model = model
        self.device = device
        self.n_estimators = n_estimators
        self.features_per_estimator = features_per_estimator
        self.max_train_rows = max_train_rows
        self.missing = missing
        self.autocast = autocast
        self.random_state = random_state
        self.id_encoding = id_encoding
        self.linear_columns = linear_columns
        self.forest_columns = forest_columns

    @classmethod
    def from_checkpoint(cls, path, device=None, **params) -> "NanoTabPFNClassifier":
        """A classifier (on CPU unless device) around a checkpoint's model; a bad file is a one-line ValueError."""
        return cls(model_from_checkpoint(path), device="cpu" if device is None else device, **params)

    def fit(self, X, y) -> "NanoTabPFNClassifier":
        """X (n, f) numeric, NaN / ±inf allowed; y (n,) with 2..model.config.num_outputs distinct labels."""
        if self.missing not in ("indicator", "mean"):
            raise ValueError(f"missing must be 'indicator' or 'mean', got {self.missing!r}")
        for name in ("id_encoding", "linear_columns"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not (isinstance(self.forest_columns, (bool, np.bool_)) or
                isinstance(self.forest_columns, str) and self.forest_columns == "half"):
            raise ValueError(f"forest_columns must be True, False or 'half', got {self.forest_columns!r}")
        if self.autocast not in AUTOCASTS:
            raise ValueError(f"autocast must be one of {AUTOCASTS}, got {self.autocast!r}")
        for name in ("n_estimators", "max_train_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.features_per_estimator is not None and self.features_per_estimator < 1:
            raise ValueError(f"features_per_estimator must be a positive int or None, "
                             f"got {self.features_per_estimator!r}")
        if isinstance(self.forest_columns, str):   # "half": two fitted classifiers, their probabilities averaged
            params = self.get_params()
            self.halves_ = [type(self)(**{**params, "forest_columns": False}).fit(X, y)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)   # the subsample's warning: the first half gave it
                self.halves_.append(type(self)(**{**params, "forest_columns": True}).fit(X, y))
            self.n_features_in_, self.classes_ = self.halves_[0].n_features_in_, self.halves_[0].classes_
            return self
        self.halves_ = None
        X = _as_features(X, "X_train")
        classes, y = _labels(y, X.shape[0])
        num_outputs = self.model.config.num_outputs
        if len(classes) < 2:
            raise ValueError(f"y_train has 1 class ({classes[0]!r}); a classifier needs at least 2")
        if len(classes) > num_outputs:
            only = " Only binary classification is supported." if num_outputs == 2 else ""
            raise ValueError(f"y_train has {len(classes)} classes but the model predicts at most {num_outputs}.{only}")
        rng = np.random.default_rng(self.random_state)
        if X.shape[0] > self.max_train_rows:   # stratified: each class in proportion and at least once
            counts = np.bincount(y)
            share = np.maximum(1, np.floor(counts * self.max_train_rows / len(y)).astype(int))
            keep = np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), min(s, n), replace=False)
                                           for c, (s, n) in enumerate(zip(share, counts)) if n]))
            warnings.warn(f"NanoTabPFNClassifier: {X.shape[0]} training rows > max_train_rows="
                          f"{self.max_train_rows}; using a stratified subsample of {len(keep)}", stacklevel=2)
            X, y = X[keep], y[keep]
        self.n_features_in_, self.classes_, self.y_train_ = X.shape[1], classes, y
        self.forest_ = self.linear_ = None
        if self.forest_columns:   # first: the linear columns, the id encoding and the members see its columns too
            self.forest_, out_of_bag = _fit_forest(X, y, self.random_state)
            X = np.concatenate([X, out_of_bag], axis=1)
        if self.linear_columns:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # a linear fit that stops at max_iter, or a column with no values
                self.linear_ = _Linear().fit(X, y)
                X = np.concatenate([X, _out_of_fold_decision(X, y, self.linear_, self.random_state)], axis=1)
        groups = [_id_groups(X[:, j], y, len(classes)) if self.id_encoding else None for j in range(X.shape[1])]
        self.id_columns_ = [j for j, g in enumerate(groups) if g is not None]
        self.id_groups_ = [groups[j] for j in self.id_columns_]
        self.key_columns_ = (_find_key(X, y, len(classes)) if self.id_encoding else None) or []
        if self.key_columns_:
            distinct, group = _row_groups(X[:, self.key_columns_])
            self.key_index_ = {row.tobytes(): i for i, row in enumerate(distinct)}
            self.key_counts_ = _shared_labels(group, y, len(classes))[0]
        X = self._with_id_frequencies(X, own_labels=y)
        self._fit_columns(X)
        clean = self._clean(X)
        # Standardising in float64 keeps finite float64 values finite in the model's float32.
        self.center_, std = clean.mean(axis=0), clean.std(axis=0)
        self.scale_ = np.where(std > 0, std, 1.0)
        self.X_train_ = self._standardize(clean)
        width = clean.shape[1]
        per = min(width, self.features_per_estimator or width)
        self.feature_subsets_ = [np.sort(rng.choice(width, per, replace=False)) if per < width else np.arange(width)
                                 for _ in range(self.n_estimators)]
        return self

    def _with_id_frequencies(self, X: np.ndarray, own_labels=None) -> np.ndarray:
        """X (n, f) with the label frequencies of each id column and of the composite key appended: class 1's for
        two classes, else all K."""
        prior = np.bincount(self.y_train_, minlength=len(self.classes_)) / len(self.y_train_)
        added = [_label_frequencies(X[:, j], *groups, prior, own_labels)
                 for j, groups in zip(self.id_columns_, self.id_groups_)]
        if self.key_columns_:   # the key as one column: its training group, NaN for a key never seen in training
            group = np.array([self.key_index_.get(row.tobytes(), np.nan) for row in _key_rows(X[:, self.key_columns_])],
                             dtype=np.float64)
            added.append(_label_frequencies(group, np.arange(len(self.key_counts_), dtype=np.float64),
                                            self.key_counts_, prior, own_labels))
        return np.concatenate([X] + [a[:, 1:] if a.shape[1] == 2 else a for a in added], axis=1)

    def _fit_columns(self, X: np.ndarray):
        """Chooses the kept columns and the missing-value fill from the training rows."""
        sentinel = np.where(np.isnan(X), np.nanmax(np.abs(np.nan_to_num(X))) * 2 + 1, X)
        kept, seen = [], set()
        for j, column in enumerate(sentinel.T):
            key = column.tobytes()
            if np.all(column == column[0]) or key in seen:      # constant (missingness too) or duplicate
                continue
            if self.missing == "mean" and np.unique(X[~np.isnan(X[:, j]), j]).size < 2:
                continue                                         # only its missingness varies, and that is dropped
            seen.add(key)
            kept.append(j)
        self.kept_columns_ = np.array(kept, dtype=np.int64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # an overflowing mean: nan_to_num caps it
            self.fill_ = np.nan_to_num(np.nanmean(X[:, kept], axis=0))
        self.indicator_columns_ = np.flatnonzero(np.isnan(X[:, kept]).any(axis=0) & (self.missing == "indicator"))

    def _clean(self, X: np.ndarray) -> np.ndarray:
        """Kept columns, filled, with missing indicators appended. (n, f) -> (n, f') float64, finite."""
        if len(self.kept_columns_) == 0:
            return np.zeros((X.shape[0], 1))                     # nothing informative: one constant column
        X = X[:, self.kept_columns_]
        missing = np.isnan(X)
        return np.concatenate([np.where(missing, self.fill_, X), missing[:, self.indicator_columns_]], axis=1,
                              dtype=np.float64)

    def _standardize(self, X: np.ndarray) -> np.ndarray:
        return np.clip((X - self.center_) / self.scale_, -Z_CLIP, Z_CLIP)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True          # NaN and ±inf are missing values, handled in fit
        tags.classifier_tags.multi_class = self.model.config.num_outputs > 2
        tags.non_deterministic = False
        return tags

    def predict_proba(self, X) -> np.ndarray:
        """X (m, f) with fit's f, NaN / ±inf allowed -> (m, K) float32 probabilities over classes_."""
        if not hasattr(self, "classes_"):
            raise NotFittedError("this NanoTabPFNClassifier is not fitted yet: call fit(X_train, y_train) first")
        if getattr(self, "halves_", None):
            return np.mean([half.predict_proba(X) for half in self.halves_], axis=0, dtype=np.float32)
        X = _as_features(X, "X_test")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but NanoTabPFNClassifier is expecting "
                             f"{self.n_features_in_} features as input (X_test vs fit)")
        if getattr(self, "forest_", None) is not None:   # None: off, or fitted before the forest columns
            X = np.concatenate([X, _forest_columns(self.forest_.predict_proba(_for_trees(X)))], axis=1)
        if getattr(self, "linear_", None) is not None:   # None: off, or fitted before the linear columns
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                X = np.concatenate([X, _decision(self.linear_, X)], axis=1)
        X = self._standardize(self._clean(self._with_id_frequencies(X)))
        device = torch.device(self.device) if self.device is not None else next(self.model.parameters()).device
        was_training = self.model.to(device).training
        self.model.eval()
        try:
            bf16 = resolved_autocast(self.autocast, device.type) == "bf16"
            with torch.no_grad(), (torch.autocast(device.type, dtype=torch.bfloat16) if bf16
                                   else contextlib.nullcontext()):
                chunks = [self._ensemble(X[i:i + TEST_CHUNK_ROWS], device)
                          for i in range(0, X.shape[0], TEST_CHUNK_ROWS)]
        finally:
            self.model.train(was_training)
        return np.concatenate(chunks).astype(np.float32)

    def _ensemble(self, X_test: np.ndarray, device) -> np.ndarray:
        """Mean probabilities of the distinct members on test rows (m, f') -> (m, K)."""
        num_classes = len(self.classes_)
        members = list(dict.fromkeys(((k // 2) % num_classes, k % 2 == 1, tuple(self.feature_subsets_[k]))
                                     for k in range(self.n_estimators)))   # (class shift, quantile?, columns)
        quantile, xs, ys = {}, [], []
        for shift, use_quantile, subset in members:
            train, test = self.X_train_[:, subset], X_test[:, subset]
            if use_quantile:
                if subset not in quantile:
                    quantile[subset] = (_quantile_normal(train, train), _quantile_normal(train, test))
                train, test = quantile[subset]
            xs.append(np.concatenate([train, test]))
            ys.append((self.y_train_ + shift) % num_classes)
        x = torch.from_numpy(np.stack(xs).astype(np.float32)).to(device)       # (B, n+m, f'')
        y = torch.from_numpy(np.stack(ys).astype(np.float32)).to(device)       # (B, n)
        # One forward on a GPU; one per member on the CPU, where a batched forward's buffers pass glibc's mmap
        # threshold and are page-faulted afresh at every call.
        group = len(members) if device.type == "cuda" else 1
        logits = torch.cat([self.model((x[i:i + group], y[i:i + group]), train_test_split_index=len(self.y_train_))
                            for i in range(0, len(members), group)])[:, :, :num_classes].float()
        probabilities = F.softmax(logits, dim=-1).cpu().numpy()                # (B, m, K)
        # Member b predicted class c at index (c + shift) mod K: roll back.
        return np.mean([np.roll(p, -m[0], axis=1) for p, m in zip(probabilities, members)], axis=0)

    def predict(self, X) -> np.ndarray:
        """(m,) predicted labels, from classes_."""
        probabilities = self.predict_proba(X)     # first: it checks that fit ran
        return self.classes_[probabilities.argmax(axis=1)]
