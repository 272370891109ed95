"""real_pool.py: which tables the pool keeps, the draws made from them, and prior_dump.py's --real-share blocks."""
import h5py
import numpy as np
import pytest

import prior_dump
from dump_format import check_dump
import real_data as rd
import real_pool as rp
from test_evaluation import archive_of, table


def pool_tables(seed=0, count=3, rows=300, columns=6):
    """[(name, X)] of numeric tables: a few integer-coded columns (targets of 2-4 values) and continuous ones."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        X = rng.standard_normal((rows, columns)).astype(np.float32)
        X[:, 0] = rng.integers(0, 2 + i % 3, rows)
        X[rng.random((rows, columns)) < 0.05] = np.nan
        out.append((f"P/t{i}", X))
    return out


def test_the_pool_leaves_out_suite_tables_their_copies_and_tables_too_small(tmp_path):
    header, rows = table(seed=3)
    copy_header = ["", "a_renamed", "b_renamed", "other"]
    copy_rows = [[r[0], r[1], r[3], str(i % 5)] for i, r in enumerate(rows)]   # two of its three columns: a, b
    archive = archive_of({"P/suite": (header, rows), "P/keep": table(seed=4), "P/copy": (copy_header, copy_rows),
                          "P/small": table(n=60, seed=5), "MASS/epil": table(seed=6)}, tmp_path / "r.tar.gz")
    suite, _ = rd.select_tasks(items={"P/suite"}, archive=archive)
    suite = [t for t in suite if t.name == "P/suite"]
    suite[0].name = "HSAUR/epilepsy"   # so that SAME_DATA's "MASS/epil" names a suite table
    tables, reasons = rp.build_pool(archive=archive, eval_tasks=suite)
    assert [name for name, _ in tables] == ["P/keep"]
    shares = "shares its columns with a suite or held-out table"
    assert reasons["P/copy"] == reasons["P/suite"] == shares   # P/suite under its own name: by its columns
    assert reasons["P/small"] == "60 rows x 5 columns"
    assert reasons["MASS/epil"] == "the data of HSAUR/epilepsy"
    X = dict(tables)["P/keep"]
    assert X.dtype == np.float32 and X.shape == (200, 5)   # id, constant, mostly missing, duplicates dropped
    tables, reasons = rp.build_pool(archive=archive, eval_tasks=rd.select_tasks(items={"P/suite"}, archive=archive)[0])
    assert reasons["P/suite"] == "a suite or held-out table"


def test_pool_file_round_trip_and_refusals(tmp_path):
    tables = pool_tables()
    rp.write_pool(tmp_path / "pool.npz", tables)
    back = rp.read_pool(str(tmp_path / "pool.npz"))
    assert [n for n, _ in back] == [n for n, _ in tables]
    for (_, a), (_, b) in zip(tables, back):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="no real-table pool"):
        rp.read_pool(str(tmp_path / "absent.npz"))
    np.savez(tmp_path / "old.npz", version=np.array([0]), names=np.array(["x"]), shapes=np.zeros((1, 2), np.int64),
             cells=np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="version 0"):
        rp.read_pool(str(tmp_path / "old.npz"))


def test_a_block_of_draws_has_one_shape_every_class_on_both_sides_and_is_seeded():
    tables = pool_tables(count=4, rows=600)
    B, R, F = 8, 512, 32

    def block(index):
        arrays = (np.full((B, R, F), 7, np.float32), np.full((B, R), 7, np.float32), np.zeros(B, np.int32),
                  np.full(B, R, np.int32), np.full(B, 300, np.int32))
        rp.fill_block(index, 0, tables, *arrays, max_classes=10)
        return arrays

    for index in range(6):
        x, y, num_features, num_datapoints, splits = block(index)
        rows, features, split = num_datapoints[0], num_features[0], splits[0]
        assert rows in rp.BLOCK_ROWS and 1 <= features <= 5 and split == int(300 / R * rows)
        assert (num_datapoints == rows).all() and (num_features == features).all() and (splits == split).all()
        assert (x[:, rows:] == 0).all() and (x[:, :, features:] == 0).all() and (y[:, rows:] == 0).all()
        assert np.isfinite(x).all() and np.abs(x).max() <= rp.FEATURE_CLIP
        for i in range(B):
            train, test = set(y[i, :split]), set(y[i, split:rows])
            assert train == test and train == set(range(len(train))) and len(train) >= 2
    for a, b in zip(block(3), block(3)):
        np.testing.assert_array_equal(a, b)


def test_real_share_replaces_whole_blocks_and_leaves_the_others_bit_for_bit(tmp_path):
    rp.write_pool(tmp_path / "pool.npz", pool_tables(count=3, rows=300))
    shape = dict(num_datasets=64, rows=128, features=4, classes=3, seed=1, progress=False, original_batch_size=8)
    prior_dump.write_dump(tmp_path / "plain.h5", **shape)
    prior_dump.write_dump(tmp_path / "mix.h5", **shape, real=(str(tmp_path / "pool.npz"), 0.5))
    real = set(rp.real_blocks(1, 0, 8, 0.5).tolist())
    assert 0 < len(real) < 8
    with h5py.File(tmp_path / "plain.h5") as plain, h5py.File(tmp_path / "mix.h5") as mix:
        assert mix.attrs["real_share"] == 0.5 and mix.attrs["real_tables"] == 3
        for block in range(8):
            part = slice(8 * block, 8 * block + 8)
            same = all(np.array_equal(plain[key][part], mix[key][part]) for key in ("X", "y", "num_features"))
            assert same == (block not in real)
    assert check_dump(str(tmp_path / "mix.h5")) == []
    with pytest.raises(ValueError, match="real tables"):
        prior_dump.file_settings(tmp_path / "mix.h5")


def test_real_flags_refuse_in_one_line(tmp_path, capsys):
    out = tmp_path / "x.h5"
    assert prior_dump.main(["--preset", "nano", "--num-datasets", "8", "--real-pool", "p.npz", "--out", str(out)]) != 0
    assert "without --real-share" in capsys.readouterr().err
    assert prior_dump.main(["--preset", "nano", "--num-datasets", "8", "--real-share", "0.5", "--real-pool",
                            str(tmp_path / "absent.npz"), "--out", str(out)]) != 0
    assert "no real-table pool" in capsys.readouterr().err
    assert not out.exists()


def test_rows_are_ordered_so_that_a_class_of_two_rows_lies_on_both_sides():
    y = np.zeros(100, np.float32)
    y[[3, 4]] = 2   # two rows of class 2
    y[50:] = 1
    for seed in range(50):
        order = rp._classes_on_both_sides(np.random.default_rng(seed), y, 10)
        assert sorted(order) == list(range(100))
        assert set(y[order[:10]]) == set(y[order[10:]]) == {0, 1, 2}
    y[4] = 0   # class 2 now has one row: it cannot lie on both sides
    assert rp._classes_on_both_sides(np.random.default_rng(0), y, 10) is None
