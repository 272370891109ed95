#!/usr/bin/env bash
# The tests that skip without flash-attn-4, on one warm GPU machine in three calls (README.md): nvidia-cutlass-dsl's
# cu13 wheel (92 MB) travels in three parts (.fa1, .fa2, then .fa3 with the other wheels); runs/ keeps them between
# calls. Stage 3 joins them, checks the md5 against this machine's, installs, and runs the tests.
set -uo pipefail
stage=$1
mkdir -p runs/fa
if [ "$stage" != 3 ]; then cp ".fa$stage"/fa.part.* runs/fa/ && ls -la runs/fa; exit; fi
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
wheel=nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
cat runs/fa/fa.part.00 runs/fa/fa.part.01 .fa3/fa.part.02 > "/tmp/$wheel"
echo "b45c1bac0786a433970dc75163c36011  /tmp/$wheel" | md5sum -c - | tee "$OUT/gpu-fa4.txt" || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .fa3/*.whl \
  "/tmp/$wheel" || exit 1
# the DSL's packages, as the wheel's .pth would add them (pip's --target skips .pth files)
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, flash_attn; from train_optimized import fa4_kernel_runs as runs
print('torch', torch.__version__, 'fa4 runs', runs())"
} >> "$OUT/gpu-fa4.txt" 2>&1
{ git log -1 --format='git %H'; sha256sum ./*.py tests/*.py; } > "$OUT/code-fa4.txt"
timeout 540 python3 -m pytest -q -n 4 -p no:cacheprovider -rfEs tests/test_fa4_attention.py tests/test_flag_picks.py \
  tests/test_gpu_train.py 2>&1 | tee "$OUT/gpu-tests-fa4.log"
echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/gpu-tests-fa4.log"
