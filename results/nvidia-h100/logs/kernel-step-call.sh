#!/usr/bin/env bash
# One GPU call on a6d3c88 (the triton_op kernel, one in-projection): blog --fast (FlashAttention-2 through SDPA)
# and --fast --attention triton (compiled with the step), interleaved flash, triton, flash, triton.
set -u
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress > "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 100 --timing-warmup 10 --no-eval --log-every 50"
run() {  # name limit flags...
  local name=$1 limit=$2; shift 2
  if [ "$SECONDS" -gt "$limit" ]; then echo "$name skipped (time)"; return; fi
  timeout 170 python train_optimized.py "$@" --record "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"; grep -h "^done" "$OUT/$name.log"
}
run flash-1 400 $blog --fast; run triton-1 400 $blog --fast --attention triton
run flash-2 480 $blog --fast; run triton-2 480 $blog --fast --attention triton
tar czf "$FINAL/call.tgz" -C "$OUT" .
