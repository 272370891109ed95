#!/usr/bin/env bash
# train()'s set-up moved to train._step_machinery (21b8b8f): the GPU tests of the graphed step, compile, bf16, the
# triton key count and the NCCL capture (tests/test_gpu_train.py, 4 workers), then the profiler's and the step
# timer's (tests/test_profile_utils.py, one worker: its timing tests flaked beside busy workers, gpu-suite), on the
# session's last device minutes. One call on nvidia-h200, carry .whl1 (schedulefree):
#   bash results/nvidia-h200/gpu-train-tests/call.sh
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl1/*.whl 2>&1 |
  grep -v WARN
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
{ git log -1 --format='git %H'; git status --short; LC_ALL=C sha256sum ./*.py tests/*.py; } > "$OUT/code.txt"
timeout 110 python3 -m pytest -q -n 4 -p no:cacheprovider -rfEs tests/test_gpu_train.py 2>&1 | tee "$OUT/tests.log"
echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/tests.log"
timeout 50 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_profile_utils.py 2>&1 | tee -a "$OUT/tests.log"
echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/tests.log"
