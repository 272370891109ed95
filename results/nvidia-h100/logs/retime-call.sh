#!/usr/bin/env bash
# One GPU call (H100): blog --fast before the last layer took only the test rows (.old/ = a615854) and now (the
# working tree), interleaved twice, each run alone on the GPU; then upstream --fast now, twice. One tarball back.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=/tmp/retime; mkdir -p "$W" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress > "$W/dumps.log" 2>&1
python prior_dump.py --preset nano --num-datasets 50000 --out data/nano50k.h5 --no-progress >> "$W/dumps.log" 2>&1
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 300 --timing-warmup 20 --no-eval --log-every 100"
up="--data $PWD/data/nano50k.h5 --steps 1200 --timing-warmup 200 --no-eval --log-every 400"
run() {  # name dir flags...; skipped once the call's time is nearly spent
  local name=$1 dir=$2; shift 2
  if [ "$SECONDS" -gt 480 ]; then echo "$name skipped (time)"; return; fi
  (cd "$dir" && timeout 200 python train_optimized.py "$@" --record "$W/$name.json") > "$W/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
for i in 1 2; do run blog-old-$i .old $blog --fast; run blog-new-$i . $blog --fast; done
for i in 1 2; do run up-new-$i . $up --fast; done
python results/nvidia-h100/slim/table.py "$W" | tee "$W/table.md"
tar czf "$FINAL/call.tgz" -C "$W" .
