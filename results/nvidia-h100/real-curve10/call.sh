#!/usr/bin/env bash
# #34/#35 on four GPUs of one machine, in two commands on the warm machine (a command lasts <= 600 s):
#   bash call.sh start   # dumps, then in the background: --recipe real-tables for 600 s, seed 0 on GPU 0 and
#                        # seed 1 on GPU 1 (kept at 60/180/300 s); on GPUs 2+3 the same under torchrun (global batch
#                        # 64, --lr as given) for 300 s, seed 0 then seed 1 (kept at 60/180 s)
#   bash call.sh finish  # waits, scores every kept model on both suites (5 splits), then #35: one GPU against two on
#                        # the blog's shape and upstream's, --fast's defaults, each launch on a fresh Inductor cache
# Carry data/ (the suites' caches) and .whl in the first command only: a carried path replaces the machine's. The run
# recorded here kept its checkpoints and dumps in data/, and its finish carried data/ again, which erased the kept
# 1/3/5-minute models and the scaling dumps; scaling/call.sh reran the scaling part. Both now live under /tmp.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site
W=/tmp/w; mkdir -p $W /tmp/ck /tmp/d
MODEL=${MODEL:-}   # extra flags after --recipe real-tables (none: the recipe as shipped)
train() {  # gpus name seed budget save_at [torchrun]
  local gpus=$1 name=$2 seed=$3 budget=$4 save=$5 launch="python"
  [ "${6:-}" = torchrun ] && launch="torchrun --standalone --nproc_per_node 2 --master_port $((29500 + seed))"
  CUDA_VISIBLE_DEVICES=$gpus TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$name timeout $((budget + 200)) $launch \
    train_optimized.py --recipe real-tables $MODEL --seed $seed --time-budget $budget --save-at $save --no-eval \
    --log-every 100 --ckpt /tmp/ck/$name.pt --record $W/$name.json > $W/$name.log 2>&1
  echo "$name exit $? at ${SECONDS}s: $(grep -E 'done:|rror' $W/$name.log | tail -1 | cut -c1-200)" >> $W/train.txt
}
if [ "$1" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v WARN
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
  LC_ALL=C sha256sum *.py > $W/code.txt; echo "MODEL=$MODEL" > $W/model.txt
  CUDA_VISIBLE_DEVICES=0 python -c "
import prior_dump, train_optimized as t
prior_dump.ensure_default_dump(preset='real', num_datasets=t.RECIPE_DUMP_DATASETS['cuda'], device='cuda')" \
    > $W/dump-real.log 2>&1 &
  CUDA_VISIBLE_DEVICES=3 python prior_dump.py --preset blog --num-datasets 600 --out /tmp/d/blog600.h5 --device cuda \
    --no-progress > $W/dump-blog.log 2>&1 &
  CUDA_VISIBLE_DEVICES=3 python prior_dump.py --preset nano --num-datasets 20000 --out /tmp/d/nano20k.h5 --device cuda \
    --no-progress > $W/dump-nano.log 2>&1; wait
  echo "dump at ${SECONDS}s: $(tail -1 $W/dump-real.log)"
  export -f train; export W MODEL
  setsid nohup bash -c 'train 0 s0 0 600 60,180,300 & train 1 s1 1 600 60,180,300 &
    (train 2,3 dp-s0 0 300 60,180 torchrun; train 2,3 dp-s1 1 300 60,180 torchrun) & wait; touch $W/TRAINED' \
    > /dev/null 2>&1 < /dev/null &
  while [ ! -e $W/TRAINED ] && [ $SECONDS -lt 560 ]; do sleep 10; done
  cat $W/train.txt 2>/dev/null; tail -qn 2 $W/s0.log $W/dp-s0.log
  tar czf $OUT/start.tgz -C $W .
  exit 0
fi
while [ ! -e $W/TRAINED ] && [ $SECONDS -lt 300 ]; do sleep 5; done
cat $W/train.txt
score() {  # gpu name=ckpt...
  local gpu=$1; shift
  CUDA_VISIBLE_DEVICES=$gpu python quality.py score --device cuda --splits 5 --out $W/score-${1%%=*}.json "$@" \
    > $W/score-${1%%=*}.log 2>&1
}
for s in 0 1; do
  score $s s$s-1m=/tmp/ck/s$s-60s.pt s$s-3m=/tmp/ck/s$s-180s.pt s$s-5m=/tmp/ck/s$s-300s.pt s$s-10m=/tmp/ck/s$s.pt &
  score $((s + 2)) dp-s$s-1m=/tmp/ck/dp-s$s-60s.pt dp-s$s-3m=/tmp/ck/dp-s$s-180s.pt dp-s$s-5m=/tmp/ck/dp-s$s.pt &
done
wait; echo "scored at ${SECONDS}s"; cat $W/score-*.log
python - <<'PY'   # slim 10-minute checkpoints (inference weights and meta) for the CPU
import glob, os, torch
for path in ("/tmp/ck/s0.pt", "/tmp/ck/s1.pt"):
    state = torch.load(path, map_location="cpu", weights_only=True)
    state.pop("train_state", None)
    torch.save(state, os.path.join("/tmp/w", "slim-" + os.path.basename(path)))
PY
cp $W/slim-*.pt $OUT/; tar czf $OUT/scores.tgz -C $W .   # what comes back even if the scaling runs overrun
scale() {  # name data steps [torchrun]
  local launch="python" gpus=0
  [ "${4:-}" = torchrun ] && launch="torchrun --standalone --nproc_per_node 2" && gpus=0,1
  CUDA_VISIBLE_DEVICES=$gpus TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$1 timeout 240 $launch train_optimized.py --data $2 \
    --fast --steps $3 --timing-warmup $(($3 / 3)) --no-eval --log-every 1000 --record $W/$1.json > $W/$1.log 2>&1
  echo "$1 exit $? at ${SECONDS}s: $(grep -E 'done:|rror' $W/$1.log | tail -1 | cut -c1-200)"
  tar czf $OUT/scaling.tgz -C $W --exclude 'slim-*' --exclude 'score-*' .
}
scale blog-1gpu /tmp/d/blog600.h5 300; scale blog-2gpu /tmp/d/blog600.h5 300 torchrun
scale up-1gpu /tmp/d/nano20k.h5 3000; scale up-2gpu /tmp/d/nano20k.h5 3000 torchrun
for i in 2 3 4 5 6 7 8 9 10; do
  [ $SECONDS -gt 470 ] && break
  scale up-2gpu-launch$i /tmp/d/nano20k.h5 60 torchrun
done
grep -h "cuda-graphs\|step:" $W/blog-2gpu.log | head -3
tar czf $OUT/scaling.tgz -C $W --exclude 'slim-*' --exclude 'score-*' .
