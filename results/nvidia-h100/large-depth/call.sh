#!/usr/bin/env bash
# Does depth buy what steps do not (#34's 30-minute point)? At 10 minutes medium (8 layers) beat small (6) with half
# its steps, and from 10 to 20 minutes medium gained 0.0004 (curve-matmul). Large is medium with 12 layers.
# GPUs 2, 3: large-s0, -s1, lr 1e-3 with the recipe's warm-up, 20 minutes, checkpoints at 1, 3 and 10, scored on
#   the GPU (against curve-matmul's medium at 1, 3, 10 and 20 minutes, same seeds).
# GPUs 0, 1: the recipe's seeds 6 and 7 for 10 minutes (#34: eight seeds; 0-5 in curve-matmul and recipe-batch),
#   then large at lr 5e-4, seeds 0 and 1, for 10 minutes (is 1e-3 large's lr?).
# Commands (<= 600 s each; issue each as soon as the last returns; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; bash call.sh finish
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site
W=/tmp/w; CK=/tmp/ck; D=/tmp/d
DEV=${DEV:-cuda}            # cpu: a dry run of the shell logic (with NUM_DATASETS and BUDGET small, and
DRY=${DRY:-}                # DRY="--batch-size 2": a CPU holds four runs only with small batches)
NUM_DATASETS=${NUM_DATASETS:-100000}
BUDGET=${BUDGET:-600}; LONG=${LONG:-1200}; SAVE_AT=${SAVE_AT:-60,180}
HOLD=${HOLD:-570}           # seconds each command waits before it reports
DEADLINE=$(( (LONG > 2 * BUDGET ? LONG : 2 * BUDGET) + 330 ))  # seconds after `start` began: `finish` returns by it
mkdir -p $W $CK $D
declare -A FLAGS=([recipe]="" [large]="--model-preset large --lr 1e-3 --warmup-steps 500"
                  [large5]="--model-preset large --lr 5e-4 --warmup-steps 500")

elapsed() { echo $(( $(date +%s) - $(cat $W/T0) )); }
run() {  # gpu name seed budget flags...: train, then score every --save-at checkpoint and the last one
  local gpu=$1 name=$2 seed=$3 budget=$4 save_at=$SAVE_AT; shift 4
  [ $budget -gt $BUDGET ] && save_at=$SAVE_AT,$BUDGET
  CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$gpu timeout $((budget + 240)) python train_optimized.py \
    --recipe real-tables --data $D/real512.h5 "$@" --seed $seed --time-budget $budget --save-at $save_at --no-eval \
    --log-every 500 --ckpt $CK/$name.pt --record $W/$name.json $DRY > $W/$name.log 2>&1
  echo "$name exit $? at $(elapsed)s: $(grep -E 'done:|rror' $W/$name.log | tail -1 | cut -c1-220)" >> $W/train.txt
  for seconds in ${save_at//,/ } $budget; do
    local ckpt=$CK/$name-${seconds}s.pt; [ $seconds = $budget ] && ckpt=$CK/$name.pt
    [ -e $ckpt ] || continue
    CUDA_VISIBLE_DEVICES=$gpu python quality.py score --device $DEV --splits 5 --minutes $(python -c "print($seconds/60)") \
      --seed $seed --out $W/score-$name-${seconds}s.json ${name%%-s[0-9]*}=$ckpt > $W/score-$name-${seconds}s.log 2>&1
    echo "scored $name at ${seconds}s ($(elapsed)s): $(tail -1 $W/score-$name-${seconds}s.log)" >> $W/train.txt
  done
}
driver() {
  local pids=()
  run 2 large-s0 0 $LONG ${FLAGS[large]} & pids+=($!)
  run 3 large-s1 1 $LONG ${FLAGS[large]} & pids+=($!)
  (run 0 recipe-s6 6 $BUDGET; run 0 large5-s0 0 $BUDGET ${FLAGS[large5]}) & pids+=($!)
  (run 1 recipe-s7 7 $BUDGET; run 1 large5-s1 1 $BUDGET ${FLAGS[large5]}) & pids+=($!)
  wait ${pids[@]}; echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
pack() {  # name globs...: the files of $W that the quoted globs match, as 15 MiB parts of one tar under $OUT
  local name=$1; shift
  (cd $W && tar cf - $(ls -d $* 2>/dev/null)) | split -b 15M - $OUT/$name.tar.part-
}
report() {
  cat $W/train.txt 2>/dev/null; tail -qn 1 $W/*-s?.log 2>/dev/null
  grep -hE '^--recipe' $W/*-s?.log 2>/dev/null | sort -u | cut -c1-200
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
  export -f elapsed run driver
  export W CK D DEV DRY BUDGET LONG SAVE_AT
  setsid nohup bash -c "$(declare -p FLAGS); driver" > $W/driver.log 2>&1 < /dev/null &
  while [ $(elapsed) -lt $HOLD ]; do sleep 5; done
  report
  ;;
wait)
  while [ $(elapsed) -lt $((DEADLINE - HOLD)) ] && [ $SECONDS -lt $HOLD ]; do sleep 5; done
  report; pack A '*.txt' '*.log'
  ;;
finish)
  while [ ! -e $W/DONE ] && [ $(elapsed) -lt $DEADLINE ]; do sleep 5; done
  report; kill $(cat $W/clocks.pid) 2>/dev/null
  pack B '*.txt' '*.log' '*.json' '*.csv'
  ls -la $OUT
  ;;
esac
