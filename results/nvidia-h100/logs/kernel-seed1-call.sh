#!/usr/bin/env bash
# One GPU call on a6d3c88: is triton's seed-1 plateau (kernel-seeds*-call.sh) a property of the kernel or of a
# chaotic escape? Seed 1, 1000 blog steps: triton with other forward tiles (fwd_block_n=64: other rounding), and
# --attention efficient (a third kernel).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w3; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python prior_dump.py --preset blog --num-datasets 1200 --out data/blog1200.h5 --no-progress > "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog1200.h5 --batch-size 6 --steps 1000 --timing-warmup 10 --no-eval --log-every 250 --seed 1"
timeout 220 python - $blog --fast --attention triton --record "$OUT/triton-n64-s1.json" > "$OUT/triton-n64-s1.log" 2>&1 <<'PY'
import dataclasses, sys
import triton_attention as ta
ta.datapoint_attention.__defaults__ = (None, dataclasses.replace(ta.DEFAULT_CONFIG, fwd_block_n=64))
import train_optimized
sys.argv = ["train_optimized.py", *sys.argv[1:]]
train_optimized.main()
PY
echo "triton-n64-s1 exit $? at ${SECONDS}s"; grep -h "^done" "$OUT/triton-n64-s1.log"
timeout 220 python train_optimized.py $blog --fast --attention efficient --record "$OUT/efficient-s1.json" > "$OUT/efficient-s1.log" 2>&1
echo "efficient-s1 exit $? at ${SECONDS}s"; grep -h "^done" "$OUT/efficient-s1.log"
python - "$OUT" <<'PY'
import json, os, sys
import numpy as np
out = sys.argv[1]
print("| run | ms/step median | loss, mean of steps 1-100 | 451-550 | 901-1000 |")
print("|---|---|---|---|---|")
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    r = json.load(open(os.path.join(out, name + ".json"))); e, s = r["extra"], r["timing"]["step"]
    losses = np.array(e["losses"], dtype=float)
    print(f"| {name} | {s['median']:.2f} | " + " | ".join(f"{losses[a:b].mean():.4f}" for a, b in ((0, 100), (450, 550), (900, 1000))) + " |")
PY
tar czf "$FINAL/call.tgz" -C "$OUT" .
