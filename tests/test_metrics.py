"""LIBERO's FWT / NBT / AUC against values computed by hand from a made-up success matrix."""

import numpy as np
import pytest

from clbench_jax.lifelong.metrics import auc_per_task, held_curve, lifelong_metrics, nbt_per_task

NAN = float("nan")
# c[i][j]: success on task j after learning task i (K = 3).
C = [[0.8, NAN, NAN],
     [0.5, 0.6, NAN],
     [0.2, 0.3, 1.0]]
CURVES = [[0.0, 0.4, 0.8, 0.6],   # peak 0.8 at index 2 -> held: 0, .4, .8, .8 -> mean 0.5 (plain mean 0.45)
          [0.1, 0.6, 0.2, 0.3],   # held: .1, .6, .6, .6 -> 0.475 (plain 0.3)
          [0.0, 0.0, 1.0, 1.0]]   # held = plain: 0.5


def test_held_curve_first_peak():
    np.testing.assert_allclose(held_curve([0.1, 0.5, 0.2, 0.5, 0.3]), [0.1, 0.5, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(held_curve([0.1, 0.5, 0.2], hold_peak=False), [0.1, 0.5, 0.2])


def test_metrics_hand_computed():
    m = lifelong_metrics(C, CURVES)
    # FWT: (0.5 + 0.475 + 0.5) / 3
    assert m["fwt_per_task"] == pytest.approx([0.5, 0.475, 0.5])
    assert m["fwt"] == pytest.approx(1.475 / 3)
    # NBT task 1: ((0.8-0.5) + (0.8-0.2)) / 2 = 0.45; task 2: 0.6-0.3 = 0.3; last task: none. Mean 0.375.
    assert m["nbt_per_task"] == pytest.approx([0.45, 0.3])
    assert m["nbt"] == pytest.approx(0.375)
    # AUC task 1: (0.5 + 0.5 + 0.2) / 3 = 0.4; task 2: (0.475 + 0.3) / 2 = 0.3875; task 3: 0.5 / 1.
    assert m["auc_per_task"] == pytest.approx([0.4, 0.3875, 0.5])
    assert m["auc"] == pytest.approx((0.4 + 0.3875 + 0.5) / 3)


def test_metrics_paper_plain_mean():
    m = lifelong_metrics(C, CURVES, hold_peak=False)
    assert m["fwt_per_task"] == pytest.approx([0.45, 0.3, 0.5])
    assert m["auc_per_task"][1] == pytest.approx((0.3 + 0.3) / 2)


def test_one_task_and_bad_shapes():
    m = lifelong_metrics([[0.7]], [[0.0, 0.7]])
    assert m["nbt"] is None and m["fwt"] == pytest.approx(0.35) and m["auc"] == pytest.approx(0.35)
    assert nbt_per_task([[1.0]]).size == 0
    assert auc_per_task([[1.0]], [0.25]) == pytest.approx([0.25])
    with pytest.raises(ValueError):
        lifelong_metrics(C, CURVES[:2])
