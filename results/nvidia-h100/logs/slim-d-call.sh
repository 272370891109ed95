#!/usr/bin/env bash
# One GPU call: loss curves with and without --last-layer-target-only. Upstream workload, 2000 steps, seeds 0-3,
# old --fast's flags (CUDA graphs + flex) with and without the flag, interleaved; then the blog workload's new --fast
# (which had the flag) on seeds 3 and 4 for 1000 steps, beside the FlashAttention-2 seeds of triton-compiled/seeds/.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wd; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f data/nano20k.h5 ] || python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
up="--data $PWD/data/nano20k.h5 --batch-size 32 --steps 2000 --timing-warmup 100 --no-eval --log-every 500"
fast="--resident --fused-optimizer --async-loss --compile --amp bf16 --feature-attention broadcast --cuda-graphs --attention flex"
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 1000 --timing-warmup 20 --no-eval --log-every 250"
run() {  # name limit flags...; skipped once the call's time is nearly spent
  local name=$1 limit=$2; shift 2
  if [ "$SECONDS" -gt "$limit" ]; then echo "$name skipped (time)"; return; fi
  timeout 200 python train_optimized.py "$@" --record "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
for seed in 0 1 2 3; do
  run up-full-s$seed 330 $up $fast --seed $seed; run up-last-s$seed 330 $up $fast --last-layer-target-only --seed $seed
done
for seed in 3 4; do run blog-last-s$seed 500 $blog --fast --last-layer-target-only --seed $seed; done
python results/nvidia-h100/slim/table.py "$OUT"
python - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    r = json.load(open(os.path.join(out, name + ".json")))
    losses = r.get("extra", r).get("losses") or []
    tail = losses[-200:] if name.startswith("up") else losses[900:1000]
    print(f"{name}: mean loss of steps {len(losses) - len(tail) + 1}-{len(losses)}: {sum(tail) / max(1, len(tail)):.4f}")
PY
tar czf "$FINAL/call.tgz" -C "$OUT" .
