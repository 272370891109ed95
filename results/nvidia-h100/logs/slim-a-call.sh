#!/usr/bin/env bash
# One GPU call on the slimmed tree (.old/ = commit 3dbf0cb, before it): the GPU tests, then the upstream workload
# interleaved old --fast / new with old --fast's flags spelled out / new --fast (adds --last-layer-target-only).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export LD_LIBRARY_PATH=/tmp/site/libkvikio/lib64:/tmp/site/libkvikio_cu13.libs:/tmp/site/rapids_logger/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress > "$OUT/dumps.log" 2>&1
python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress >> "$OUT/dumps.log" 2>&1
timeout 200 python -m pytest -q tests/test_gpu_loaders.py tests/test_gpu_train.py tests/test_triton_attention.py \
  > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests exit $?"; tail -2 "$OUT/gpu-tests.log"
timeout 120 python -m pytest -q tests/test_model.py tests/test_profile_utils.py tests/test_prior.py -k cuda \
  > "$OUT/gpu-tests-cuda.log" 2>&1
echo "cuda tests exit $?"; tail -2 "$OUT/gpu-tests-cuda.log"
up="--data $PWD/data/nano20k.h5 --batch-size 32 --steps 400 --timing-warmup 100 --no-eval --log-every 200"
oldfast="--resident --fused-optimizer --async-loss --compile --amp bf16 --feature-attention broadcast --cuda-graphs --attention flex"
run() {  # name dir flags...; skipped once the call's time is nearly spent
  local name=$1 dir=$2; shift 2
  if [ "$SECONDS" -gt 500 ]; then echo "$name skipped (time)"; return; fi
  (cd "$dir" && timeout 150 python train_optimized.py "$@" --record "$OUT/$name.json") > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
for i in 1 2; do
  run up-old-$i .old $up --fast; run up-new-$i . $up $oldfast; run up-newfast-$i . $up --fast
done
python results/nvidia-h100/slim/table.py "$OUT"
tar czf "$FINAL/call.tgz" -C "$OUT" .
