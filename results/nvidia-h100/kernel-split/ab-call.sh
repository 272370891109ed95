#!/usr/bin/env bash
# The split backward against the shared-launch one (.old = 9f589f9): GPU tests first, then one process per tree,
# alternately, twice: ../../nvidia-h200/kernel-ffma/kernel_ab.py (check against SDPA, then do_bench fwd, fwd+bwd).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
timeout 200 python -m pytest -q tests/test_triton_attention.py > $OUT/gpu-tests.log 2>&1; echo "gpu tests exit $?"; tail -2 $OUT/gpu-tests.log
AB=results/nvidia-h200/kernel-ffma/kernel_ab.py
for round in 1 2; do
  for tree in .old .; do
    name=$([ "$tree" = . ] && echo new || echo old)
    timeout 120 python $AB $tree > $OUT/ab-$name-$round.log 2>&1; echo "$name $round exit $?"
    grep '^S=' $OUT/ab-$name-$round.log | sed "s/^/$name $round /"
  done
done
