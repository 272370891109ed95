#!/usr/bin/env bash
# One short GPU call after moving train()'s interval points into _Run (e749001): the GPU training tests, and one upstream
# --fast run with evals, periodic checkpoints and a resume, beside the same run of the code before (.old/ = 0cdfd29).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data runs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_gpu_train.py > "$OUT/gpu-train-tests.log" 2>&1
echo "test_gpu_train exit $?"; tail -1 "$OUT/gpu-train-tests.log"
python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress > "$OUT/dumps.log" 2>&1
up="--data $PWD/data/nano20k.h5 --batch-size 32 --steps 400 --timing-warmup 100 --log-every 100 --eval-every 200 --save-every 150"
for v in new:. old:.old; do
  IFS=: read name dir <<< "$v"
  (cd $dir && timeout 120 python train_optimized.py $up --fast --ckpt /tmp/$name.pt --record "$OUT/up-$name.json") \
    > "$OUT/up-$name.log" 2>&1; echo "up-$name exit $?"
done
(timeout 120 python train_optimized.py ${up/--steps 400/--steps 500} --fast --ckpt /tmp/new.pt --resume \
  --record "$OUT/up-new-resumed.json") > "$OUT/up-new-resumed.log" 2>&1; echo "up-new-resumed exit $?"
grep -h "^eval\|checkpoint:\|^done\|resumed" "$OUT"/up-*.log
tar czf "$FINAL/call.tgz" -C "$OUT" .
