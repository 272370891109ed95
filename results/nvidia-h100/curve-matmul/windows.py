"""The figures README and prior-fit derive from this call's records. From the repository root:
    python results/nvidia-h100/curve-matmul/windows.py
Training loss (the records' per-step losses, rounded to 4 decimals) over step windows, and split 0's mean ROC AUC over
all 104 tasks from the score records. The records keep every 25th step's loss; every step's is read from the commit
their extra.losses_per_step_at names (git show), so this needs the repository's history."""
import json, os, subprocess, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
import evaluation  # noqa: E402   (the score records' stored form)
WINDOWS = ((3000, 5000), (7500, 8500), (15000, 16300))


def every_step(run):
    """The run's per-step losses: the record's own, or those of the commit it names when it keeps every 25th."""
    extra = json.load(open(os.path.join(HERE, run + ".json")))["extra"]
    if "losses_per_step_at" in extra:
        shown = subprocess.run(["git", "show", f"{extra['losses_per_step_at']}:./{run}.json"], cwd=HERE,
                               capture_output=True, text=True, check=True).stdout
        extra = json.loads(shown)["extra"]
    return extra["losses"]


for run in ("small-s0", "small-s1", "medium-s0", "medium-s1", "dp-s0"):
    losses = np.array(every_step(run), dtype=float)
    means = " | ".join(f"steps {a}-{b} {losses[a:b].mean():.4f}" if len(losses) >= b else f"steps {a}-{b} -"
                       for a, b in WINDOWS)
    print(f"loss {run:10s} ({len(losses)} steps): {means}")
for name in ("small-s0-600s", "small-s1-600s", "medium-s0-180s", "medium-s1-180s", "medium-s0-600s", "medium-s1-600s",
             "medium-s0-1200s", "medium-s1-1200s"):
    record = json.load(open(os.path.join(HERE, f"score-{name}.json")))
    method = next(iter(record["results"]))
    split0 = [value for scope in ("suite", "heldout")
              for key, value in evaluation.from_stored(record["results"][method][scope])["per_split"].items()
              if key.endswith("#0")]
    print(f"split 0 {name:16s} {len(split0)} tasks: {np.mean(split0):.4f}")
