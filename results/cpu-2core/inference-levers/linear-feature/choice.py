"""Linear columns: logistic regression's decision values appended as columns (class 1's for two classes, all K for
more), out of fold on the training rows (5 folds) and from the fit on all of them for the test rows
(NanoTabPFNClassifier(linear_columns=True), classifier.LINEAR_FOLDS). Where a linear model beats the recipe, the
model gets the linear summary as a column. Scored on a task set's first SPLITS splits, ranked among itself and the 7
baselines. From the repository root:
    python results/cpu-2core/inference-levers/linear-feature/choice.py CKPT suite|heldout SPLITS on|off"""
import json, os, sys, time, warnings
sys.path.insert(0, os.getcwd())
import torch
torch.set_num_threads(2)
import evaluation, quality
from classifier import NanoTabPFNClassifier, model_from_checkpoint

if __name__ == "__main__":
    ckpt, which, splits, lever = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    tasks, baselines = quality.load_cached(splits)
    model = model_from_checkpoint(ckpt)
    warnings.simplefilter("ignore")
    t = time.time()
    usable = evaluation.usable_tasks(tasks[which], 10)
    res = evaluation.evaluate_suite(lambda: NanoTabPFNClassifier(model, device="cpu", linear_columns=lever == "on"),
                                    usable, splits)
    cmp = evaluation.compare({"m": res, **baselines[which]}, "m")["methods"]
    print(json.dumps({"ckpt": os.path.basename(ckpt), "which": which, "lever": lever, "roc_auc": round(res["roc_auc"], 5),
                      "rank": round(cmp["m"]["mean_rank"], 3), "log_loss": round(res["log_loss"], 5),
                      "catboost": round(cmp["catboost"]["roc_auc"], 5),
                      "per_task": {k: round(v, 4) for k, v in res["per_task"].items()}, "s": round(time.time() - t)}),
          flush=True)
