#!/usr/bin/env bash
# One GPU call (H200): the kernel's GPU tests (with the last layer's test-row queries), then blog --fast before
# (.old/ = the tree before the last layer's datapoint attention took only the test rows) and after, interleaved,
# twice, each run alone on the GPU.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=/tmp/wt200; mkdir -p "$W" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress \
  > "$W/dumps.log" 2>&1
timeout 150 python -m pytest -q tests/test_triton_attention.py > "$W/gpu-tests.log" 2>&1
echo "gpu tests exit $? at ${SECONDS}s"; tail -1 "$W/gpu-tests.log"
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 300 --timing-warmup 20 --no-eval --log-every 100"
run() {  # name dir flags...; skipped once the call's time is nearly spent
  local name=$1 dir=$2; shift 2
  if [ "$SECONDS" -gt 440 ]; then echo "$name skipped (time)"; return; fi
  (cd "$dir" && timeout 200 python train_optimized.py $blog "$@" --record "$W/$name.json") > "$W/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
for i in 1 2; do run blog-old-$i .old --fast; run blog-new-$i . --fast; done
python results/nvidia-h100/slim/table.py "$W" | tee "$W/table.md"
tar czf "$FINAL/call.tgz" -C "$W" .
