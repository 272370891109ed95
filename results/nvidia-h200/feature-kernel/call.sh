#!/usr/bin/env bash
# The triton feature-attention kernel: its GPU tests, the kernel alone (bench.py), then blog and upstream --fast
# with the broadcast feature attention (bc) beside --fast --feature-attention triton (ft), each run its own process,
# interleaved in argv order (names WORK-VARIANT-N), each variant its own Inductor cache.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/fk; rm -rf "$OUT"; mkdir -p "$OUT" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
LC_ALL=C sha256sum *.py > "$OUT/code.txt"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 200 python -m pytest -q tests/test_triton_attention.py -k "feature" > "$OUT/gpu-tests.log" 2>&1
  echo "gpu tests exit $? at ${SECONDS}s: $(tail -1 "$OUT/gpu-tests.log")"
fi
if [ "${BENCH:-1}" = 1 ]; then
  PYTHONPATH=$PWD:/tmp/site timeout 200 python results/nvidia-h200/feature-kernel/bench.py > "$OUT/bench.log" 2>&1
  echo "bench exit $? at ${SECONDS}s"; grep '^|' "$OUT/bench.log"
fi
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
[ -f data/nano20k.h5 ] || python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 300 --timing-warmup 20 --no-eval --log-every 100"
up="--data $PWD/data/nano20k.h5 --batch-size 32 --steps 400 --timing-warmup 100 --no-eval --log-every 200"
for name in "$@"; do
  if [ "$SECONDS" -gt "${GUARD:-480}" ]; then echo "$name skipped (time)"; continue; fi
  work=${name%%-*}; variant=${name#*-}; variant=${variant%-*}
  flags=$([ "$work" = up ] && echo "$up" || echo "$blog")
  extra=$([ "$variant" = ft ] && echo "--feature-attention triton" || echo "")
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$variant timeout 200 python train_optimized.py $flags --fast $extra \
    --record "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s: $(grep -E '^(compile|done)' "$OUT/$name.log" | tr '\n' ' ' | cut -c1-160)"
done
python results/nvidia-h100/slim/table.py "$OUT" | tee "$OUT/table.md"
tar czf "$FINAL/records.tgz" -C "$OUT" .
