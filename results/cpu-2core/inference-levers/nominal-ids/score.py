"""The splits changes.log lists, scored with the id rule as committed and with the nominal rule, for one model.
    python results/cpu-2core/inference-levers/nominal-ids/score.py CKPT changes.log   (from the repository root)"""
import re
import sys

import numpy as np
import torch

from changes import ORIGINAL_ID_GROUPS, classifier, nominal_id_groups
import evaluation  # noqa: E402  (the repository root is on the path through changes)
import real_data  # noqa: E402

torch.set_num_threads(2)
tasks = {("suite", t.name): t for t in real_data.read_cache("data/real_suite.npz")}
tasks.update({("heldout", t.name): t for t in real_data.read_cache("data/real_heldout.npz")})
changed = [re.match(r"(\w+) (\S+)#(\d+) ", line).groups() for line in open(sys.argv[2])]
diff = {}
for scope, name, i in changed:
    task, i = tasks[(scope, name)], int(i)
    X_tr, X_te, y_tr, y_te = task.split(i)
    scores = []
    for rule in (ORIGINAL_ID_GROUPS, nominal_id_groups):
        classifier._id_groups = rule
        clf = classifier.NanoTabPFNClassifier.from_checkpoint(sys.argv[1]).fit(X_tr, y_tr)
        scores.append(evaluation.split_scores(y_te, clf.predict_proba(X_te), clf.classes_, int(task.y.max()) + 1)[0])
    classifier._id_groups = ORIGINAL_ID_GROUPS
    diff.setdefault((scope, name), []).append(scores[1] - scores[0])
    print(scope, name, i, f"{scores[0]:.4f} -> {scores[1]:.4f}", flush=True)
for scope, num_tasks in (("suite", 66), ("heldout", 38)):
    total = sum(sum(v) / 5 for (s, _), v in diff.items() if s == scope)
    print(scope, "mean change over its tasks:", f"{total / num_tasks:+.5f}")
