#!/usr/bin/env bash
# One GPU call on a6d3c88: more seeds of the 1000-step blog runs (kernel-quality-call.sh's seed 1 on triton stayed
# on the early loss plateau that FlashAttention-2's seed 1 left at ~step 400): seeds 2 and 3 on both kernels, and
# seed 1 on FlashAttention-2 twice more (its backward is not deterministic); then the GPU training tests.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f data/blog1200.h5 ] || python prior_dump.py --preset blog --num-datasets 1200 --out data/blog1200.h5 --no-progress > "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog1200.h5 --batch-size 6 --steps 1000 --timing-warmup 10 --no-eval --log-every 250"
run() {  # name limit flags...
  local name=$1 limit=$2; shift 2
  if [ "$SECONDS" -gt "$limit" ]; then echo "$name skipped (time)"; return; fi
  timeout 200 python train_optimized.py "$@" --record "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"; grep -h "^done" "$OUT/$name.log"
}
run flash-s2 300 $blog --fast --seed 2; run triton-s2 330 $blog --fast --attention triton --seed 2
run flash-s3 360 $blog --fast --seed 3; run triton-s3 390 $blog --fast --attention triton --seed 3
run flash-s1b 420 $blog --fast --seed 1; run flash-s1c 440 $blog --fast --seed 1
if [ "$SECONDS" -lt 470 ]; then
  timeout $((585 - SECONDS)) python -m pytest -q -x tests/test_gpu_train.py > "$OUT/gpu-train-tests.log" 2>&1
  echo "gpu train tests exit $? at ${SECONDS}s"; tail -1 "$OUT/gpu-train-tests.log"
fi
python - "$OUT" <<'PY'
import json, os, sys
import numpy as np
out = sys.argv[1]
print("| run | ms/step median | loss, mean of steps 1-100 | 451-550 | 901-1000 |")
print("|---|---|---|---|---|")
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    r = json.load(open(os.path.join(out, name + ".json"))); e, s = r["extra"], r["timing"]["step"]
    losses = np.array(e["losses"], dtype=float)
    parts = [losses[a:b].mean() for a, b in ((0, 100), (450, 550), (900, 1000))]
    print(f"| {name} | {s['median']:.2f} | " + " | ".join(f"{p:.4f}" for p in parts) + " |")
PY
tar czf "$FINAL/call.tgz" -C "$OUT" .
