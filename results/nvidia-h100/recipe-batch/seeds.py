"""The recipe's 10-minute points over its six seeds (0, 1 from curve-matmul, 2-5 from this call) and each candidate
beside the recipe's seeds 0 and 1. From the repository root: python results/nvidia-h100/recipe-batch/seeds.py"""
import glob, json, statistics

HERE, CURVE = "results/nvidia-h100/recipe-batch", "results/nvidia-h100/curve-matmul"
CELLS = [("overall", "all"), ("suite", "all"), ("heldout", "all"), ("overall", "multiclass"), ("overall", "wide")]


def cells(path):
    """{(scope, group): {method: (roc_auc, mean_rank)}} of one score record (the run named "ours")."""
    record = json.load(open(path))
    (name, summary), = record["summary"].items()
    return {cell: {("ours" if m == name else m): (v["roc_auc"], v["mean_rank"])
                   for m, v in summary[cell[0]][cell[1]]["methods"].items()} for cell in CELLS}


def row(label, paths):
    runs = [cells(p) for p in paths]
    out = [label, str(len(runs))]
    for cell in CELLS:
        aucs = [r[cell]["ours"][0] for r in runs]
        ranks = [r[cell]["ours"][1] for r in runs]
        best = max((m for m in runs[0][cell] if m != "ours"), key=lambda m: runs[0][cell][m][0])
        out.append(f"{statistics.mean(aucs):.4f} ({min(aucs):.4f}-{max(aucs):.4f}) / {statistics.mean(ranks):.2f}"
                   f" [{best} {statistics.mean(r[cell][best][0] for r in runs):.4f} / "
                   f"{statistics.mean(r[cell][best][1] for r in runs):.2f}]")
    print("| " + " | ".join(out) + " |")


if __name__ == "__main__":
    print("| run, 10 min | seeds | " + " | ".join(f"{s} {g}: ROC AUC (min-max) / rank [best baseline]" for s, g in CELLS)
          + " |\n|" + "---|" * (len(CELLS) + 2))
    recipe = sorted(glob.glob(f"{CURVE}/score-medium-s[01]-600s.json")) + sorted(glob.glob(f"{HERE}/score-recipe-s*-600s.json"))
    row("the recipe (medium), seeds 0-5", recipe)
    row("the recipe, seeds 0, 1", recipe[:2])
    for name in ("realcols", "smallb32"):
        row(f"{name}, seeds 0, 1", sorted(glob.glob(f"{HERE}/score-{name}-s[01]-600s.json")))
