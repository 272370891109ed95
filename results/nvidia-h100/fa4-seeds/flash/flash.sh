#!/usr/bin/env bash
# The FlashAttention-2 path beside the fa4 seed study: 1000 blog steps of --fast --attention flash (sliced, compiled,
# bf16, the last-layer shortcut), the same dump and seeds as results/nvidia-h100/fa4-seeds/, six runs at a time.
# JOBS="seed:lr ..."; a job not started by DEADLINE seconds is skipped and says so.
set -u
export PYTHONUNBUFFERED=1 NANOTABPFN_GIT_COMMIT=${COMMIT:-unknown}
W=/tmp/flashout; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py > $W/code-${TAG:-0}.txt
export BLOG="--data $PWD/data/blog1200.h5 --batch-size 6 --steps 1000 --timing-warmup 20 --no-eval --log-every 250"
export W T0=$(date +%s) DEADLINE=${DEADLINE:-420} TORCHINDUCTOR_CACHE_DIR=/tmp/ind-flash
if [ ! -f data/blog1200.h5 ]; then
  python prior_dump.py --preset blog --num-datasets 1200 --out data/blog1200.h5 --no-progress > $W/dumps.log 2>&1
  md5sum data/blog1200.h5 | tee -a $W/dumps.log
  timeout 200 python train_optimized.py $BLOG --fast --attention flash --steps 30 --log-every 10 > $W/warm.log 2>&1
  echo "warm: $(grep -E '^done|Error' $W/warm.log | cut -c1-150)"
fi
one() {
  if [ $(( $(date +%s) - T0 )) -gt "$DEADLINE" ]; then echo "flash-s$1-lr$2 skipped: past the deadline"; return; fi
  timeout 400 python train_optimized.py $BLOG --fast --attention flash --seed $1 --lr $2 \
    --record $W/q-flash-lr$2-s$1.json > $W/q-flash-lr$2-s$1.log 2>&1
  echo "flash-s$1-lr$2 exit $? at $(( $(date +%s) - T0 ))s"
}
export -f one
for job in $JOBS; do echo "${job//:/ }"; done | xargs -P ${PARALLEL:-6} -L 1 bash -c 'one $0 $1'
tar czf $OUT/flash-${TAG:-0}.tgz -C $W .
