"""The recipe's 10-minute points over its eight seeds (0, 1 from curve-matmul, 2-5 from recipe-batch, 6, 7 from this
call), and large beside medium at 10 and 20 minutes. From the repository root:
python results/nvidia-h100/large-depth/seeds.py"""
import glob, importlib.util

H100 = "results/nvidia-h100"
spec = importlib.util.spec_from_file_location("seeds", f"{H100}/recipe-batch/seeds.py")
seeds = importlib.util.module_from_spec(spec); spec.loader.exec_module(seeds)   # its cells() and row()

print("| run | seeds | " + " | ".join(f"{s} {g}: ROC AUC (min-max) / rank [best baseline]" for s, g in seeds.CELLS)
      + " |\n|" + "---|" * (len(seeds.CELLS) + 2))
recipe = (sorted(glob.glob(f"{H100}/curve-matmul/score-medium-s[01]-600s.json"))
          + sorted(glob.glob(f"{H100}/recipe-batch/score-recipe-s*-600s.json"))
          + sorted(glob.glob(f"{H100}/large-depth/score-recipe-s*-600s.json")))
seeds.row("the recipe (medium), 10 min, seeds 0-7", recipe)
for seconds in (600, 1200):
    seeds.row(f"medium, {seconds // 60} min, seeds 0, 1",
              sorted(glob.glob(f"{H100}/curve-matmul/score-medium-s[01]-{seconds}s.json")))
    seeds.row(f"large, {seconds // 60} min, seeds 0, 1",
              sorted(glob.glob(f"{H100}/large-depth/score-large-s[01]-{seconds}s.json")))
