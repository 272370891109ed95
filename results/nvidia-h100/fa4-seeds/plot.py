"""Loss curves of the fa4 seed study: python plot.py -> loss-curves.png (50-step means, one line per seed)."""
import glob
import json
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PATHS = [("--fast --attention fa4", "q-fa4"), ("--fast (triton)", "q-triton"),
         ("--fast --attention flash (FlashAttention-2, sliced)", "flash/q-flash")]
PANELS = [(f"{name}, lr {lr}", f"{prefix}-lr{value}-s*.json") for lr, value in (("4e-3", "0.004"), ("2e-3", "0.002"))
          for name, prefix in PATHS]
fig, axes = plt.subplots(2, len(PATHS), figsize=(16, 8), sharey=True)
for ax, (title, pattern) in zip(axes.flat, PANELS):
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
for ax in axes[:, 0]:
    ax.set_ylabel("training loss (50-step mean); dotted: ln 2")
fig.suptitle("Blog workload, 1000 steps, H100 (fa4, triton: code 88ae419; flash: 09ca48c): red = stopped learning (mean loss of steps 901-1000 > 0.45)",
             fontsize=11)
fig.tight_layout()
fig.savefig(os.path.join(HERE, "loss-curves.png"), dpi=110)
