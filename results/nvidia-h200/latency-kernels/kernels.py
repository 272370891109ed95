# The large preset's latency under each pair of speed-only kernel fields: feature_attention (SDPA or fp32 batched
# matmuls) x last_layer_target_only. Before 66607af's successor, `quality.py latency` timed (sdpa, False) while a
# checkpoint predicts with (matmul, True). Same random weights for all four; they alternate call by call.
#   python results/nvidia-h200/latency-kernels/kernels.py [--device cuda]
import sys, time
import numpy as np, torch
sys.path.insert(0, ".")
from classifier import INFERENCE_ATTENTION, NanoTabPFNClassifier
from model import MODEL_PRESETS, ModelConfig, NanoTabPFNModel
device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
WARMUP, REPEATS = 3, 10
rng = np.random.default_rng(0)
X = rng.normal(size=(1500, 20)); y = (X[:, 0] + rng.normal(size=len(X)) > 0).astype(int)
torch.manual_seed(0)
weights = NanoTabPFNModel(ModelConfig(**MODEL_PRESETS["large"], num_outputs=10)).state_dict()
kinds = [(feature, last) for feature in ("sdpa", "matmul") for last in (False, True)]
print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if device.startswith('cuda') else 'cpu'}; large "
      f"preset, random weights; 500 train + 1000 test rows x 20 features, 4 members, linear columns; median (p10-p90) "
      f"of {REPEATS} after {WARMUP}, the four kernel pairs alternating")
for autocast in ("bf16", "off"):
    classifiers = {}
    for feature, last in kinds:
        model = NanoTabPFNModel(ModelConfig(**MODEL_PRESETS["large"], num_outputs=10, attention=INFERENCE_ATTENTION,
                                            feature_attention=feature, last_layer_target_only=last))
        model.load_state_dict(weights)
        classifiers[feature, last] = NanoTabPFNClassifier(model, device=device, n_estimators=4, autocast=autocast)
    times, proba = {kind: [] for kind in kinds}, {}
    for repeat in range(WARMUP + REPEATS):
        for kind in kinds:
            start = time.perf_counter()   # predict_proba returns a numpy array: the GPU's work has finished
            proba[kind] = classifiers[kind].fit(X[:500], y[:500]).predict_proba(X[500:])
            if repeat >= WARMUP:
                times[kind].append(1000 * (time.perf_counter() - start))
    for kind in kinds:
        p10, median, p90 = np.percentile(times[kind], [10, 50, 90])
        diff = np.abs(proba[kind] - proba["sdpa", False]).max()
        print(f"autocast {autocast:4} | feature_attention {kind[0]:6} | last_layer_target_only {str(kind[1]):5} | "
              f"{median:6.1f} ms ({p10:.1f}-{p90:.1f}) | largest |p - p(sdpa, False)| {diff:.1e}", flush=True)
