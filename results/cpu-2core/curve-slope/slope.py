"""How fast the committed time-to-quality curves rise per decade of training time, against what #34's curve targets
ask. Reads committed score records only (104 tasks, 5 splits, seeds 0 and 1); run from the repository root; writes
nothing (slope.log). Each point: the mean over tasks of each task's ROC AUC averaged over the seeds. The slope is the
least-squares line of those means on log10(minutes); its interval, and each gain's, is a bootstrap over tasks."""
import json
import math
import pathlib
import sys

import numpy as np

sys.path.insert(0, ".")   # the repository root
import quality  # noqa: E402

R = pathlib.Path("results")
RESAMPLES = 10_000
CURVES = {   # label: [(minutes, [score records of seeds 0 and 1])]
    "recipe, one H200 (small to 3 min, medium from 10)": [
        (1, ["nvidia-h200/curve-command/score-s{}-60s.json"]), (3, ["nvidia-h200/curve-command/score-s{}-180s.json"]),
        (10, ["nvidia-h200/recipe-30min/score-recipe-s{}-600s.json"]),
        (20, ["nvidia-h200/recipe-30min/score-recipe-s{}-1200s.json"]),
        (30, ["nvidia-h200/recipe-30min/score-recipe-s{}-1800s.json"])],
    "small, one H100 (classifier of then)": [
        (m, [f"nvidia-h100/curve-matmul/score-small-s{{}}-{60 * m}s.json"]) for m in (1, 3, 10)],
    "medium, one H100 (classifier of then)": [
        (m, [f"nvidia-h100/curve-matmul/score-medium-s{{}}-{60 * m}s.json"]) for m in (1, 3, 10, 20)],
    "large, one H100 (classifier of then)": [
        (m, [f"nvidia-h100/large-depth/score-large-s{{}}-{60 * m}s.json"]) for m in (1, 3, 10, 20)],
}
TARGETS = [(1, 10), (10, 30)]   # #34: each of these steps gains >= 0.005
STEPS = TARGETS + [(1, 30)]       # and the whole curve, which no target names


def per_task(patterns):
    """{task: ROC AUC averaged over seeds 0 and 1} from the records the patterns name."""
    records = [json.loads((R / p.format(seed)).read_text()) for p in patterns for seed in (0, 1)]
    return quality.mean_per_task(records)


def fit(minutes, means):
    """(intercept, slope per decade) of the least-squares line of means on log10(minutes)."""
    slope, intercept = np.polyfit(np.log10(minutes), means, 1)
    return intercept, slope


def interval(values):
    return "[{:+.4f}, {:+.4f}]".format(*np.percentile(values, [2.5, 97.5]))


def report(label, points, picks):
    tasks = sorted(per_task(points[0][1]))
    minutes = np.array([m for m, _ in points], float)
    table = np.array([[per_task(p)[t] for t in tasks] for _, p in points]).T   # (tasks, points)
    means, boot = table.mean(0), table[picks[:, :len(tasks)]].mean(1)          # (points,), (resamples, points)
    print(f"\n{label}: {len(tasks)} tasks; " + ", ".join(f"{m:g} min {v:.4f}" for m, v in zip(minutes, means)))
    for first in (0, 1):   # all points, then from 3 minutes on (past the cold start of a larger model)
        keep = slice(first, None)
        if len(minutes[keep]) < 3:
            continue
        intercept, slope = fit(minutes[keep], means[keep])
        slopes = np.polyfit(np.log10(minutes[keep]), boot[:, keep].T, 1)[0]
        residual = np.abs(means[keep] - (intercept + slope * np.log10(minutes[keep]))).max()
        print(f"  fit from {minutes[first]:g} min: {slope:+.4f} per decade {interval(slopes)}, largest residual "
              f"{residual:.4f}; +0.005 past the fit's 10 minutes would take {10 * 10 ** (0.005 / slope):.0f} min")
    at = {m: i for i, m in enumerate(minutes)}
    for a, b in STEPS:
        if a in at and b in at:
            gain = boot[:, at[b]] - boot[:, at[a]]
            asks = f"; #34 asks +0.0050 = {0.005 / math.log10(b / a):+.4f} per decade" if (a, b) in TARGETS else ""
            print(f"  {a:g} -> {b:g} min: {means[at[b]] - means[at[a]]:+.4f} {interval(gain)}{asks}")


def main():
    picks = np.random.default_rng(0).integers(0, 104, (RESAMPLES, 104))   # the same task resamples for every curve
    print("slope: ROC AUC per decade of training minutes (x10 the time); [95% bootstrap over tasks, "
          f"{RESAMPLES} resamples]")
    for label, points in CURVES.items():
        report(label, points, picks)


if __name__ == "__main__":
    main()
