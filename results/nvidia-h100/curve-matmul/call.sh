#!/usr/bin/env bash
# The time-to-quality curve on the matmul step (#34): the recipe (small) and medium, seeds 0 and 1, 20 minutes each
# with checkpoints at 1, 3 and 10 minutes, on four GPUs of one machine, every checkpoint scored on its GPU; the final
# checkpoints come back so that a later call can resume them to 30 minutes. One background driver, three commands
# (<= 600 s each; issue each as soon as the last returns):
#   bash call.sh start    # carry: the 4 suite/baseline caches and .whl: the dump, then the driver (setsid)
#   bash call.sh wait     # the same carry; returns what has finished
#   bash call.sh finish   # the same carry; waits for the driver, returns every record and small's final checkpoints
#   bash call.sh ckpt medium-s0; bash call.sh ckpt medium-s1   # each returns one final checkpoint (58.5 MB) in parts
# What comes back from $OUT: at most 8 files of 16 MiB, 64 MiB together: hence the parts and the extra calls.
# GPUs 0, 1: `--recipe real-tables` (small, lr 2e-3; --fast picks fp32 matmul feature attention on this dump)
# GPUs 2, 3: the same with --model-preset medium --lr 1e-3 --warmup-steps 500 (medium at 2e-3 stalled without warm-up)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site
W=/tmp/w; CK=/tmp/ck; D=/tmp/d
DEV=${DEV:-cuda}            # cpu: a dry run of the shell logic (with NUM_DATASETS small)
NUM_DATASETS=${NUM_DATASETS:-100000}
mkdir -p $W $CK $D
BUDGET=${BUDGET:-1200}    # seconds of training per run
SAVE_AT=${SAVE_AT:-60,180,600}
DEADLINE=$((BUDGET + 260)) # seconds after `start` began: `finish` returns by it

elapsed() { echo $(( $(date +%s) - $(cat $W/T0) )); }
run() {  # gpu name seed flags...: train, then score the checkpoint of every --save-at point and the last one
  local gpu=$1 name=$2 seed=$3; shift 3
  CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$gpu timeout $((BUDGET + 240)) python train_optimized.py \
    --recipe real-tables --data $D/real512.h5 "$@" --seed $seed --time-budget $BUDGET --save-at $SAVE_AT --no-eval \
    --log-every 500 --ckpt $CK/$name.pt --record $W/$name.json > $W/$name.log 2>&1
  echo "$name exit $? at $(elapsed)s: $(grep -E 'done:|rror' $W/$name.log | tail -1 | cut -c1-220)" >> $W/train.txt
  for seconds in ${SAVE_AT//,/ } $BUDGET; do
    local ckpt=$CK/$name-${seconds}s.pt; [ $seconds = $BUDGET ] && ckpt=$CK/$name.pt
    [ -e $ckpt ] || continue
    CUDA_VISIBLE_DEVICES=$gpu python quality.py score --device $DEV --splits 5 --minutes $(python -c "print($seconds/60)") \
      --seed $seed --out $W/score-$name-${seconds}s.json ${name%%-s[0-9]*}=$ckpt > $W/score-$name-${seconds}s.log 2>&1
    echo "scored $name at ${seconds}s ($(elapsed)s): $(tail -1 $W/score-$name-${seconds}s.log)" >> $W/train.txt
  done
}
driver() {
  run 0 small-s0 0 & run 1 small-s1 1 &
  run 2 medium-s0 0 --model-preset medium --lr 1e-3 --warmup-steps 500 &
  run 3 medium-s1 1 --model-preset medium --lr 1e-3 --warmup-steps 500 &
  wait; echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
pack() {  # name globs...: the files of $W that the quoted globs match, as 15 MiB parts of one tar under $OUT
  local name=$1; shift
  (cd $W && tar cf - $(ls -d $* 2>/dev/null)) | split -b 15M - $OUT/$name.tar.part-
}
report() { cat $W/train.txt 2>/dev/null; tail -qn 1 $W/*-s?.log 2>/dev/null; }

case ${1:-} in
start)
  date +%s > $W/T0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 |
    grep -v WARN
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee $W/gpu.txt
  git rev-parse HEAD > $W/code.txt 2>/dev/null; LC_ALL=C sha256sum *.py >> $W/code.txt
  python prior_dump.py --device $DEV --no-progress --preset real --rows 512 --num-datasets $NUM_DATASETS \
    --out $D/real512.h5 > $W/dump-real512.log 2>&1
  echo "dump at $(elapsed)s"; tail -n 1 $W/dump-real512.log
  # the logger starts after the dump and is stopped by its PID (never `pkill -f`: it would match this command line)
  setsid nohup nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu \
    --format=csv -l 10 > $W/clocks.csv 2>&1 < /dev/null & echo $! > $W/clocks.pid
  export -f elapsed run driver
  export W CK D BUDGET SAVE_AT DEV
  setsid nohup bash -c driver > $W/driver.log 2>&1 < /dev/null &
  while [ $(elapsed) -lt 570 ]; do sleep 5; done
  report
  ;;
wait)
  while [ $(elapsed) -lt $((DEADLINE - 570)) ] && [ $SECONDS -lt 570 ]; do sleep 5; done
  report; pack A '*.txt' '*.log'
  ;;
finish)
  while [ ! -e $W/DONE ] && [ $(elapsed) -lt $DEADLINE ]; do sleep 5; done
  report; kill $(cat $W/clocks.pid) 2>/dev/null
  pack B '*.txt' '*.log' '*.json' '*.csv'
  tar cf - -C $CK small-s0.pt small-s1.pt | split -b 15M - $OUT/small.tar.part-   # for a resume to 30 minutes
  ls -la $OUT
  ;;
ckpt)
  tar cf - -C $CK $2.pt | split -b 15M - $OUT/$2.tar.part-; ls -la $OUT
  ;;
esac
