"""Hand-computed cases for the jnp predicates (the LIBERO differential test is test_predicates_libero.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from clbench_jax.errors import MissingEntityError, UnknownPredicateError
from clbench_jax.sim.predicates import (OPS, JointTests, PredicateLayout, SimView, compile_goal, eval_rows,
                                        goal_holds, quat_to_mat)

# Entities: bowl (0), plate (1), cabinet (2, two drawer joints). Sites: cabinet top drawer region (joint 0),
# a table region without parent.
LAYOUT = PredicateLayout(
    entities=("bowl_1", "plate_1", "cabinet_1"),
    sites=("cabinet_1_top_region", "main_table_plate_region"),
    joints=("cabinet_1_top", "cabinet_1_bottom"),
    entity_joints=np.array([[0, 0], [0, 0], [1, 1]], bool),
    site_joints=np.array([[1, 0], [0, 0]], bool),
)
# Cabinet drawers: open iff q < -0.14, close iff q > 0.0 (LIBERO's wooden cabinet).
TESTS = JointTests(op=jnp.array([[OPS["lt"]] * 2, [OPS["gt"]] * 2, [0, 0], [0, 0]]),
                   thr=jnp.array([[-0.14] * 2, [0.0] * 2, [0, 0], [0, 0]], jnp.float32))


def view(bowl=(0.0, 0.0, 0.92), plate=(0.0, 0.0, 0.90), contact_bp=True, q=(0.0, 0.0), yaw=0.0):
    c = np.zeros((3, 3), bool)
    c[0, 1] = c[1, 0] = contact_bp
    R = np.array([[np.cos(yaw), -np.sin(yaw), 0], [np.sin(yaw), np.cos(yaw), 0], [0, 0, 1]])
    return SimView(
        body_pos=jnp.array([bowl, plate, (0.3, 0.0, 0.9)], jnp.float32),
        site_pos=jnp.array([(0.3, 0.0, 1.0), (0.0, 0.0, 0.895)], jnp.float32),
        site_mat=jnp.array([R, np.eye(3)], jnp.float32),
        site_size=jnp.array([(0.10, 0.05, 0.04), (0.05, 0.05, 0.007)], jnp.float32),
        site_parent=jnp.array([2, -1]),
        joint_q=jnp.array(q, jnp.float32),
        contact=jnp.array(c),
    )


def truth(atoms, v):
    t = compile_goal(LAYOUT, atoms, 4)
    return [bool(x) for x in np.asarray(eval_rows(v, t, TESTS))[: len(atoms)]]


def test_on_object_object_rules():
    on = [("On", "bowl_1", "plate_1")]
    assert truth(on, view()) == [True]
    assert truth(on, view(contact_bp=False)) == [False]  # contact required
    assert truth(on, view(bowl=(0.029, 0.0, 0.92))) == [True]  # xy within 3 cm
    assert truth(on, view(bowl=(0.031, 0.0, 0.92))) == [False]
    assert truth(on, view(bowl=(0.0, 0.0, 0.89))) == [False]  # below the plate
    assert truth(on, view(bowl=(0.0, 0.0, 0.90))) == [True]  # z_b <= z_a holds at equality


def test_on_site_band_and_parent_contact():
    # Table region: size_z 0.007, centre 0.895: d_z in (0.002, 0.107) -> z in (0.897, 1.002).
    on = [("On", "bowl_1", "main_table_plate_region")]
    assert truth(on, view(bowl=(0.0, 0.0, 0.898))) == [True]
    assert truth(on, view(bowl=(0.0, 0.0, 0.896))) == [False]
    assert truth(on, view(bowl=(0.0, 0.0, 1.001))) == [True]
    assert truth(on, view(bowl=(0.0, 0.0, 1.003))) == [False]
    assert truth(on, view(bowl=(0.049, -0.049, 0.95))) == [True]
    assert truth(on, view(bowl=(0.051, 0.0, 0.95))) == [False]
    # A site with a parent (the cabinet) needs contact with it: none in this view.
    assert truth([("On", "bowl_1", "cabinet_1_top_region")], view(bowl=(0.3, 0.0, 1.05))) == [False]


def test_in_uses_rotated_half_sizes_and_z_slack():
    inside = [("In", "bowl_1", "cabinet_1_top_region")]
    # Site at (0.3, 0, 1.0), half (0.10, 0.05, 0.04): x in (0.2, 0.4), y in (-0.05, 0.05), z in (0.95, 1.04).
    assert truth(inside, view(bowl=(0.39, 0.04, 0.951))) == [True]
    assert truth(inside, view(bowl=(0.3, 0.0, 0.9505))) == [True]   # within the 1 cm slack below
    assert truth(inside, view(bowl=(0.3, 0.0, 0.949))) == [False]
    assert truth(inside, view(bowl=(0.3, 0.06, 1.0))) == [False]
    # Yawed 90 degrees: |R size| swaps x and y extents.
    assert truth(inside, view(bowl=(0.3, 0.09, 1.0), yaw=np.pi / 2)) == [True]
    assert truth(inside, view(bowl=(0.39, 0.0, 1.0), yaw=np.pi / 2)) == [False]


def test_open_close_any_all_and_site_joints():
    # Entity-level: Open = ANY joint open; Close = ALL joints closed.
    assert truth([("Open", "cabinet_1"), ("Close", "cabinet_1")], view(q=(-0.15, 0.01))) == [True, False]
    assert truth([("Open", "cabinet_1"), ("Close", "cabinet_1")], view(q=(0.01, 0.01))) == [False, True]
    assert truth([("Close", "cabinet_1")], view(q=(0.0, 0.01))) == [False]  # strict q > 0
    # Site-level: only the drawer the region sits on.
    assert truth([("Open", "cabinet_1_top_region")], view(q=(0.01, -0.15))) == [False]
    assert truth([("Open", "cabinet_1_top_region")], view(q=(-0.15, 0.01))) == [True]


def test_goal_is_conjunction_and_padding_rows_are_true():
    t = compile_goal(LAYOUT, [("On", "bowl_1", "plate_1"), ("Open", "cabinet_1_top_region")], 4)
    assert not bool(goal_holds(view(q=(0.0, 0.0)), t, TESTS))
    assert bool(goal_holds(view(q=(-0.2, 0.0)), t, TESTS))
    # vmap over worlds and jit
    vs = jax.tree.map(lambda *x: jnp.stack(x), view(q=(0.0, 0.0)), view(q=(-0.2, 0.0)))
    out = jax.jit(jax.vmap(lambda v: goal_holds(v, t, TESTS)))(vs)
    assert list(np.asarray(out)) == [False, True]


def test_compile_errors_are_typed_and_named():
    with pytest.raises(MissingEntityError, match="ghost_1"):
        compile_goal(LAYOUT, [("On", "ghost_1", "plate_1")], 4, task="t")
    with pytest.raises(UnknownPredicateError, match="stack"):
        compile_goal(LAYOUT, [("Stack", "bowl_1", "plate_1")], 4)
    with pytest.raises(UnknownPredicateError, match="region"):
        compile_goal(LAYOUT, [("In", "bowl_1", "plate_1")], 4)
    with pytest.raises(UnknownPredicateError):
        compile_goal(LAYOUT, [("On", "bowl_1")], 4)


def test_quat_to_mat_matches_mujoco():
    import mujoco

    rng = np.random.default_rng(0)
    for _ in range(20):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        m = np.zeros(9)
        mujoco.mju_quat2Mat(m, q)
        np.testing.assert_allclose(np.asarray(quat_to_mat(jnp.array(q))), m.reshape(3, 3), atol=1e-6)
