# The second call, verbatim (one H200, warm after smoke.sh): S = 1 at upstream's lr, S = 10 at a lower lr, S = 10
# with a warm-up; 1,000 steps of --fast each on the default nano dump, toy-suite evaluation at the end.
export PYTHONPATH=/tmp/site; for a in "1 4e-3 0" "10 1e-3 0" "10 4e-3 200"; do set -- $a; timeout 70 python train_optimized.py --fast --sf-average-scale $1 --lr $2 --warmup-steps $3 --steps 1000 > $OUT/ab-S$1-lr$2-w$3.log 2>&1; echo "S=$1 lr=$2 warmup=$3 exit $?: $(grep -E '^done' $OUT/ab-S$1-lr$2-w$3.log | cut -c1-60) | $(grep nanoTabPFN $OUT/ab-S$1-lr$2-w$3.log)"; done
