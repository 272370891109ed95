set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl1/*.whl 2>&1 | grep -v WARN
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
{ git rev-parse HEAD; LC_ALL=C sha256sum *.py; } > $OUT/code.txt
timeout 150 python train_optimized.py --fast --sf-average-scale 10 --steps 1000 --save-every 500 --ckpt /tmp/a.pt --record $OUT/smoke-a.json > $OUT/smoke.log 2>&1; echo "a exit $?" >> $OUT/smoke.log
python - >> $OUT/smoke.log 2>&1 <<'PY'
import torch; s = torch.load("/tmp/a.pt", weights_only=True); print("ckpt step", s["step"], "hparams", s["hparams"])
PY
timeout 60 python train_optimized.py --fast --sf-average-scale 4 --steps 1500 --ckpt /tmp/a.pt --resume --no-eval >> $OUT/smoke.log 2>&1; echo "resume with 4: exit $?" >> $OUT/smoke.log
timeout 150 python train_optimized.py --fast --sf-average-scale 10 --steps 1500 --ckpt /tmp/a.pt --resume --no-eval >> $OUT/smoke.log 2>&1; echo "resume with 10: exit $?" >> $OUT/smoke.log
grep -E "fused|^done|exit|ckpt step|roc_auc|error" $OUT/smoke.log
