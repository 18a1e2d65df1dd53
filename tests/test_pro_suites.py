"""LIBERO-PRO's perturbed task sets as suites (tasks/suites.py): found in the installed package, ordered like the
LIBERO suite they perturb, instructions from their BDDL text, scene keys, and the one set that does not parse."""

from __future__ import annotations

import pytest

from clbench_jax.errors import BDDLError, UnknownTaskError
from clbench_jax.tasks import suites as S


def test_pro_suites_found_with_their_base():
    pro = S.pro_suites()
    assert pro["libero_goal_lan"] == "libero_goal" and pro["libero_10_with_mug"] == "libero_10"
    assert pro["libero_object_temp_x0.3"] == "libero_object" and pro["libero_spatial_swap"] == "libero_spatial"
    # every kind of each base is there; LIBERO's own suites and sets without initial states are not
    for base in S.PRO_BASES:
        assert {base + "_" + k for k in ("lan", "object", "swap", "task")} <= set(pro)
    others = {"libero_goal", "libero_90", "libero_mine", "libero_study_table", "libero_object_with_trigger"}
    assert not others & set(pro)
    assert S.pro_kind("libero_goal_with_milk") == "added distractor" and S.pro_kind("libero_object_temp_y0.1") == \
        "position shift"


def test_order_follows_the_libero_suite():
    """Files renamed by LIBERO-PRO (another scene prefix, reworded) land at their LIBERO task's index: the
    distractor set's goals are the LIBERO tasks' goals, index by index."""
    base = S.suite_tasks("libero_goal")
    for suite in ("libero_goal_with_milk", "libero_goal_lan", "libero_goal_swap"):
        tasks = S.suite_tasks(suite)
        assert [sorted(map(str, t.goal)) for t in tasks] == [sorted(map(str, t.goal)) for t in base], suite
    assert S.suite_tasks("libero_goal_with_milk")[0].name == "FLOOR_SCENE1_open_the_middle_layer_of_the_drawer"
    spatial = S.suite_tasks("libero_spatial_with_blue_stick")  # all goals alike: matched by the reworded file name
    assert "next_to_the_cookies_box" in spatial[6].name and "between_the_plate" in spatial[0].name
    assert S.task_order("libero_goal_lan", 1) == S.task_order("libero_goal", 1)


def test_instruction_is_the_bddl_language():
    """LIBERO-PRO perturbs the (:language ...) text and keeps file names: that text is the instruction."""
    assert S.suite_tasks("libero_goal_lan")[8].instruction == "place the bowl on top of the plate"
    assert S.suite_tasks("libero_goal")[8].instruction == "put the bowl on the plate"
    task = S.suite_tasks("libero_goal_task")[8]
    assert task.name == "put_the_bowl_on_the_plate" and task.instruction == "put the wine bottle on the plate"
    assert [str(a) for a in task.goal] == ["(on wine_bottle_1 plate_1)"]


def test_scene_keys_and_lookup():
    lan = S.suite_tasks("libero_goal_lan")
    assert {t.scene for t in lan} == {"libero_goal_lan"} and S.scene_tasks("libero_goal_lan") == lan
    ten = S.suite_tasks("libero_10_swap")
    assert ten[2].scene == "libero_10_swap/" + ten[2].name and S.scene_tasks(ten[2].scene) == [ten[2]]
    t = S.get_task("libero_goal_swap:3")
    assert t.suite == "libero_goal_swap" and t.name == "open_the_top_drawer_and_put_the_bowl_inside"
    assert S.get_task("put_the_bowl_on_the_plate").suite == "libero_goal"  # full names stay LIBERO's
    with pytest.raises(UnknownTaskError, match="libero_goal_lan"):
        S.suite_tasks("libero_goal_lann")


def test_the_set_with_an_inverted_range_is_refused_by_name():
    """libero_object_temp_y0.5 ships one file whose region's y range runs backwards: the parser names it."""
    with pytest.raises(BDDLError, match="x0 <= x1 and y0 <= y1") as e:
        S.suite_tasks("libero_object_temp_y0.5")
    assert "pick_up_the_cream_cheese" in e.value.file and e.value.line == 15


@pytest.mark.slow
def test_grid_evaluates_a_checkpoint_on_a_pro_suite(tmp_path):
    """A checkpoint (a tiny random-init BC-Transformer) evaluated by the grid on a LIBERO-PRO task (the mug
    distractor set), on the native backend and in LIBERO's own environment: the same episodes, the same outcome."""
    import jax
    import numpy as np

    from clbench_jax.eval import grid as G
    from clbench_jax.eval.grid_runner import run_grid
    from clbench_jax.lifelong.loop import scene_for
    from clbench_jax.policies import make_bc_transformer
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.sim import libero_backend

    tiny = dict(embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, seq_len=4, gmm_hidden=(32,),
                gmm_modes=3)
    policy = make_bc_transformer("state", **tiny)
    tasks = tuple(S.suite_tasks("libero_goal_with_mug")[:1])
    scene = scene_for(tasks[0].scene)
    assert "porcelain_mug_1" in scene.objects or any("mug" in o for o in scene.objects)
    ex = {"obs": {k: np.zeros((1, 4) + s, d) for k, (s, d) in obs_spec(scene, "state").items()},
          "lang": np.zeros((1, 384), np.float32)}
    params = policy.init(jax.random.PRNGKey(0), ex)
    cks = [G.Checkpoint("m", 0, 0, lambda j: params)]
    variants = ((G.original_variant(tasks[0]),),)
    emb = [np.random.default_rng(0).normal(size=(1, 384)).astype(np.float32)]
    cols = {}
    try:
        for backend in ("native", "libero"):
            spec = G.GridSpec(tasks=tasks, variants=variants, n_rollouts=2, horizon=6, chunk=2, backend=backend)
            cols[backend] = run_grid(spec, cks, policy, tmp_path / backend, embeddings=emb, progress=False)
    finally:
        libero_backend.close_pool()
    for c in cols.values():
        assert list(c["status"]) == ["ok", "ok"] and list(c["length"]) == [6, 6]
        assert c["variant"][0] == f"{tasks[0].name}/original"
    np.testing.assert_array_equal(cols["native"]["success"], cols["libero"]["success"])
    np.testing.assert_array_equal(cols["native"]["held_at_reset"], cols["libero"]["held_at_reset"])
    # the same starts and policy: the hands end within millimetres of each other
    np.testing.assert_allclose(cols["native"]["ee_disp_max"], cols["libero"]["ee_disp_max"], atol=3e-3)
