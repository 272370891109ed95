#!/usr/bin/env bash
# --init-from on the recipe's GPU path (--fast: torch.compile, one CUDA graph per step, the fused schedule-free
# optimizer): a 15-second recipe run, then a second 15-second run that starts from its weights. The second run's
# first loss must be the first run's trained level, not a fresh model's; both must exit 0. One call on nvidia-h200,
# carry .whl1 (schedulefree):   bash results/nvidia-h200/init-from/call.sh
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl1/*.whl 2>&1 |
  grep -v WARN
export PYTHONPATH=/tmp/site TORCHINDUCTOR_CACHE_DIR=/tmp/ind
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
{ git log -1 --format='git %H'; git status --short; LC_ALL=C sha256sum ./*.py; } > "$OUT/code.txt"
common=(--recipe real-tables --time-budget 15 --no-eval --log-every 100)
python train_optimized.py "${common[@]}" --ckpt /tmp/a.pt --record "$OUT/base.json" > "$OUT/base.log" 2>&1
echo "base exit $?" | tee -a "$OUT/base.log"
python train_optimized.py "${common[@]}" --init-from /tmp/a.pt --ckpt /tmp/b.pt --record "$OUT/tuned.json" \
  > "$OUT/tuned.log" 2>&1
echo "tuned exit $?" | tee -a "$OUT/tuned.log"
python3 -c "
import json, sys
for name in ('base', 'tuned'):
    x = json.load(open(sys.argv[1] + '/' + name + '.json'))['extra']
    print(name, 'steps', x['steps_done'], 'first losses', [round(v, 4) for v in x['losses'][:3]],
          'last', round(x['losses'][-1], 4))" "$OUT" | tee "$OUT/first-losses.txt"
grep -h "done:" "$OUT"/*.log
