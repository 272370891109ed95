"""Every 10-minute configuration scored with the classifier of now (linear columns, no forest columns), from the
committed score records: each one's mean ROC AUC over 104 tasks, and how far it moves each task from the recipe
against how far another seed of the recipe moves it, and its mean on the 12 wide tables (>= 20 features) beside
CatBoost's (each record's own summary). Run from the repository root; writes nothing (spread.log)."""
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, ".")   # the repository root
import quality  # noqa: E402

R = pathlib.Path("results")
RUNS = {   # configuration: (directory, record name), seeds 0 and 1 unless named
    "recipe (medium, one H200)": ("nvidia-h200/recipe-30min", "recipe"),
    "recipe again (medium, one H200)": ("nvidia-h200/fresh-tables", "recipe"),
    "recipe (medium, one H100)": ("nvidia-h100/feature-embedding", "recipe"),
    "tables never repeated": ("nvidia-h200/fresh-tables", "fresh"),
    "mixed training-row law": ("nvidia-h200/train-law-mixed", "mixed"),
    "a quarter real tables": ("nvidia-h200/real-pool", "mix"),
    "1024-row tables": ("nvidia-h200/task-rows", "rows1024"),
    "TabPFN v2's column embedding (H100)": ("nvidia-h100/feature-embedding", "coded"),
    "short training sets (H100)": ("nvidia-h100/prior-shapes", "short"),
    "mostly binary tables (H100)": ("nvidia-h100/prior-shapes", "binary"),
    "small on two H200s": ("nvidia-h200/ddp-curve", "dp"),
    "medium on two H200s": ("nvidia-h200/ddp-medium", "mdp"),
    "random DAGs, half the tables": ("nvidia-h200/dag-prior", "dag5"),
    "random DAGs, all the tables": ("nvidia-h200/dag-prior", "dag10"),
    "linear columns in the prior": ("nvidia-h200/linear-prior", "lin"),
    "schedule-free average x 10": ("nvidia-h200/sf-average", "avg10"),
    "1024-row tables and average x 10": ("nvidia-h200/rows-average", "rowsavg"),
    "half real tables": ("nvidia-h200/real-half", "half"),
    "periodic cell features": ("nvidia-h200/periodic-medium", "periodic"),
    "7 min prior, 3 min real tables only": ("nvidia-h200/real-phase", "phase"),
}


def per_task(directory, name, seed):
    """From one score record: {task: mean ROC AUC over its splits} (quality.mean_per_task), the commit that scored it,
    and (the run's, CatBoost's) mean ROC AUC on the wide tables (the record's summary)."""
    record = json.loads((R / directory / f"score-{name}-s{seed}-600s.json").read_text())
    wide = record["summary"][name]["overall"]["wide"]["methods"]
    return quality.mean_per_task([record]), record["commit"][:7], (wide[name]["roc_auc"], wide["catboost"]["roc_auc"])


def main():
    table = {label: [per_task(d, n, s) for s in (0, 1)] for label, (d, n) in RUNS.items()}
    reference = [scores for scores, _, _ in table["recipe (medium, one H200)"]]
    tasks = sorted(reference[0])
    as_array = lambda scores: np.array([scores[t] for t in tasks])
    print(f"{len(tasks)} tasks; |d| = mean over tasks of |ROC AUC - the recipe's (one H200) of the same seed|")
    print(f"{'configuration':38s} {'commits':17s} {'s0':>7s} {'s1':>7s} {'mean':>7s} {'|d| s0':>7s} {'|d| s1':>7s}"
          f" {'wide':>7s} {'-CatB.':>7s}")
    means, wides = [], []
    for label, pair in table.items():
        scores = [as_array(s) for s, _, _ in pair]
        moved = [np.abs(scores[i] - as_array(reference[i])).mean() for i in (0, 1)]
        means.append(np.mean([s.mean() for s in scores]))
        ours, catboost = np.mean([wide for _, _, wide in pair], axis=0)
        wides.append(ours)
        print(f"{label:38s} {','.join(sorted({c for _, c, _ in pair})):17s} {scores[0].mean():7.4f} {scores[1].mean():7.4f} "
              f"{means[-1]:7.4f} {moved[0]:7.4f} {moved[1]:7.4f} {ours:7.4f} {ours - catboost:+7.4f}")
    seed_moved = np.abs(as_array(reference[0]) - as_array(reference[1])).mean()
    print(f"the recipe's seed 1 against its seed 0: |d| {seed_moved:.4f}")
    print(f"two-seed means of the {len(means)} configurations: {min(means):.4f} to {max(means):.4f}, "
          f"median {np.median(means):.4f}; on the wide tables {min(wides):.4f} to {max(wides):.4f}")


if __name__ == "__main__":
    main()
