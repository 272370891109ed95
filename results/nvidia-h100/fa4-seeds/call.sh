#!/usr/bin/env bash
# Is FlashAttention-4's gradient right where the blog trains, and does its loss curve match triton's?
# PHASE=b: install flash-attn-4 (its cu13 CUTLASS-DSL wheel came in two calls: part aa in /tmp/fa4w), make the blog
#          dump, run study.py sweep and lockstep (seed 1, the seed fa4 lost at 4e-3), and warm both paths' compiles.
# PHASE=seeds JOBS="path:seed:lr ...": 1000-step blog runs of --fast (triton) and --fast --attention fa4, six at a
#          time on the one GPU; a job not started by DEADLINE seconds is skipped and says so.
set -u
export PYTHONUNBUFFERED=1 NANOTABPFN_GIT_COMMIT=${COMMIT:-unknown}
W=/tmp/studyout; mkdir -p $W
if [ "$PHASE" = b ]; then
  cp .fa4b/cu13.part.ab /tmp/fa4w/ && cat /tmp/fa4w/cu13.part.aa /tmp/fa4w/cu13.part.ab \
    > /tmp/fa4w/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl && rm /tmp/fa4w/cu13.part.*
  md5sum /tmp/fa4w/*.whl | tee $W/md5.txt
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fa4site /tmp/fa4w/*.whl \
    .fa4b/*.whl 2>&1 | grep -v "^WARNING: Target"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl 2>&1 \
    | grep -v "^WARNING: Target"
fi
export PYTHONPATH=/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:/tmp/fa4site:/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py .fa4b/study.py > $W/code-$PHASE.txt
export BLOG="--data $PWD/data/blog1200.h5 --batch-size 6 --steps 1000 --timing-warmup 20 --no-eval --log-every 250"
one() {  # path seed lr: 1000 blog steps, each path its own Inductor cache (warm after PHASE=b)
  local path=$1 seed=$2 lr=$3 flags="--fast"
  [ "$path" = fa4 ] && flags="--fast --attention fa4"
  if [ $(( $(date +%s) - T0 )) -gt "$DEADLINE" ]; then echo "$path-s$seed-lr$lr skipped: past the deadline"; return; fi
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$path timeout 400 python train_optimized.py $BLOG $flags --seed $seed --lr $lr \
    --record $W/q-$path-lr$lr-s$seed.json > $W/q-$path-lr$lr-s$seed.log 2>&1
  echo "$path-s$seed-lr$lr exit $? at $(( $(date +%s) - T0 ))s: $(grep -o 'final loss [0-9.]*' $W/q-$path-lr$lr-s$seed.log)"
}
export -f one
export W T0=$(date +%s) DEADLINE=${DEADLINE:-420}
if [ "$PHASE" = b ]; then
  python prior_dump.py --preset blog --num-datasets 1200 --out data/blog1200.h5 --no-progress > $W/dumps.log 2>&1
  md5sum data/blog1200.h5 | tee -a $W/dumps.log
  # Warm each path's compile (30 steps) while the checks run: the seed runs then start from a warm cache.
  ( for p in triton fa4; do
      flags="--fast"; [ $p = fa4 ] && flags="--fast --attention fa4"
      TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$p timeout 300 python train_optimized.py $BLOG $flags --steps 30 \
        --log-every 10 > $W/warm-$p.log 2>&1 &
    done; wait ) &
  timeout 200 python .fa4b/study.py sweep $W > $W/sweep.log 2>&1; echo "sweep exit $? at ${SECONDS}s"
  tail -6 $W/sweep.log
  timeout 260 python .fa4b/study.py lockstep $W 1 ${LOCKSTEP_STEPS:-700} > $W/lockstep.log 2>&1
  echo "lockstep exit $? at ${SECONDS}s"; tail -16 $W/lockstep.log
  wait; for p in triton fa4; do echo "warm $p: $(grep -E '^done|Error' $W/warm-$p.log | cut -c1-150)"; done
else
  for job in $JOBS; do echo "${job//:/ }"; done | xargs -P ${PARALLEL:-6} -L 1 bash -c 'one $0 $1 $2'
fi
tar czf $OUT/study-$PHASE-${TAG:-0}.tgz -C $W .
