#!/usr/bin/env bash
# The machinery of a four-GPU call: sourced by a call.sh that sets FLAGS (declare -A: run name -> flags) and defines
# driver() (the runs, in the background; it ends with `touch $W/DONE`), then passes its command:
#   source results/nvidia-h100/call-lib.sh "$@"     # start | wait | finish, each <= 600 s, issued back to back
# run GPU NAME SEED BUDGET FLAGS...: trains --recipe real-tables with FLAGS for BUDGET seconds (checkpoints at
# SAVE_AT and, for a longer run, at BUDGET), then scores every checkpoint on that GPU; FROM=S run ... resumes it.
# `start` makes the recipe's dump, $D/real512.h5, or those of DUMPS (declare -A: name -> prior_dump flags).
# Earlier calls' call.sh files hold their own copy of this, as they ran.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site
W=/tmp/w; CK=/tmp/ck; D=/tmp/d
DEV=${DEV:-cuda}            # cpu: a dry run of the shell logic (with NUM_DATASETS and BUDGET small, and
DRY=${DRY:-}                # DRY="--batch-size 2": a CPU holds four runs only with small batches)
NUM_DATASETS=${NUM_DATASETS:-100000}
DATA=${DATA-$D/real512.h5}  # DATA="": no --data, the recipe's own (since 759e867: made on the fly)
BUDGET=${BUDGET:-600}; LONG=${LONG:-$BUDGET}; SAVE_AT=${SAVE_AT-60,180}   # LONG: the longest run's budget
HOLD=${HOLD:-570}           # seconds each command waits before it reports
# seconds after `start` began: `finish` returns by it. Two phases of BUDGET on a GPU need the dump (~50 s), two
# compiles (60-80 s each) and the scoring (~30 s a checkpoint): at + 330, large-depth's last scoring was cut.
DEADLINE=${DEADLINE:-$((2 * BUDGET + 390))}
mkdir -p $W $CK $D
elapsed() { echo $(( $(date +%s) - $(cat $W/T0) )); }
run() {  # gpu name seed budget flags...: train, then score every --save-at checkpoint and the last one.
         # FROM=S run ...: resume NAME's checkpoint (S seconds trained) to budget; log, record and score its end only
         # GPU as a list (0,1): torchrun over those GPUs; scored on the first
  local gpu=$1 name=$2 seed=$3 budget=$4 save_at=$SAVE_AT tag=$2 from=${FROM:-0} launch=python; shift 4
  [ $budget -gt $BUDGET ] && save_at=${SAVE_AT:+$SAVE_AT,}$BUDGET
  local keep=(${save_at:+--save-at $save_at})   # SAVE_AT="": the budget's checkpoint only
  [ $from -gt 0 ] && { keep=(--resume); save_at=""; tag=$name-${budget}s; }
  [[ $gpu == *,* ]] && launch="torchrun --standalone --nproc_per_node $(( $(tr -cd , <<< $gpu | wc -c) + 1 ))"
  CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_CACHE_DIR=/tmp/ind-${gpu//,/} timeout $((budget - from + 240)) $launch \
    train_optimized.py --recipe real-tables ${DATA:+--data $DATA} "$@" --seed $seed --time-budget $budget "${keep[@]}" \
    --no-eval --log-every 500 --ckpt $CK/$name.pt --record $W/$tag.json $DRY > $W/$tag.log 2>&1
  echo "$tag exit $? at $(elapsed)s: $(grep -E 'done:|rror' $W/$tag.log | tail -1 | cut -c1-220)" >> $W/train.txt
  [ -n "${NO_SCORE:-}" ] && return   # NO_SCORE=1: the caller scores the checkpoints (score_one)
  for seconds in ${save_at//,/ } $budget; do score_one ${gpu%%,*} $name $seed $seconds $budget; done
}
score_one() {  # gpu name seed seconds budget: score $CK/NAME-SECONDSs.pt (NAME.pt at the budget) on that GPU
  local ckpt=$CK/$2-${4}s.pt; [ $4 = $5 ] && ckpt=$CK/$2.pt
  [ -e $ckpt ] || return 0
  CUDA_VISIBLE_DEVICES=$1 python quality.py score --device $DEV --splits 5 --minutes $(python -c "print($4/60)") \
    --seed $3 --out $W/score-$2-${4}s.json ${2%%-s[0-9]*}=$ckpt > $W/score-$2-${4}s.log 2>&1
  echo "scored $2 at ${4}s ($(elapsed)s): $(tail -1 $W/score-$2-${4}s.log)" >> $W/train.txt
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
  gpu=0   # each dump on its own GPU, all at once; DUMPS (declare -A: name -> prior_dump flags) or the recipe's
  declare -p DUMPS > /dev/null 2>&1 || declare -A DUMPS=([real512]="")
  [ -z "$DATA" ] && DUMPS=()   # the recipe's prior made on the fly: no file
  for name in "${!DUMPS[@]}"; do
    CUDA_VISIBLE_DEVICES=$gpu python prior_dump.py --device $DEV --no-progress --preset real --rows 512 \
      --num-datasets $NUM_DATASETS ${DUMPS[$name]} --out $D/$name.h5 > $W/dump-$name.log 2>&1 & gpu=$((gpu + 1))
  done
  wait
  echo "dumps at $(elapsed)s"; tail -qn 1 $W/dump-*.log
  # the logger starts after the dump and is stopped by its PID (never `pkill -f`: it would match this command line)
  setsid nohup nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu \
    --format=csv -l 10 > $W/clocks.csv 2>&1 < /dev/null & echo $! > $W/clocks.pid
  export -f elapsed run score_one driver
  export W CK D DEV DRY BUDGET LONG SAVE_AT DATA DEADLINE   # DEADLINE: a driver may time its own steps by it
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
  for name in ${KEEP:-}; do   # KEEP: checkpoints to bring back, without their resume state (a third of the size)
    [ -e $CK/$name.pt ] || continue
    python -c "import sys, checkpoint; checkpoint.write_inference_copy(*sys.argv[1:])" $CK/$name.pt $W/$name.pt
  done
  for name in ${KEEP_STATE:-}; do   # KEEP_STATE: whole checkpoints (about 44 MB for medium), for a later --resume
    [ -e $CK/$name.pt ] && cp $CK/$name.pt $W/$name.pt
  done
  pack B '*.txt' '*.log' '*.json' '*.csv' '*.pt'
  ls -la $OUT
  ;;
esac
