#!/usr/bin/env bash
# #34 choice on four GPUs of one machine, one configuration per GPU, seed 0, 180 s of training (kept at 60 s too):
# the recipe's data and transforms with the small and medium presets, small at two learning rates, and small on
# 512-row tables; each GPU then scores its two checkpoints on both suites (5 splits, NanoTabPFNClassifier defaults).
# Scores of last session's nano recipe checkpoints (data/ck-nano, 60/180/~260 s) on the same 5 splits for reference.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v WARN
export PYTHONPATH=/tmp/site
W=/tmp/w; mkdir -p $W data/ck
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py > $W/code.txt; git rev-parse HEAD > $W/commit.txt 2>/dev/null
CUDA_VISIBLE_DEVICES=0 python -c "
import prior_dump, train_optimized as t
prior_dump.ensure_default_dump(preset='real', num_datasets=t.RECIPE_DUMP_DATASETS['cuda'], device='cuda')" \
  > $W/dump-real.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 python prior_dump.py --preset real --rows 512 --num-datasets 100000 --out data/real512.h5 \
  --device cuda --no-progress > $W/dump-real512.log 2>&1 &
wait; echo "dumps at ${SECONDS}s"; tail -qn 1 $W/dump-real.log $W/dump-real512.log
run() {  # gpu name flags...
  local gpu=$1 name=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$gpu timeout 300 python train_optimized.py \
    --recipe real-tables --seed 0 --time-budget 180 --save-at 60 --no-eval --log-every 500 --ckpt data/ck/$name.pt \
    --record $W/$name.json "$@" > $W/$name.log 2>&1
  echo "$name exit $? at ${SECONDS}s: $(grep -E 'done:|rror' $W/$name.log | tail -1 | cut -c1-200)"
  CUDA_VISIBLE_DEVICES=$gpu python quality.py score --device cuda --splits 5 --seed 0 --out $W/score-$name.json \
    $name-60s=data/ck/$name-60s.pt $name-180s=data/ck/$name.pt > $W/score-$name.log 2>&1
  echo "$name scored at ${SECONDS}s"
}
run 0 small --model-preset small --lr 2e-3 &
run 1 small512 --model-preset small --lr 2e-3 --data data/real512.h5 &
run 2 medium --model-preset medium --lr 1e-3 &
run 3 small-lr4 --model-preset small --lr 4e-3 &
wait
CUDA_VISIBLE_DEVICES=0 python quality.py score --device cuda --splits 5 --seed 0 --out $W/score-nano.json \
  nano-60s=data/ck-nano/slim-s0-60s.pt nano-180s=data/ck-nano/slim-s0-180s.pt nano-258s=data/ck-nano/slim-s0.pt \
  > $W/score-nano.log 2>&1
cat $W/score-*.log
python - <<'PY'   # slim 180 s checkpoints (inference weights and meta) for the CPU
import glob, os, torch
for path in glob.glob("data/ck/*.pt"):
    if "-60s" in path: continue
    state = torch.load(path, map_location="cpu", weights_only=True)
    state.pop("train_state", None)
    torch.save(state, os.path.join("/tmp/w", "slim-" + os.path.basename(path)))
PY
ls -la $W | tail -n +2 | awk '{print $5, $9}' | sort -n | tail -4
cd $W && tar czf $OUT/choice.tgz --exclude 'slim-*' . && for f in slim-*.pt; do cp $f $OUT/; done
