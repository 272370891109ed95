#!/usr/bin/env bash
# #34's one command for the time-to-quality curve, `quality.py run`, end to end on a two-GPU kind: the recipe for
# 1 and 3 minutes (its small model below 10 minutes), seeds 0 and 1 in parallel, one per GPU, every checkpoint scored
# on the GPU (104 tasks, 5 splits), then curve.md and curve.png. Until this call it had run on the CPU only, in its
# test, with a tiny model. One command (<= 600 s), carrying the 4 suite/baseline caches and .whl (schedulefree):
#   bash results/nvidia-h200/curve-command/call.sh
# and on one H100 (nvidia-h100-x1), the 1-minute point beside dp-seeds' 10-minute H100 runs of the same seeds:
#   MINUTES=1 GPUS=1 bash results/nvidia-h200/curve-command/call.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
{ git rev-parse HEAD; git status --short; LC_ALL=C sha256sum *.py; } > $OUT/code.txt 2>&1
start=$(date +%s)
python quality.py run --minutes ${MINUTES:-1,3} --seeds 0,1 --gpus ${GPUS:-2} --out /tmp/curve 2>&1 | tee /tmp/curve-run.log
echo "exit ${PIPESTATUS[0]}; wall $(( $(date +%s) - start )) s" | tee -a /tmp/curve-run.log
cd /tmp/curve && tar cf $OUT/curve.tar /tmp/curve-run.log *.log *.json curve.md curve.png 2>/dev/null; ls -la /tmp/curve
