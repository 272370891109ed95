#!/usr/bin/env bash
# One GPU call: the blog workload's fastest opt-in combination: --fast --last-layer-target-only with
# FlashAttention-2 and with --attention triton, interleaved, 300 steps each.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wg; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 300 --timing-warmup 20 --no-eval --log-every 100"
run() {  # name flags...
  local name=$1; shift
  if [ "$SECONDS" -gt 430 ]; then echo "$name skipped (time)"; return; fi
  timeout 200 python train_optimized.py $blog "$@" --record "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
run last-flash-1 --fast --last-layer-target-only; run last-triton-1 --fast --last-layer-target-only --attention triton
run last-flash-2 --fast --last-layer-target-only; run last-triton-2 --fast --last-layer-target-only --attention triton
python results/nvidia-h100/slim/table.py "$OUT"
tar czf "$FINAL/call.tgz" -C "$OUT" .
