"""Primitive stand-ins: they compile, have the BDDL's sites, avoid MJX-unsupported shapes, stand, and satisfy
LIBERO's In / On / Open / Close / TurnOn rules when used as a person would."""

from __future__ import annotations

import glob
import importlib.util
import math
import os
import re

import mujoco
import numpy as np
import pytest

from clbench_jax.errors import UnknownCategoryError
from clbench_jax.sim import assets as A

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWED = {int(mujoco.mjtGeom.mjGEOM_BOX), int(mujoco.mjtGeom.mjGEOM_CAPSULE), int(mujoco.mjtGeom.mjGEOM_SPHERE),
           int(mujoco.mjtGeom.mjGEOM_PLANE)}


# --------------------------------------------------------------------------------------------- helpers
def _spec(dt: float = 0.005) -> mujoco.MjSpec:
    spec = mujoco.MjSpec()
    o = spec.option
    o.timestep, o.integrator = dt, mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    o.solver, o.iterations, o.ls_iterations = mujoco.mjtSolver.mjSOL_NEWTON, 5, 8
    o.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    spec.worldbody.add_geom(name="ground", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[5, 5, 0.1])
    return spec


def _add(spec, name, cat, pos=(0, 0, 0), quat=(1, 0, 0, 0), free=None):
    b = spec.worldbody.add_body(name=name, pos=list(pos), quat=list(quat))
    if free if free is not None else A.standin(cat).kind == "object":
        b.add_freejoint(name=f"{name}_joint")
    A.build(b, name, cat)
    return b


def _run(m, d, seconds):
    for _ in range(int(round(seconds / m.opt.timestep))):
        mujoco.mj_step(m, d)


def _in_box(p, site_pos, site_mat, half):
    """LIBERO In(a, region): a's body origin strictly inside the site box, lower z bound lowered by 0.01."""
    h = np.abs(site_mat @ half)
    lb, ub = site_pos - h, site_pos + h
    lb[2] -= 0.01
    return bool(np.all(lb < p) and np.all(p < ub))


def _contact(m, d, body_a, body_b) -> bool:
    ra, rb = m.body(body_a).id, m.body(body_b).id
    for c in d.contact[: d.ncon]:
        r1, r2 = m.body_rootid[m.geom_bodyid[c.geom1]], m.body_rootid[m.geom_bodyid[c.geom2]]
        if {r1, r2} == {ra, rb}:
            return True
    return False


def _on_site(m, d, obj, site, parent):
    """LIBERO On(a, site): d = R_site (p_a - p_site); size_z - 0.005 < d_z < size_z + 0.10, |d_xy| < size_xy,
    plus contact between a and the site's parent."""
    s = m.site(site).id
    R, half = d.site_xmat[s].reshape(3, 3), m.site_size[s]
    dv = R @ (d.xpos[m.body(obj).id] - d.site_xpos[s])
    geo = half[2] - 0.005 < dv[2] < half[2] + 0.10 and bool(np.all(np.abs(dv[:2]) < half[:2]))
    return geo and _contact(m, d, obj, parent)


def _in_site(m, d, obj, site):
    s = m.site(site).id
    return _in_box(d.xpos[m.body(obj).id], d.site_xpos[s], d.site_xmat[s].reshape(3, 3), m.site_size[s])


def _site_world(cat, suffix, body_pos=(0, 0, 0)):
    st = next(x for x in A.standin(cat).sites if x.suffix == suffix)
    s = A.standin(cat)
    off = np.zeros(3) if not st.body else np.asarray(s.child_body_pos[s.child_bodies.index(st.body)])
    return np.asarray(body_pos) + off + np.asarray(st.pos), np.asarray(st.size)


def _qpos_adr(m, joint):
    return m.jnt_qposadr[m.joint(joint).id]


# --------------------------------------------------------------------------------------------- catalogue
def test_category_lists():
    assert len(A.FIXTURE_CATEGORIES) == 7 and len(A.ARENA_CATEGORIES) == 5
    assert len(A.OBJECT_CATEGORIES) == 26
    assert set(A.CATEGORIES) == set(A.FIXTURE_CATEGORIES) | set(A.OBJECT_CATEGORIES) | set(A.ARENA_CATEGORIES)
    with pytest.raises(UnknownCategoryError) as e:
        A.standin("bowl_drainer")
    assert e.value.token == "bowl_drainer"
    with pytest.raises(UnknownCategoryError):
        A.arena("wooden_cabinet")
    for c in A.CATEGORIES:
        assert A.standin(c).shape_class < 16


@pytest.mark.parametrize("cat", A.CATEGORIES)
def test_builds_and_compiles(cat):
    s = A.standin(cat)
    spec = _spec()
    b = _add(spec, "x", cat)
    m = spec.compile()
    assert m.ngeom == 1 + len(s.geoms)
    for t in m.geom_type[1:]:
        assert int(t) in ALLOWED and int(t) != int(mujoco.mjtGeom.mjGEOM_CYLINDER)
    for i in range(1, m.ngeom):
        assert m.geom(i).name == f"x_g{i - 1}"
        if m.geom_contype[i]:
            assert m.geom_condim[i] == 3 and m.geom_conaffinity[i] == 1
    for st in s.sites:
        sid = m.site(f"x_{st.suffix}").id
        assert m.site_type[sid] == mujoco.mjtGeom.mjGEOM_BOX
        np.testing.assert_allclose(m.site_size[sid], st.size)
    for j in s.joints:
        jid = m.joint(f"x_{j.suffix}").id
        np.testing.assert_allclose(m.jnt_range[jid], j.range, atol=1e-9)  # radians after compile
        assert m.jnt_limited[jid] and m.dof_frictionloss[m.jnt_dofadr[jid]] > 0
    assert b is not None
    mass = m.body_subtreemass[1]
    assert abs(mass - s.mass) < 1e-6
    if s.kind == "object":
        assert 0.05 <= mass <= 1.5
    elif s.kind == "fixture":
        assert 0.5 <= mass <= 20.0
    # the body origin is the bottom centre: nothing below z = 0, bounding box as declared
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    signs = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)])
    for i in range(1, m.ngeom):
        c, h = m.geom_aabb[i][:3], m.geom_aabb[i][3:]
        pts = d.geom_xpos[i] + (c + signs * h) @ d.geom_xmat[i].reshape(3, 3).T
        lo, hi = np.minimum(lo, pts.min(0)), np.maximum(hi, pts.max(0))
    body_z = 0.0
    assert abs(lo[2] - body_z) < 2e-3, lo  # capsule AABBs are boxes around the capsule: allow 2 mm
    if s.kind != "arena":
        np.testing.assert_allclose(hi - lo, s.size, atol=3e-3)
        np.testing.assert_allclose((hi[:2] + lo[:2]) / 2, s.bbox_offset, atol=3e-3)


def test_geom_counts():
    counts = {c: len(A.standin(c).geoms) for c in A.CATEGORIES}
    for c, n in counts.items():
        s = A.standin(c)
        if s.kind == "object":
            assert n <= (7 if s.shape_class in (1, 6) else 3), (c, n)
        elif s.kind == "fixture":
            assert n <= (22 if c.endswith("_cabinet") else 10), (c, n)
        else:
            assert sum(g.collide for g in s.geoms) <= 1, c


def _bddl_dir():
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "libero", "bddl_files")
    return d if os.path.isdir(d) else None


def test_bddl_sites_exist():
    d = _bddl_dir()
    if d is None:
        pytest.skip("libero data files not installed")
    files = sorted(f for s in ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
                   for f in glob.glob(os.path.join(d, s, "*.bddl")))
    assert len(files) == 130
    needed: dict[str, set] = {}
    for f in files:
        text = open(f).read()
        ent = {}
        for sec in ("fixtures", "objects"):
            m = re.search(r"\(:" + sec + r"(.*?)\)\s*\n\s*\(", text, re.S)
            ent.update(dict(re.findall(r"(\w+)\s*-\s*(\w+)", m.group(1))))
        for cat in ent.values():
            A.standin(cat)  # every category in the 130 tasks has a stand-in
        for region, target in re.findall(r"\((\w+)\s*\n\s*\(:target (\w+)\)", text):
            if target in ent and ent[target] not in A.ARENA_CATEGORIES:
                needed.setdefault(ent[target], set()).add(region)
    assert needed["wooden_cabinet"] == {"top_region", "middle_region", "bottom_region", "top_side"}
    for cat, regions in needed.items():
        have = {s.suffix for s in A.standin(cat).sites}
        assert regions <= have, (cat, regions - have)


def test_mjx_accepts_every_collision_pair():
    from mujoco import mjx

    spec = _spec()
    _add(spec, "arena", "kitchen_table", free=False)
    for i, c in enumerate(A.FIXTURE_CATEGORIES):
        _add(spec, f"f{i}", c, pos=(-0.8 + 0.5 * (i % 4), -0.4 + 0.8 * (i // 4), 0.9), free=False)
    for i, c in enumerate(A.OBJECT_CATEGORIES):
        _add(spec, f"o{i}", c, pos=(-0.4 + 0.16 * (i % 6), -0.45 + 0.2 * (i // 6), 1.5))
    m = spec.compile()
    mjx.put_model(m, impl="jax")  # raises NotImplementedError for an unsupported geom-type pair


def test_markdown_matches_docs():
    md = A.standins_markdown()
    for c in A.CATEGORIES:
        assert f"| {c} |" in md
    path = os.path.join(ROOT, "docs", "STANDINS.md")
    assert md in open(path).read(), "docs/STANDINS.md is stale: paste assets.standins_markdown() into it"


# --------------------------------------------------------------------------------------------- physics
@pytest.mark.parametrize("dt", [0.005, 0.002])
def test_objects_stand_upright(dt):
    spec = _spec(dt)
    for i, c in enumerate(A.OBJECT_CATEGORIES):
        _add(spec, f"o{i}", c, pos=(0.5 * (i % 6), 0.5 * (i // 6), 0.01))
    m = spec.compile()
    d = mujoco.MjData(m)
    _run(m, d, 1.0)
    for i, c in enumerate(A.OBJECT_CATEGORIES):
        bid = m.body(f"o{i}").id
        z = d.xpos[bid][2]
        up = d.xmat[bid].reshape(3, 3)[:, 2]
        tilt = math.degrees(math.acos(min(1.0, up[2])))
        assert abs(z) < 0.01 and tilt < 10.0, (c, z, tilt)
        assert np.linalg.norm(d.qvel[6 * i:6 * i + 3]) < 0.01, c


@pytest.mark.parametrize("container", ["basket", "wooden_tray", "akita_black_bowl", "white_bowl"])
def test_box_dropped_into_container_is_in(container):
    spec = _spec()
    _add(spec, "c", container)
    h = A.standin(container).size[2]
    _add(spec, "cheese", "cream_cheese", pos=(0.01, -0.01, h + 0.02))
    m = spec.compile()
    d = mujoco.MjData(m)
    _run(m, d, 1.5)
    assert _in_site(m, d, "cheese", "c_contain_region")
    if container.endswith("bowl"):  # LIBERO's On(cheese, bowl) object rule
        pa, pb = d.xpos[m.body("cheese").id], d.xpos[m.body("c").id]
        assert pb[2] <= pa[2] and _contact(m, d, "cheese", "c") and np.linalg.norm(pa[:2] - pb[:2]) < 0.03


@pytest.mark.parametrize("fixture,site,obj", [
    ("flat_stove", "cook_region", "akita_black_bowl"),
    ("flat_stove", "cook_region", "moka_pot"),
    ("flat_stove", "cook_region", "chefmate_8_frypan"),
    ("wooden_cabinet", "top_side", "akita_black_bowl"),
    ("wooden_cabinet", "top_side", "wine_bottle"),
    ("white_cabinet", "top_side", "akita_black_bowl"),
    ("microwave", "top_side", "white_bowl"),
    ("wooden_two_layer_shelf", "top_side", "yellow_book"),
    ("wooden_two_layer_shelf", "top_side", "chefmate_8_frypan"),
    ("wine_rack", "top_region", "wine_bottle"),
])
def test_object_set_on_fixture_region_is_on(fixture, site, obj):
    spec = _spec()
    base = (0.0, 0.0, 0.0)
    _add(spec, "f", fixture, pos=base, free=False)
    p, half = _site_world(fixture, site, base)
    _add(spec, "o", obj, pos=(p[0], p[1], p[2] + half[2] + 0.003))
    m = spec.compile()
    d = mujoco.MjData(m)
    _run(m, d, 1.0)
    assert _on_site(m, d, "o", f"f_{site}", "f")


def test_wine_bottle_lying_on_rack_is_on():
    spec = _spec()
    _add(spec, "f", "wine_rack", free=False)
    p, half = _site_world("wine_rack", "top_region")
    # lying along x, base toward +x, axis 0.034 above the crate top
    q = (math.cos(-math.pi / 4), 0.0, math.sin(-math.pi / 4), 0.0)
    _add(spec, "o", "wine_bottle", pos=(0.12, 0.0, p[2] + half[2] + 0.04), quat=q)
    m = spec.compile()
    d = mujoco.MjData(m)
    _run(m, d, 1.0)
    assert _on_site(m, d, "o", "f_top_region", "f")


@pytest.mark.parametrize("fixture,site,obj,quat", [
    ("wooden_two_layer_shelf", "top_region", "chefmate_8_frypan", None),
    ("wooden_two_layer_shelf", "bottom_region", "chefmate_8_frypan", None),
    ("wooden_two_layer_shelf", "top_region", "black_book", None),
    ("desk_caddy", "front_contain_region", "black_book", (math.cos(math.pi / 4), 0, 0, math.sin(math.pi / 4))),
    ("desk_caddy", "back_contain_region", "black_book", (math.cos(math.pi / 4), 0, 0, math.sin(math.pi / 4))),
    ("desk_caddy", "left_contain_region", "black_book", None),
    ("desk_caddy", "right_contain_region", "yellow_book", None),
])
def test_object_put_in_fixture_region_is_in(fixture, site, obj, quat):
    spec = _spec()
    _add(spec, "f", fixture, free=False)
    p, half = _site_world(fixture, site)
    off = -A.standin(obj).bbox_offset[0] if obj == "chefmate_8_frypan" else 0.0  # keep the handle inside
    _add(spec, "o", obj, pos=(p[0] + off, p[1], p[2] - half[2] + 0.005), quat=quat or (1, 0, 0, 0))
    m = spec.compile()
    d = mujoco.MjData(m)
    _run(m, d, 1.0)
    assert _in_site(m, d, "o", f"f_{site}")


def test_mug_in_open_microwave_is_in():
    spec = _spec()
    _add(spec, "f", "microwave", free=False)
    p, half = _site_world("microwave", "heating_region")
    _add(spec, "o", "white_yellow_mug", pos=(p[0] - 0.011, p[1], p[2] - half[2] + 0.005))
    m = spec.compile()
    d = mujoco.MjData(m)
    d.qpos[_qpos_adr(m, "f_door_joint")] = -1.6
    _run(m, d, 1.0)
    assert _in_site(m, d, "o", "f_heating_region")
    q = d.qpos[_qpos_adr(m, "f_door_joint")]
    art = A.standin("microwave").articulation
    assert A.eval_test(art.open_test, q) and abs(q + 1.6) < 0.01
    assert A.eval_test(art.close_test, 0.0) and not A.eval_test(art.close_test, -0.01)


def test_microwave_door_hinged_as_libero():
    """LIBERO's microwave.xml: front -y, door hinged at the -x edge (x = -0.1725), its handle at the +x end next to
    the control panel. Mirrored (as before), KITCHEN_SCENE7's microwave (yaw pi) had its bar 0.83 m from the arm's
    base and the oracle opened it in 6% of episodes. Opening (negative q) must swing the bar toward the front."""
    spec = _spec()
    _add(spec, "f", "microwave", free=False)
    m = spec.compile()
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    door = m.body("f_door").id
    bar = next(i for i in range(m.ngeom) if m.geom_bodyid[i] == door and m.geom_size[i][0] < 0.01)
    hinge = d.xpos[door].copy()
    assert hinge[0] < -0.15 and d.geom_xpos[bar][0] > 0.0
    y0 = d.geom_xpos[bar][1]
    d.qpos[_qpos_adr(m, "f_door_joint")] = -0.5
    mujoco.mj_forward(m, d)
    assert d.geom_xpos[bar][1] < y0 - 0.05  # front is -y
    np.testing.assert_allclose(d.xpos[door], hinge, atol=1e-9)


@pytest.mark.parametrize("cat", ["wooden_cabinet", "white_cabinet"])
def test_drawer_region_as_libero(cat):
    """Drawer regions have LIBERO's size (wooden_cabinet.xml: 0.151 deep along the slide, 0.204 wide) and sit at the
    drawer's front, so an object put at a region's centre is ~9 cm behind the drawer's front face as in LIBERO."""
    s = A.standin(cat)
    front = np.asarray(s.front)
    for level in ("top", "middle", "bottom"):
        st = next(x for x in s.sites if x.suffix == f"{level}_region")
        size = np.abs(np.asarray(st.size))
        np.testing.assert_allclose(size @ np.abs(front), 0.151 / 2, atol=1e-6)
        across = np.array([abs(front[1]), abs(front[0]), 0.0])
        np.testing.assert_allclose(size @ across, 0.102, atol=1e-6)
        centre = np.asarray(s.child_body_pos[s.child_bodies.index(st.body)]) + np.asarray(st.pos)
        face = float(np.asarray(s.geoms[0].size) @ np.abs(front))  # the top board's half depth: the front face
        assert 0.085 < face - centre @ front < 0.095


@pytest.mark.parametrize("cat", ["wooden_cabinet", "white_cabinet"])
def test_drawers(cat):
    s = A.standin(cat)
    art = s.articulation
    assert A.eval_test(art.open_test, -0.15) and not A.eval_test(art.open_test, -0.13)
    assert A.eval_test(art.close_test, 0.005) and not A.eval_test(art.close_test, -0.001)
    for level in ("top", "middle", "bottom"):
        assert A.joint_for_site(cat, f"{level}_region") == f"{level}_drawer_joint"
    assert A.joint_for_site(cat, "top_side") is None
    spec = _spec()
    _add(spec, "f", cat, free=False)
    m = spec.compile()
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    handle0 = d.geom_xpos[m.geom("f_g9").id].copy()  # the top... any drawer geom: check it moves along front
    adrs = {lv: _qpos_adr(m, f"f_{lv}_drawer_joint") for lv in ("top", "middle", "bottom")}
    d.qpos[adrs["bottom"]] = -0.15
    mujoco.mj_kinematics(m, d)
    moved = d.geom_xpos[m.geom("f_g9").id] - handle0
    np.testing.assert_allclose(moved, 0.15 * np.asarray(s.front), atol=1e-9)
    # drawers left part-open stay where they are (2 s with gravity)
    for lv, adr in adrs.items():
        d.qpos[adr] = -0.05
    mujoco.mj_forward(m, d)
    _run(m, d, 2.0)
    for lv, adr in adrs.items():
        assert abs(d.qpos[adr] + 0.05) < 0.005, lv


@pytest.mark.parametrize("cat", ["wooden_cabinet", "white_cabinet"])
def test_bowl_dropped_into_open_top_drawer_is_in(cat):
    s = A.standin(cat)
    spec = _spec()
    _add(spec, "f", cat, free=False)
    front = np.asarray(s.front)
    p, half = _site_world(cat, "top_region")
    # open to -0.20: the exposed part of the drawer runs from the carcass face to the drawer's front panel
    face = 0.12
    inner_front = 0.105 + 0.20
    x = 0.5 * (face + inner_front)
    pos = x * front + np.array([0, 0, p[2] - half[2] + 0.01])
    _add(spec, "o", "akita_black_bowl", pos=tuple(pos))
    m = spec.compile()
    d = mujoco.MjData(m)
    adr = _qpos_adr(m, "f_top_drawer_joint")
    d.qpos[adr] = -0.20
    _run(m, d, 1.0)
    assert _in_site(m, d, "o", "f_top_region")
    assert abs(d.qpos[adr] + 0.20) < 0.005
    assert A.eval_test(s.articulation.open_test, d.qpos[adr])


def test_stove_knob():
    s = A.standin("flat_stove")
    art = s.articulation
    assert A.eval_test(art.turnon_test, 0.5) and not A.eval_test(art.turnon_test, 0.49)
    assert A.eval_test(art.turnoff_test, -0.001) and not A.eval_test(art.turnoff_test, 0.0)
    spec = _spec()
    _add(spec, "f", "flat_stove", free=False)
    m = spec.compile()
    d = mujoco.MjData(m)
    adr = _qpos_adr(m, "f_knob_joint")
    for q in (0.8, -0.003):
        d.qpos[adr] = q
        _run(m, d, 1.0)
        assert abs(d.qpos[adr] - q) < 0.01


def test_arenas():
    for c in A.ARENA_CATEGORIES:
        a = A.arena(c)
        s = A.standin(c)
        assert s.kind == "arena" and s.size[:2] == a.size
        if c != "floor":
            top = s.geoms[0]
            assert top.collide and abs(top.pos[2] + top.size[2] - a.surface_z) < 1e-9
            assert a.robot_base[0] < -a.size[0] / 2  # the robot stands behind the near edge
    assert A.arena("kitchen_table").surface_z == 0.90 and A.arena("table").robot_base == (-0.66, 0.0, 0.90)
    assert A.arena("study_table").robot_base[0] == -0.55 and A.arena("living_room_table").surface_z == 0.41


@pytest.mark.parametrize("cat,body,joint,open_force", [
    ("wooden_cabinet", "top_drawer", "top_drawer_joint", 8.0),
    ("white_cabinet", "bottom_drawer", "bottom_drawer_joint", 8.0),
    ("microwave", "door", "door_joint", 8.0),
])
def test_pull_open_and_push_closed(cat, body, joint, open_force):
    """A gripper-sized force at the handle opens the drawer / door past LIBERO's open threshold, and pushing it
    home leaves it closed by LIBERO's rule."""
    s = A.standin(cat)
    spec = _spec()
    _add(spec, "f", cat, free=False)
    m = spec.compile()
    d = mujoco.MjData(m)
    bid, adr = m.body(f"f_{body}").id, _qpos_adr(m, f"f_{joint}")
    handle = next(i for i in range(m.ngeom) if m.geom_bodyid[i] == bid and m.geom_size[i][0] < 0.01)
    front = np.asarray(s.front)
    mujoco.mj_forward(m, d)

    def push(direction, seconds):
        for _ in range(int(seconds / m.opt.timestep)):
            d.xfrc_applied[:] = 0
            mujoco.mj_applyFT(m, d, open_force * direction, np.zeros(3), d.geom_xpos[handle], bid, d.qfrc_applied)
            mujoco.mj_step(m, d)
            d.qfrc_applied[:] = 0

    if s.joints[0].kind == "slide":
        push(front, 1.0)
        assert A.eval_test(s.articulation.open_test, d.qpos[adr]), d.qpos[adr]
        push(-front, 1.5)
    else:  # the door: pull along the door's normal, then push back on it
        for _ in range(3):
            R = d.xmat[bid].reshape(3, 3)
            push(R @ np.array([0.0, -1.0, 0.0]), 0.5)
        assert A.eval_test(s.articulation.open_test, d.qpos[adr]), d.qpos[adr]
        for _ in range(6):
            R = d.xmat[bid].reshape(3, 3)
            push(R @ np.array([0.0, 1.0, 0.0]), 0.5)
    _run(m, d, 0.5)  # released
    assert A.eval_test(s.articulation.close_test, d.qpos[adr]), d.qpos[adr]


@pytest.mark.parametrize("top,base", [
    ("akita_black_bowl", "plate"), ("white_bowl", "plate"), ("porcelain_mug", "plate"),
    ("red_coffee_mug", "plate"), ("akita_black_bowl", "cookies"),
    ("akita_black_bowl", "glazed_rim_porcelain_ramekin"), ("akita_black_bowl", "akita_black_bowl"),
])
def test_object_on_object(top, base):
    """LIBERO's On(a, b) for objects: z_b <= z_a, a touches b, origins within 3 cm in x/y; a stays upright."""
    spec = _spec()
    _add(spec, "b", base)
    _add(spec, "a", top, pos=(0.005, -0.005, A.standin(base).size[2] + 0.005))
    m = spec.compile()
    d = mujoco.MjData(m)
    _run(m, d, 1.0)
    pa, pb = d.xpos[m.body("a").id], d.xpos[m.body("b").id]
    assert pb[2] <= pa[2] and _contact(m, d, "a", "b") and np.linalg.norm(pa[:2] - pb[:2]) < 0.03
    max_tilt = 20.0 if top == base else 10.0  # a bowl nests in a bowl: its square foot leans on the slanted walls
    assert d.xmat[m.body("a").id].reshape(3, 3)[2, 2] > math.cos(math.radians(max_tilt))
