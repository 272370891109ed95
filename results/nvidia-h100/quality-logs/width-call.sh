#!/usr/bin/env bash
# One GPU call: model width / depth on the 10-feature prior (60 s of --fast each, real suite every 15 s,
# 1 split per task), then every checkpoint on all 235 splits against baselines computed in the same call.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  .whl/lightgbm-*.whl && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" runs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null
# the baselines on all 5 splits, on cores 4-15 while the GPU trains (cached in data/real_baselines.json)
# (1 split per task first: the training runs' evals read those; this machine's library versions key the cache)
rm -f data/real_baselines.json
taskset -c 4-15 timeout 400 python -c "import evaluation as e, real_data as r; t = r.load_suite()
e.baseline_scores(t, splits_per_task=1); e.baseline_scores(t)" > "$OUT/baselines.log" 2>&1 &
python prior_dump.py --preset nano --features 10 --num-datasets 300000 --out data/p10.h5 --no-progress \
  > "$OUT/dump-p10.log" 2>&1; tail -1 "$OUT/dump-p10.log"
for i in $(seq 90); do grep -q 'knn@1' data/real_baselines.json 2>/dev/null && break; sleep 1; done
ckpts=()
train() {  # name flags...
  local name=$1; shift
  if [ "$SECONDS" -gt ${LIMIT:-330} ]; then echo "$name skipped (time)"; return; fi
  taskset -c 0-3 timeout 240 python train_optimized.py --fast --data data/p10.h5 --batch-size 32 --time-budget 60 \
    --eval-every 15s --eval-suite real --log-every 5000 --ckpt runs/$name.pt --record "$OUT/$name.json" "$@" \
    > "$OUT/train-$name.log" 2>&1
  echo "$name train exit $? at ${SECONDS}s"; tail -2 "$OUT/train-$name.log"
  [ -f runs/$name.pt ] && ckpts+=("$name=runs/$name.pt")
}
train w192 --embedding-size 192 --num-attention-heads 8 --mlp-hidden-size 384
train l6 --num-layers 6
train w192l6 --embedding-size 192 --num-attention-heads 8 --mlp-hidden-size 384 --num-layers 6
wait
tail -2 "$OUT/baselines.log"
timeout 90 python results/nvidia-h100/quality-logs/eval_checkpoint.py "$OUT/full-suite.json" "${ckpts[@]}" \
  > "$OUT/full-suite.log" 2>&1
echo "full-suite exit $?"
cp data/real_baselines.json "$OUT/" 2>/dev/null
python - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print("| variant | steps in 60 s | ms/step median | eval history (train s: ROC AUC, rank) |")
print("|---|---|---|---|")
for f in sorted(os.listdir(out)):
    if not f.endswith(".json") or f in ("full-suite.json", "real_baselines.json"):
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
