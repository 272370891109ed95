#!/usr/bin/env bash
# One GPU call: 60 s of upstream --fast on every real split, with and without --categorical-columns, interleaved.
#   RUNS="name:flags;name:flags" bash categorical-call.sh     (names: what the record and log are called)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  .whl/lightgbm-*.whl && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wf; mkdir -p "$OUT" "$FINAL" data/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
dump=data/bench/prior-n50000-r150-f5-c2-s0-cuda.h5
[ -f $dump ] || python -c "import prior_dump; prior_dump.write_dump('$dump', 50000, 150, 5, 2, 0, device='cuda')"
IFS=';' read -ra runs <<< "$RUNS"
for entry in "${runs[@]}"; do
  name=${entry%%:*}; flags=${entry#*:}
  if [ "$SECONDS" -gt 480 ]; then echo "$name skipped (time)"; continue; fi
  # shellcheck disable=SC2086
  timeout 200 python train_optimized.py --data $dump --batch-size 32 --fast --time-budget 60 --eval-every 30s \
    --eval-suite real-all --log-every 5000 --record "$OUT/$name.json" $flags > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
done
python results/nvidia-h100/categorical/summary.py "$OUT" | tee "$OUT/summary.md"
tar czf "$FINAL/call.tgz" -C "$OUT" .
