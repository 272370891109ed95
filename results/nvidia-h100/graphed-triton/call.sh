#!/usr/bin/env bash
# The triton kernel inside the padded CUDA-graph step (key count read on the GPU) beside --fast's current choices.
# Runs named WORK-VARIANT-N: blog (600 x 5000 x 5, batch 6, 300 steps, 20 warm-up) or up (20,000 x 150 x 5,
# batch 32, 400 steps, 100 warm-up); variant: fast (--fast as it is), graphed (--fast --cuda-graphs
# --attention triton), triton (--fast --attention triton: graphed on short tables anyway), old (--fast of .old/, a
# git archive of the commit before; the rest run the working tree). TESTS=1 runs the GPU
# tests first. Each run its own process, data fetch inside the clock, interleaved in argv order.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/gt; rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for d in . .old; do [ -d $d ] && echo "code $d: sha256 of its top-level *.py $(cd $d && cat $(ls *.py) | sha256sum | cut -c1-16)"; done | tee "$OUT/code.txt"
if [ "${TESTS:-0}" = 1 ]; then
  timeout 300 python -m pytest -q tests/test_triton_attention.py tests/test_gpu_train.py -k "triton or graph" \
    > "$OUT/gpu-tests.log" 2>&1
  echo "gpu tests exit $? at ${SECONDS}s: $(tail -1 "$OUT/gpu-tests.log")"
fi
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
[ -f data/nano20k.h5 ] || python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 300 --timing-warmup 20 --no-eval --log-every 100"
up="--data $PWD/data/nano20k.h5 --batch-size 32 --steps 400 --timing-warmup 100 --no-eval --log-every 200"
for name in "$@"; do
  if [ "$SECONDS" -gt "${GUARD:-430}" ]; then echo "$name skipped (time)"; continue; fi
  work=${name%%-*}; variant=${name#*-}; variant=${variant%-*}
  flags=$([ "$work" = up ] && echo "$up" || echo "$blog")
  case $variant in graphed) extra="--cuda-graphs --attention triton";; triton) extra="--attention triton";; *) extra="";; esac
  dir=$([ "$variant" = old ] && echo .old || echo .)
  (cd $dir && timeout 240 python train_optimized.py $flags --fast $extra --record "$OUT/$name.json") > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s: $(grep -E '^done' "$OUT/$name.log" | cut -c1-110)"
done
python results/nvidia-h100/slim/table.py "$OUT" | tee "$OUT/table.md"
tar czf "$FINAL/records-${TAG:-$1}.tgz" -C "$OUT" .
