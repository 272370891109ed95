#!/usr/bin/env bash
# One GPU call on a6d3c88: 1000 steps of the blog workload with --fast (FlashAttention-2) and --fast
# --attention triton, seeds 0 and 1 (same batches per seed), for the loss curves; then the GPU training tests.
set -u
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python prior_dump.py --preset blog --num-datasets 1200 --out data/blog1200.h5 --no-progress > "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog1200.h5 --batch-size 6 --steps 1000 --timing-warmup 10 --no-eval --log-every 250"
run() {  # name limit flags...
  local name=$1 limit=$2; shift 2
  if [ "$SECONDS" -gt "$limit" ]; then echo "$name skipped (time)"; return; fi
  timeout 200 python train_optimized.py "$@" --record "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"; grep -h "^done" "$OUT/$name.log"
}
run flash-s0 300 $blog --fast --seed 0; run flash-s1 330 $blog --fast --seed 1
run triton-s0 400 $blog --fast --attention triton --seed 0; run triton-s1 480 $blog --fast --attention triton --seed 1
if [ "$SECONDS" -lt 420 ]; then
  timeout $((580 - SECONDS)) python -m pytest -q -x tests/test_gpu_train.py > "$OUT/gpu-train-tests.log" 2>&1
  echo "gpu train tests exit $? at ${SECONDS}s"; tail -1 "$OUT/gpu-train-tests.log"
fi
python - "$OUT" <<'PY'
import json, os, sys
import numpy as np
out = sys.argv[1]
print("| run | ms/step median | p10 | p90 | peak GiB | loss, mean of steps 1-100 | 451-550 | 901-1000 |")
print("|---|---|---|---|---|---|---|---|")
for name in ("flash-s0", "triton-s0", "flash-s1", "triton-s1"):
    try:
        r = json.load(open(os.path.join(out, name + ".json"))); e, s = r["extra"], r["timing"]["step"]
    except Exception as exc:
        print(f"| {name} | unreadable: {exc} |"); continue
    losses = np.array(e["losses"], dtype=float)
    parts = [losses[a:b].mean() for a, b in ((0, 100), (450, 550), (900, 1000))]
    print(f"| {name} | {s['median']:.2f} | {s['p10']:.2f} | {s['p90']:.2f} | {e['peak_memory_bytes']/2**30:.2f} | "
          + " | ".join(f"{p:.4f}" for p in parts) + " |")
PY
tar czf "$FINAL/call.tgz" -C "$OUT" .
