#!/usr/bin/env bash
# #34/#35 on four GPUs of one machine: one background driver, three commands that wait for it (<= 600 s each).
#   bash call.sh start    # carry: the 4 suite/baseline caches, .whl, data/ck (two resumable 10-minute checkpoints),
#                         #        data/fa4w (flash-attn-4's small wheels); the dump, then the driver (setsid)
#   bash call.sh wait     # carry: data/fa4a (first half of the CUTLASS cu13 wheel); returns seeds 4 and 5
#   bash call.sh finish   # carry: data/fa4b (second half); installs flash-attn-4, waits for the driver, returns all
# GPUs 0, 1: the recipe's 10-minute models of seeds 0 and 1 (results/nvidia-h100/real-rows) resumed to 30 minutes
#   (--resume --time-budget 1800, kept at 20), then scored on the GPU. If a resume is refused, seeds 6 and 7 instead.
# GPUs 2, 3: the recipe for 10 minutes, seeds 4 and 5 (kept at 1, 3, 5 min); then the recipe under torchrun on both,
#   seed 1, 300 s (its lr x sqrt(2) now set by --recipe); then `benchmark.py --scaling` on the blog's shape with
#   `--fast --attention triton` and, once flash-attn-4 is installed, `--fast --attention fa4`.
# Final models are scored on their GPU (5 splits), kept ones on the machine's CPUs; every score is one record.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site
W=/tmp/w; CK=/tmp/ck; D=/tmp/d; FA4=/tmp/fa4w
mkdir -p $W $CK $D $FA4
DEADLINE=1500    # seconds after `start` began: the driver starts nothing after it; `finish` returns by it

train() {  # gpus name seed budget save_at flags... (torchrun when gpus has a comma)
  local gpus=$1 name=$2 seed=$3 budget=$4 save=$5 launch=python; shift 5
  [[ $gpus == *,* ]] && launch="torchrun --standalone --nproc_per_node 2"
  CUDA_VISIBLE_DEVICES=$gpus TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$name timeout $((budget + 240)) $launch \
    train_optimized.py --recipe real-tables --data $D/real512.h5 "$@" --seed $seed --time-budget $budget \
    --save-at $save --no-eval --log-every 100 --ckpt $CK/$name.pt --record $W/$name.json > $W/$name.log 2>&1
  local rc=$?
  echo "$name exit $rc at $(elapsed)s: $(grep -E 'done:|rror' $W/$name.log | tail -1 | cut -c1-220)" >> $W/train.txt
  return $rc
}
elapsed() { echo $(( $(date +%s) - $(cat $W/T0) )); }
score() {  # gpu|cpu name ckpt minutes seed  (one record per checkpoint, named "recipe" or "recipe2gpu")
  [ -e $3 ] || return 0
  local where=(CUDA_VISIBLE_DEVICES=$1) device=cuda
  local method=${2%%-s[0-9]*}; method=${method/recipe30/recipe}   # the 30-minute runs are the recipe's curve
  [ $1 = cpu ] && where=(OMP_NUM_THREADS=4 CUDA_VISIBLE_DEVICES=) device=cpu
  env "${where[@]}" python quality.py score --device $device --splits 5 --minutes $4 --seed $5 \
    --out $W/score-$2.json $method=$3 > $W/score-$2.log 2>&1
  sed -i "s/^/[$2] /" $W/score-$2.log
}
early() {  # name seed seconds...: kept models scored one after another on 4 CPU threads
  local name=$1 seed=$2; shift 2
  for t in "$@"; do score cpu $name-s$seed-${t}s $CK/$name-s$seed-${t}s.pt $((t / 60)) $seed; done
}
slim() {  # checkpoint -> inference weights and meta under $W, for the CPU
  python - "$@" <<'PY'
import os, sys, torch
for path in sys.argv[1:]:
    if os.path.exists(path):
        state = torch.load(path, map_location="cpu", weights_only=True)
        state.pop("train_state", None)
        torch.save(state, "/tmp/w/slim-" + os.path.basename(path))
PY
}
pack() {  # name files...: $W's small files, then the named files or quoted globs, matched in $W (tar's exit 1: a log
          # changed while read). The run's call passed the globs unquoted: they matched nothing, no model came back.
  local name=$1 files; shift
  tar cf $W/.pack.tar -C $W --exclude '*.pt' --exclude '*.tar' --exclude '.pack*' --exclude '*.part-*' .
  [ $? -le 1 ] || return 1
  files=$(cd $W && ls -d $* 2>/dev/null); [ -z "$files" ] || tar rf $W/.pack.tar -C $W $files   # globs in $W
  mv $W/.pack.tar $W/pack-$name.tar
}
resume_or_new() {  # gpu seed new_seed: the 10-minute model resumed to 30 minutes; a refused resume trains new_seed
  local gpu=$1 seed=$2
  cp $CK/full-s$seed.pt $CK/recipe30-s$seed.pt
  if ! train $gpu recipe30-s$seed $seed 1800 1200 --resume && [ ! -e $CK/recipe30-s$seed-1200s.pt ] \
      && [ $(elapsed) -lt 300 ]; then
    train $gpu recipe-s$3 $3 600 60,180,300; score $gpu recipe-s$3 $CK/recipe-s$3.pt 10 $3
    slim $CK/recipe-s$3.pt; return
  fi
  score $gpu recipe30-s$seed $CK/recipe30-s$seed.pt 30 $seed
  score $gpu recipe30-s$seed-20m $CK/recipe30-s$seed-1200s.pt 20 $seed
  slim $CK/recipe30-s$seed.pt $CK/recipe30-s$seed-1200s.pt
}
scaling() {  # gpus attention (flash-attn-4 installed apart, in /tmp/fa4site); not started within 60 s of DEADLINE
  [ $((DEADLINE - $(elapsed))) -gt 60 ] || return
  CUDA_VISIBLE_DEVICES=$1 PYTHONPATH=/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:/tmp/fa4site:/tmp/site \
    timeout $((DEADLINE - $(elapsed))) python benchmark.py --scaling --gpus 1,2 --workloads blog \
    --best-flags="--fast --attention $2" --repeats 1 --run-timeout 300 --out $W/scaling-$2 > $W/scaling-$2.log 2>&1
  echo "scaling $2 exit $? at $(elapsed)s" >> $W/train.txt
}
driver() {
  resume_or_new 0 0 6 & p0=$!
  resume_or_new 1 1 7 & p1=$!
  train 2 recipe-s4 4 600 60,180,300 & p2=$!
  train 3 recipe-s5 5 600 60,180,300 & p3=$!
  wait $p2 $p3
  score 2 recipe-s4 $CK/recipe-s4.pt 10 4 & p2=$!
  score 3 recipe-s5 $CK/recipe-s5.pt 10 5 & p3=$!
  early recipe 4 60 180 300 & early recipe 5 60 180 300 &
  wait $p2 $p3; slim $CK/recipe-s4.pt $CK/recipe-s5.pt; touch $W/A_DONE
  train 2,3 recipe2gpu-s1 1 300 60,180
  score 2 recipe2gpu-s1 $CK/recipe2gpu-s1.pt 5 1 & early recipe2gpu 1 60 180 & slim $CK/recipe2gpu-s1.pt
  # fa4 under DDP first when flash-attn-4 is already installed; triton beside it either way (the comparison)
  if [ -e $W/FA4_READY ]; then scaling 2,3 fa4; scaling 2,3 triton; else
    scaling 2,3 triton
    while [ ! -e $W/FA4_READY ] && [ $(elapsed) -lt $((DEADLINE - 200)) ]; do sleep 5; done
    [ -e $W/FA4_READY ] && scaling 2,3 fa4
  fi
  wait $p0 $p1; wait
  echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/B_DONE
}

case $1 in
start)
  date +%s > $W/T0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 |
    grep -v WARN
  cp data/fa4w/*.whl $FA4/; cp data/ck/full-r512b16-s0.pt $CK/full-s0.pt; cp data/ck/full-r512b16-s1.pt $CK/full-s1.pt
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
  LC_ALL=C sha256sum *.py > $W/code.txt
  CUDA_VISIBLE_DEVICES=0 python prior_dump.py --preset real --rows 512 --num-datasets 100000 --out $D/real512.h5 \
    --device cuda --no-progress > $W/dump-real512.log 2>&1
  echo "dump at $(elapsed)s"; tail -n 2 $W/dump-real512.log
  export -f train elapsed score early slim pack resume_or_new scaling driver; export W CK D DEADLINE
  setsid nohup bash -c driver > $W/driver.log 2>&1 < /dev/null &
  while [ $(elapsed) -lt 580 ]; do sleep 5; done
  cat $W/train.txt 2>/dev/null; tail -qn 1 $W/recipe*-s*.log
  ;;
wait)
  cp data/fa4a/cu13.part.aa $FA4/
  while [ $(elapsed) -lt $((DEADLINE - 560)) ] && [ $SECONDS -lt 580 ]; do sleep 5; done
  cat $W/train.txt; cat $W/score-*.log 2>/dev/null; tail -qn 1 $W/recipe*-s*.log
  pack A slim-recipe-s4.pt slim-recipe-s5.pt && cp $W/pack-A.tar $OUT/
  ;;
finish)
  cat data/fa4b/cu13.part.ab >> $FA4/cu13.part.aa && mv $FA4/cu13.part.aa \
    $FA4/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
  md5sum $FA4/*.whl > $W/fa4-md5.txt
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fa4site $FA4/*.whl 2>&1 |
    grep -v WARN
  PYTHONPATH=/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:/tmp/fa4site python -c "import flash_attn.cute.interface" \
    > $W/fa4-import.log 2>&1 && touch $W/FA4_READY; cat $W/fa4-import.log
  while [ ! -e $W/B_DONE ] && [ $(elapsed) -lt $DEADLINE ]; do sleep 5; done
  cat $W/train.txt; cat $W/score-*.log 2>/dev/null; tail -n 20 $W/driver.log
  pack B 'slim-recipe30*.pt' 'slim-recipe2gpu*.pt' slim-recipe-s6.pt slim-recipe-s7.pt; split -b 15M $W/pack-B.tar $OUT/B.tar.part-
  ;;
esac
