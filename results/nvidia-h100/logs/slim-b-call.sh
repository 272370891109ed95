#!/usr/bin/env bash
# One GPU call after slim-a-call.sh: the blog workload interleaved old --fast (.old/ = 3dbf0cb) / new with old
# --fast's flags spelled out / new --fast (adds --last-layer-target-only); then new --fast for 1000 steps on
# seeds 0-2 (the loss curve beside results/nvidia-h100/triton-compiled/seeds/, FlashAttention-2 without it).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wb; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress \
  > "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog600.h5 --batch-size 6 --timing-warmup 20 --no-eval --log-every 100"
oldfast="--resident --fused-optimizer --async-loss --compile --amp bf16 --feature-attention broadcast --attention flash"
run() {  # name limit dir flags...; skipped once the call's time is nearly spent
  local name=$1 limit=$2 dir=$3; shift 3
  if [ "$SECONDS" -gt "$limit" ]; then echo "$name skipped (time)"; return; fi
  (cd "$dir" && timeout 200 python train_optimized.py "$@" --record "$OUT/$name.json") > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
for i in 1 2; do
  run blog-old-$i 420 .old $blog --steps 300 --fast; run blog-new-$i 420 . $blog --steps 300 $oldfast
  run blog-newfast-$i 420 . $blog --steps 300 --fast
done
for seed in 0 1 2; do run seed$seed-newfast 520 . $blog --steps 1000 --seed $seed --fast; done
python results/nvidia-h100/slim/table.py "$OUT"
tar czf "$FINAL/call.tgz" -C "$OUT" .
