#!/usr/bin/env bash
# The triton kernels inside the blog --fast step, old (.old = 9f589f9) and new: --profile's CUDA table over steps
# 22-24 (wait = timing warm-up 20, then 1 warm-up step, 3 active), same seed and splits. Then the GPU tests.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wp; rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 40 --timing-warmup 20 --no-eval --log-every 20"
for tree in old new; do
  dir=$([ "$tree" = new ] && echo . || echo .old)
  (cd $dir && timeout 280 python train_optimized.py $blog --fast --profile --profile-dir /tmp/prof-$tree \
     --record "$OUT/prof-$tree.json") > "$OUT/prof-$tree.log" 2>&1
  echo "prof-$tree exit $? at ${SECONDS}s"
  grep -E "_(fwd|bwd|delta)_kernel|Self CUDA time total" "$OUT/prof-$tree.log" | sed "s/^/$tree /"
done
for t in tests/test_triton_attention.py tests/test_gpu_train.py tests/test_gpu_loaders.py; do
  if [ "$SECONDS" -gt 500 ]; then echo "$t skipped (time)"; continue; fi
  timeout $((560 - SECONDS)) python -m pytest -q $t > "$OUT/$(basename $t .py).log" 2>&1
  echo "$t exit $? at ${SECONDS}s: $(tail -1 $OUT/$(basename $t .py).log)"
done
tar czf "$FINAL/profile-call.tgz" -C "$OUT" .
