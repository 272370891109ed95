#!/usr/bin/env bash
# One GPU call of the chain regeneration (H200). PHASE=ab: the triton GPU tests, then the forward kernel's A/B
# (.old/ = HEAD before the change, alternately old/new twice; the new kernel is kept only if it is faster in
# both pairs at S = 2500, else .old's file is copied in), then the blog ablation until BUDGET minutes.
# PHASE=blog: the blog ablation continued (--resume). PHASE=upstream: the upstream chain (--resume).
# Records accumulate in runs/abl-h200 (carried between calls); everything is copied to $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=$FINAL/logs; mkdir -p "$W" runs/abl-h200
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
if [ "$PHASE" = ab ]; then
  timeout 150 python -m pytest -q tests/test_triton_attention.py > "$W/gpu-tests.log" 2>&1
  echo "gpu tests exit $? at ${SECONDS}s"; tail -1 "$W/gpu-tests.log"
  K=results/nvidia-h200/kernel-ffma
  for i in 1 2; do for t in old new; do
    d=$([ $t = old ] && echo .old || echo .)
    timeout 90 python $K/kernel_ab.py $d > "$W/kernel-$t-$i.log" 2>&1; echo "kernel $t-$i exit $? at ${SECONDS}s"
    grep "^S=" "$W/kernel-$t-$i.log"
  done; done
  python - "$W" <<'PY' > "$W/kernel-decision.txt"
import json, sys
w = sys.argv[1]
def s2500(name):
    row = [r for r in json.loads(open(f"{w}/kernel-{name}.log").read().strip().splitlines()[-1])["rows"] if r["S"] == 2500][0]
    return row["fwd"]["median"], row["fwd_bwd"]["median"]
pairs = [(s2500(f"old-{i}"), s2500(f"new-{i}")) for i in (1, 2)]
keep = all(new[1] < old[1] for old, new in pairs)
print("pairs (old fwd, fwd+bwd) -> (new fwd, fwd+bwd) at S=2500:", pairs, "keep new:", keep)
PY
  cat "$W/kernel-decision.txt"
  grep -q "keep new: True" "$W/kernel-decision.txt" || cp .old/triton_attention.py triton_attention.py
fi
configs_blog=baseline,pinned,streams,gds-bin,flash,resident,pinned+streams,pinned+streams+gds-bin,pinned+streams+gds-bin+flash,resident+flash+bf16,+compile,+broadcast-features,+fused+async,+flash-kernel,+last-layer-target-only,+triton,fast
configs_up=baseline,pinned+streams+gds-bin+flash,resident+flash+bf16,+fused+async,+cuda-graphs,+flex,fast
left=$(( ${LIMIT:-560} - SECONDS - 200 ))
budget=$(python3 -c "print(max(0.1, $left / 60))")
if [ "$PHASE" = upstream ]; then
  python benchmark.py --workloads upstream --repeats 2 --steps 120 --timing-warmup 20 --configs $configs_up \
    --run-timeout 200 --resume --budget-minutes $budget --out runs/abl-h200 --name chain-upstream > "$W/chain-upstream.log" 2>&1
else
  python benchmark.py --workloads blog --repeats 2 --num-datasets 1200 --configs $configs_blog \
    --run-timeout 200 --resume --budget-minutes $budget --out runs/abl-h200 --name chain-blog > "$W/chain-blog.log" 2>&1
fi
echo "benchmark exit $? at ${SECONDS}s"
cp -r runs/abl-h200 "$FINAL/abl-h200"; cp triton_attention.py "$FINAL/triton_attention.ran.py"
tail -25 "$W"/chain-*.log
