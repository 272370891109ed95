#!/usr/bin/env bash
# One GPU call: two more 60 s time-to-quality runs of upstream --fast (seeds 1 and 2) on every real split, beside
# call C's seed 0 (slim/quality/): the same dump as benchmark.py --quality, evaluated every 20 s of training.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  .whl/lightgbm-*.whl && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/we; mkdir -p "$OUT" "$FINAL" data/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
dump=data/bench/prior-n50000-r150-f5-c2-s0-cuda.h5
[ -f $dump ] || python -c "import prior_dump; prior_dump.write_dump('$dump', 50000, 150, 5, 2, 0, device='cuda')"
for seed in 1 2; do
  timeout 280 python train_optimized.py --data $dump --batch-size 32 --fast --time-budget 60 --eval-every 20s \
    --eval-suite real-all --seed $seed --log-every 2500 --record "$OUT/ttq-s$seed.json" > "$OUT/ttq-s$seed.log" 2>&1
  echo "seed $seed exit $? at ${SECONDS}s"
done
python - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    e = json.load(open(os.path.join(out, name + ".json")))["extra"]
    evals = ", ".join(f"{h['scores']['roc_auc']:.4f} (rank {h['scores']['rank']:.2f}) at {h['train_seconds']:.0f} s"
                      for h in e["eval_history"])
    last = e["eval_history"][-1]["scores"]
    best = max(last["baselines_roc_auc"].items(), key=lambda kv: kv[1])
    print(f"{name}: {e['steps_done']} steps; {evals}; best baseline {best[0]} {best[1]:.4f}; baseline ranks "
          + ", ".join(f"{n} {r:.2f}" for n, r in last["baselines_rank"].items()))
PY
tar czf "$FINAL/call.tgz" -C "$OUT" .
