"""The splits changes.log lists, scored with the id rule as committed and with the nominal rule, for one model.
    python results/cpu-2core/inference-levers/nominal-ids/score.py CKPT changes.log   (from the repository root)"""
import os
import sys, re, numpy as np, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
import real_data, evaluation, classifier as C
torch.set_num_threads(2)
ck = sys.argv[1]
tasks = {("suite", t.name): t for t in real_data.read_cache("data/real_suite.npz")}
tasks.update({("heldout", t.name): t for t in real_data.read_cache("data/real_heldout.npz")})
changed = [re.match(r"(\w+) (\S+)#(\d+) ", l).groups() for l in open(sys.argv[2]) if "merge" in l]
orig = C._id_groups
def merged(column, y, k, ratio=0.75):
    g = orig(column, y, k)
    if g is None: return None
    obs = ~np.isnan(column); _, grp = np.unique(column[obs], return_inverse=True)
    gain = C._shared_labels(grp, y[obs], k)[2]
    coarse = C._shared_labels(grp // 2, y[obs], k)[2]
    return g if coarse < ratio * gain else None
diff = {}
for scope, name, i in changed:
    t = tasks[(scope, name)]; i = int(i); nc = int(t.y.max()) + 1
    Xtr, Xte, ytr, yte = t.split(i); out = []
    for rule in (orig, merged):
        C._id_groups = rule
        clf = C.NanoTabPFNClassifier.from_checkpoint(ck).fit(Xtr, ytr)
        out.append(evaluation.split_scores(yte, clf.predict_proba(Xte), clf.classes_, nc)[0])
    C._id_groups = orig
    diff.setdefault((scope, name), []).append(out[1] - out[0])
    print(scope, name, i, f"{out[0]:.4f} -> {out[1]:.4f}", flush=True)
for scope in ("suite", "heldout"):
    n = 66 if scope == "suite" else 38
    tot = sum(sum(v) / 5 for (s, _), v in diff.items() if s == scope)
    print(scope, "mean change over its tasks:", f"{tot / n:+.5f}")
