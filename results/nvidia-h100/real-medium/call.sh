#!/usr/bin/env bash
# #34 on four GPUs of one machine: one background driver, commands that wait for it (<= 600 s each).
#   bash call.sh start    # carry: the 4 suite/baseline caches and .whl; makes the dumps, starts the driver (setsid)
#   bash call.sh wait     # returns what has finished, with the 10-minute models' inference weights
#   bash call.sh finish   # waits for the driver (until DEADLINE), returns all and one resumable medium model
#   bash call.sh more     # returns the second resumable medium model
# Does a larger model keep learning past 10 minutes, where small levels off (real-30min: 0.7532 -> 0.7544)?
# GPUs 0, 1, 2: the recipe with --model-preset medium for 20 minutes, kept at 10: lr 1e-3 seeds 0 and 1, lr 2e-3 seed 0.
# GPU 3: the recipe on a 64-feature prior (prior_dump --features 64) for the wide tables, seeds 0 and 1, 10 minutes.
# Every model is scored on its GPU after its run (5 splits, all 104 tasks, every baseline on the same splits).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site
W=/tmp/w; CK=/tmp/ck; D=/tmp/d
mkdir -p $W $CK $D
DEADLINE=1500    # seconds after `start` began: `finish` returns by then

elapsed() { echo $(( $(date +%s) - $(cat $W/T0) )); }
train() {  # gpu name seed budget save_at flags...
  local gpu=$1 name=$2 seed=$3 budget=$4 save=$5; shift 5
  CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$name timeout $((budget + 240)) \
    python train_optimized.py --recipe real-tables --data $D/real512.h5 "$@" --seed $seed --time-budget $budget \
    --save-at $save --no-eval --log-every 100 --ckpt $CK/$name.pt --record $W/$name.json > $W/$name.log 2>&1
  echo "$name exit $? at $(elapsed)s: $(grep -E 'done:|rror' $W/$name.log | tail -1 | cut -c1-220)" >> $W/train.txt
}
score() {  # gpu name ckpt minutes seed   (the method is the name up to "-s<seed>")
  [ -e $3 ] || return 0
  CUDA_VISIBLE_DEVICES=$1 python quality.py score --device cuda --splits 5 --minutes $4 --seed $5 \
    --out $W/score-$2.json ${2%%-s[0-9]*}=$3 > $W/score-$2.log 2>&1
  sed -i "s/^/[$2] /" $W/score-$2.log
  echo "scored $2 at $(elapsed)s" >> $W/train.txt
}
slim() {  # checkpoints -> their inference weights and meta as $W/slim-NAME.pt
  python - "$@" <<'PY'
import os, sys, torch
for path in sys.argv[1:]:
    if os.path.exists(path):
        state = torch.load(path, map_location="cpu", weights_only=True)
        state.pop("train_state", None)
        torch.save(state, "/tmp/w/slim-" + os.path.basename(path))
PY
}
medium() {  # gpu lr seed: 20 minutes kept at 10, then both scored on the GPU at once
  local name=medium-lr$2-s$3
  train $1 $name $3 1200 600 --model-preset medium --lr $2e-3
  score $1 $name-10m $CK/$name-600s.pt 10 $3 & score $1 $name $CK/$name.pt 20 $3; wait
}
pack() {  # name globs...: the files of $W that the quoted globs match, as 15 MB parts of one tar under $OUT
  local name=$1; shift
  tar cf $W/.pack.tar -C $W $(cd $W && ls -d $* 2>/dev/null)
  [ $? -le 1 ] || return 1    # tar's 1: a log changed while read
  split -b 15M $W/.pack.tar $OUT/$name.tar.part- && rm $W/.pack.tar
}
driver() {
  medium 0 1 0 & medium 1 1 1 & medium 2 2 0 &
  train 3 wide64-s0 0 600 180 --data $D/real512w64.h5; score 3 wide64-s0 $CK/wide64-s0.pt 10 0
  train 3 wide64-s1 1 600 180 --data $D/real512w64.h5; score 3 wide64-s1 $CK/wide64-s1.pt 10 1
  wait; echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}

case $1 in
start)
  date +%s > $W/T0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 |
    grep -v WARN
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
  LC_ALL=C sha256sum *.py > $W/code.txt
  CUDA_VISIBLE_DEVICES=0 python prior_dump.py --preset real --rows 512 --num-datasets 100000 --out $D/real512.h5 \
    --device cuda --no-progress > $W/dump-real512.log 2>&1 &
  CUDA_VISIBLE_DEVICES=3 python prior_dump.py --preset real --rows 512 --features 64 --num-datasets 100000 \
    --out $D/real512w64.h5 --device cuda --no-progress > $W/dump-real512w64.log 2>&1; wait
  echo "dumps at $(elapsed)s"; tail -qn 1 $W/dump-*.log
  export -f elapsed train score slim medium driver; export W CK D
  setsid nohup bash -c driver > $W/driver.log 2>&1 < /dev/null &
  while [ $(elapsed) -lt 570 ]; do sleep 5; done
  cat $W/train.txt 2>/dev/null; tail -qn 1 $W/*-s*.log
  ;;
wait)
  while [ $(elapsed) -lt $((DEADLINE - 560)) ] && [ $SECONDS -lt 570 ]; do sleep 5; done
  cat $W/train.txt; cat $W/score-*.log 2>/dev/null; tail -qn 1 $W/*-s?.log
  slim $CK/wide64-s0.pt $CK/medium-lr*-600s.pt
  pack A '*.txt' '*.log' '*.json' 'slim-*.pt'
  ;;
finish)
  while [ ! -e $W/DONE ] && [ $(elapsed) -lt $DEADLINE ]; do sleep 5; done
  cat $W/train.txt; cat $W/score-*.log 2>/dev/null; tail -n 20 $W/driver.log
  cp $CK/medium-lr1-s0.pt $W/full-medium-lr1-s0.pt
  pack B train.txt driver.log 'score-*' full-medium-lr1-s0.pt   # 64 MB a call: one medium model is about 58 MB
  ;;
more)
  cp $CK/medium-lr1-s1.pt $W/full-medium-lr1-s1.pt
  pack C '*.txt' '*.log' '*.json' full-medium-lr1-s1.pt
  ;;
esac
