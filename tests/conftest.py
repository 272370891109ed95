"""Shared test fixtures: tiny nanoTabPFN-format dumps written directly with h5py (no prior needed)."""
import os
import sys

import h5py
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Idle OpenMP threads sleep instead of spinning (libgomp reads this when it loads, before any test imports torch or
# a baseline library): beside torch's threads, LightGBM's fits in test_evaluation took 114 s spinning, 6 s asleep.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def write_tiny_dump(path, num_datasets=24, rows=40, features=5, num_classes=2, seed=0,
                    split_key="single_eval_pos", original_batch_size=4, compression=None,
                    ragged=True):
    """Writes a small valid dump with varying num_features / num_datapoints / splits (when ragged).

    Labels are learnable (class = sign of feature 0) so a short training run can show a falling loss.
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_datasets, rows, features)).astype(np.float32)
    num_features = (rng.integers(1, features + 1, num_datasets) if ragged
                    else np.full(num_datasets, features)).astype(np.int32)
    num_datapoints = (rng.integers(rows // 2, rows + 1, num_datasets) if ragged
                      else np.full(num_datasets, rows)).astype(np.int32)
    y = np.zeros((num_datasets, rows), np.float32)
    splits = np.zeros(num_datasets, np.int32)
    for block in range(0, num_datasets, original_batch_size):
        lo = int(num_datapoints[block:block + original_batch_size].min())
        splits[block:block + original_batch_size] = max(2, int(lo * rng.uniform(0.3, 0.7)))
    for i in range(num_datasets):
        X[i, :, num_features[i]:] = 0.0
        X[i, num_datapoints[i]:] = 0.0
        if num_classes == 2:
            labels = (X[i, :, 0] > 0).astype(np.float32)
        else:
            labels = rng.integers(0, num_classes, rows).astype(np.float32)
        labels[:num_classes] = np.arange(num_classes)                       # every class in train part
        labels[splits[i]:splits[i] + num_classes] = np.arange(num_classes)  # ... and in the test part
        labels[num_datapoints[i]:] = 0.0
        y[i] = labels
    kw = dict(compression=compression, chunks=True) if compression else {}
    with h5py.File(path, "w") as f:
        f.create_dataset("X", data=X, **kw)
        f.create_dataset("y", data=y, **kw)
        f.create_dataset("num_features", data=num_features)
        f.create_dataset("num_datapoints", data=num_datapoints)
        f.create_dataset(split_key, data=splits)
        f.create_dataset("max_num_classes", data=np.array([num_classes], np.int64))
        f.create_dataset("original_batch_size", data=np.array([original_batch_size], np.int64))
        f.create_dataset("problem_type", data="classification", dtype=h5py.string_dtype())
    return str(path)


@pytest.fixture
def tiny_dump(tmp_path):
    return write_tiny_dump(tmp_path / "tiny.h5")
