#!/usr/bin/env bash
# #38's runs past where they died, at this commit on one H200: the issue's 300k nano dump (seed 7), then at once on
# the GPU for 450 s of training each: plain --fast --seed 0 (died at step 46,719 before the fix; nan-triton reached
# 45,000 and was cut) and --fast --categorical-columns 0.1 --seed 0 (died at 18,850; nan-triton ran it to 28,000).
# One call on nvidia-h200, carry .whl1 (schedulefree):  bash results/nvidia-h200/long-fast/call.sh
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl1/*.whl 2>&1 |
  grep -v WARN
export PYTHONPATH=/tmp/site
W=$OUT; mkdir -p /tmp/d
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/gpu.txt 2>&1
{ git log -1 --format='git %H'; git status --short; LC_ALL=C sha256sum ./*.py; } > $W/code.txt
python3 prior_dump.py --preset nano --num-datasets 300000 --seed 7 --out /tmp/d/nano300k.h5 --device cuda \
  --no-progress > $W/dump.log 2>&1; echo "dump exit $? at ${SECONDS}s"; tail -1 $W/dump.log
run() {  # name flags...
  local name=$1; shift
  timeout 540 python3 train_optimized.py --data /tmp/d/nano300k.h5 --no-eval --fast --seed 0 --time-budget 450 \
    --log-every 5000 "$@" --record /tmp/$name.json > $W/$name.log 2>&1
  echo "$name exit $? at ${SECONDS}s: $(grep -E 'loss is|done:|Error' $W/$name.log | tail -1 | cut -c1-200)"
}
run plain &
run cat --categorical-columns 0.1 &
wait
# the records keep every step's loss: count them and the non-finite ones here, then thin them for the way back
python3 - <<'PY'
import json, math, os
for name in ("plain", "cat"):
    record = json.load(open(f"/tmp/{name}.json"))
    losses = record["extra"]["losses"]
    bad = [i + 1 for i, x in enumerate(losses) if not math.isfinite(x)]
    print(f"{name}: {len(losses)} per-step losses, {len(bad)} non-finite (first at step {bad[0] if bad else None})")
    record["extra"]["step_times_ms_removed"] = f"{len(record['extra'].pop('step_times_ms', []))} per-step times"
    record["extra"].update(losses=[round(x, 4) for x in losses[24::25]], losses_every=25, losses_steps=len(losses),
                           losses_rounded=4)
    json.dump(record, open(os.path.join(os.environ["OUT"], f"{name}.json"), "w"), separators=(",", ":"))
PY
