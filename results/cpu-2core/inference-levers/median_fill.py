"""Mean vs median fill of missing cells (the classifier's _fit_columns patched), up60.pt, all 235 splits, this CPU."""
import json, os, sys, time, warnings
import numpy as np
sys.path.insert(0, os.getcwd())
import evaluation, real_data
import classifier as C
tasks = real_data.load_suite()
baselines = evaluation.baseline_scores(tasks)
orig = C.NanoTabPFNClassifier._fit_columns
def median_fit_columns(self, X):
    orig(self, X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        self.fill_ = np.nan_to_num(np.nanmedian(X[:, self.kept_columns_], axis=0))

for name in ("mean", "median"):
    C.NanoTabPFNClassifier._fit_columns = orig if name == "mean" else median_fit_columns
    clf = C.NanoTabPFNClassifier.from_checkpoint("/tmp/up60.pt")
    s = time.perf_counter(); r = evaluation.evaluate_suite(lambda: clf, tasks)
    summ = evaluation.compare({name: r, **baselines}, name)
    print(name, round(r["roc_auc"], 4), round(summ["methods"][name]["mean_rank"], 2), "%.0fs" % (time.perf_counter() - s), flush=True)
    json.dump(r, open(f"/tmp/median-{name}.json", "w"))
