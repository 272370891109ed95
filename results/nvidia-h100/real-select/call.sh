#!/usr/bin/env bash
# #34 selection on one H100: the real prior (512 rows, 1-100 features, 2-10 classes) with --recipe real-tables'
# transforms, three model presets for 100 s of training each (kept at 50 s too), scored on the real suite (GPU).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v WARN
export PYTHONPATH=/tmp/site TORCHINDUCTOR_CACHE_DIR=/tmp/ind
W=/tmp/w; mkdir -p $W /tmp/d
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py > $W/code.txt
python prior_dump.py --preset real --seed 0 --out /tmp/d/real50k.h5 --device cuda --no-progress > $W/dump.log 2>&1
echo "dump exit $? at ${SECONDS}s"; tail -1 $W/dump.log
run() {  # name flags...
  local name=$1; shift
  if [ "$SECONDS" -gt 430 ]; then echo "$name skipped (time)"; return; fi
  timeout 200 python train_optimized.py --recipe real-tables --data /tmp/d/real50k.h5 --time-budget 100 --save-at 50 \
    --no-eval --log-every 100 --ckpt /tmp/ck/$name.pt --record $W/$name.json "$@" > $W/$name.log 2>&1
  echo "$name exit $? at ${SECONDS}s: $(grep -E 'done:|Error|error' $W/$name.log | tail -1 | cut -c1-220)"
  python results/nvidia-h100/real-select/score.py $W/score-$name.json 2 $name-50s=/tmp/ck/$name-50s.pt \
    $name-100s=/tmp/ck/$name.pt > $W/score-$name.log 2>&1 &
}
mkdir -p /tmp/ck
run nano --model-preset nano --lr 4e-3
run small --model-preset small --lr 2e-3
run medium --model-preset medium --lr 1e-3 --batch-size 16
wait
cat $W/score-*.log
tar czf $OUT/real-select.tgz -C $W .
