"""NanoTabPFNClassifier: an sklearn-style classifier around a trained NanoTabPFNModel, for real tables.

fit stores a cleaned training set; predict_proba runs the model on train + test rows as one table per
ensemble member. What real input gets (each step fitted on the training rows only):
  * ±inf is treated as missing; missing cells get the column's train mean, plus (missing="indicator") one
    0/1 column per feature that had missing training cells;
  * constant and duplicate columns are dropped;
  * more training rows than max_train_rows: a stratified subsample of max_train_rows, with a warning;
  * more feature columns than features_per_estimator: each ensemble member sees its own random subset;
  * labels of any sortable type (strings, ints, bools); predict returns them.
Ensemble member k permutes the class indices (class c -> (c + k) mod K) and, for k // K odd, feeds
quantile-normalised features; probabilities are averaged after undoing the permutation.

Importing this module has no side effects.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import DataConversionWarning, NotFittedError
from sklearn.utils.multiclass import type_of_target

from checkpoint import read_checkpoint
from model import SPEED_ONLY_FIELDS, ModelConfig, NanoTabPFNModel

INFERENCE_ATTENTION = "sdpa"   # one SDPA call per attention: the same math as "mha", faster on CPU and GPU
SIZE_FIELDS = ("embedding_size", "num_attention_heads", "mlp_hidden_size", "num_layers", "num_outputs")
# Keys of older checkpoints' model_config that chose kernels only (never the math): ignored.
OLD_SPEED_FIELDS = ("padded_attention", "checkpoint", "sdpa_backend")
TRANSFORMS = ("none", "quantile")
TEST_CHUNK_ROWS = 4096      # test rows per forward: test rows never attend to each other, so chunks agree
Z_CLIP = 1e6                # standardised values are clipped here (the model clips at 100 std after its own scaling)


def _strip_prefixes(state_dict: dict) -> dict:
    """Removes the prefixes torch.compile ("_orig_mod.") and DDP ("module.") add to parameter names."""
    out = {}
    for key, value in state_dict.items():
        for prefix in ("_orig_mod.", "module."):
            while key.startswith(prefix):
                key = key[len(prefix):]
        out[key] = value
    return out


def model_from_checkpoint(path, attention: str = INFERENCE_ATTENTION) -> NanoTabPFNModel:
    """The model of a checkpoint, built from its size fields (kernel choices of any version are ignored).

    Args:
        path: the checkpoint file.
        attention: the ModelConfig.attention to run it with (speed only).
    """
    state = read_checkpoint(path)
    config = state["model_config"]
    unknown = sorted(set(config) - set(SIZE_FIELDS) - set(SPEED_ONLY_FIELDS) - set(OLD_SPEED_FIELDS))
    missing = [name for name in SIZE_FIELDS if name not in config]
    if unknown or missing:
        raise ValueError(f"checkpoint {path}: model_config has unknown field(s) {unknown} or lacks {missing}")
    try:
        model = NanoTabPFNModel(ModelConfig(**{name: config[name] for name in SIZE_FIELDS}, attention=attention))
    except (ValueError, TypeError) as error:
        raise ValueError(f"checkpoint {path}: bad model_config: {error}") from None
    weights = _strip_prefixes(state["model"])
    try:
        model.load_state_dict(weights)
    except (RuntimeError, TypeError) as error:
        first = str(error).strip().splitlines()
        detail = first[1].strip() if len(first) > 1 else first[0] if first else type(error).__name__
        raise ValueError(f"checkpoint {path}: its tensors do not match its model_config ({detail[:200]})") from None
    if not all(torch.isfinite(p).all() for p in model.state_dict().values() if p.is_floating_point()):
        raise ValueError(f"checkpoint {path} holds non-finite weights")
    return model


def _as_features(X, what: str) -> np.ndarray:
    """X as a float64 (n, f) array with n, f >= 1; ±inf becomes NaN (missing). Messages follow sklearn's."""
    if hasattr(X, "to_numpy"):       # a pandas DataFrame, without importing pandas
        X = X.to_numpy()
    if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):
        raise ValueError(f"{what} is a sparse matrix: sparse input is not supported; pass X.toarray()")
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{what} must be 2-D (samples, features), got {X.ndim}-D with shape {X.shape}: "
                         f"Reshape your data with X.reshape(-1, 1) for one feature or X.reshape(1, -1) for one sample")
    if X.shape[0] == 0 or X.shape[1] == 0:
        count, unit = (X.shape[0], "sample") if X.shape[0] == 0 else (X.shape[1], "feature")
        raise ValueError(f"{what} is empty: Found array with {count} {unit}(s) (shape={X.shape}) while a "
                         f"minimum of 1 is required.")
    if X.dtype.kind == "c":
        raise ValueError(f"{what}: Complex data not supported; give real-valued features")
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


def _labels(y, num_rows: int):
    """(classes, indices) of 1-D labels of any sortable type; one-line ValueError otherwise."""
    if y is None:
        raise ValueError("NanoTabPFNClassifier requires y to be passed, but the target y is None")
    if hasattr(y, "to_numpy"):
        y = y.to_numpy()
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        warnings.warn(DataConversionWarning("A column-vector y was passed when a 1d array was expected; "
                                            "use shape (n,)"), stacklevel=3)
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != num_rows:
        raise ValueError(f"y_train must be 1-D with {num_rows} labels, got shape {y.shape}")
    if y.dtype.kind in "fc" and not np.isfinite(y).all():
        raise ValueError("y_train contains NaN or infinity")
    if y.dtype.kind == "O" and any(v is None or (isinstance(v, float) and math.isnan(v)) for v in y):
        raise ValueError("y_train contains missing labels (None or NaN)")
    if y.dtype.kind == "f" and type_of_target(y) == "continuous":
        raise ValueError("y_train: Unknown label type: continuous (class labels expected, not real values)")
    try:
        classes, indices = np.unique(y, return_inverse=True)
    except TypeError as error:
        raise ValueError(f"y_train labels cannot be sorted (mixed types?): {error}") from None
    return classes, indices.reshape(-1)


def _quantile_normal(train: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Maps each column of x through the train column's empirical CDF to normal scores. (n, f) -> (n, f)."""
    from scipy.special import ndtri
    out = np.empty_like(x)
    n = train.shape[0]
    for j in range(x.shape[1]):
        sorted_train = np.sort(train[:, j])
        low = np.searchsorted(sorted_train, x[:, j], side="left")
        high = np.searchsorted(sorted_train, x[:, j], side="right")
        out[:, j] = ndtri(np.clip((low + high) / (2.0 * n), 0.5 / n, 1 - 0.5 / n))
    return out


class NanoTabPFNClassifier(ClassifierMixin, BaseEstimator):
    """sklearn-style classifier: fit stores the (cleaned) training set, predict_proba runs the model."""

    def __init__(self, model: NanoTabPFNModel, device=None, n_estimators: int = 4,
                 features_per_estimator: int | None = 10, max_train_rows: int = 1000,
                 missing: str = "mean", random_state: int = 0):
        """
        Args:
            model: a trained NanoTabPFNModel.
            device: where to run it; None keeps the model's current device.
            n_estimators: ensemble members (class-index rotations x {raw, quantile} inputs x feature subsets).
            features_per_estimator: features each member sees at most (None: all).
            max_train_rows: more training rows are subsampled (stratified) to this many, with a warning.
            missing: "indicator" (mean + a 0/1 missing column) or "mean" (mean imputation only).
            random_state: seed of the subsampling and of the feature subsets.
        """
        self.model = model
        self.device = device
        self.n_estimators = n_estimators
        self.features_per_estimator = features_per_estimator
        self.max_train_rows = max_train_rows
        self.missing = missing
        self.random_state = random_state

    @classmethod
    def from_checkpoint(cls, path, device=None, **params) -> "NanoTabPFNClassifier":
        """A classifier around the model of a checkpoint {"model_config": {...}, "model": state_dict}.

        Args:
            path: the checkpoint file (torch.load with weights_only=True: a checkpoint is data, never code).
            device: where to run the model (None: CPU).
            **params: other constructor arguments (n_estimators, ...).
        Returns:
            a NanoTabPFNClassifier; every bad file raises a one-line ValueError.
        """
        return cls(model_from_checkpoint(path), device="cpu" if device is None else device, **params)

    def _check_params(self):
        if self.missing not in ("indicator", "mean"):
            raise ValueError(f"missing must be 'indicator' or 'mean', got {self.missing!r}")
        for name in ("n_estimators", "max_train_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.features_per_estimator is not None and self.features_per_estimator < 1:
            raise ValueError(f"features_per_estimator must be a positive int or None, "
                             f"got {self.features_per_estimator!r}")

    def fit(self, X, y) -> "NanoTabPFNClassifier":
        """Checks and cleans the training set and stores it.

        Args:
            X: (n, f) numeric training features; NaN / ±inf allowed (missing).
            y: (n,) labels of any sortable type, 2..model.config.num_outputs distinct values.
        Returns:
            self.
        """
        self._check_params()
        X = _as_features(X, "X_train")
        classes, y = _labels(y, X.shape[0])
        num_outputs = self.model.config.num_outputs
        if len(classes) < 2:
            raise ValueError(f"y_train has 1 class ({classes[0]!r}); a classifier needs at least 2")
        if len(classes) > num_outputs:
            only = " Only binary classification is supported." if num_outputs == 2 else ""
            raise ValueError(f"y_train has {len(classes)} classes but the model predicts at most {num_outputs}.{only}")
        rng = np.random.default_rng(self.random_state)
        if X.shape[0] > self.max_train_rows:
            keep = self._stratified_subsample(y, rng)
            warnings.warn(f"NanoTabPFNClassifier: {X.shape[0]} training rows > max_train_rows="
                          f"{self.max_train_rows}; using a stratified subsample of {len(keep)}", stacklevel=2)
            X, y = X[keep], y[keep]
        self.n_features_in_ = X.shape[1]
        self.classes_ = classes
        self._fit_columns(X)
        self.X_train_ = self._clean(X)
        # Why: standardising in float64 keeps finite float64 values finite in the model's float32;
        # the model re-standardises with the same train statistics, so nothing else changes.
        self.center_ = self.X_train_.mean(axis=0)
        self.scale_ = np.where(self.X_train_.std(axis=0) > 0, self.X_train_.std(axis=0), 1.0)
        self.X_train_ = self._standardize(self.X_train_)
        self.y_train_ = y
        width = self.X_train_.shape[1]
        per = width if self.features_per_estimator is None else min(width, self.features_per_estimator)
        self.feature_subsets_ = [np.sort(rng.choice(width, per, replace=False)) if per < width else np.arange(width)
                                 for _ in range(self.n_estimators)]
        return self

    def _stratified_subsample(self, y: np.ndarray, rng) -> np.ndarray:
        """max_train_rows indices, each class in proportion and at least once."""
        counts = np.bincount(y)
        share = np.maximum(1, np.floor(counts * self.max_train_rows / len(y)).astype(int))
        picks = [rng.choice(np.flatnonzero(y == c), min(s, n), replace=False) for c, (s, n) in
                 enumerate(zip(share, counts)) if n]
        return np.sort(np.concatenate(picks))

    def _fit_columns(self, X: np.ndarray):
        """Chooses the kept columns and the missing-value fill from the training rows."""
        sentinel = np.where(np.isnan(X), np.nanmax(np.abs(np.nan_to_num(X))) * 2 + 1, X)
        kept, seen = [], set()
        for j in range(X.shape[1]):
            column = sentinel[:, j]
            key = column.tobytes()
            if np.all(column == column[0]) or key in seen:      # constant (missingness too) or duplicate
                continue
            if self.missing == "mean" and np.unique(X[~np.isnan(X[:, j]), j]).size < 2:
                continue                                         # only its missingness varies, and that is dropped
            seen.add(key)
            kept.append(j)
        self.kept_columns_ = np.array(kept, dtype=np.int64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # all-NaN kept column: impossible, kept anyway
            self.fill_ = np.nan_to_num(np.nanmean(X[:, kept], axis=0)) if kept else np.zeros(0)
        has_missing = np.isnan(X[:, kept]).any(axis=0) if kept else np.zeros(0, dtype=bool)
        self.indicator_columns_ = np.flatnonzero(has_missing) if self.missing == "indicator" else np.zeros(0, int)

    def _clean(self, X: np.ndarray) -> np.ndarray:
        """Kept columns, filled, with missing indicators appended. (n, f) -> (n, f') float64, finite."""
        if len(self.kept_columns_) == 0:
            return np.zeros((X.shape[0], 1))                     # nothing informative: one constant column
        X = X[:, self.kept_columns_]
        missing = np.isnan(X)
        X = np.where(missing, self.fill_, X)
        return np.concatenate([X, missing[:, self.indicator_columns_].astype(np.float64)], axis=1)

    def _standardize(self, X: np.ndarray) -> np.ndarray:
        return np.clip((X - self.center_) / self.scale_, -Z_CLIP, Z_CLIP)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True          # NaN and ±inf are missing values, handled in fit
        tags.classifier_tags.multi_class = self.model.config.num_outputs > 2
        tags.non_deterministic = False
        return tags

    def _members(self):
        """(class shift, transform, feature subset) of each distinct ensemble member."""
        num_classes = len(self.classes_)
        members = []
        for k in range(self.n_estimators):
            transform = TRANSFORMS[(k // num_classes) % len(TRANSFORMS)]
            member = (k % num_classes, transform, tuple(self.feature_subsets_[k]))
            if member not in members:
                members.append(member)
        return members

    def _device(self) -> torch.device:
        return torch.device(self.device) if self.device is not None else next(self.model.parameters()).device

    def predict_proba(self, X) -> np.ndarray:
        """
        Args:
            X: (m, f) test features with the f of fit; NaN / ±inf allowed.
        Returns:
            (m, K) probabilities over classes_ (rows sum to 1).
        """
        if not hasattr(self, "classes_"):
            raise NotFittedError("this NanoTabPFNClassifier is not fitted yet: call fit(X_train, y_train) first")
        X = _as_features(X, "X_test")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but NanoTabPFNClassifier is expecting "
                             f"{self.n_features_in_} features as input (X_test vs fit)")
        X = self._standardize(self._clean(X))
        device = self._device()
        self.model.to(device)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                chunks = [self._ensemble(X[i:i + TEST_CHUNK_ROWS], device)
                          for i in range(0, X.shape[0], TEST_CHUNK_ROWS)]
        finally:
            self.model.train(was_training)
        return np.concatenate(chunks).astype(np.float32)

    def _ensemble(self, X_test: np.ndarray, device) -> np.ndarray:
        """Mean probabilities of every member on test rows (m, f') -> (m, K); one forward per member group."""
        num_classes, split = len(self.classes_), self.X_train_.shape[0]
        quantile = {}
        xs, ys, shifts = [], [], []
        for shift, transform, subset in self._members():
            subset = list(subset)
            train, test = self.X_train_[:, subset], X_test[:, subset]
            if transform == "quantile":
                key = tuple(subset)
                if key not in quantile:
                    quantile[key] = (_quantile_normal(train, train), _quantile_normal(train, test))
                train, test = quantile[key]
            xs.append(np.concatenate([train, test]))
            ys.append((self.y_train_ + shift) % num_classes)
            shifts.append(shift)
        x = torch.from_numpy(np.stack(xs).astype(np.float32)).to(device)       # (B, n+m, f'')
        y = torch.from_numpy(np.stack(ys).astype(np.float32)).to(device)       # (B, n)
        logits = self.model((x, y), train_test_split_index=split)[:, :, :num_classes].float()  # (B, m, K)
        probabilities = F.softmax(logits, dim=-1).cpu().numpy()
        # Member b predicted class c at index (c + shift) mod K: roll back.
        return np.mean([np.roll(p, -s, axis=1) for p, s in zip(probabilities, shifts)], axis=0)

    def predict(self, X) -> np.ndarray:
        """
        Args:
            X: (m, f) test features.
        Returns:
            (m,) predicted labels, from classes_.
        """
        probabilities = self.predict_proba(X)     # first: it checks that fit ran
        return self.classes_[probabilities.argmax(axis=1)]
