"""How much room the suite leaves above the recipe: per task, the best of the 7 baselines chosen in hindsight (on the
test splits' ROC AUC), against the recipe's eight 10-minute models and its 20-minute ones (medium, seeds 0 and 1), and
the recipe of now (seeds 0 and 1 on H200s) at 1, 10 and 30 minutes.
Over all 104 tasks and the 12 wide ones. From the repository root:
    python results/cpu-2core/ceiling/ceiling.py"""
import glob, json, os, sys
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
import evaluation  # noqa: E402   (the score records' stored form)

H100, H200 = "results/nvidia-h100", "results/nvidia-h200"
RECIPE = {"the recipe, 10 min (8 seeds)": sorted(glob.glob(f"{H100}/curve-matmul/score-medium-s[01]-600s.json"))
          + sorted(glob.glob(f"{H100}/recipe-batch/score-recipe-s[2-5]-600s.json"))
          + sorted(glob.glob(f"{H100}/large-depth/score-recipe-s[67]-600s.json")),
          "the recipe, 20 min (seeds 0, 1)": sorted(glob.glob(f"{H100}/curve-matmul/score-medium-s[01]-1200s.json")),
          # the classifier since (linear columns), H200s: the recipe's own 1-minute model, and 10 and 30 minutes
          "the recipe now, 1 min (small, H200)": sorted(glob.glob(f"{H200}/curve-command/score-s[01]-60s.json")),
          "the recipe now, 10 min (H200)": sorted(glob.glob(f"{H200}/recipe-30min/score-recipe-s[01]-600s.json")),
          "the recipe now, 30 min (H200)": sorted(glob.glob(f"{H200}/recipe-30min/score-recipe-s[01]-1800s.json"))}


def per_task(paths):
    """{task: mean ROC AUC over the records}, suite and held-out tasks together."""
    tasks = {}
    for path in paths:
        results = next(iter(json.load(open(path))["results"].values()))
        for scope in ("suite", "heldout"):
            for task, auc in evaluation.from_stored(results[scope])["per_task"].items():
                tasks.setdefault(task, []).append(auc)
    return {task: float(np.mean(aucs)) for task, aucs in tasks.items()}


if __name__ == "__main__":
    import os, sys
    sys.path.insert(0, os.getcwd())
    import real_data
    from quality import WIDE_FEATURES
    baselines = {}
    for scope in ("suite", "heldout"):
        for name, result in json.load(open(f"data/baselines-{scope}.json"))["results"].items():
            baselines.setdefault(name, {}).update(result["per_task"])
    tasks = real_data.read_cache("data/real_suite.npz") + real_data.read_cache("data/real_heldout.npz")
    groups = {"all": [t.name for t in tasks], "wide": [t.name for t in tasks if t.X.shape[1] >= WIDE_FEATURES]}
    oracle = {task: max(b[task] for b in baselines.values()) for task in groups["all"]}
    print("| | " + " | ".join(f"{g} ({len(names)} tasks)" for g, names in groups.items()) + " |\n|---|---|---|")
    print("| CatBoost | " + " | ".join(f"{np.mean([baselines['catboost'][t] for t in n]):.4f}" for n in groups.values()) + " |")
    print("| the best baseline per task, in hindsight | "
          + " | ".join(f"{np.mean([oracle[t] for t in n]):.4f}" for n in groups.values()) + " |")
    for label, paths in RECIPE.items():
        ours = per_task(paths)
        print(f"| {label} ({len(paths)} records) | " + " | ".join(
            f"{np.mean([ours[t] for t in n]):.4f} (ahead of hindsight on {sum(ours[t] > oracle[t] for t in n)})"
            for n in groups.values()) + " |")
        print(f"| the better of it and the hindsight pick, per task | " + " | ".join(
            f"{np.mean([max(ours[t], oracle[t]) for t in n]):.4f}" for n in groups.values()) + " |")
        behind = sorted(groups["all"], key=lambda t: ours[t] - oracle[t])[:25]
        best = [max(baselines, key=lambda name: baselines[name][t]) for t in behind]
        print(f"|   the 25 tasks it trails the hindsight pick most: its baseline | "
              + ", ".join(f"{name} {best.count(name)}" for name in sorted(set(best), key=lambda n: (-best.count(n), n)))
              + " | |")
