#!/usr/bin/env bash
# One GPU call (H100): the GPU tests at the session's last code (the triton kernel's tests and the training-path
# tests, with the new cuDNN-line test), then 6 steps of upstream's shape with --flash --amp bf16 to show the line.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=/tmp/final; mkdir -p "$W" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
timeout 400 python -m pytest -q tests/test_triton_attention.py tests/test_gpu_train.py > "$W/gpu-tests.log" 2>&1
echo "gpu tests exit $? at ${SECONDS}s"; tail -3 "$W/gpu-tests.log"
python prior_dump.py --preset nano --num-datasets 2000 --out data/nano2k.h5 --no-progress > "$W/dumps.log" 2>&1
timeout 120 python train_optimized.py --data data/nano2k.h5 --flash --amp bf16 --steps 6 --no-eval --log-every 3 \
  > "$W/flash-bf16.log" 2>&1; echo "flash-bf16 exit $?"; grep -n "kernel" "$W/flash-bf16.log"
tar czf "$FINAL/call.tgz" -C "$W" .
