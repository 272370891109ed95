"""The same test tables for k-NN (1, 5) and a random forest: how much a lookup of near rows is worth on each kind."""
import sys
import warnings

from sklearn.ensemble import RandomForestClassifier
from sklearn.neighbors import KNeighborsClassifier

sys.path.insert(0, "results/cpu-2core/grouped-prior")
from eval import TESTS, mean_auc   # noqa: E402

if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    for path in TESTS:
        models = {"knn1": lambda: KNeighborsClassifier(1), "knn5": lambda: KNeighborsClassifier(5),
                  "rf": lambda: RandomForestClassifier(100, n_jobs=2, random_state=0)}
        scores = {name: mean_auc(lambda xa, ya, xt, m=make: m().fit(xa, ya).predict_proba(xt)[:, 1], path)
                  for name, make in models.items()}
        print(path.split("/")[-1], " | ".join(f"{name} {score:.4f}" for name, score in scores.items()))
