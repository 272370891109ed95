#!/usr/bin/env bash
# One GPU call (H200): benchmark.py --attention at the current code (every kernel, the blog's and upstream's shapes,
# with the exp and tensor-core floors), into one tarball.
set -u
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=/tmp/att; mkdir -p "$W" "$FINAL"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
timeout 540 python benchmark.py --attention --workloads blog,upstream --out "$W" > "$W/attention.log" 2>&1
echo "attention exit $? at ${SECONDS}s"; grep -A2 "fastest at the median" "$W/attention.md"
tar czf "$FINAL/call.tgz" -C "$W" .
