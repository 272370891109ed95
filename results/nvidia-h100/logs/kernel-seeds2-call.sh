#!/usr/bin/env bash
# One GPU call on a6d3c88: seed 1 on triton for 3000 steps (does it leave the plateau later?), and seeds 4-7 on
# both kernels, 1000 steps of the blog workload each (kernel-seeds-call.sh's sequel).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w2; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f data/blog1200.h5 ] || python prior_dump.py --preset blog --num-datasets 1200 --out data/blog1200.h5 --no-progress > "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog1200.h5 --batch-size 6 --steps 1000 --timing-warmup 10 --no-eval --log-every 250"
run() {  # name limit flags...
  local name=$1 limit=$2; shift 2
  if [ "$SECONDS" -gt "$limit" ]; then echo "$name skipped (time)"; return; fi
  timeout 200 python train_optimized.py "$@" --record "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"; grep -h "^done" "$OUT/$name.log"
}
run triton-s1-3000 200 ${blog/--steps 1000/--steps 3000} --fast --attention triton --seed 1
for seed in 4 5 6 7; do
  run flash-s$seed 520 $blog --fast --seed $seed; run triton-s$seed 540 $blog --fast --attention triton --seed $seed
done
python - "$OUT" <<'PY'
import json, os, sys
import numpy as np
out = sys.argv[1]
print("| run | ms/step median | loss, mean of steps 1-100 | 451-550 | 901-1000 | last 100 |")
print("|---|---|---|---|---|---|")
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    r = json.load(open(os.path.join(out, name + ".json"))); e, s = r["extra"], r["timing"]["step"]
    losses = np.array(e["losses"], dtype=float)
    parts = [losses[a:b].mean() for a, b in ((0, 100), (450, 550), (900, 1000), (len(losses) - 100, len(losses)))]
    print(f"| {name} | {s['median']:.2f} | " + " | ".join(f"{p:.4f}" for p in parts) + " |")
PY
tar czf "$FINAL/call.tgz" -C "$OUT" .
