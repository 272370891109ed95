#!/usr/bin/env bash
# #34/#35 on four GPUs of one machine; one background driver, three commands that wait for it (<= 600 s each):
#   bash call.sh start    # dumps, then the driver (setsid): phase A, the pick, phase B; waits ~590 s
#   bash call.sh wait     # waits ~590 s, returns phase A's records and checkpoints
#   bash call.sh finish   # waits for phase B (at most $LIMIT s), returns its records and checkpoints
# Phase A (10 min, one run per GPU): the recipe's model on 512-row tables, batch 32 and batch 16, seeds 0 and 1.
# The pick: the configuration with the best mean suite ROC AUC over its two seeds, against the shipped recipe's
# 0.7296 (256-row tables, batch 32; seeds 0 and 1, results/nvidia-h100/real-curve10). Scored on the GPUs.
# Phase B: the pick for 10 min, seeds 2 and 3 (GPUs 0, 1); on GPUs 2+3 the pick under torchrun for 300 s with
# lr x sqrt(2) for the doubled global batch (seed 0), then `benchmark.py --scaling` with --fast's defaults.
# Beside both phases: fresh-cache `torchrun --fast` launches (upstream's shape, the blog's shape), a crash test.
# Kept models (60/180/300 s) are scored on the machine's CPUs; every run's final model on its GPU (5 splits).
# Carry the four suite/baseline caches under data/ and .whl in the first command only.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site
W=/tmp/w; CK=/tmp/ck; D=/tmp/d; HERE=$(pwd)
mkdir -p $W $CK $D
RECIPE_SUITE=0.7296    # real-curve10: suite ROC AUC of the recipe at 10 min, mean of seeds 0 and 1
declare -A FLAGS=([r256]="--data $D/real256.h5" [r512]="--data $D/real512.h5"
                  [r512b16]="--data $D/real512.h5 --batch-size 16")

train() {  # gpus name seed budget save_at flags... (torchrun when gpus has a comma)
  local gpus=$1 name=$2 seed=$3 budget=$4 save=$5 launch=python; shift 5
  [[ $gpus == *,* ]] && launch="torchrun --standalone --nproc_per_node 2"
  CUDA_VISIBLE_DEVICES=$gpus TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$name timeout $((budget + 240)) $launch \
    train_optimized.py --recipe real-tables "$@" --seed $seed --time-budget $budget --save-at $save --no-eval \
    --log-every 100 --ckpt $CK/$name.pt --record $W/$name.json > $W/$name.log 2>&1
  echo "$name exit $? at ${SECONDS}s: $(grep -E 'done:|rror' $W/$name.log | tail -1 | cut -c1-220)" >> $W/train.txt
}
score_gpu() {  # gpu name  (the final model)
  CUDA_VISIBLE_DEVICES=$1 python quality.py score --device cuda --splits 5 --minutes 10 --out $W/score-$2.json \
    $2=$CK/$2.pt > $W/score-$2.log 2>&1
}
score_cpu() {  # name seconds...  (kept models, 8 CPU threads)
  local name=$1 pairs=(); shift
  for s in "$@"; do [ -e $CK/$name-${s}s.pt ] && pairs+=("$name-${s}s=$CK/$name-${s}s.pt"); done
  OMP_NUM_THREADS=8 CUDA_VISIBLE_DEVICES= python quality.py score --device cpu --splits 5 \
    --out $W/score-$name-early.json "${pairs[@]}" > $W/score-$name-early.log 2>&1
}
launches() {  # gpus name data steps count
  for i in $(seq 1 $5); do
    [ -e $W/STOP_LAUNCHES ] && break
    CUDA_VISIBLE_DEVICES=$1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind-launch-$2-$i timeout 400 torchrun --standalone \
      --nproc_per_node 2 train_optimized.py --data $3 --fast --steps $4 --timing-warmup 4 --no-eval \
      --log-every 1000 > $W/launch-$2-$i.log 2>&1
    echo "$2 launch $i exit $? at ${SECONDS}s: $(grep -E 'done:|rror|Traceback' $W/launch-$2-$i.log | tail -1 |
      cut -c1-200)" >> $W/launches.txt
  done
}
slim() {  # names...: inference weights and meta, for the CPU
  python - "$@" <<'PY'
import sys, torch
for name in sys.argv[1:]:
    state = torch.load(f"/tmp/ck/{name}.pt", map_location="cpu", weights_only=True)
    state.pop("train_state", None)
    torch.save(state, f"/tmp/w/slim-{name}.pt")
PY
}
pick() {  # prints the winning configuration's name
  python - $RECIPE_SUITE <<'PY'
import json, sys
best, best_auc = "r256", float(sys.argv[1])
for config in ("r512", "r512b16"):
    aucs = []
    for seed in (0, 1):
        name = f"{config}-s{seed}"
        try:
            aucs.append(json.load(open(f"/tmp/w/score-{name}.json"))["summary"][name]["suite"]["all"]["methods"][name]["roc_auc"])
        except (OSError, KeyError, ValueError):
            pass
    if len(aucs) == 2 and sum(aucs) / 2 > best_auc:
        best, best_auc = config, sum(aucs) / 2
print(best)
PY
}
pack() {  # tarball of everything small in $W (tar's exit 1: a log changed while read; the archive is whole)
  tar czf $W/.pack.tgz -C $W --exclude '*.pt' --exclude '*.tar' --exclude '.pack*' --exclude 'pack-*' .
  [ $? -le 1 ] && mv $W/.pack.tgz $W/pack-$1.tgz
}
driver() {
  A="r512-s0 r512b16-s0 r512-s1 r512b16-s1"
  train 0 r512-s0 0 600 60,180,300 ${FLAGS[r512]} & pa=$!
  train 1 r512b16-s0 0 600 60,180,300 ${FLAGS[r512b16]} & pb=$!
  train 2 r512-s1 1 600 60,180,300 ${FLAGS[r512]} & pc=$!
  train 3 r512b16-s1 1 600 60,180,300 ${FLAGS[r512b16]} & pd=$!
  (sleep 90; launches 2,3 upstream $D/nano20k.h5 60 10) &
  (sleep 90; launches 0,1 blog $D/blog600.h5 12 10) &
  wait $pa $pb $pc $pd; echo "phase A trained at ${SECONDS}s" >> $W/train.txt
  gpu=0 pids=(); for n in $A; do score_gpu $gpu $n & pids+=($!); gpu=$((gpu + 1)); done; wait ${pids[@]}
  WIN=$(pick); echo "$WIN" > $W/pick.txt; echo "pick $WIN at ${SECONDS}s" >> $W/train.txt
  for n in $A; do score_cpu $n 60 180 300 & done
  train 0 $WIN-s2 2 600 60,180,300 ${FLAGS[$WIN]} & pe=$!
  train 1 $WIN-s3 3 600 60,180,300 ${FLAGS[$WIN]} & pf=$!
  keep=$([ $WIN = r512b16 ] && echo r512b16 || echo r512)   # full checkpoints (resumable) of these two seeds
  slim $A; cp $CK/$keep-s0.pt $W/full-$keep-s0.pt; cp $CK/$keep-s1.pt $W/full-$keep-s1.pt
  pack A; (cd $W && tar cf $W/A.tar pack-A.tgz full-*.pt $(for n in $A; do [[ $n == $keep-* ]] || echo slim-$n.pt; done))
  touch $W/A_DONE
  ( train 2,3 dp-$WIN-s0 0 300 60,180 ${FLAGS[$WIN]} --lr 2.83e-3
    CUDA_VISIBLE_DEVICES=2,3 timeout 420 python benchmark.py --scaling --gpus 1,2 --best-flags="--fast" --repeats 1 \
      --out $W/scaling > $W/scaling.log 2>&1; echo "scaling exit $? at ${SECONDS}s" >> $W/train.txt ) & pg=$!
  wait $pe $pf; touch $W/STOP_LAUNCHES
  score_gpu 0 $WIN-s2 & score_gpu 1 $WIN-s3 & score_cpu $WIN-s2 60 180 300 & score_cpu $WIN-s3 60 180 300 &
  wait $pg; score_gpu 2 dp-$WIN-s0 & score_cpu dp-$WIN-s0 60 180 &
  wait; echo "all scored at ${SECONDS}s" >> $W/train.txt
  slim $WIN-s2 $WIN-s3 dp-$WIN-s0; pack B
  (cd $W && tar cf $W/B.tar pack-B.tgz slim-$WIN-s2.pt slim-$WIN-s3.pt slim-dp-$WIN-s0.pt); touch $W/B_DONE
}

case $1 in
start)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 |
    grep -v WARN
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
  LC_ALL=C sha256sum *.py > $W/code.txt
  CUDA_VISIBLE_DEVICES=0 python prior_dump.py --preset real --rows 512 --num-datasets 100000 --out $D/real512.h5 \
    --device cuda --no-progress > $W/dump-real512.log 2>&1 &
  CUDA_VISIBLE_DEVICES=1 python prior_dump.py --preset real --num-datasets 100000 --out $D/real256.h5 \
    --device cuda --no-progress > $W/dump-real256.log 2>&1 &
  CUDA_VISIBLE_DEVICES=3 python prior_dump.py --preset blog --num-datasets 600 --out $D/blog600.h5 --device cuda \
    --no-progress > $W/dump-blog.log 2>&1 &
  CUDA_VISIBLE_DEVICES=2 python prior_dump.py --preset nano --num-datasets 20000 --out $D/nano20k.h5 --device cuda \
    --no-progress > $W/dump-nano.log 2>&1; wait
  echo "dumps at ${SECONDS}s"; tail -qn 1 $W/dump-*.log
  export -f train score_gpu score_cpu launches slim pick pack driver; export W CK D RECIPE_SUITE HERE
  setsid nohup bash -c "declare -A FLAGS=([r256]='${FLAGS[r256]}' [r512]='${FLAGS[r512]}' \
    [r512b16]='${FLAGS[r512b16]}'); driver" > $W/driver.log 2>&1 < /dev/null &
  while [ $SECONDS -lt 585 ]; do sleep 5; done
  cat $W/train.txt $W/launches.txt 2>/dev/null; tail -qn 1 $W/r512*-s*.log
  ;;
wait)
  while [ ! -e $W/A_DONE ] && [ $SECONDS -lt 585 ]; do sleep 5; done
  while [ $SECONDS -lt ${HOLD:-585} ]; do sleep 5; done
  cat $W/train.txt $W/launches.txt 2>/dev/null; cat $W/score-*.log 2>/dev/null
  [ -e $W/A.tar ] && split -b 15M $W/A.tar $OUT/A.tar.part- || (pack partial; cp $W/pack-partial.tgz $OUT/)
  ;;
finish)
  while [ ! -e $W/B_DONE ] && [ $SECONDS -lt ${LIMIT:-470} ]; do sleep 5; done
  cat $W/train.txt $W/launches.txt 2>/dev/null; cat $W/score-*.log 2>/dev/null; tail -n 30 $W/driver.log
  [ -e $W/B.tar ] && split -b 15M $W/B.tar $OUT/B.tar.part- || (pack partial; cp $W/pack-partial.tgz $OUT/)
  ;;
esac
