#!/usr/bin/env bash
# The large preset's GPU latency under each kernel pair, then `quality.py latency` as it now builds the preset, then
# the classifier's and latency's tests on the GPU. One command on nvidia-h200, nothing carried:
#   bash results/nvidia-h200/latency-kernels/call.sh
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
{ git rev-parse HEAD; git status --short; LC_ALL=C sha256sum *.py tests/test_classifier.py tests/test_quality.py; } \
  > $OUT/code.txt 2>&1
python results/nvidia-h200/latency-kernels/kernels.py --device cuda 2>&1 | tee $OUT/kernels.log
python quality.py latency --device cuda --out $OUT/latency.json 2>&1 | tee $OUT/latency.log
python -m pytest -q -p no:cacheprovider tests/test_classifier.py tests/test_quality.py 2>&1 | tail -5 | tee $OUT/tests.log
