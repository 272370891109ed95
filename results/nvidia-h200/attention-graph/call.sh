#!/usr/bin/env bash
# The per-kernel rows of benchmark.py --attention timed as CUDA graph replays (blog shape, one H200): first the GPU
# tests of the timer (a replay computes the eager gradient), then RUNS benchmark processes.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl 2>/dev/null \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=$OUT; OUT=/tmp/ag; rm -rf "$OUT"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
LC_ALL=C sha256sum *.py > "$OUT/code.txt"
timeout 150 python -m pytest -q tests/test_benchmark.py -k "graph or attention" > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests exit $? at ${SECONDS}s"; tail -1 "$OUT/gpu-tests.log"
for run in ${RUNS:-1 2}; do
  timeout 200 python benchmark.py --attention --workloads blog --out "$OUT/attention$run" > "$OUT/attention$run.log" 2>&1
  echo "attention run $run exit $? at ${SECONDS}s"
  grep -E "^\| (kernel|[a-z-]+ \| 2500)" "$OUT/attention$run/attention.md" | cut -c1-200
  sed -n '/^As the graphed/,$p' "$OUT/attention$run/attention.md"
done
tar czf "$FINAL/records.tgz" -C "$OUT" .   # one file back: the device returns at most eight
