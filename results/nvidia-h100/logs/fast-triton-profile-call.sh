#!/usr/bin/env bash
# One GPU call: the profile of the new blog --fast (triton + last-layer shortcut), benchmark.py --attention on both
# workloads (every kernel, with its TFLOP/s and the Hopper floors), and the GPU tests of the kernel and the loop.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=/tmp/wq; mkdir -p "$W" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress \
  > "$W/dumps.log" 2>&1
timeout 240 python train_optimized.py --data "$PWD/data/blog600.h5" --batch-size 6 --steps 40 --timing-warmup 20 \
  --no-eval --log-every 20 --fast --profile --profile-dir "$W/profile" --record "$W/profile.json" > "$W/profile.log" 2>&1
echo "profile exit $? at ${SECONDS}s"
timeout 200 python benchmark.py --attention --workloads blog,upstream --out "$W/attention" > "$W/attention.log" 2>&1
echo "attention exit $? at ${SECONDS}s"
timeout $((560 - SECONDS)) python -m pytest -q tests/test_triton_attention.py tests/test_gpu_train.py \
  > "$W/gpu-tests.log" 2>&1
echo "gpu tests exit $? at ${SECONDS}s"; tail -2 "$W/gpu-tests.log"
grep -A40 "fastest at\|^| kernel" "$W/attention/attention.md" | head -60
tar czf "$FINAL/call.tgz" -C "$W" .
