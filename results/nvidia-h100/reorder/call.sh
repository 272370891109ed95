#!/usr/bin/env bash
# The backward's dP dot issued before the exponentials, blog --fast: the working tree (new) beside .old/ (old: a git
# archive of the commit before), each run its own process, interleaved in argv order (names WORK-VARIANT-N, as in
# ../graphed-triton/call.sh; VARIANT new, old, or old@new: old's code on new's Inductor cache). Each variant has its
# own TORCHINDUCTOR_CACHE_DIR. TESTS=1 runs the GPU tests first (-k TESTK, default triton); ATTENTION=1 runs benchmark.py --attention last.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/ro; rm -rf "$OUT"; mkdir -p "$OUT" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
LC_ALL=C sha256sum *.py > "$OUT/code-new.txt"; (cd .old && LC_ALL=C sha256sum *.py) > "$OUT/code-old.txt"
if [ "${TESTS:-0}" = 1 ]; then
  timeout 240 python -m pytest -q tests/test_triton_attention.py tests/test_gpu_train.py -k "${TESTK:-triton}" > "$OUT/gpu-tests.log" 2>&1
  echo "gpu tests exit $? at ${SECONDS}s: $(tail -1 "$OUT/gpu-tests.log")"
fi
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 300 --timing-warmup 20 --no-eval --log-every 100"
for name in "$@"; do
  if [ "$SECONDS" -gt "${GUARD:-400}" ]; then echo "$name skipped (time)"; continue; fi
  variant=${name#*-}; variant=${variant%-*}
  dir=$([ "${variant%@*}" = old ] && echo .old || echo .)
  cache=/tmp/inductor-${variant#*@}
  (cd $dir && TORCHINDUCTOR_CACHE_DIR=$cache timeout 240 python train_optimized.py $blog --fast --record "$OUT/$name.json") \
    > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s: $(grep -E '^(compile|done)' "$OUT/$name.log" | tr '\n' ' ' | cut -c1-160)"
done
python results/nvidia-h100/slim/table.py "$OUT" | tee "$OUT/table.md"
if [ "${ATTENTION:-0}" = 1 ]; then
  timeout 300 python benchmark.py --attention --workloads blog --out "$OUT/attention" > "$OUT/attention.log" 2>&1
  echo "attention exit $? at ${SECONDS}s"; sed -n '/^| kernel/,/^$/p' "$OUT/attention/attention.md"
fi
tar czf "$FINAL/records.tgz" -C "$OUT" .
