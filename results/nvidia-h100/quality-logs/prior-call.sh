#!/usr/bin/env bash
# One GPU call for the real-data quality of prior variants: each variant is a prior_dump.py dump, trained 60 s
# with --fast while the real suite (1 split per task) is evaluated every 15 s of training (clock paused), then
# every checkpoint is scored on all 235 splits against the cached baselines (eval_checkpoint.py).
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .wsf/*.whl .whl/lightgbm-*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" runs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null
VARIANTS=${VARIANTS:-"p5:150:5:300000:32 p10:150:10:300000:32"}
LIMIT=${LIMIT:-420}
ckpts=()
for v in $VARIANTS; do
  IFS=: read name rows feats num batch <<< "$v"
  if [ "$SECONDS" -gt "$LIMIT" ]; then echo "$name skipped (time)"; continue; fi
  python prior_dump.py --preset nano --rows $rows --features $feats --num-datasets $num --out data/$name.h5 \
    --no-progress > "$OUT/dump-$name.log" 2>&1 || { echo "$name dump failed"; tail -2 "$OUT/dump-$name.log"; continue; }
  tail -1 "$OUT/dump-$name.log"
  timeout 240 python train_optimized.py --fast --data data/$name.h5 --batch-size $batch --time-budget 60 \
    --eval-every 15s --eval-suite real --log-every 5000 --ckpt runs/$name.pt --record "$OUT/$name.json" \
    > "$OUT/train-$name.log" 2>&1
  echo "$name train exit $? at ${SECONDS}s"; tail -2 "$OUT/train-$name.log"
  [ -f runs/$name.pt ] && ckpts+=("$name=runs/$name.pt")
done
timeout 150 python results/quality-logs/eval_checkpoint.py "$OUT/full-suite.json" "${ckpts[@]}" > "$OUT/full-suite.log" 2>&1
echo "full-suite exit $?"
python - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print("| variant | steps in 60 s | ms/step median | eval history (train s: ROC AUC, rank) |")
print("|---|---|---|---|")
for f in sorted(os.listdir(out)):
    if not f.endswith(".json") or f == "full-suite.json":
        continue
    try:
        r = json.load(open(os.path.join(out, f))); e = r.get("extra", r)
        h = ", ".join(f"{x['train_seconds']:.0f}: {x['scores']['roc_auc']:.4f} r{x['scores'].get('rank') or 0:.2f}"
                      for x in e.get("eval_history", []))
        print(f"| {f[:-5]} | {e.get('steps_done')} | {r['timing']['step']['median']:.2f} | {h} |")
    except Exception as exc:
        print(f"| {f} | unreadable: {exc} |")
PY
tail -6 "$OUT/full-suite.log"
tar czf "$FINAL/call.tgz" -C "$OUT" .
