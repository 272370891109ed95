#!/usr/bin/env bash
# One GPU call: blog workload --fast, new code and old (.old/, c472d21) interleaved (new, old, new), then the
# wide model on the 10-feature prior at a lower learning rate (60 s, real suite), then --flash --gds-bin.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export LD_LIBRARY_PATH=/tmp/site/libkvikio/lib64:/tmp/site/libkvikio_cu13.libs:/tmp/site/rapids_logger/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data runs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null
python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress > "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 100 --timing-warmup 10 --no-eval --log-every 50"
run() {  # name dir limit flags...
  local name=$1 dir=$2 limit=$3; shift 3
  if [ "$SECONDS" -gt "$limit" ]; then echo "$name skipped (time)"; return; fi
  (cd "$dir" && timeout 200 python train_optimized.py "$@" --record "$OUT/$name.json") > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
run blog-new-1 . 300 $blog --fast; run blog-old-2 .old 300 $blog --fast; run blog-new-2 . 300 $blog --fast
if [ "$SECONDS" -lt 340 ]; then
  python prior_dump.py --preset nano --features 10 --num-datasets 300000 --out data/p10.h5 --no-progress >> "$OUT/dumps.log" 2>&1
  run w192-lr1e-3 . 380 --fast --data data/p10.h5 --batch-size 32 --time-budget 60 --eval-every 15s \
    --eval-suite real --log-every 5000 --embedding-size 192 --num-attention-heads 8 --mlp-hidden-size 384 --lr 1e-3
  tail -2 "$OUT/w192-lr1e-3.log"
fi
run blog-new-flash-gds . 470 $blog --flash --gds-bin
grep -h "kvikio\|--gds-bin\|--loader" "$OUT/blog-new-flash-gds.log" 2>/dev/null | head -4
python - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print("| run | ms/step median | p10 | p90 | peak GiB | final loss | kernel |")
print("|---|---|---|---|---|---|---|")
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    try:
        r = json.load(open(os.path.join(out, name + ".json")))
        e, s = r.get("extra", r), r["timing"]["step"]
    except Exception as exc:
        print(f"| {name} | unreadable: {exc} |"); continue
    kernel = e.get("attention_kernel") or e.get("sdpa_backend") or ""
    print(f"| {name} | {s['median']:.3f} | {s['p10']:.3f} | {s['p90']:.3f} | {e['peak_memory_bytes']/2**30:.2f} | "
          f"{e['final_loss']:.4f} | {kernel[:40]} |")
PY
tar czf "$FINAL/call.tgz" -C "$OUT" .
