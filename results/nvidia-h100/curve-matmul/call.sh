#!/usr/bin/env bash
# The time-to-quality curve on the matmul step (#34) on four GPUs of one machine, every checkpoint scored on its GPU:
# GPUs 0, 1: `--recipe real-tables` (small; --fast picks fp32 matmul feature attention on this dump), seeds 0 and 1,
#            10 minutes with checkpoints at 1 and 3; then the recipe under torchrun on both (its own rule: lr x 2,
#            warm-up 500), seed 0 (and seed 1 where time is left), 5 minutes each, with a checkpoint at 3.
# GPUs 2, 3: medium (--model-preset medium --lr 1e-3 --warmup-steps 500), seeds 0 and 1, 20 minutes with checkpoints
#            at 1, 3 and 10; their final checkpoints come back for a resume to 30 minutes in a later call.
# Commands (<= 600 s each; issue each as soon as the last returns; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; bash call.sh finish; bash call.sh ckpt medium-s1
# What comes back from $OUT: at most 8 files of 16 MiB, 64 MiB together: hence the parts and the extra call.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site
W=/tmp/w; CK=/tmp/ck; D=/tmp/d
DEV=${DEV:-cuda}            # cpu: a dry run of the shell logic (with NUM_DATASETS and the budgets small)
NUM_DATASETS=${NUM_DATASETS:-100000}
SMALL=${SMALL:-600}; DP=${DP:-300}; MEDIUM=${MEDIUM:-1200}   # seconds of training per run
SMALL_AT=${SMALL_AT:-60,180}; DP_AT=${DP_AT:-180}; MEDIUM_AT=${MEDIUM_AT:-60,180,600}
HOLD=${HOLD:-570}           # seconds each command waits before it reports
DEADLINE=$((MEDIUM + 300)) # seconds after `start` began: `finish` returns by it
mkdir -p $W $CK $D

elapsed() { echo $(( $(date +%s) - $(cat $W/T0) )); }
run() {  # gpus name seed budget save_at flags...: train (torchrun when gpus has a comma), then score every checkpoint
  local gpus=$1 name=$2 seed=$3 budget=$4 at=$5 launch=python; shift 5
  [[ $gpus == *,* ]] && launch="torchrun --standalone --nproc_per_node 2"
  CUDA_VISIBLE_DEVICES=$gpus TORCHINDUCTOR_CACHE_DIR=/tmp/ind-${gpus/,/} timeout $((budget + 240)) $launch \
    train_optimized.py --recipe real-tables --data $D/real512.h5 "$@" --seed $seed --time-budget $budget \
    --save-at $at --no-eval --log-every 500 --ckpt $CK/$name.pt --record $W/$name.json > $W/$name.log 2>&1
  echo "$name exit $? at $(elapsed)s: $(grep -E 'done:|rror' $W/$name.log | tail -1 | cut -c1-220)" >> $W/train.txt
  for seconds in ${at//,/ } $budget; do
    local ckpt=$CK/$name-${seconds}s.pt; [ $seconds = $budget ] && ckpt=$CK/$name.pt
    [ -e $ckpt ] || continue
    CUDA_VISIBLE_DEVICES=${gpus%%,*} python quality.py score --device $DEV --splits 5 \
      --minutes $(python -c "print($seconds/60)") --seed $seed --out $W/score-$name-${seconds}s.json \
      ${name%%-s[0-9]*}=$ckpt > $W/score-$name-${seconds}s.log 2>&1
    echo "scored $name at ${seconds}s ($(elapsed)s): $(tail -1 $W/score-$name-${seconds}s.log)" >> $W/train.txt
  done
}
small_then_dp() {
  run 0 small-s0 0 $SMALL $SMALL_AT & local a=$!
  run 1 small-s1 1 $SMALL $SMALL_AT & local b=$!
  wait $a $b
  run 0,1 dp-s0 0 $DP $DP_AT
  [ $(( $(elapsed) + DP + 120 )) -lt $DEADLINE ] && run 0,1 dp-s1 1 $DP $DP_AT
}
driver() {
  small_then_dp & local a=$!
  run 2 medium-s0 0 $MEDIUM $MEDIUM_AT --model-preset medium --lr 1e-3 --warmup-steps 500 & local b=$!
  run 3 medium-s1 1 $MEDIUM $MEDIUM_AT --model-preset medium --lr 1e-3 --warmup-steps 500 & local c=$!
  wait $a $b $c; echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
pack() {  # name globs...: the files of $W that the quoted globs match, as 15 MiB parts of one tar under $OUT
  local name=$1; shift
  (cd $W && tar cf - $(ls -d $* 2>/dev/null)) | split -b 15M - $OUT/$name.tar.part-
}
report() {
  cat $W/train.txt 2>/dev/null; tail -qn 1 $W/*-s?.log 2>/dev/null
  grep -hE 'feature-attention|--lr|warmup' $W/*-s0.log 2>/dev/null | sort -u | cut -c1-200 | head -12
}

case ${1:-} in
start)
  date +%s > $W/T0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 |
    grep -v WARN
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee $W/gpu.txt
  git rev-parse HEAD > $W/code.txt 2>/dev/null; git status --short >> $W/code.txt; LC_ALL=C sha256sum *.py >> $W/code.txt
  python prior_dump.py --device $DEV --no-progress --preset real --rows 512 --num-datasets $NUM_DATASETS \
    --out $D/real512.h5 > $W/dump-real512.log 2>&1
  echo "dump at $(elapsed)s"; tail -n 1 $W/dump-real512.log
  # the logger starts after the dump and is stopped by its PID (never `pkill -f`: it would match this command line)
  setsid nohup nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu \
    --format=csv -l 10 > $W/clocks.csv 2>&1 < /dev/null & echo $! > $W/clocks.pid
  export -f elapsed run small_then_dp driver
  export W CK D DEV SMALL DP MEDIUM SMALL_AT DP_AT MEDIUM_AT DEADLINE
  setsid nohup bash -c driver > $W/driver.log 2>&1 < /dev/null &
  while [ $(elapsed) -lt $HOLD ]; do sleep 5; done
  report
  ;;
wait)
  while [ $(elapsed) -lt $((DEADLINE - HOLD)) ] && [ $SECONDS -lt $HOLD ]; do sleep 5; done
  report; pack A '*.txt' '*.log'
  ;;
finish)  # the records and medium-s0's final checkpoint (about 56 MiB in 4 parts) together stay under 64 MiB
  while [ ! -e $W/DONE ] && [ $(elapsed) -lt $DEADLINE ]; do sleep 5; done
  report; kill $(cat $W/clocks.pid) 2>/dev/null
  pack B '*.txt' '*.log' '*.json' '*.csv'
  tar cf - -C $CK medium-s0.pt | split -b 15M - $OUT/medium-s0.tar.part-
  ls -la $OUT
  ;;
ckpt)
  tar cf - -C $CK $2.pt | split -b 15M - $OUT/$2.tar.part-; ls -la $OUT
  ;;
esac
