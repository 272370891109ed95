"""Loss curves of the fa4 seed study: python plot.py -> loss-curves.png (50-step means, one line per seed)."""
import glob
import json
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PANELS = [("--fast --attention fa4, lr 4e-3", "q-fa4-lr0.004-s*.json"), ("--fast (triton), lr 4e-3", "q-triton-lr0.004-s*.json"),
          ("--fast --attention fa4, lr 2e-3", "q-fa4-lr0.002-s*.json"), ("--fast (triton), lr 2e-3", "q-triton-lr0.002-s*.json")]
fig, axes = plt.subplots(1, len(PANELS), figsize=(18, 4.2), sharey=True)
for ax, (title, pattern) in zip(axes, PANELS):
    files = sorted(glob.glob(os.path.join(HERE, pattern)))
    for f in files:
        losses = json.load(open(f))["extra"]["losses"]
        means = [sum(losses[i:i + 50]) / 50 for i in range(0, len(losses), 50)]
        stuck = sum(losses[900:1000]) / 100 > 0.45
        ax.plot(range(25, 25 + 50 * len(means), 50), means, color="tab:red" if stuck else "tab:blue",
                alpha=0.9 if stuck else 0.35, lw=1.5 if stuck else 1)
    ax.axhline(0.6931, color="gray", ls=":", lw=1)
    ax.set_title(f"{title}: {len(files)} seeds", fontsize=10)
    ax.set_xlabel("step")
axes[0].set_ylabel("training loss (50-step mean); dotted: ln 2")
fig.suptitle("Blog workload, 1000 steps, H100, code 88ae419: red = stopped learning (mean loss of steps 901-1000 > 0.45)",
             fontsize=11)
fig.tight_layout()
fig.savefig(os.path.join(HERE, "loss-curves.png"), dpi=110)
