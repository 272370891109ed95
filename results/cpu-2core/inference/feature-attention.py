# classifier.INFERENCE_FEATURE_ATTENTION on a CPU: a checkpoint's model with the feature attention as fp32 batched
# matmuls or as PyTorch SDPA, same weights, same table; the two alternate call by call so that drift hits both.
# Prints each one's median (min-max) and the largest difference between their probabilities.
#   python results/cpu-2core/inference/feature-attention.py CKPT [FEATURES]   (default 20)
import sys, time
import numpy as np, torch
sys.path.insert(0, ".")
import classifier
from classifier import NanoTabPFNClassifier, model_from_checkpoint
rng = np.random.default_rng(0)
FEATURES = int(sys.argv[2]) if len(sys.argv) > 2 else 20
X = rng.normal(size=(1500, FEATURES)); y = (X[:, 0] + rng.normal(size=1500) > 0).astype(int)
KINDS, REPEATS = ("matmul", "sdpa"), 6
classifiers = {}
for kind in KINDS:
    classifier.INFERENCE_FEATURE_ATTENTION = kind
    model = model_from_checkpoint(sys.argv[1])
    assert model.config.feature_attention == kind
    classifiers[kind] = NanoTabPFNClassifier(model, device="cpu", n_estimators=4)
times, proba = {kind: [] for kind in KINDS}, {}
for repeat in range(REPEATS + 1):          # call 0 of each is the warm-up
    for kind in KINDS:
        start = time.perf_counter()
        classifiers[kind].fit(X[:500], y[:500]); proba[kind] = classifiers[kind].predict_proba(X[500:])
        if repeat:
            times[kind].append((time.perf_counter() - start) * 1000)
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {sys.argv[1]}; 500 train + 1000 test rows x {FEATURES} "
      f"features, 4 members, fit + predict_proba; median (min-max) of {REPEATS} after 1 warm-up, alternating")
for kind in KINDS:
    print(f"{kind}: {np.median(times[kind]):.0f} ms ({min(times[kind]):.0f}-{max(times[kind]):.0f})")
print("largest |p_matmul - p_sdpa|: %.2e" % np.abs(proba["matmul"] - proba["sdpa"]).max())
