"""A checkpoint's ROC AUC with NanoTabPFNClassifier(max_train_rows=CAP) on both suites' first SPLITS splits.
Run from the repository root: python results/cpu-2core/inference-levers/train-rows/rows.py CKPT CAP SPLITS"""
import os
import sys
import time
import warnings

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import evaluation  # noqa: E402
import quality  # noqa: E402
from classifier import NanoTabPFNClassifier  # noqa: E402

torch.set_num_threads(2)
ckpt, cap, splits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tasks, _ = quality.load_cached(splits)
classifier = NanoTabPFNClassifier.from_checkpoint(ckpt, device="cpu", max_train_rows=cap)
warnings.simplefilter("ignore")   # the subsample's warning, once per split
for which in ("suite", "heldout"):
    start = time.time()
    result = evaluation.evaluate_suite(lambda: classifier, evaluation.usable_tasks(tasks[which], 10), splits)
    print(which, cap, round(result["roc_auc"], 4), round(time.time() - start), flush=True)
