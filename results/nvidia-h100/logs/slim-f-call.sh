#!/usr/bin/env bash
# One GPU call: 60 s of upstream --fast with --missing-cells 0.2 (seeds 0-2), and seed 0 without it, on every
# real split, beside call E's seeds 1-2 without it (same dump, same flags otherwise, evals every 20 s).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  .whl/lightgbm-*.whl && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wf; mkdir -p "$OUT" "$FINAL" data/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
dump=data/bench/prior-n50000-r150-f5-c2-s0-cuda.h5
[ -f $dump ] || python -c "import prior_dump; prior_dump.write_dump('$dump', 50000, 150, 5, 2, 0, device='cuda')"
run() {  # name flags...
  local name=$1; shift
  if [ "$SECONDS" -gt 470 ]; then echo "$name skipped (time)"; return; fi
  timeout 200 python train_optimized.py --data $dump --batch-size 32 --fast --time-budget 60 --eval-every 20s \
    --eval-suite real-all --log-every 2500 --record "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
run miss-s0 --missing-cells 0.2 --seed 0; run ttq-s0 --seed 0
run miss-s1 --missing-cells 0.2 --seed 1; run miss-s2 --missing-cells 0.2 --seed 2
python - "$OUT" <<'PY'
import json, os, sys
import numpy as np
sys.path.insert(0, os.getcwd())
import real_data
nan_tasks = [t.name for t in real_data.load_suite() if np.isnan(t.X).any()]
out = sys.argv[1]
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    e = json.load(open(os.path.join(out, name + ".json")))["extra"]
    ev = e["eval"]
    nan = np.mean([ev["per_task"][t] for t in nan_tasks])
    other = np.mean([v for t, v in ev["per_task"].items() if t not in nan_tasks])
    print(f"{name}: {e['steps_done']} steps; at 60 s ROC AUC {ev['roc_auc']:.4f}, rank {ev['rank']:.2f}; "
          f"{len(nan_tasks)} tasks with NaN {nan:.4f}, the other {47 - len(nan_tasks)} {other:.4f}; evals "
          + ", ".join(f"{h['scores']['roc_auc']:.4f}" for h in e["eval_history"]))
PY
tar czf "$FINAL/call.tgz" -C "$OUT" .
