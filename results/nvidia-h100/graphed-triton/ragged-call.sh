#!/usr/bin/env bash
# --fast on a ragged long-table dump (rows 1000-2000 and 1-5 features per dataset, tests/conftest.write_tiny_dump):
# the new graphed padded step against .old/ (60bb494: sliced triton + compile), 60 steps each, 10 warm-up.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=/tmp/rg; mkdir -p "$W" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
LC_ALL=C sha256sum *.py > "$W/code.txt"
python -c "import sys; sys.path.insert(0, 'tests'); from conftest import write_tiny_dump; \
write_tiny_dump('data/ragged2000.h5', num_datasets=256, rows=2000, features=5, seed=3)" || exit
DATA=$PWD/data/ragged2000.h5
for tree in new old; do
  dir=$([ "$tree" = new ] && echo . || echo .old)
  (cd $dir && timeout 230 python train_optimized.py --data $DATA --batch-size 8 --steps 60 \
     --timing-warmup 10 --no-eval --log-every 30 --fast --record "$W/ragged-$tree.json") > "$W/ragged-$tree.log" 2>&1
  echo "ragged-$tree exit $? at ${SECONDS}s: $(grep -E '^done|Error|error' "$W/ragged-$tree.log" | head -3 | cut -c1-200)"
done
tar czf "$FINAL/ragged.tgz" -C "$W" .
