#!/usr/bin/env bash
# Inductor's tuning switches on blog --fast, no code change: names WORK-VARIANT-N, VARIANT bc (as it is),
# ma (TORCHINDUCTOR_MAX_AUTOTUNE=1: Triton GEMM templates beside cuBLAS, epilogues fused), cd
# (TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1: tuned pointwise / reduction configs), macd (both), tune (--fast --compile-tuning:
# both switches at d4693cc, coordinate descent only since 9e3cbc9). Each variant has its
# own Inductor cache (its second run reuses its tuning); runs interleaved in argv order.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/at; mkdir -p "$OUT" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
LC_ALL=C sha256sum *.py > "$OUT/code.txt"
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 300 --timing-warmup 20 --no-eval --log-every 100"
for name in "$@"; do
  if [ "$SECONDS" -gt "${GUARD:-420}" ]; then echo "$name skipped (time)"; continue; fi
  variant=${name#*-}; variant=${variant%-*}
  case $variant in ma) env="TORCHINDUCTOR_MAX_AUTOTUNE=1";; cd) env="TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1";;
    macd) env="TORCHINDUCTOR_MAX_AUTOTUNE=1 TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1";; *) env="";; esac
  extra=$([ "$variant" = tune ] && echo "--compile-tuning" || echo "")
  env $env TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$variant timeout ${RUN_TIMEOUT:-300} python train_optimized.py $blog \
    --fast $extra --record "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s: $(grep -E '^(compile|done)' "$OUT/$name.log" | tr '\n' ' ' | cut -c1-170)"
done
python results/nvidia-h100/slim/table.py "$OUT" | tee "$OUT/table.md"
tar czf "$FINAL/records.tgz" -C "$OUT" .
