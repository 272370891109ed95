#!/usr/bin/env bash
# The whole-model GPU checks of triton and fa4 after their shared helper (`064d489`), flash-attn-4 from wheels (part aa
# of the cu13 CUTLASS wheel came in the call before, in /tmp/fa4w).
set -u
W=/tmp/testsout; mkdir -p $W
cp .fa4b/cu13.part.ab /tmp/fa4w/ && cat /tmp/fa4w/cu13.part.aa /tmp/fa4w/cu13.part.ab \
  > /tmp/fa4w/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl && rm /tmp/fa4w/cu13.part.*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fa4site /tmp/fa4w/*.whl \
  .fa4b/*.whl 2>&1 | grep -v "^WARNING: Target"
export PYTHONPATH=/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:/tmp/fa4site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py tests/*.py > $W/code.txt
timeout 240 python -m pytest -q tests/test_fa4_attention.py tests/test_triton_attention.py -k "model or matches_sdpa" \
  > $W/gpu-tests.log 2>&1; echo "gpu tests exit $? at ${SECONDS}s"; tail -2 $W/gpu-tests.log
tar czf $OUT/tests.tgz -C $W .
