import os, sys, json, time, numpy as np, torch, torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..'))
import real_data, evaluation, classifier as C
from classifier import NanoTabPFNClassifier, _quantile_normal
ck, which, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
PREPS = spec['preps']; ORDER = spec.get('order', 'prep')
def prep(name, train, test):
    if name == 'std': return train, test
    q = (_quantile_normal(train, train), _quantile_normal(train, test))
    if name == 'q': return q
    if name == 'both': return np.concatenate([train, q[0]], 1), np.concatenate([test, q[1]], 1)
def _ensemble(self, X_test, device):
    K = len(self.classes_); P = len(PREPS)
    members = []
    for k in range(self.n_estimators):
        m = (k % P, (k // P) % K) if ORDER == 'prep' else ((k // K) % P, k % K)
        if m not in members: members.append(m)
    logits_all = []
    for p, shift in members:
        train, test = prep(PREPS[p], self.X_train_, X_test)
        x = torch.from_numpy(np.concatenate([train, test]).astype(np.float32))[None]
        y = torch.from_numpy(((self.y_train_ + shift) % K).astype(np.float32))[None]
        lg = self.model((x, y), train_test_split_index=len(self.y_train_))[:, :, :K].float()
        logits_all.append(np.roll(F.softmax(lg, -1)[0].numpy(), -shift, axis=1))
    return np.mean(logits_all, 0)
C.NanoTabPFNClassifier._ensemble = _ensemble
tasks = real_data.read_cache(real_data.SUITES[which])
clf = NanoTabPFNClassifier.from_checkpoint(ck, n_estimators=spec['n'])
t = time.time()
r = evaluation.evaluate_suite(lambda: clf, tasks, 2)
mc = [v for k, v in r['per_task'].items() if next(t for t in tasks if t.name == k).num_classes > 2]
print(json.dumps({'ck': ck.split('/')[-1], 'which': which, 'spec': spec, 'roc_auc': round(r['roc_auc'], 5), 'mc': round(float(np.mean(mc)), 5), 'log_loss': round(r['log_loss'], 5), 's': round(time.time() - t)}), flush=True)
