"""Oracle policy: success on one task per goal kind (small n) and a contrast goal.

The expected rates are what the oracle reaches today (docs/ORACLE.md); tasks the oracle does not yet solve are
marked xfail with the reason, so the suite documents the state instead of hiding it.
"""

import pytest

from clbench_jax.data.oracle import make_oracle, oracle_success
from clbench_jax.sim.scene import build_scene
from clbench_jax.tasks.suites import scene_tasks, suite_tasks

N = 2


@pytest.fixture(scope="module")
def goal_scene():
    return build_scene(suite_tasks("libero_goal"))


def _rate(scene, name, n=N, **kw):
    task = next(t for t in scene.tasks if t.name == name)
    return oracle_success(scene, [task], n, seed=0, **kw)[name]["success"]


def test_make_oracle_shapes(goal_scene):
    policy, p0 = make_oracle(goal_scene)
    ps = p0(3)
    assert ps["phase"].shape == (3,) and ps["off"].shape == (3, 3)


def test_turn_on_stove(goal_scene):
    assert _rate(goal_scene, "turn_on_the_stove") >= 0.99


def test_on_object_in_bowl(goal_scene):
    # On(cream_cheese, bowl): pick-and-place onto an object; 94% at n = 50 (docs/ORACLE.md), 1 of these 2 initial
    # states stalls the arm above the bowl
    assert _rate(goal_scene, "put_the_cream_cheese_in_the_bowl") >= 0.5


def test_on_site_bowl_on_stove(goal_scene):
    # bowl rim grasp: the constant 30 N squeeze (sim/robot.py) and the partly opened, tilted approach
    assert _rate(goal_scene, "put_the_bowl_on_the_stove") >= 0.99


def test_tall_object_wine_bottle(goal_scene):
    # a 0.21 m bottle: grasped by the neck so the hand clears its top (was 0% when grasped at mid-height)
    assert _rate(goal_scene, "put_the_wine_bottle_on_the_rack") >= 0.99


def test_open_drawer(goal_scene):
    # the middle drawer and the pinching hand pass over the low stand-in wine rack in front of the cabinet (0% with
    # the old 0.115 m rack: the drawer's front panel, then the hand's box, hit it; docs/ORACLE.md)
    assert _rate(goal_scene, "open_the_middle_drawer_of_the_cabinet") >= 0.9


def test_middle_drawer_slides_over_wine_rack(goal_scene):
    """Physics, no oracle: in libero_goal the wine rack stands 1.5-4 cm in front of the wooden cabinet; a 40 N pull
    on each drawer's joint alone (arm held at home, out of the way) must slide it past LIBERO's open threshold
    (q < -0.14), as in LIBERO, where the real rack passes under the middle drawer. The old 0.115 m stand-in stopped
    the middle drawer at q ~ -0.03."""
    import mujoco

    from clbench_jax.sim.init_states import make_init_bank, robot_hold_ctrl

    m = goal_scene.model
    task = next(t for t in goal_scene.tasks if t.name == "open_the_middle_drawer_of_the_cabinet")
    bank = make_init_bank(goal_scene, task, 3, seed=0)
    d = mujoco.MjData(m)
    for i in range(len(bank.state)):
        for level in ("middle", "top"):
            mujoco.mj_resetData(m, d)
            mujoco.mj_setState(m, d, bank.state[i], mujoco.mjtState.mjSTATE_FULLPHYSICS)
            d.mocap_pos[:], d.mocap_quat[:] = bank.mocap[i][:, :3], bank.mocap[i][:, 3:]
            d.ctrl[:] = robot_hold_ctrl(goal_scene)
            j = m.joint(f"wooden_cabinet_1_{level}_drawer_joint")
            d.qfrc_applied[j.dofadr[0]] = -40.0
            for _ in range(int(round(1.5 / m.opt.timestep))):
                mujoco.mj_step(m, d)
            q = d.qpos[j.qposadr[0]]
            assert q < -0.20, (i, level, q)


def test_open_top_drawer_and_put_bowl_inside(goal_scene):
    # open the drawer, step sideways clear of it, then the bowl: the straight path down to the bowl from above the
    # open drawer used to sweep its front panel and shut it (8-20% before, 97% at n = 30)
    assert _rate(goal_scene, "open_the_top_drawer_and_put_the_bowl_inside") >= 0.99


def test_push_plate(goal_scene):
    # the plate starts 1.6 cm from the cabinet's side: the push direction turns away from the goal's until the hand
    # fits behind the plate (26-47% before, 87% at n = 30)
    assert _rate(goal_scene, "push_the_plate_to_the_front_of_the_stove", n=4) >= 0.5


def test_contrast_goal(goal_scene):
    """Contrast goal: the bowl to the stove from the initial states of 'put the bowl on the plate'; the oracle
    must act on the given goal, not the task's own."""
    name = "put_the_bowl_on_the_plate"
    task = next(t for t in goal_scene.tasks if t.name == name)
    res = oracle_success(goal_scene, [task], N, seed=0, horizon=400,
                         goal_atoms=[("on", "akita_black_bowl_1", "flat_stove_1_cook_region")])
    assert res[name]["success"] >= 0.5


def test_rim_wall_within_reach():
    """libero_spatial's bowl on the stove sits 0.31 m from the arm's base: the habitual left near wall put the tilted
    hand's wrist 0.21-0.23 m from the base's axis, the elbow stalled on its joint limit (22-30% before); the reach
    term in the grasp-candidate score picks the right near wall there (100% at n = 20)."""
    scene = build_scene(suite_tasks("libero_spatial"))
    name = "pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate"
    assert _rate(scene, name, n=4) >= 0.99


@pytest.mark.slow
@pytest.mark.parametrize("suite,name,target", [
    ("libero_object", "pick_up_the_alphabet_soup_and_place_it_in_the_basket", 0.9),
    ("libero_90", "KITCHEN_SCENE6_close_the_microwave", 0.9),
    ("libero_90", "KITCHEN_SCENE4_close_the_bottom_drawer_of_the_cabinet", 0.9),
    ("libero_10", "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket_and_place_it_in_the_basket", 0.9),
])
def test_more_kinds(suite, name, target):
    tasks = suite_tasks(suite)
    task = next((t for t in tasks if t.name.startswith(name[:60])), None)
    if task is None:
        pytest.skip("task not found")
    scene = build_scene(scene_tasks(task.scene) if suite in ("libero_10", "libero_90") else tasks)
    rate = oracle_success(scene, [task], N, seed=0)[task.name]["success"]
    if rate < target:
        pytest.xfail(f"oracle at {rate:.0%} on {task.name} (docs/ORACLE.md)")


def test_hand_box_clears_tall_neighbour():
    """libero_object's tomato sauce can stands ~0.1 m from the taller orange-juice carton: with the closing axis
    toward the carton, the hand's 0.19 m box landed on the carton's top and slid off it (initial states 7 and 8 of
    these 10 failed, 86% at n = 50); the grasp-candidate score now turns the closing axis away (100% at n = 50)."""
    tasks = suite_tasks("libero_object")
    scene = build_scene(tasks)
    assert _rate(scene, "pick_up_the_tomato_sauce_and_place_it_in_the_basket", n=10) >= 0.99


def test_microwave_bar_within_reach():
    """KITCHEN_SCENE7 (microwave at yaw pi): with the stand-in's door hinged as LIBERO's, the pull bar sits within
    the arm's reach (6% when mirrored: the pre-grasp stalled at 0.8 m from the base)."""
    scene = build_scene(scene_tasks("KITCHEN_SCENE7"))
    assert _rate(scene, "KITCHEN_SCENE7_open_the_microwave", n=2) >= 0.99


def test_bowl_out_of_the_top_drawer():
    """libero_spatial's bowl in the open top drawer: pinched across the slide axis and slid 2 cm out before the lift
    (2% before: the hand box pushed the drawer shut, then the back rim caught under the cabinet's top panel)."""
    scene = build_scene(suite_tasks("libero_spatial"))
    name = "pick_up_the_black_bowl_in_the_top_drawer_of_the_wooden_cabinet_and_place_it_on_the_plate"
    assert _rate(scene, name, n=4) >= 0.74


@pytest.mark.slow
def test_rise_over_open_door():
    """libero_10: the first move toward the mug sweeps across the open microwave door's top unless it rises first
    (the door was shut and the mug knocked away in 6 of 20; 100% at n = 20 with the rise)."""
    scene = build_scene(scene_tasks("KITCHEN_SCENE6"))
    name = "KITCHEN_SCENE6_put_the_yellow_and_white_mug_in_the_microwave_and_close_it"
    assert _rate(scene, name, n=4) >= 0.74


@pytest.mark.slow
def test_shared_region_slots():
    """libero_10 "put both moka pots on the stove": both On rows name the stove's cook region; aimed at its centre,
    the second pot came down on the first (0 of 50). Each pot now gets its own slot on the region's diagonal, and the
    retreat after a release no longer climbs to the workspace's top (from there the next approach knocked the first
    pot over: 5 of these 10 initial states failed with the slots alone)."""
    task = next(t for t in suite_tasks("libero_10") if t.name == "KITCHEN_SCENE8_put_both_moka_pots_on_the_stove")
    scene = build_scene(scene_tasks(task.scene))
    assert _rate(scene, task.name, n=10) >= 0.9
