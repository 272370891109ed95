import time, numpy as np, torch, sys
sys.path.insert(0, '.')
from classifier import NanoTabPFNClassifier, model_from_checkpoint
from model import NanoTabPFNModel, ModelConfig, MODEL_PRESETS
rng = np.random.default_rng(0)
X = rng.normal(size=(1500, 20)); y = (X[:, 0] + rng.normal(size=1500) > 0).astype(int)
def timed(model, n):
    clf = NanoTabPFNClassifier(model, device="cpu", n_estimators=n)
    times = []
    for i in range(6):
        t = time.perf_counter(); clf.fit(X[:500], y[:500]); clf.predict_proba(X[500:]); times.append(time.perf_counter() - t)
    return np.median(times[1:]) * 1000, min(times[1:]) * 1000, max(times[1:]) * 1000
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; 500 train + 1000 test rows x 20 features; median (min-max) of 5 after 1 warm-up")
trained = model_from_checkpoint(sys.argv[1])
label = f"{sys.argv[1]} ({trained.config.num_layers} layers, E {trained.config.embedding_size})"
models = [(label, trained)] + ([("large preset (random weights)", NanoTabPFNModel(ModelConfig(**MODEL_PRESETS["large"], num_outputs=10)))]
                               if "--large" in sys.argv else [])
for name, model in models:
    for n in (1, 4):
        print(f"{name}, {n} member(s): %.0f ms (%.0f-%.0f)" % timed(model, n), flush=True)
