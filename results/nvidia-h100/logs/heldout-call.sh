#!/usr/bin/env bash
# One GPU call: 60 s of upstream --fast with and without --categorical-columns 0.1 (SEEDS), each scored on the real
# suite at the end and, from its checkpoint, on the held-out tasks (results/heldout/heldout.py).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  .whl/lightgbm-*.whl && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wf; mkdir -p "$OUT" "$FINAL" data/bench /tmp/ck
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
dump=data/bench/prior-n50000-r150-f5-c2-s0-cuda.h5
[ -f $dump ] || python -c "import prior_dump; prior_dump.write_dump('$dump', 50000, 150, 5, 2, 0, device='cuda')"
pairs=()
for seed in ${SEEDS:-0 1}; do
  for variant in base cat10; do
    name=$variant-s$seed; flags="--seed $seed"
    [ $variant = cat10 ] && flags="$flags --categorical-columns 0.1"
    if [ "$SECONDS" -gt 430 ]; then echo "$name skipped (time)"; continue; fi
    # shellcheck disable=SC2086
    timeout 200 python train_optimized.py --data $dump --batch-size 32 --fast --time-budget 60 --eval-suite real-all \
      --log-every 5000 --record "$OUT/$name.json" --ckpt /tmp/ck/$name.pt $flags > "$OUT/$name.log" 2>&1
    echo "$name exit $? at ${SECONDS}s"; pairs+=("$name=/tmp/ck/$name.pt")
  done
done
python results/heldout/heldout.py score "$OUT/heldout.json" "${pairs[@]}" 2>&1 | tee "$OUT/heldout.md"
python results/nvidia-h100/categorical/summary.py "$OUT" | tee "$OUT/summary.md"
gzip -9 "$OUT"/*.json
tar czf "$FINAL/call.tgz" -C "$OUT" .
