"""classifier.py: real input (NaN, inf, constant/duplicate columns, wide and long tables, any labels),
one-line errors, ensembling, sklearn conventions, and from_checkpoint on good, old and bad files."""
import dataclasses
import functools
import os
import pickle
import warnings

import numpy as np
import pytest
import torch

import classifier as C
from classifier import NanoTabPFNClassifier
from model import NanoTabPFNModel

# Tests of the other mechanisms see only the columns those give; the linear and forest columns have their own tests.
Plain = functools.partial(NanoTabPFNClassifier, linear_columns=False, forest_columns=False)
Linear = functools.partial(NanoTabPFNClassifier, forest_columns=False)
SMALL = dict(embedding_size=16, num_attention_heads=4, mlp_hidden_size=24, num_layers=2, num_outputs=3)


def make_model(seed=0, **overrides):
    torch.manual_seed(seed)
    model = NanoTabPFNModel(**{**SMALL, **overrides})
    with torch.no_grad():   # non-trivial norms and biases
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def toy_data(n_train=40, n_test=15, features=4, num_classes=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_train + n_test, features)).astype(np.float32)
    y = np.arange(n_train + n_test) % num_classes
    rng.shuffle(y)
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def one_line_error(exc_type, fn, *args, match=None):
    with pytest.raises(exc_type, match=match) as info:
        fn(*args)
    assert "\n" not in str(info.value), str(info.value)
    return str(info.value)


def test_shapes_probabilities_and_mode():
    model = make_model(10)
    clf = Plain(model, n_estimators=1)
    X_train, y_train, X_test, _ = toy_data(num_classes=2)
    assert clf.fit(X_train, y_train) is clf
    model.train()
    proba = clf.predict_proba(X_test)
    assert model.training                                  # mode restored
    assert proba.shape == (15, 2) and proba.dtype == np.float32
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=0, atol=1e-6)
    assert (proba >= 0).all()
    np.testing.assert_array_equal(clf.predict(X_test), proba.argmax(1))
    model.eval()
    clf.predict(X_test)
    assert not model.training
    # One member, clean input: the softmax of the model's first K logits on train + test.
    with torch.no_grad():
        x = torch.from_numpy(np.concatenate([X_train, X_test]))[None]
        logits = model((x, torch.from_numpy(y_train.astype(np.float32))[None]), len(X_train))[0, :, :2]
    np.testing.assert_allclose(proba, logits.softmax(-1).numpy(), rtol=1e-4, atol=1e-5)


def test_ensemble_averages_class_rotations():
    model = make_model(3, num_outputs=2)
    X_train, y_train, X_test, _ = toy_data(num_classes=2, seed=4)
    def members(n, labels):
        return Plain(model, n_estimators=n).fit(X_train, labels).predict_proba(X_test)
    one, flipped = members(1, y_train), members(1, 1 - y_train)[:, ::-1]
    assert not np.allclose(one, flipped, atol=1e-3)        # the rotation is a different member
    two = members(2, y_train)                              # the quantile view joins before any rotation
    assert two.shape == (15, 2) and not np.allclose(two, one, atol=1e-4)
    four = members(4, y_train)                             # both views, both rotations
    np.testing.assert_allclose(four, (two + members(2, 1 - y_train)[:, ::-1]) / 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(four.sum(1), 1.0, atol=1e-6)



def test_a_10_output_model_on_2_to_10_classes():
    """Probabilities over the table's K classes only (the first K of 10 logits, renormalised), members shifting the
    class indices by k // 2 mod K and rolled back, labels in sorted order (strings too), any K in 2..10."""
    model = make_model(30, num_outputs=10)
    for num_classes in (2, 3, 10):
        X_train, y_train, X_test, _ = toy_data(n_train=60, num_classes=num_classes, seed=num_classes)
        one = Plain(model, n_estimators=1).fit(X_train, y_train)
        proba = one.predict_proba(X_test)
        assert proba.shape == (15, num_classes) and (proba >= 0).all()
        np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-5)
        with torch.no_grad():
            x = torch.from_numpy(one.X_train_.astype(np.float32))
            x = torch.cat([x, torch.from_numpy(one._standardize(one._clean(X_test.astype(np.float64))).astype(
                np.float32))])[None]
            logits = model((x, torch.from_numpy(y_train.astype(np.float32))[None]), len(X_train))[0]
        np.testing.assert_allclose(proba, logits[:, :num_classes].softmax(-1).numpy(), rtol=1e-4, atol=1e-5)
        # All K shifts: relabelling y -> y + 1 mod K only moves the columns.
        full = Plain(model, n_estimators=2 * num_classes).fit(X_train, y_train).predict_proba(X_test)
        moved = Plain(model, n_estimators=2 * num_classes).fit(X_train, (y_train + 1) % num_classes)
        np.testing.assert_allclose(moved.predict_proba(X_test), np.roll(full, 1, axis=1), rtol=1e-4, atol=1e-6)
        assert not np.allclose(full, proba, atol=1e-4)                 # the shifted members differ
    names = np.array(["ant", "bee", "cat", "dog", "eel"])
    X_train, y_train, X_test, _ = toy_data(n_train=50, num_classes=5, seed=5)
    order = np.array([3, 0, 4, 1, 2])                                  # names given out of sorted order
    named = Plain(model).fit(X_train, names[order][y_train])
    plain = Plain(model).fit(X_train, order[y_train])
    np.testing.assert_array_equal(named.classes_, names)
    np.testing.assert_allclose(named.predict_proba(X_test), plain.predict_proba(X_test), rtol=0, atol=0)
    np.testing.assert_array_equal(named.predict(X_test), names[plain.predict(X_test)])
    eleven = toy_data(n_train=55, num_classes=11)
    one_line_error(ValueError, Plain(model).fit, eleven[0], eleven[1], match="11 classes.*at most 10")
    binary = Plain(make_model(31, num_outputs=2))
    message = one_line_error(ValueError, binary.fit, X_train, y_train, match="5 classes.*at most 2")
    assert "Only binary" in message


def test_bf16_autocast_is_close_to_fp32_and_really_runs():
    model = make_model(5, num_outputs=2)
    X_train, y_train, X_test, _ = toy_data(num_classes=2, seed=6)
    fp32 = NanoTabPFNClassifier(model, autocast="off").fit(X_train, y_train).predict_proba(X_test)
    bf16 = NanoTabPFNClassifier(model, autocast="bf16").fit(X_train, y_train).predict_proba(X_test)
    assert bf16.dtype == np.float32 and not np.array_equal(bf16, fp32)     # the forward did run in bf16
    np.testing.assert_allclose(bf16, fp32, rtol=0, atol=0.03)
    np.testing.assert_allclose(bf16.sum(1), 1.0, atol=1e-6)
    assert np.array_equal(NanoTabPFNClassifier(model).fit(X_train, y_train).predict_proba(X_test), fp32)  # auto


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_auto_autocast_is_bf16_on_a_gpu():
    model = make_model(5, num_outputs=2)
    X_train, y_train, X_test, _ = toy_data(num_classes=2, seed=6)
    on_gpu = {autocast: NanoTabPFNClassifier(model, device="cuda", autocast=autocast).fit(X_train, y_train)
              .predict_proba(X_test) for autocast in ("auto", "bf16", "off")}
    assert np.array_equal(on_gpu["auto"], on_gpu["bf16"]) and not np.array_equal(on_gpu["auto"], on_gpu["off"])

def test_labels_of_any_type():
    model = make_model(11)
    X_train, y_train, X_test, _ = toy_data(num_classes=3, seed=1)
    plain = NanoTabPFNClassifier(model).fit(X_train, y_train)
    names = np.array(["cat", "dog", "emu"])
    named = NanoTabPFNClassifier(model).fit(X_train, names[y_train])
    shifted = NanoTabPFNClassifier(model).fit(X_train, y_train * 5 + 3)   # labels 3, 8, 13
    np.testing.assert_array_equal(named.classes_, names)
    np.testing.assert_allclose(named.predict_proba(X_test), plain.predict_proba(X_test), rtol=0, atol=0)
    np.testing.assert_allclose(shifted.predict_proba(X_test), plain.predict_proba(X_test), rtol=0, atol=0)
    np.testing.assert_array_equal(named.predict(X_test), names[plain.predict(X_test)])
    np.testing.assert_array_equal(shifted.predict(X_test), plain.predict(X_test) * 5 + 3)
    assert set(plain.predict(X_test)) <= {0, 1, 2}
    X2, y2, T2, _ = toy_data(num_classes=2, seed=2)
    booleans = NanoTabPFNClassifier(model).fit(X2, y2.astype(bool))
    assert booleans.predict(T2).dtype == bool
    assert set(NanoTabPFNClassifier(model).fit(X2, np.array(["no", "yes"], dtype=object)[y2]).predict(T2)) <= {"no", "yes"}


def test_nan_and_inf_are_missing_values():
    model = make_model(12, num_outputs=2)
    X_train, y_train, X_test, _ = toy_data(n_train=60, seed=3)
    X_train, X_test = X_train.astype(np.float64), X_test.astype(np.float64)
    rng = np.random.default_rng(0)
    X_train[rng.random(X_train.shape) < 0.2] = np.nan
    X_test[rng.random(X_test.shape) < 0.2] = np.nan
    for missing in ("mean", "indicator"):
        clf = Plain(model, missing=missing).fit(X_train, y_train)
        proba = clf.predict_proba(X_test)
        assert np.isfinite(proba).all() and proba.shape == (15, 2)
        assert clf.X_train_.shape[1] == (4 if missing == "mean" else 8)   # one indicator per column with NaN
        with_inf = X_test.copy()
        with_inf[np.isnan(with_inf)] = np.inf
        with_inf[0, np.isinf(with_inf[0])] = -np.inf
        np.testing.assert_allclose(clf.predict_proba(with_inf), proba, rtol=0, atol=0)   # ±inf == NaN
    huge = X_test.copy()
    huge[:, 0] = 1e39            # finite in float64, infinite in float32: still a finite prediction
    assert np.isfinite(Plain(model).fit(X_train, y_train).predict_proba(huge)).all()
    all_missing = np.full_like(X_test, np.nan)
    assert np.isfinite(Plain(model).fit(X_train, y_train).predict_proba(all_missing)).all()


def test_constant_and_duplicate_columns_are_dropped():
    model = make_model(13, num_outputs=2)
    X_train, y_train, X_test, _ = toy_data(seed=5)
    expected = Plain(model).fit(X_train, y_train).predict_proba(X_test)
    widen = lambda X: np.column_stack([np.full(len(X), 7.0), X, X[:, 1], np.full(len(X), np.nan)])
    clf = Plain(model).fit(widen(X_train), y_train)
    np.testing.assert_array_equal(clf.kept_columns_, [1, 2, 3, 4])
    np.testing.assert_allclose(clf.predict_proba(widen(X_test)), expected, rtol=1e-6, atol=1e-7)
    constant = Plain(model).fit(np.ones((20, 3)), y_train[:20])   # nothing informative
    proba = constant.predict_proba(np.ones((5, 3)))
    assert np.isfinite(proba).all() and np.allclose(proba, proba[0])


def grouped_table(num_classes, seed=0, subjects=30, rows_each=4):
    """A subject id column whose label is the subject's (rows of one subject repeat it), an age-like integer
    column and a noise column: (X, y) of subjects * rows_each rows in random order."""
    rng = np.random.default_rng(seed)
    subject = np.repeat(rng.permutation(1000)[:subjects], rows_each).astype(float)
    y = np.repeat(np.arange(subjects) % num_classes, rows_each)
    X = np.column_stack([subject, rng.integers(20, 70, len(y)), rng.standard_normal(len(y))])
    order = rng.permutation(len(y))
    return X[order], y[order]


def test_id_columns_get_leave_one_out_label_frequencies():
    X, y = grouped_table(num_classes=2)
    X_train, y_train, X_test = X[:80], y[:80], X[80:]
    clf = Plain(make_model(17, num_outputs=2)).fit(X_train, y_train)
    assert clf.id_columns_ == [0] and clf.n_features_in_ == 3         # the id, not the age-like column
    prior = np.bincount(y_train) / len(y_train)
    added = clf._with_id_frequencies(X_train, own_labels=y_train)
    assert added.shape == (80, 4)
    for i in range(5):                                                   # the row's partners, its own label left out
        partners = (X_train[:, 0] == X_train[i, 0]) & (np.arange(80) != i)
        expected = (y_train[partners].sum() + C.ID_SMOOTHING * prior[1]) / (partners.sum() + C.ID_SMOOTHING)
        assert added[i, 3] == pytest.approx(expected)
    test_added = clf._with_id_frequencies(np.array([[X_train[0, 0], 30, 0.0], [-5.0, 30, 0.0], [np.nan, 30, 0.0]]))
    seen = X_train[:, 0] == X_train[0, 0]
    assert test_added[0, 3] == pytest.approx((y_train[seen].sum() + prior[1]) / (seen.sum() + 1))
    assert test_added[1, 3] == pytest.approx(prior[1]) and test_added[2, 3] == pytest.approx(prior[1])
    proba = clf.predict_proba(X_test)
    assert proba.shape == (len(X_test), 2) and np.isfinite(proba).all()
    off = Plain(make_model(17, num_outputs=2), id_encoding=False).fit(X_train, y_train)
    assert off.id_columns_ == [] and off.X_train_.shape[1] == 3
    shuffled = Plain(make_model(17, num_outputs=2)).fit(X_train, np.random.default_rng(1).permutation(
        y_train))
    assert shuffled.id_columns_ == []                                    # ids whose labels differ: left alone
    X3, y3 = grouped_table(num_classes=3, seed=2)
    three = Plain(make_model(18)).fit(X3[:90], y3[:90])
    assert three.id_columns_ == [0] and three.X_train_.shape[1] == 3 + 3   # one frequency per class
    one_line_error(ValueError, Plain(clf.model, id_encoding="yes").fit, X_train, y_train,
                   match="id_encoding")


def test_a_composite_key_gets_leave_one_out_label_frequencies():
    """A subject is named by two columns (a local id that repeats across 3 sites, and the site); the label is the
    subject's, a visit column varies within the subject. Neither column alone is an id (KEY_*, ID_*)."""
    rng = np.random.default_rng(3)
    site, local = np.repeat(np.arange(3), 10), np.tile(np.arange(1, 11), 3)           # 30 subjects
    label = rng.permutation(np.arange(30) % 2)
    rows = np.repeat(np.arange(30), 4)                                                # 4 visits each
    X = np.column_stack([local[rows], site[rows], np.tile(np.arange(4), 30), rng.standard_normal(120)]).astype(float)
    y = label[rows]
    order = rng.permutation(120)
    X, y = X[order], y[order]
    clf = Plain(make_model(17, num_outputs=2)).fit(X[:100], y[:100])
    assert clf.id_columns_ == [] and sorted(clf.key_columns_) == [0, 1] and clf.X_train_.shape[1] == 5
    prior = np.bincount(y[:100]) / 100
    added = clf._with_id_frequencies(X[:100], own_labels=y[:100])
    for i in range(5):                                                   # the subject's other rows, own label out
        partners = (X[:100, 0] == X[i, 0]) & (X[:100, 1] == X[i, 1]) & (np.arange(100) != i)
        expected = (y[:100][partners].sum() + C.ID_SMOOTHING * prior[1]) / (partners.sum() + C.ID_SMOOTHING)
        assert added[i, 4] == pytest.approx(expected)
    unseen = clf._with_id_frequencies(np.array([[99.0, 0, 0, 0], [1.0, np.nan, 0, 0]]))
    assert unseen[:, 4] == pytest.approx([prior[1], prior[1]])         # a key no training row has: the prior
    assert np.isfinite(clf.predict_proba(X[100:])).all()
    assert Plain(clf.model, id_encoding=False).fit(X[:100], y[:100]).key_columns_ == []
    shuffled = Plain(clf.model).fit(X[:100], rng.permutation(y[:100]))
    assert shuffled.key_columns_ == []                                   # keys whose labels differ: left alone


def test_wide_tables_use_feature_subsets():
    model = make_model(14, num_outputs=2)
    X_train, y_train, X_test, _ = toy_data(features=30, seed=6)
    clf = Plain(model, n_estimators=3, features_per_estimator=5).fit(X_train, y_train)
    assert [len(s) for s in clf.feature_subsets_] == [5, 5, 5]
    assert len({tuple(s) for s in clf.feature_subsets_}) == 3
    proba = clf.predict_proba(X_test)
    again = Plain(model, n_estimators=3, features_per_estimator=5).fit(X_train, y_train)
    np.testing.assert_allclose(again.predict_proba(X_test), proba, rtol=0, atol=0)   # seeded
    every = Plain(model, n_estimators=3, features_per_estimator=None).fit(X_train, y_train)
    assert [len(s) for s in every.feature_subsets_] == [30, 30, 30]


def test_linear_columns_are_out_of_fold_on_the_training_rows():
    """Logistic regression's decision values join the columns: out of fold on the training rows, so on labels that
    are noise they carry no signal there (in-sample values on 30 noise columns would separate the classes), and from
    the full fit for the test rows; one per class for more than two classes."""
    from sklearn.metrics import roc_auc_score
    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((60, 30)), np.arange(60) % 2
    clf = Linear(make_model(19, num_outputs=2)).fit(X, y)
    oof = C._out_of_fold_decision(X, y, clf.linear_, 0)[:, 0]
    assert roc_auc_score(y, C._decision(clf.linear_, X)[:, 0]) > 0.95 and abs(roc_auc_score(y, oof) - 0.5) < 0.25
    assert clf.X_train_.shape[1] == 31 and clf.X_train_[:, -1] == pytest.approx((oof - oof.mean()) / oof.std())
    assert Plain(clf.model).fit(X, y).X_train_.shape[1] == 30
    X3, y3 = rng.standard_normal((45, 3)), np.arange(45) % 3
    three = Linear(make_model(20)).fit(X3, y3)
    assert three.X_train_.shape[1] == 3 + 3 and np.isfinite(three.predict_proba(rng.standard_normal((5, 3)))).all()
    X3[::7, 1] = np.nan                                                   # missing cells: mean fill + indicator
    assert np.isfinite(Linear(three.model).fit(X3, y3).predict_proba(X3[:4])).all()
    one_line_error(ValueError, NanoTabPFNClassifier(clf.model, linear_columns=1).fit, X, y, match="linear_columns")


def test_forest_columns_are_out_of_bag_on_the_training_rows():
    """A random forest's class probabilities join the columns first: out of bag on the training rows, so on labels that
    are noise they carry no signal there (the forest's in-sample probabilities separate the classes), and the whole
    forest's on the test rows; one per class for more than two classes; missing and huge cells go to the trees."""
    from sklearn.metrics import roc_auc_score
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((80, 6)), np.arange(80) % 2
    forest, out_of_bag = C._fit_forest(X, y, 0)
    in_sample = forest.predict_proba(X)[:, 1]
    assert roc_auc_score(y, in_sample) > 0.95 and abs(roc_auc_score(y, out_of_bag[:, 0]) - 0.5) < 0.25
    clf = NanoTabPFNClassifier(make_model(21, num_outputs=2), linear_columns=False, forest_columns=True).fit(X, y)
    oob = out_of_bag[:, 0]
    assert clf.X_train_.shape[1] == 7 and clf.X_train_[:, -1] == pytest.approx((oob - oob.mean()) / oob.std())
    test = rng.standard_normal((5, 6))
    plain = Plain(clf.model).fit(np.concatenate([X, out_of_bag], axis=1), y)
    expected = plain.predict_proba(np.concatenate([test, forest.predict_proba(test)[:, 1:]], axis=1))
    np.testing.assert_array_equal(clf.predict_proba(test), expected)   # the whole forest's column on the test rows
    X3, y3 = rng.standard_normal((45, 3)), np.arange(45) % 3
    X3[::7, 1], X3[3, 2] = np.nan, 1e39   # beyond float32: the trees get it clipped
    three = NanoTabPFNClassifier(make_model(22), linear_columns=False, forest_columns=True).fit(X3, y3)
    assert three.X_train_.shape[1] == 3 + 3 and np.isfinite(three.predict_proba(X3[:6])).all()
    one_line_error(ValueError, NanoTabPFNClassifier(clf.model, forest_columns=1).fit, X, y, match="forest_columns")
    assert NanoTabPFNClassifier(clf.model).forest_columns is False   # off by default (forest-columns' README)


def test_forest_columns_half_averages_an_ensemble_without_them_and_one_with():
    """forest_columns="half": the mean of the probabilities of the classifier without forest columns and of the one
    with them, each fitted on the same rows; any other string is refused in one line."""
    rng = np.random.default_rng(6)
    X, y = rng.standard_normal((70, 4)), rng.integers(0, 3, 70)
    test, model = rng.standard_normal((9, 4)), make_model(23)
    half = NanoTabPFNClassifier(model, forest_columns="half").fit(X, y)
    parts = [NanoTabPFNClassifier(model, forest_columns=flag).fit(X, y).predict_proba(test) for flag in (False, True)]
    assert not np.allclose(parts[0], parts[1])   # the forest columns change the prediction
    np.testing.assert_allclose(half.predict_proba(test), (parts[0] + parts[1]) / 2, rtol=1e-6)
    assert half.predict(test).shape == (9,) and list(half.classes_) == [0, 1, 2] and half.n_features_in_ == 4
    one_line_error(ValueError, NanoTabPFNClassifier(model, forest_columns="Half").fit, X, y, match="'half'")


def test_linear_columns_match_the_logistic_regression_baseline():
    """The numpy fill and scaling give sklearn's pipeline (SimpleImputer with indicators, StandardScaler) to
    rounding: a column with no values dropped, a constant one, cells missing at fit and only at predict."""
    import warnings
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((80, 6)) * [1, 10, 0.1, 1, 1, 1] + [0, 5, 0, 0, 0, 0], np.arange(80) % 3
    X[:, 0] += y
    X[:, 3], X[:, 4], X[::5, 1], X[::9, 2] = np.nan, 2.5, np.nan, np.nan
    test = rng.standard_normal((20, 6))
    test[::4, 5] = np.nan                                        # missing only at predict: filled, no indicator
    for labels in (y, y % 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                      # SimpleImputer on the empty column
            expected = make_pipeline(SimpleImputer(add_indicator=True), StandardScaler(),
                                     LogisticRegression(C=1.0, max_iter=2000)).fit(X, labels).decision_function(test)
        assert C._Linear().fit(X, labels).decision_function(test) == pytest.approx(expected, abs=1e-8)


def test_long_tables_are_subsampled_with_a_warning(monkeypatch):
    model = make_model(15, num_outputs=2)
    X_train, y_train, X_test, _ = toy_data(n_train=120, seed=7)
    with pytest.warns(UserWarning, match="120 training rows > max_train_rows=50") as record:
        clf = NanoTabPFNClassifier(model, max_train_rows=50).fit(X_train, y_train)
    assert len(record) == 1 and "\n" not in str(record[0].message)
    assert clf.X_train_.shape[0] == 50 and set(clf.y_train_) == {0, 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NanoTabPFNClassifier(model, max_train_rows=120).fit(X_train, y_train)   # at the limit: no warning
    # Test rows never attend to each other: chunked prediction equals one pass.
    whole = clf.predict_proba(X_test)
    monkeypatch.setattr(C, "TEST_CHUNK_ROWS", 4)
    np.testing.assert_allclose(clf.predict_proba(X_test), whole, rtol=1e-5, atol=1e-6)


def test_bad_input_is_a_one_line_value_error():
    X_train, y_train, X_test, _ = toy_data(num_classes=2)
    clf = NanoTabPFNClassifier(make_model(16, num_outputs=2))
    one_line_error(ValueError, clf.predict, X_test, match="not fitted")
    one_line_error(ValueError, clf.fit, X_train, np.arange(len(X_train)) % 3, match="3 classes")
    one_line_error(ValueError, clf.fit, X_train, np.zeros(len(X_train)), match="1 class")
    one_line_error(ValueError, clf.fit, X_train[:, 0], y_train, match="2-D")
    one_line_error(ValueError, clf.fit, X_train[:0], y_train[:0], match="empty")
    one_line_error(ValueError, clf.fit, X_train[:, :0], y_train, match="empty")
    one_line_error(ValueError, clf.fit, X_train, y_train[:-1], match="labels")
    one_line_error(ValueError, clf.fit, X_train, np.where(y_train == 0, np.nan, 1.0), match="NaN")
    one_line_error(ValueError, clf.fit, X_train, np.array([None, "a"] * 20, dtype=object), match="missing")
    one_line_error(ValueError, clf.fit, X_train, np.array([1, "a"] * 20, dtype=object), match="sorted")
    one_line_error(ValueError, clf.fit, X_train, np.linspace(0, 1, len(X_train)), match="continuous")
    one_line_error(ValueError, clf.fit, X_train, None, match="requires y")
    strings = X_train.astype(object)
    strings[2, 1] = "red"
    one_line_error(ValueError, clf.fit, strings, y_train, match="non-numeric")
    one_line_error(ValueError, clf.fit, X_train + 1j, y_train, match="Complex")
    one_line_error(ValueError, NanoTabPFNClassifier(clf.model, missing="median").fit, X_train, y_train, match="missing")
    one_line_error(ValueError, NanoTabPFNClassifier(clf.model, n_estimators=0).fit, X_train, y_train, match="n_estimators")
    one_line_error(ValueError, NanoTabPFNClassifier(clf.model, autocast="fp16").fit, X_train, y_train, match="autocast")
    clf.fit(X_train, y_train)
    one_line_error(ValueError, clf.predict, X_test[:, :3], match="3 features.*expecting 4")
    one_line_error(ValueError, clf.predict_proba, X_test[0], match="2-D")
    one_line_error(ValueError, clf.predict, X_test[:0], match="empty")


def test_sklearn_estimator_checks():
    """sklearn's own conventions, on a model that predicts up to 10 classes (untrained, so the accuracy
    check is left out; check_estimators_overwrite_params is left out because joblib hashes a deep copy
    of an nn.Module differently from the module, which it reads as a mutation)."""
    from sklearn.utils.estimator_checks import check_estimator
    skipped = {"check_classifiers_train", "check_estimators_overwrite_params", "check_array_api_input"}
    estimator = NanoTabPFNClassifier(make_model(17, num_outputs=10), n_estimators=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(estimator, on_fail=None, on_skip=None)
    failed = [f"{r['check_name']}: {str(r['exception']).splitlines()[:1]}" for r in results
              if r["status"] == "failed" and r["check_name"] not in skipped]
    assert not failed, failed
    assert sum(r["status"] == "passed" for r in results) >= 45


# ---------------------------------------------------------------------------------------------
# from_checkpoint

def save_checkpoint(path, model, config=None, **extra):
    config = dataclasses.asdict(model.config) if config is None else config
    torch.save({"model_config": config, "model": model.state_dict(), **extra}, path)


def test_from_checkpoint_round_trip_new_old_and_prefixed(tmp_path):
    model = make_model(18, attention="sdpa", feature_attention="matmul")
    X_train, y_train, X_test, _ = toy_data(num_classes=3, seed=2)
    expected = NanoTabPFNClassifier(model).fit(X_train, y_train).predict_proba(X_test)
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model)
    clf = NanoTabPFNClassifier.from_checkpoint(path)
    assert {f: getattr(clf.model.config, f) for f in C.SIZE_FIELDS} == {**SMALL}
    assert clf.model.config.attention == C.INFERENCE_ATTENTION
    assert clf.model.config.feature_attention == C.INFERENCE_FEATURE_ATTENTION
    assert C.model_from_checkpoint(path, attention="mha").config.attention == "mha"   # upstream's kernels still load
    np.testing.assert_allclose(clf.fit(X_train, y_train).predict_proba(X_test), expected, rtol=1e-5, atol=1e-6)
    # An old checkpoint's kernel-only keys, and a compiled model's "_orig_mod." prefixes.
    old = {**SMALL, "attention": "flash", "feature_attention": "broadcast", "padded_attention": "flex",
           "checkpoint": True, "sdpa_backend": "cudnn"}
    torch.save({"model_config": old, "model": {"_orig_mod." + k: v for k, v in model.state_dict().items()}}, path)
    old_clf = NanoTabPFNClassifier.from_checkpoint(path, "cpu", n_estimators=2)
    assert old_clf.n_estimators == 2 and old_clf.device == "cpu"
    np.testing.assert_allclose(old_clf.set_params(n_estimators=4).fit(X_train, y_train).predict_proba(X_test),
                               expected, rtol=1e-5, atol=1e-6)


def test_from_checkpoint_content_errors(tmp_path):
    model = make_model(19)
    path = tmp_path / "c.pt"
    torch.save({"model": model.state_dict()}, path)
    one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, path, match="model_config")
    save_checkpoint(path, model, {**dataclasses.asdict(model.config), "dropout": 0.1})
    one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, path, match="dropout")
    save_checkpoint(path, model, {**SMALL, "num_layers": 3})                 # config disagrees with tensors
    one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, path, match="do not match")
    save_checkpoint(path, model, {**SMALL, "num_layers": "two"})
    one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, path, match="bad model_config")
    broken = make_model(19)
    with torch.no_grad():
        broken.decoder.linear2.weight[0, 0] = float("nan")
    save_checkpoint(path, broken)
    one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, path, match="non-finite")
    one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, path, match=r"\('decoder\.linear2\.weight'\)")
    torch.save([1, 2, 3], path)
    one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, path, match="expected a dict")


class _RunsCode:
    """Unpickling this would run a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Unknown:
    pass


def test_from_checkpoint_bad_files(tmp_path):
    good = tmp_path / "good.pt"
    save_checkpoint(good, make_model(20))
    data = good.read_bytes()
    marker = tmp_path / "code-ran"
    files = {
        "missing": (None, "does not exist"),
        "folder": (None, "not a file"),
        "empty": (b"", "is empty"),
        "text": (b"hello, this is not a checkpoint\n", "not a PyTorch checkpoint"),
        "truncated": (data[: len(data) // 2], "corrupt or truncated"),
        "header-only": (data[:100], "corrupt or truncated"),
    }
    for name, (content, _) in files.items():
        if content is not None:
            (tmp_path / name).write_bytes(content)
    (tmp_path / "folder").mkdir()
    for name, (_, match) in files.items():
        one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, tmp_path / name, match=match)
    legacy = tmp_path / "legacy.pt"
    torch.save({"model_config": {}, "model": {}}, legacy, _use_new_zipfile_serialization=False)
    legacy.write_bytes(legacy.read_bytes()[:-20])
    one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, legacy, match="corrupt or truncated")
    # Pickles that weights_only=True refuses: code (as torch.save and as a raw pickle) and unknown classes.
    refused = {"code.pt": lambda p: torch.save({"model_config": _RunsCode(marker), "model": {}}, p),
               "code.pkl": lambda p: p.write_bytes(pickle.dumps({"model": _RunsCode(marker)})),
               "unknown.pt": lambda p: torch.save({"model_config": _Unknown(), "model": {}}, p)}
    for name, write in refused.items():
        write(tmp_path / name)
        message = one_line_error(ValueError, NanoTabPFNClassifier.from_checkpoint, tmp_path / name,
                                 match="holds code or unknown objects and is refused")
        assert "weights_only" not in message and "False" not in message
    assert not marker.exists()      # the code in the pickles never ran
    pickle.loads(pickle.dumps(_RunsCode(marker)))   # the check can fail: unpickling does run it
    assert marker.exists()
