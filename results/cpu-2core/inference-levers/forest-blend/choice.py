"""Forest blends: the default classifier (D), the classifier with forest columns (F) and that classifier's forest
alone (R) predict each split once; the blends are mixtures of their probabilities, each scored as a method of its own
and ranked among itself and the 7 baselines. Scored on a task set's first SPLITS splits. From the repository root:
    python results/cpu-2core/inference-levers/forest-blend/choice.py CKPT suite|heldout SPLITS"""
import json, os, sys, time, warnings
sys.path.insert(0, os.getcwd())
import numpy as np
import torch
torch.set_num_threads(2)
import evaluation, quality
from classifier import NanoTabPFNClassifier, _for_trees, model_from_checkpoint

BLENDS = {"D": {"D": 1.0}, "F": {"F": 1.0}, "DF": {"D": 0.5, "F": 0.5},
          "D+R25": {"D": 0.75, "R": 0.25}, "D+R50": {"D": 0.5, "R": 0.5}, "F+R25": {"F": 0.75, "R": 0.25}}


def split_probabilities(model, X_tr, y_tr, X_te) -> dict:
    """{"D", "F", "R"}: (m, K) probabilities over the classifier's classes_."""
    plain = NanoTabPFNClassifier(model, device="cpu").fit(X_tr, y_tr)
    forest = NanoTabPFNClassifier(model, device="cpu", forest_columns=True).fit(X_tr, y_tr)
    X_te = np.where(np.isfinite(np.asarray(X_te, dtype=np.float64)), X_te, np.nan)
    return {"D": plain.predict_proba(X_te), "F": forest.predict_proba(X_te),
            "R": forest.forest_.predict_proba(_for_trees(X_te))}, plain.classes_


if __name__ == "__main__":
    ckpt, which, splits = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tasks, baselines = quality.load_cached(splits)
    model = model_from_checkpoint(ckpt)
    warnings.simplefilter("ignore")
    start = time.time()
    auc, loss = {b: {} for b in BLENDS}, {b: {} for b in BLENDS}
    for task in evaluation.usable_tasks(tasks[which], 10):
        num_classes = int(task.y.max()) + 1
        for index in range(len(task.splits))[:splits]:
            X_tr, X_te, y_tr, y_te = task.split(index)
            probabilities, classes = split_probabilities(model, X_tr, y_tr, X_te)
            for blend, weights in BLENDS.items():
                mixed = sum(w * probabilities[part] for part, w in weights.items())
                key = f"{task.name}#{index}"
                auc[blend][key], loss[blend][key] = evaluation.split_scores(y_te, mixed, classes, num_classes)
    for blend in BLENDS:
        result = evaluation.summarize(auc[blend], 0.0, loss[blend])
        methods = evaluation.compare({"m": result, **baselines[which]}, "m")["methods"]
        print(json.dumps({"ckpt": os.path.basename(ckpt), "which": which, "blend": blend,
                          "roc_auc": round(result["roc_auc"], 5), "rank": round(methods["m"]["mean_rank"], 3),
                          "log_loss": round(result["log_loss"], 5), "catboost": round(methods["catboost"]["roc_auc"], 5),
                          "per_task": {k: round(v, 4) for k, v in result["per_task"].items()},
                          "s": round(time.time() - start)}), flush=True)
