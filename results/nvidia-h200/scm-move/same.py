"""prior_scm.py's move out of prior_dump.py (fe27c3a) changes no table on CUDA: sha256 over the datasets the old
prior_dump.py (ae8114f, imported from the folder given) and this tree's make, for nano, the recipe's real preset and a
prior with every mix option on.

    python same.py OLD_DIR [DEVICE ...]    # OLD_DIR holds ae8114f's prior_dump.py; devices default to cuda, cpu
"""
import hashlib
import importlib.util
import sys
import time

import numpy as np

sys.path.insert(0, ".")
import prior_dump   # noqa: E402  (this tree's)


def load_old(folder):
    spec = importlib.util.spec_from_file_location("old_prior_dump", f"{folder}/prior_dump.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def digest(module, device):
    Mix = module.PriorMix
    cases = [dict(num_datasets=2000, rows=150, features=5, classes=2, seed=0),
             dict(num_datasets=1000, rows=512, features=32, classes=10, seed=0, feature_law="block-log"),
             dict(num_datasets=500, rows=200, features=12, classes=4, seed=5,
                  mix=Mix(grouped_rows=0.5, proxy_share=0.3, binary_share=0.4, train_law="mixed", tree_share=0.6,
                          noise_scale=0.5))]
    out = []
    for case in cases:
        h = hashlib.sha256()
        for group in module.generate(device=device, **case):
            for array in (group.X, group.y, group.num_features, group.single_eval_pos):
                h.update(np.ascontiguousarray(array).tobytes())
        out.append(h.hexdigest()[:16])
    return out


if __name__ == "__main__":
    old = load_old(sys.argv[1])
    for device in sys.argv[2:] or ("cuda", "cpu"):
        start = time.perf_counter()
        a, b = digest(old, device), digest(prior_dump, device)
        print(f"{device}: old {a} new {b} -> {'identical' if a == b else 'DIFFERENT'} "
              f"({time.perf_counter() - start:.1f} s)", flush=True)
