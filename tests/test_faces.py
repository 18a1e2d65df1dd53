"""Seed 004's battery: what occ blanks, which objects a goal names, the first-grasp split, the no-switch baselines,
trivially reachable contrasts and unverified probes reported apart, the paraphrase gap by kind, and the floors --
numbers from hand-built episodes worked out by hand, and the floors run for real on two short libero_goal episodes."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from clbench_jax.errors import ClbenchError
from clbench_jax.eval import episodes, faces
from clbench_jax.eval.report import finalize
from clbench_jax.policies.bc import RGB_KEYS, STATE_KEYS
from clbench_jax.sim.scene import TOKEN_DIM
from clbench_jax.tasks.suites import get_task


def test_occ_blanks_cameras_or_token_identity_and_refuses_a_policy_with_neither():
    assert faces.occlusion_keys(RGB_KEYS) == ("agentview_rgb", "eye_in_hand_rgb")
    assert faces.occlusion_keys(STATE_KEYS) == ("tokens",)
    with pytest.raises(ClbenchError, match="observes neither") as e:
        faces.occlusion_keys(("joint_states", "gripper_states"))
    assert e.value.field == "grid.conditions" and "joint_states" in str(e.value)
    rng = np.random.default_rng(0)
    obs = {"tokens": jnp.asarray(rng.normal(size=(3, 4, TOKEN_DIM)), jnp.float32),
           "agentview_rgb": jnp.full((3, 2, 2, 3), 200, jnp.uint8), "joint_states": jnp.ones((3, 7))}
    occ = jnp.array([True, False, True])
    out = faces.occlude(obs, occ, ("agentview_rgb", "tokens"))
    tok, orig = np.asarray(out["tokens"]), np.asarray(obs["tokens"])
    ident = np.zeros(TOKEN_DIM, bool)
    ident[7:7 + 3 + 3 + 16] = True  # size, colour, shape class
    assert (tok[[0, 2]][..., ident] == 0).all()
    np.testing.assert_array_equal(tok[[0, 2]][..., ~ident], orig[[0, 2]][..., ~ident])  # poses and joints stay
    np.testing.assert_array_equal(tok[1], orig[1])
    assert (np.asarray(out["agentview_rgb"])[[0, 2]] == 0).all() and (np.asarray(out["agentview_rgb"])[1] == 200).all()
    np.testing.assert_array_equal(out["joint_states"], obs["joint_states"])


def test_named_and_original_objects_and_grasp_categories():
    drawer = get_task("libero_goal:0")  # open the middle drawer: the cabinet owns the region
    assert faces.manipulated(drawer, (("open", "wooden_cabinet_1_middle_region"),)) == ("wooden_cabinet_1",)
    bowl = get_task("libero_goal:1")
    orig = (("on", "akita_black_bowl_1", "flat_stove_1_cook_region"),)
    swap = (("on", "plate_1", "flat_stove_1_cook_region"),)
    assert faces.named_objects(bowl, swap, orig) == ("plate_1",)
    assert faces.named_objects(bowl, (("on", "akita_black_bowl_1", "plate_1"),), orig) == ("akita_black_bowl_1",)
    assert faces.named_objects(bowl, None, orig) == ()  # a collision names nothing of the goal
    got = faces.grasp_category(["plate_1", "akita_black_bowl_1", "wine_bottle_1", "", "a"],
                               ["plate_1", "plate_1", "plate_1", "plate_1", "a,b"], ["akita_black_bowl_1"] * 4 + ["a"])
    assert got.tolist() == ["named", "original", "other", "none", "named"]


def _row(variant, cond, target, succ, grasp, named, slot="", trivial=False, kinds="", method="m"):
    return dict(method=method, seed=0, stage=0, task=0, variant=variant, condition=cond, slot=slot, target=target,
                status="ok", success=succ, held_at_reset=(0, 0, 0), action_initiated=True, n_audited=2,
                trivial=trivial, kinds=kinds, first_grasp_object=grasp, named_object=named, original_object="bowl")


def _battery_rows(method="m"):
    r = []
    add = lambda v, c, t, rows, named="bowl", **kw: r.extend(  # noqa: E731
        _row(v, c, t, s, g, named, method=method, **kw) for s, g in rows)
    # goal columns: 0 original (bowl on the stove), 1 a contrast goal (cheese), 2 a swap goal (plate); G_j = 0, 1
    add("o", "original", 0, [((1, 0, 0), "bowl"), ((1, 0, 0), "bowl"), ((0, 1, 0), "cheese"), ((0, 0, 1), "")])
    add("c", "contrast", 1, [((0, 1, 0), "cheese"), ((1, 0, 0), "bowl")], named="cheese", slot="object")
    add("ct", "contrast", 1, [((0, 1, 0), "cheese")] * 2, named="cheese", slot="action", trivial=True)
    add("s", "swap", 2, [((0, 0, 1), "plate"), ((1, 0, 0), "bowl"), ((0, 0, 0), "plate"), ((0, 0, 0), "")],
        named="plate", slot="object")
    add("n", "nonsense", 0, [((1, 0, 0), "bowl"), ((0, 0, 0), "")])
    add("x", "occ", 0, [((0, 0, 0), "")] * 2)
    add("k", "collision", -1, [((0, 0, 1), ""), ((1, 0, 0), "bowl")], named="", slot="object")
    add("pr", "probe", -1, [((1, 0, 0), "bowl")] * 2, named="", slot="attribute")
    add("p1", "paraphrase", 0, [((1, 0, 0), "bowl"), ((0, 0, 0), "")], kinds="synonym")
    add("p2", "paraphrase", 0, [((0, 0, 0), "")] * 2, kinds="synonym,question,composition")
    cols = {k: np.array([x[k] for x in r]) for k in r[0]}
    for k in ("success", "held_at_reset"):
        cols[k] = cols[k].astype(bool)
    return cols


def test_report_reads_the_battery_against_floors_and_baselines(tmp_path):
    episodes.write_columns(tmp_path / "grid" / "episodes.h5", _battery_rows(), {"tasks": ["task_a"]})
    floor = _battery_rows("do-nothing")
    floor["success"][:] = False  # the floor reaches nothing and grasps nothing
    floor["first_grasp_object"][:] = ""
    episodes.write_columns(tmp_path / "floors" / "do-nothing" / "episodes.h5", floor, {"tasks": ["task_a"]})
    doc = finalize(tmp_path, log=lambda m: None)
    lang = doc["language"]["m"]
    mean = lambda d: {k: v["mean"] for k, v in d.items()}  # noqa: E731
    # the trivially reachable contrast is apart: contrast numbers come from "c" alone
    assert mean(lang["contrast"]) == pytest.approx({"target_sr": 0.5, "gsa": 0.5, "original_persistence": 0.5})
    assert mean(lang["contrast_trivial"]) == pytest.approx({"target_sr": 1, "gsa": 1, "original_persistence": 0})
    # no-switch baselines from the original rollouts: the contrast goal (column 1) in 1 of 4, the swap goal too
    assert mean(lang["contrast_baseline"]) == pytest.approx({"target_sr": 0.25, "gsa": 0.25})
    assert mean(lang["swap_baseline"]) == pytest.approx({"target_sr": 0.25, "gsa": 0.25})
    # collisions over the audited goals only: the swap goal (column 2) reached in rollout 0 does not count
    assert mean(lang["collision"]) == pytest.approx({"ogp": 0.5, "cgar": 0.5, "air": 1.0})
    assert mean(lang["collision_achieved"]) == pytest.approx({"original": .5, "other": 0, "multiple": 0, "none": .5})
    assert lang["probe"]["ogp"]["mean"] == 1.0  # unverified probes: their own row
    f = lang["faces"]
    assert f["original"]["success"]["mean"] == 0.5 and f["original"]["failures"]["mean"] == 0.5
    assert mean(f["original"]["failed_first_grasp"]) == pytest.approx({"named": 0, "original": 0, "other": .5,
                                                                        "none": .5})
    assert f["swap"]["success"]["mean"] == 0.25 and f["swap"]["original_goal"]["mean"] == 0.25
    assert mean(f["swap"]["first_grasp"]) == pytest.approx({"named": .5, "original": .25, "other": 0, "none": .25})
    assert mean(f["swap"]["failed_first_grasp"]) == pytest.approx({"named": 1 / 3, "original": 1 / 3, "other": 0,
                                                                    "none": 1 / 3})
    assert mean(f["contrast"]["failed_first_grasp"])["original"] == 1.0  # the miss grasped the old object
    assert f["nonsense"]["success"]["mean"] == 0.5 and f["occ"]["success"]["mean"] == 0.0
    assert "first_reach" not in f["swap"] and doc["first_reach_recorded"] is False
    # the paraphrase gap by kind: original 0.5; synonym paraphrases p1 (.5) and p2 (0), question only p2
    kinds = doc["paraphrase_kinds"]["m"]
    assert {k: v["final_gap"]["mean"] for k, v in kinds.items()} == pytest.approx(
        {"synonym": 0.25, "question": 0.5, "composition": 0.5})
    assert kinds["synonym"]["variants"] == 2 and kinds["question"]["tasks"] == 1
    # the floor: same tables, its own rows
    fl = doc["floors"]
    assert fl["files"] == {"do-nothing": "floors/do-nothing/episodes.h5"}
    assert fl["metrics"]["do-nothing"]["original"]["final"]["mean"] == 0.0
    assert fl["language"]["do-nothing"]["faces"]["swap"]["first_grasp"]["none"]["mean"] == 1.0
    md = (tmp_path / "report.md").read_text()
    assert "| floor: do-nothing | 1 | 0.0 ± 0.0 |" in md  # FWT table
    assert "| m | 50.0 ± 0.0 | 50.0 ± 0.0 | 25.0 ± 0.0 | 50.0 ± 0.0 | 50.0 ± 0.0 | 50.0 ± 0.0 | 100.0 ± 0.0 |" in md
    assert "| m | 100.0 ± 0.0 | 100.0 ± 0.0 | 0.0 ± 0.0 | 100.0 ± 0.0 | 100.0 ± 0.0 | 100.0 ± 0.0 |" in md  # apart
    # original SR, swap named goal, swap original goal, first grasp named, no-switch, occ, nonsense
    assert "| m | 50.0 ± 0.0 | 25.0 ± 0.0 | 25.0 ± 0.0 | 50.0 ± 0.0 | 25.0 ± 0.0 | 0.0 ± 0.0 | 50.0 ± 0.0 |" in md
    assert "| m | swap | 25.0 ± 0.0 | 75.0 ± 0.0 | 33.3 ± 0.0 | 33.3 ± 0.0 | 0.0 ± 0.0 | 33.3 ± 0.0 |" in md
    assert "| floor: do-nothing | swap | 0.0 ± 0.0 | 100.0 ± 0.0 | 0.0 ± 0.0 | 0.0 ± 0.0 | 0.0 ± 0.0 | 100.0 ± 0.0 |" in md
    assert "not recorded by this simulator build" in md
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["floors"]["language"]["do-nothing"]["faces"]["occ"]["success"]["mean"] == 0.0


def test_floors_run_the_battery_for_real(tmp_path):
    """Two libero_goal tasks, their original instruction, a paraphrase, occ, a contrast and a collision, 2 rollouts of
    15 steps: the do-nothing floor never moves; the random-motion floor moves at once. Floors read no instruction, so
    a floor runs one variant per stop class and copies its episodes to the others: the file is row for row what a
    run of every variant writes."""
    from dataclasses import replace

    from clbench_jax.eval import grid as G
    from clbench_jax.eval.grid_runner import run_grid
    from clbench_jax.eval.floors import FLOORS, FloorPolicy, floor_episode_files, floor_fn, run_floors
    from clbench_jax.tasks.suites import suite_tasks

    tasks = tuple(suite_tasks("libero_goal")[:2])
    variants = tuple((G.original_variant(t), G.Variant(f"{t.name}/p", "paraphrase", "say it otherwise",
                                                       G.original_variant(t).goal), G.occ_variant(t),
                      G.Variant(f"{t.name}/c", "contrast", "do the other task", G.original_variant(tasks[1 - j]).goal),
                      G.Variant(f"{t.name}/x", "collision", "shake it", None))
                     for j, t in enumerate(tasks))
    spec = G.GridSpec(tasks=tasks, variants=variants, n_rollouts=2, horizon=15, chunk=6, obs="rgb",
                      final_only=("occ",))
    files = run_floors(spec, tmp_path / "floors", FLOORS, progress=False)
    assert floor_episode_files(tmp_path) == files and set(files) == set(FLOORS)
    still, _ = episodes.read_columns(files["do-nothing"])
    moving, meta = episodes.read_columns(files["random-motion"])
    assert len(still["method"]) == len(moving["method"]) == 2 * 5 * 2 and (still["status"] == "ok").all()
    assert set(still["method"]) == {"do-nothing"} and (still["stage"] == 1).all()
    # zero actions: robosuite's OSC holds the hand within ~1.5 mm of where it settles (as in LIBERO), far under 1 cm
    assert not still["action_initiated"].any() and (still["ee_disp_max"] < 3e-3).all()
    assert moving["action_initiated"].all()
    assert meta["spec"]["obs"] == "state"  # floors look at nothing: no rendering for an RGB run's floors
    assert len(episodes.read_columns(tmp_path / "floors" / "random-motion" / "shared" / "episodes.h5")[0]["task"]) \
        == 2 * 2 * 2  # two variants per task ran
    # the copies against every variant run
    ref = run_grid(replace(spec, obs="state"), [G.Checkpoint("random-motion", 0, 1, lambda j: {"floor": np.zeros(1)})],
                     FloorPolicy("random-motion"), tmp_path / "every", embeddings=[np.zeros((5, 384))] * 2,
                     progress=False, policy_fn=floor_fn("random-motion"))
    order = lambda c: np.lexsort((c["rollout"], c["variant"], c["task"]))  # noqa: E731
    a, b = order(moving), order(ref)
    assert set(moving) == set(ref)
    for k in ref:
        np.testing.assert_array_equal(moving[k][a], ref[k][b], err_msg=k)
    assert (moving["target"][moving["condition"] == "contrast"] == 1).all()


def test_every_table_has_the_floor_rows(tmp_path):
    """Seed 000's per-slot and collision tables and the per-task table carry the floors too."""
    episodes.write_columns(tmp_path / "grid" / "episodes.h5", _battery_rows(), {"tasks": ["task_a"]})
    floor = _battery_rows("random-motion")
    episodes.write_columns(tmp_path / "floors" / "random-motion" / "episodes.h5", floor, {"tasks": ["task_a"]})
    finalize(tmp_path, log=lambda m: None)
    md = (tmp_path / "report.md").read_text()
    per_slot = md.split("Figure 3)")[1].split("![")[0]
    collisions = md.split("(Figure 4)")[1].split("![")[0]
    per_task = md.split("## Final success per task")[1].split("##")[0]
    for table in (per_slot, collisions):
        assert "| m |" in table and "| floor: random-motion |" in table
    assert "| task | m | floor: random-motion |" in per_task and "| 0: task_a | 50.0 ± 0.0 | 50.0 ± 0.0 |" in per_task
