"""S[t, j, c] from a hand-built episode table: per-variant means, variants averaged equally, failed cells left
out, collisions excluded, mean / std across seeds; per-seed metrics against hand-computed values."""

import numpy as np
import pytest

from clbench_jax.eval import aggregate, episodes
from clbench_jax.eval.language_metrics import success_matrix

COLS = ("method", "seed", "stage", "task", "variant", "condition", "target", "status", "success")


def _table():
    rows = []

    def add(method, seed, t, j, variant, cond, target, succ, status="ok"):
        for s in succ:  # s: per goal column (2 columns)
            rows.append((method, seed, t, j, variant, cond, target, status, s))

    # method a, seed 0
    add("a", 0, 0, 0, "o0", "original", 0, [(1, 0), (0, 0)])                       # 0.5
    add("a", 0, 0, 0, "p1", "paraphrase", 0, [(1, 0), (1, 1)])                     # 1.0
    add("a", 0, 0, 0, "p2", "paraphrase", 0, [(0, 0), (0, 1), (0, 0), (1, 0)])     # 0.25 -> S = 0.625 (pooled 0.5)
    add("a", 0, 0, 0, "c1", "contrast", 1, [(1, 0), (0, 1)])                       # target column 1: 0.5
    add("a", 0, 0, 0, "x1", "collision", -1, [(1, 1), (1, 1)])                     # no S
    add("a", 0, 1, 0, "o0", "original", 0, [(0, 1), (0, 1)])                       # 0.0
    add("a", 0, 1, 1, "o1", "original", 0, [(1, 0), (1, 0)])                       # 1.0
    add("a", 0, 1, 1, "p3", "paraphrase", 0, [(1, 1), (1, 1)], "failed cell: non-finite values")  # left out
    # method a, seed 1
    add("a", 1, 0, 0, "o0", "original", 0, [(1, 0), (1, 0)])                       # 1.0
    add("a", 1, 1, 0, "o0", "original", 0, [(1, 0), (0, 0)])                       # 0.5
    add("a", 1, 1, 1, "o1", "original", 0, [(0, 0), (0, 0)])                       # 0.0
    # method b, seed 0: only stage 0
    add("b", 0, 0, 0, "o0", "original", 0, [(0, 0), (0, 0), (0, 0), (1, 1)])       # 0.25
    cols = {k: np.array([r[i] for r in rows]) for i, k in enumerate(COLS)}
    cols["success"] = cols["success"].astype(bool)
    return cols


def test_success_tensor_hand_computed():
    T = aggregate.success_tensors(_table(), n_tasks=2)
    a = T["a"]
    assert a["seeds"] == [0, 1] and a["conditions"] == ["original", "paraphrase", "contrast"]
    o, p, c = 0, 1, 2
    s0, s1 = a["per_seed"]
    np.testing.assert_allclose(s0[:, :, o], [[0.5, np.nan], [0.0, 1.0]])
    np.testing.assert_allclose(s1[:, :, o], [[1.0, np.nan], [0.5, 0.0]])
    assert s0[0, 0, p] == pytest.approx(0.625)  # variants equally, not pooled episodes (0.5)
    assert np.isnan(s0[1, 1, p])  # the failed cell is left out, not counted as its (True) rows
    assert s0[0, 0, c] == pytest.approx(0.5)  # judged on the contrast's own goal column
    assert np.isnan(s1[0, 0, p]) and np.isnan(s1[0, 0, c])
    np.testing.assert_allclose(a["mean"][:, :, o], [[0.75, np.nan], [0.25, 0.5]])
    np.testing.assert_allclose(a["std"][:, :, o], [[0.25, np.nan], [0.25, 0.5]])
    assert T["b"]["per_seed"][0, 0, 0, o] == pytest.approx(0.25)
    assert np.isnan(T["b"]["mean"][1]).all()


def test_matches_language_metrics_success_matrix():
    """Cross-check: the per-seed original slice equals language_metrics.success_matrix on the same rows."""
    cols = _table()
    T = aggregate.success_tensors(cols, n_tasks=2)
    for si, seed in enumerate((0, 1)):
        m = (cols["method"] == "a") & (cols["seed"] == seed) & (cols["condition"] == "original")
        want = success_matrix(cols["stage"][m], cols["task"][m], cols["variant"][m], cols["success"][m, 0], 2)
        np.testing.assert_allclose(T["a"]["per_seed"][si, :, :, 0], want)


def test_seed_metrics_hand_computed():
    m = aggregate.seed_metrics(aggregate.success_tensors(_table(), n_tasks=2))["a"]["original"]
    # seed 0: S = [[.5, -], [0, 1]] -> NBT .5, AUC (.25 + 1) / 2 = .625, final .5
    # seed 1: S = [[1, -], [.5, 0]] -> NBT .5, AUC (.75 + 0) / 2 = .375, final .25
    assert m["nbt"]["per_seed"] == pytest.approx([0.5, 0.5]) and m["nbt"]["std"] == pytest.approx(0.0)
    assert m["auc"]["mean"] == pytest.approx(0.5) and m["auc"]["std"] == pytest.approx(0.125)
    assert m["final"]["mean"] == pytest.approx(0.375) and m["final"]["std"] == pytest.approx(0.125)


def test_episode_file_roundtrip(tmp_path):
    cols = _table()
    episodes.write_columns(tmp_path / "e.h5", cols, {"note": "x"})
    back, meta = episodes.read_columns(tmp_path / "e.h5")
    assert meta == {"note": "x"} and set(back) == set(cols)
    for k in cols:
        np.testing.assert_array_equal(back[k], cols[k])
    (tmp_path / "bad.h5").write_bytes(b"not hdf5")
    with pytest.raises(episodes.DataFileError, match="bad.h5"):
        episodes.read_columns(tmp_path / "bad.h5")
