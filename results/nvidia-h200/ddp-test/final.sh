#!/usr/bin/env bash
# The torchrun paths with no --data on a fresh machine: after 531bfe7 (local rank 0 wrote the default dump, the other
# ranks waited for it), then again after its lock (one run makes it, the others wait); and the two-GPU test. nvidia-h200-x2,
# one call, carry .whl1.
#   bash results/nvidia-h200/ddp-test/final.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl1/*.whl || exit 1
{ git log -1 --format='git %H'; git status --short; LC_ALL=C sha256sum ./*.py tests/*.py; } > "$OUT/final-code.txt"
rm -f data/nano_default_*   # no default dump: the first command makes it
timeout 200 torchrun --nproc_per_node=2 train.py --steps 300 > "$OUT/final-train.log" 2>&1
echo "exit $?" >> "$OUT/final-train.log"
timeout 200 torchrun --nproc_per_node=2 train_optimized.py --fast > "$OUT/final-fast.log" 2>&1
echo "exit $?" >> "$OUT/final-fast.log"
grep -hE "^prior:|^done:|nanoTabPFN|^exit|rror" "$OUT"/final-train.log "$OUT"/final-fast.log | cut -c1-200
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_ddp.py 2>&1 | tail -3 | tee "$OUT/final-tests.log"
