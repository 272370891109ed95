#!/usr/bin/env bash
# benchmark.py --attention on the blog's shape: every kernel, and the triton calls as the graphed --fast step makes them.
# RUNS: the runs' names, one benchmark process each (default: 1; the first call wrote attention/ and attention.log).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=$OUT; OUT=/tmp/sa; rm -rf "$OUT"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
LC_ALL=C sha256sum *.py > "$OUT/code.txt"
for run in ${RUNS:-1}; do
  timeout 250 python benchmark.py --attention --workloads blog --out "$OUT/attention$run" > "$OUT/attention$run.log" 2>&1
  echo "attention run $run exit $? at ${SECONDS}s"; sed -n '/^As the graphed/,$p' "$OUT/attention$run/attention.md"
done
tar czf "$FINAL/records.tgz" -C "$OUT" .   # one file back: the device returns at most eight
