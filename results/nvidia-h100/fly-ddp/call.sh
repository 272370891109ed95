#!/usr/bin/env bash
# The recipe under torchrun on two H100s with its prior made on the fly (since 759e867: --loader prior --streams, each
# rank generating its slice's chunks on a side stream), 20 s: does the graphed NCCL step run with it, at the step time
# of dp-seeds' two-GPU runs (which read the file)? Checks: the run ends, every loss finite, the checkpoint's data
# identity equals dp-seeds' (content 52dfba27...). Command (carry .whl): bash results/nvidia-h100/fly-ddp/call.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v WARN
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
(git rev-parse HEAD; git status --short; LC_ALL=C sha256sum *.py) > $OUT/code.txt 2>/dev/null
timeout 140 torchrun --standalone --nproc_per_node 2 train_optimized.py --recipe real-tables --seed 1 --time-budget ${BUDGET:-20} \
  --no-eval --log-every 500 --ckpt /tmp/c.pt --record $OUT/ddp-fly.json > $OUT/ddp-fly.log 2>&1; echo "exit $?" >> $OUT/ddp-fly.log
python -c "import torch; print('data identity:', torch.load('/tmp/c.pt', weights_only=True, map_location='cpu')['data'])" \
  >> $OUT/ddp-fly.log 2>&1
grep -E "recipe|loader|prior:|done:|exit|identity|rror" $OUT/ddp-fly.log | cut -c1-250
