"""Does the classifier's pipeline hide what the model gains from 10 to 20 minutes? The recipe's checkpoints (10
minutes: dp-seeds' H100 runs; 20 minutes: recipe-30min's H200 runs; seeds 0, 1) scored on this 2-core CPU on the
first 2 splits of all 104 tasks as a bare model: NanoTabPFNClassifier(linear_columns=False, id_encoding=False), its
4 ensemble members kept. The pipeline's scores on the same splits come from the committed score records.

    python results/cpu-2core/raw-curve/raw.py score          # ~30 min: writes raw-scores.json here
    python results/cpu-2core/raw-curve/raw.py score linear   # the same with the linear columns on: linear-scores.json
    python results/cpu-2core/raw-curve/raw.py compare        # reads them and the committed records (raw.log)
Run from the repository root; the checkpoints are not committed (data/ck10, data/ck20 name their runs' models)."""
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, ".")   # the repository root
import evaluation   # noqa: E402
import quality      # noqa: E402

HERE = pathlib.Path("results/cpu-2core/raw-curve")
SPLITS = 2
RUNS = {   # (minutes, seed): (checkpoint, the committed score record of the same model, its name there)
    (10, 0): ("data/ck10/recipe10-s0.pt", "results/nvidia-h100/dp-seeds/score-recipe-s0-600s.json", "recipe"),
    (10, 1): ("data/ck10/recipe10-s1.pt", "results/nvidia-h100/dp-seeds/score-recipe-s1-600s.json", "recipe"),
    (20, 0): ("data/ck20/recipe20-s0.pt", "results/nvidia-h200/recipe-30min/score-recipe-s0-1200s.json", "recipe"),
    (20, 1): ("data/ck20/recipe20-s1.pt", "results/nvidia-h200/recipe-30min/score-recipe-s1-1200s.json", "recipe"),
}


def score(variant="bare"):
    """variant "bare": no linear and no id columns; "linear": the linear columns on, the id columns off."""
    from classifier import NanoTabPFNClassifier
    tasks, _ = quality.load_cached(SPLITS)
    out = {}
    for (minutes, seed), (path, _, _) in RUNS.items():
        bare = NanoTabPFNClassifier.from_checkpoint(path, device="cpu", linear_columns=variant == "linear",
                                                    id_encoding=False)
        out[f"{minutes}-{seed}"] = {w: evaluation.stored(evaluation.evaluate_suite(lambda: bare, tasks[w], SPLITS))
                                    for w in quality.SUITES}
        print(f"scored {minutes} min, seed {seed}", flush=True)
    (HERE / ("raw-scores.json" if variant == "bare" else f"{variant}-scores.json")).write_text(
        json.dumps(out, separators=(",", ":")))


def per_task(scores):
    """{(suite, task): mean ROC AUC over the first SPLITS splits}."""
    return {(w, task): float(np.mean(v[:SPLITS])) for w in quality.SUITES
            for task, v in scores[w]["roc_auc_per_split"].items()}


def compare():
    read = lambda name: json.loads((HERE / name).read_text())
    raw = read("raw-scores.json")
    bare = {key: per_task(raw[f"{key[0]}-{key[1]}"]) for key in RUNS}
    linear = ({key: per_task(read("linear-scores.json")[f"{key[0]}-{key[1]}"]) for key in RUNS}
              if (HERE / "linear-scores.json").exists() else None)
    pipeline = {key: per_task(json.loads(pathlib.Path(record).read_text())["results"][name])
                for key, (_, record, name) in RUNS.items()}
    tasks = sorted(bare[(10, 0)])
    mean = lambda table, minutes: np.array([np.mean([table[(minutes, s)][t] for s in (0, 1)]) for t in tasks])
    print(f"{len(tasks)} tasks, first {SPLITS} splits, seeds 0 and 1 averaged per task")
    tables = [("bare model", bare)] + ([("linear columns, no id columns", linear)] if linear else [])
    for label, table in tables + [("the classifier (committed records)", pipeline)]:
        ten, twenty = mean(table, 10), mean(table, 20)
        print(f"{label}: 10 min {ten.mean():.4f}, 20 min {twenty.mean():.4f}, "
              f"20 - 10: {quality.margin_cell(twenty - ten)}")
    for minutes in (10, 20):
        print(f"what the pipeline adds at {minutes} min: {quality.margin_cell(mean(pipeline, minutes) - mean(bare, minutes))}")


if __name__ == "__main__":
    {"score": score, "compare": compare}[sys.argv[1]](*sys.argv[2:])
