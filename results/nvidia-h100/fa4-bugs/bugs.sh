#!/usr/bin/env bash
# Runs repro.py (two flash-attn-4 4.0.0b36 bugs on sm90) after installing flash-attn-4 from wheels (part aa of the cu13
# CUTLASS wheel came in the call before, in /tmp/fa4w).
set -u
W=/tmp/bugsout; mkdir -p $W
cp .fa4b/cu13.part.ab /tmp/fa4w/ && cat /tmp/fa4w/cu13.part.aa /tmp/fa4w/cu13.part.ab \
  > /tmp/fa4w/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl && rm /tmp/fa4w/cu13.part.*
md5sum /tmp/fa4w/*.whl | tee $W/md5.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fa4site /tmp/fa4w/*.whl \
  .fa4b/*.whl 2>&1 | grep -v "^WARNING: Target"
export PYTHONPATH=/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:/tmp/fa4site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
timeout 300 python -W ignore .fa4b/repro.py 2>&1 | tee $W/repro.log
tar czf $OUT/bugs.tgz -C $W .
