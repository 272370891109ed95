#!/usr/bin/env bash
# One GPU call: benchmark.py --quality on every split of the real suite for the upstream workload, with the
# real-table prior: --best-flags "--fast --categorical-columns 0.1" (300 steps beside the baseline, then 60 s
# evaluated every 15 s of training, each baseline a line in the plot).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  .whl/lightgbm-*.whl && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 560 python benchmark.py --quality --workloads upstream --repeats 1 --steps 300 --timing-warmup 20 \
  --eval-suite real-all --time-budget 60 --eval-every 15s --best-flags "--fast --categorical-columns 0.1" \
  --out "$FINAL/quality" 2>&1 | tee "$FINAL/quality.log"
echo "benchmark exit ${PIPESTATUS[0]}"
ls "$FINAL/quality"
