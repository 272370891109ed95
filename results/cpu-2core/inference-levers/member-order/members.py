import os, sys, json, time, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..'))
import real_data, evaluation
from classifier import NanoTabPFNClassifier
ck, which, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tasks = real_data.read_cache(real_data.SUITES[which])
clf = NanoTabPFNClassifier.from_checkpoint(ck, **params)
t = time.time()
r = evaluation.evaluate_suite(lambda: clf, tasks, 2)
wide = [v for k, v in r['per_task'].items() if next(t for t in tasks if t.name == k).X.shape[1] >= 20]
print(json.dumps({'which': which, 'params': params, 'roc_auc': round(r['roc_auc'], 5), 'wide': round(float(np.mean(wide)), 5), 'log_loss': round(r['log_loss'], 5), 's': round(time.time() - t)}), flush=True)
