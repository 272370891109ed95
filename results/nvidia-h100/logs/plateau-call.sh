#!/usr/bin/env bash
# One GPU call: does the blog workload's early loss plateau depend on the attention kernel, or on the seed?
# 1000 steps of --fast (FlashAttention-2) and of --fast --last-layer-target-only --attention triton (the fastest
# opt-in), seeds SEEDS, on one 1200-dataset blog dump, four runs at a time on the one GPU (loss curves only: the
# ms/step of runs that share the GPU are not step times).
set -u
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7"}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=/tmp/wp; mkdir -p "$W" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
[ -f data/blog1200.h5 ] || python prior_dump.py --preset blog --num-datasets 1200 --out data/blog1200.h5 \
  --no-progress | tee -a "$W/dumps.log"
export BLOG="--data $PWD/data/blog1200.h5 --batch-size 6 --steps 1000 --timing-warmup 20 --no-eval --log-every 250"
export W T0=$(date +%s) LIMIT=${LIMIT:-470}   # seconds since T0 (each xargs shell restarts $SECONDS)
one() {  # config seed; not started once the call's time is nearly spent
  # flash: --fast of .old/ (cacd46e: FlashAttention-2, no shortcut on long tables); triton-ll: the flags spelled out.
  local config=$1 seed=$2 dir=. flags="--fast --last-layer-target-only --attention triton"
  [ "$config" = flash ] && dir=.old flags="--fast"
  [ "$config" = triton-ll-lr2e-3 ] && flags="$flags --lr 2e-3"
  [ "$config" = fast ] && flags="--fast"   # --fast of the working tree, as it is
  local now=$(( $(date +%s) - T0 ))
  if [ "$now" -gt "$LIMIT" ]; then echo "$config-s$seed skipped (time)"; return; fi
  (cd $dir && timeout $((LIMIT + 110 - now)) python train_optimized.py $BLOG $flags --seed "$seed" \
    --record "$W/$config-s$seed.json") > "$W/$config-s$seed.log" 2>&1
  echo "$config-s$seed exit $? at $(( $(date +%s) - T0 ))s"
}
export -f one
CONFIGS=${CONFIGS:-"flash triton-ll"}
for seed in $SEEDS; do for config in $CONFIGS; do echo "$config $seed"; done; done | xargs -P 4 -L 1 bash -c 'one $0 $1'
python results/nvidia-h100/plateau/table.py "$W" | tee "$W/table.md"
tar czf "$FINAL/call.tgz" -C "$W" .
