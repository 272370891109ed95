#!/usr/bin/env bash
# Where the blog --fast step's host time goes on an H100: a GEMM host-cost probe (mm_probe.py) and --profile's
# chrome trace over steps 22-24 (wait = timing warm-up 20, 1 warm-up step, 3 active), returned gzipped.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/hb; rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python results/nvidia-h100/host-bound/mm_probe.py 2>&1 | tee "$OUT/mm_probe.md"
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 40 --timing-warmup 20 --no-eval --log-every 20"
timeout 300 python train_optimized.py $blog --fast --profile --profile-dir /tmp/prof --record "$OUT/prof.json" \
  > "$OUT/prof.log" 2>&1
echo "prof exit $? at ${SECONDS}s"
find /tmp/prof -name '*.json' -exec gzip -c {} \; > "$OUT/trace.json.gz"
ls -la /tmp/prof "$OUT"
tar czf "$FINAL/host-bound.tgz" -C "$OUT" .
