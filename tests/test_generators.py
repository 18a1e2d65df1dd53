"""Demonstration generators: confounded (LIBERO's placements) vs deconfounded (permuted table placements)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from clbench_jax.data import generators as g
from clbench_jax.sim.init_states import make_init_bank
from clbench_jax.sim.scene import build_scene
from clbench_jax.tasks.suites import get_task, suite_tasks


@pytest.fixture(scope="module")
def goal_scene():
    return build_scene(suite_tasks("libero_goal"))


@pytest.fixture(scope="module")
def object_scene():
    return build_scene(suite_tasks("libero_object"))


def test_chi_square_and_cramers_v_by_hand():
    # perfectly dependent 2x2 with 10 per cell on the diagonal: chi2 = N = 20, V = 1
    assert g.chi_square([[10, 0], [0, 10]]) == pytest.approx(20.0)
    assert g.chi_square([[5, 5], [5, 5]]) == pytest.approx(0.0)
    # [[8, 2], [2, 8]]: expected 5 everywhere -> 4 * 9 / 5 = 7.2
    assert g.chi_square([[8, 2], [2, 8]]) == pytest.approx(7.2)
    dep = g.independence_test([0] * 10 + [1] * 10, ["a"] * 10 + ["b"] * 10, n_perm=500)
    assert dep["chi2"] == pytest.approx(20.0) and dep["cramers_v"] == pytest.approx(1.0)
    assert dep["p"] < 0.01  # a shuffle reproduces a perfect 10/10 split with probability 2 / C(20, 10)
    ind = g.independence_test([0, 1] * 10, ["a"] * 10 + ["b"] * 10, n_perm=500)
    assert ind["chi2"] == pytest.approx(0.0) and ind["p"] == pytest.approx(1.0)


def test_targets(goal_scene):
    names = {t.name: g.target_object(goal_scene, t) for t in goal_scene.tasks}
    assert names["put_the_bowl_on_the_plate"] == "akita_black_bowl_1"
    assert names["push_the_plate_to_the_front_of_the_stove"] == "plate_1"
    assert names["open_the_top_drawer_and_put_the_bowl_inside"] == "akita_black_bowl_1"  # first movable arg
    assert names["turn_on_the_stove"] is None and names["open_the_middle_drawer_of_the_cabinet"] is None
    t = get_task("libero_goal:8")
    assert g.table_placements(goal_scene, t) == {
        "akita_black_bowl_1": "main_table_akita_black_bowl_region", "cream_cheese_1": "main_table_cream_cheese_region",
        "wine_bottle_1": "main_table_wine_bottle_region", "plate_1": "main_table_plate_region"}


def test_confounded_is_libero_placement(goal_scene):
    t = get_task("libero_goal:8")
    bank = g.init_bank(goal_scene, t, 6, 0, "confounded")
    assert bank.inits == () and bank.source == "libero"
    placed = g.table_placements(goal_scene, t)
    for obj, slots in g.object_slots(goal_scene, t, bank).items():
        assert slots == [placed[obj]] * 6, obj
    ref = make_init_bank(goal_scene, t, 6, seed=0)  # the same thing LIBERO-style callers get
    np.testing.assert_array_equal(bank.state, ref.state)


def test_variant_hook_draws_from_libero_reset(goal_scene):
    """An identity variant is LIBERO's own reset of the task's BDDL: other states than the official ones (another
    draw), objects in the same :init slots, deterministic per (seed, index)."""
    t = get_task("libero_goal:1")
    a = make_init_bank(goal_scene, t, 4, seed=5)
    b = make_init_bank(goal_scene, t, 4, seed=5, variant=lambda rng: t)
    assert b.inits == (t.init,) * 4 and b.source == "sampler"
    assert not np.allclose(a.state, b.state)
    assert g.object_slots(goal_scene, t, a) == g.object_slots(goal_scene, t, b)
    np.testing.assert_array_equal(b.state, make_init_bank(goal_scene, t, 4, seed=5, variant=lambda rng: t).state)


def test_deconfounded_permutes_and_validates(goal_scene):
    t = get_task("libero_goal:8")
    bank = g.init_bank(goal_scene, t, 12, 0, "deconfounded")
    assert len(bank.inits) == 12 and bank.source == "sampler"
    placed = g.table_placements(goal_scene, t)
    slots = g.object_slots(goal_scene, t, bank)
    keep = [a for a in t.init if not (a.pred == "on" and a.args[0] in placed)]
    layouts = set()
    for i, init in enumerate(bank.inits):
        assigned = {a.args[0]: a.args[1] for a in init if a.pred == "on" and a.args[0] in placed}
        assert sorted(assigned.values()) == sorted(placed.values())  # a permutation of the slots
        assert [a for a in init if not (a.pred == "on" and a.args[0] in placed)] == keep  # fixtures untouched
        for obj in placed:  # LIBERO's reset puts each object in the slot its permuted atom names
            assert slots[obj][i] == assigned[obj], (i, obj)
        layouts.add(tuple(sorted(assigned.items())))
    assert len(layouts) >= 6  # 4! = 24 layouts; 12 draws cover many
    # same seed, same bank
    again = g.init_bank(goal_scene, t, 12, 0, "deconfounded")
    np.testing.assert_array_equal(again.state, bank.state)


def _records(scene, gen, n):
    rec = []
    for t in scene.tasks:
        rec += g.slot_records(scene, t, g.init_bank(scene, t, n, 0, gen))
    return rec


@pytest.mark.slow
def test_target_position_independent_of_task_only_when_deconfounded(goal_scene):
    """libero_goal (one scene, 8 tasks with a movable target): the target's settled slot vs the task id."""
    out = {}
    for gen in g.GENERATORS:
        tg = [r for r in _records(goal_scene, gen, 16) if r["is_target"]]
        out[gen] = g.independence_test([r["task"] for r in tg], [r["slot"] for r in tg], n_perm=1000, seed=0)
    conf, dec = out["confounded"], out["deconfounded"]
    print({k: {m: round(v[m], 4) for m in ("chi2", "p", "cramers_v", "n")} for k, v in out.items()})
    assert conf["n"] == dec["n"] == 8 * 16
    assert conf["cramers_v"] == pytest.approx(1.0) and conf["p"] < 0.002  # the task fixes the target's slot
    assert dec["p"] > 0.05 and dec["cramers_v"] < 0.45
    # every slot hosts the target under deconfounded
    assert len(dec["cols"]) == 4 and min(np.asarray(dec["table"]).sum(0)) >= 16


@pytest.mark.slow
def test_position_predicts_target_only_when_confounded(object_scene):
    """libero_object: does an object's slot say whether it is the target? (LIBERO: always the same slot.)"""
    out = {}
    for gen in g.GENERATORS:
        rec = _records(object_scene, gen, 8)
        out[gen] = g.independence_test([r["slot"] for r in rec], [r["is_target"] for r in rec], n_perm=1000)
        hits = Counter(r["slot"] for r in rec if r["is_target"])
        out[gen]["prior_hit"] = max(hits.values()) / sum(hits.values())  # "go to the usual target slot"
    conf, dec = out["confounded"], out["deconfounded"]
    print({k: {m: round(v[m], 4) for m in ("chi2", "p", "cramers_v", "prior_hit")} for k, v in out.items()})
    assert conf["n"] == dec["n"] == 10 * 8 * 6  # six candidate targets per task; the basket is never one
    assert conf["cramers_v"] == pytest.approx(1.0) and conf["p"] < 0.002 and conf["prior_hit"] == 1.0
    assert dec["p"] > 0.05 and dec["cramers_v"] < 0.15 and dec["prior_hit"] < 0.4


def test_never_targets_stay_put(object_scene):
    t = get_task("libero_object:3")
    assert "basket_1" not in g.permutable_objects(object_scene, t)
    assert len(g.permutable_objects(object_scene, t)) == 6
    bank = g.init_bank(object_scene, t, 6, 1, "deconfounded")
    assert g.object_slots(object_scene, t, bank)["basket_1"] == ["floor_bin_region"] * 6


def test_refusals():
    spatial = build_scene(suite_tasks("libero_spatial"))
    with pytest.raises(g.GeneratorError, match="twin") as e:
        g.init_bank(spatial, get_task("libero_spatial:0"), 2, 0, "deconfounded")
    assert e.value.task == "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"
    assert e.value.token == "akita_black_bowl_1"
    with pytest.raises(g.GeneratorError, match="unknown generator"):
        g.check_generator("shuffled")
