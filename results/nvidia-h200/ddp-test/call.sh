#!/usr/bin/env bash
# Two H200s of one machine (nvidia-h200-x2), two calls on a warm machine, each <= 600 s; carry .whl1 (schedulefree)
# and the four caches data/real_suite.npz, data/real_heldout.npz, data/baselines-{suite,heldout}.json.
#   bash results/nvidia-h200/ddp-test/call.sh 1   # the two-GPU tests; linear_check.py; README's torchrun --fast
#   bash results/nvidia-h200/ddp-test/call.sh 2   # the recipe under torchrun for 60 s, scored on GPU 0
set -uo pipefail
part=$1
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl1/*.whl || exit 1
if [ "$part" = 1 ]; then
  { nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.device_count(), 'GPUs')"
    nvidia-smi topo -m; nproc; } > "$OUT/gpu.txt" 2>&1
  { git log -1 --format='git %H'; git status --short; LC_ALL=C sha256sum ./*.py tests/*.py; } > "$OUT/code.txt"
  # test_ddp.py's cuda case is the one test no earlier GPU call could run; the torchrun tests of test_train.py and
  # test_prior_transforms.py (make_linear_columns on CUDA) beside it
  timeout 400 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_ddp.py tests/test_prior_transforms.py \
    "tests/test_train.py::test_ddp_gloo_two_ranks_disjoint_data_identical_parameters" \
    "tests/test_train.py::test_ddp_time_budget_and_save_at_land_between_log_points" \
    "tests/test_train.py::test_two_node_c10d_rendezvous_and_graphed_ddp_step_match_ddp" 2>&1 | tee "$OUT/tests.log"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/tests.log"
  python3 results/nvidia-h200/ddp-test/linear_check.py 2>&1 | tee "$OUT/linear.log"
  # README's multi-GPU command, as printed there
  timeout 150 torchrun --nproc_per_node=2 train_optimized.py --fast > "$OUT/torchrun-fast.log" 2>&1
  echo "exit $?" >> "$OUT/torchrun-fast.log"; tail -5 "$OUT/torchrun-fast.log"
else
  start=$(date +%s)
  timeout 300 torchrun --nproc_per_node=2 train_optimized.py --recipe real-tables --time-budget 60 --seed 0 \
    --ckpt /tmp/recipe2.pt --record "$OUT/recipe2.json" > "$OUT/recipe2.log" 2>&1
  echo "exit $? after $(( $(date +%s) - start )) s" >> "$OUT/recipe2.log"; tail -4 "$OUT/recipe2.log"
  # the checkpoint in the classifier (README's use), then every task's 5 splits against the cached baselines
  python3 -c "import numpy as np, classifier as c; m = c.NanoTabPFNClassifier.from_checkpoint('/tmp/recipe2.pt',
device='cuda'); X = np.random.default_rng(0).normal(size=(300, 20)); y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1)
m.fit(X[:200], y[:200]); print('classifier: probabilities', m.predict_proba(X[200:]).shape)" 2>&1 | tee "$OUT/classifier.log"
  timeout 240 python3 quality.py score --device cuda --splits 5 --minutes 1 --seed 0 --out "$OUT/score-recipe2.json" \
    recipe2=/tmp/recipe2.pt > "$OUT/score.log" 2>&1
  echo "exit $?" >> "$OUT/score.log"; tail -12 "$OUT/score.log"
fi
