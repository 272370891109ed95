#!/usr/bin/env bash
# Where the graphed blog --fast step's GPU time goes now: --profile over steps 22-24 (timing warm-up 20, one warm-up
# step, three active), its tables and the gzipped chrome trace.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=/tmp/pf; mkdir -p "$W" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
LC_ALL=C sha256sum *.py > "$W/code.txt"
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
timeout 300 python train_optimized.py --data $PWD/data/blog600.h5 --batch-size 6 --steps 40 --timing-warmup 20 \
  --no-eval --log-every 20 --fast --profile --profile-dir /tmp/prof --record "$W/profile.json" > "$W/profile.log" 2>&1
echo "profile exit $? at ${SECONDS}s"
find /tmp/prof -name '*.json' -exec gzip -c {} \; > "$W/trace.json.gz"
sed -n '/Top CUDA operations/,/Self CUDA time total/p' "$W/profile.log" | cut -c1-160
tar czf "$FINAL/profile.tgz" -C "$W" .
