#!/usr/bin/env bash
# One H100: is bf16 autocast the classifier's way under #34's 100 ms, and does it keep the quality?
# `quality.py latency` (fp32 and bf16, linear columns off and on, 1 and 4 members) on the large preset and on
# dp-seeds' 10-minute medium model of seed 0; then dp-seeds' two 10-minute models (runs/dp/, carried; made in
# results/nvidia-h100/dp-seeds) scored on every split in fp32 and under bf16, in this call.
# The rule, written before the run: bf16 keeps the quality if both seeds' overall ROC AUC moves by < 0.001.
# Command (carry the 4 suite/baseline caches, .whl and runs/dp):  bash results/nvidia-h100/latency-bf16/call.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
R=/tmp/r; mkdir -p $R   # everything comes back as one tar ($OUT returns at most 8 files)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v WARN
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
(git rev-parse HEAD; git status --short; LC_ALL=C sha256sum *.py) > $R/code.txt 2>/dev/null
python quality.py latency --out $R/latency-large.json > $R/latency.log 2>&1
python quality.py latency --out $R/latency-medium.json runs/dp/recipe-s0.pt >> $R/latency.log 2>&1
for seed in 0 1; do
  for autocast in off bf16; do
    python quality.py score --autocast $autocast --minutes 10 --seed $seed --out $R/score-s$seed-$autocast.json \
      recipe-$autocast=runs/dp/recipe-s$seed.pt >> $R/score.log 2>&1
  done
done
cat $R/latency.log $R/score.log; tar cf $OUT/r.tar -C $R .
