"""TaskSpecs -> one MuJoCo model per LIBERO scene, plus the static tables that turn sensor readings into arrays.

All tasks that share a LIBERO scene share one model: the union of their objects and fixtures is built, and a task's
absent objects are parked out of reach, so tasks become an array axis (`SceneArrays`, stacked over tasks).
MuJoCo names are the BDDL names: body `akita_black_bowl_1`, joint `akita_black_bowl_1_joint` (free),
site `wooden_cabinet_1_top_region`, so any MuJoCo tool can address them.

Fixtures are mocap bodies: static in the physics (never pushed), placed per episode from the BDDL regions, and their
articulated parts (drawers, doors, knobs) are jointed children. Table regions (`main_table_plate_region`) are
per-task boxes in `SceneArrays` (two tasks of one scene may give one region name different ranges); an exported
single-task model carries them as real sites too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import mujoco
import numpy as np

from clbench_jax.errors import MissingEntityError, UnknownCategoryError
from clbench_jax.sim import assets, robot
from clbench_jax.sim.predicates import PredicateLayout
from clbench_jax.tasks.spec import TaskSpec

# Table regions: LIBERO's TargetZone: half-height 0.007, centre 0.02 above the table body centre, i.e. (for a
# 0.05 m thick table whose top is the surface) 0.005 below the surface.
REGION_HALF_HEIGHT = 0.007
REGION_Z_BELOW_SURFACE = 0.005
GOAL_ROWS = 4  # padded goal-table rows: libero_10 goals have 2 atoms; contrasts may add more
INIT_ROWS = 16
TOKEN_SHAPES = 16  # one-hot width for shape classes in object tokens
MAX_TOKEN_JOINTS = 3
TOKEN_DIM = 3 + 4 + 3 + 3 + TOKEN_SHAPES + MAX_TOKEN_JOINTS


@dataclass(frozen=True)
class SensorMap:
    """Addresses into `sensordata` (static numpy index arrays)."""

    arm_q: np.ndarray  # (7,)
    finger_q: np.ndarray  # (2,)
    entity_pos: np.ndarray  # (E, 3)
    entity_quat: np.ndarray  # (E, 4)
    site_pos: np.ndarray  # (S_fixed, 3) sites carried by bodies
    site_quat: np.ndarray  # (S_fixed, 4)
    joint_q: np.ndarray  # (J,)
    pair_found: np.ndarray  # (P,) contact sensors; only in the native model (MJX computes contacts itself)


@dataclass(frozen=True)
class Scene:
    key: str
    tasks: tuple[TaskSpec, ...]
    arena_name: str
    arena_category: str
    arena: "assets.Arena"
    objects: tuple[str, ...]  # movable entities (free bodies)
    fixtures: tuple[str, ...]  # non-arena fixtures (mocap bodies)
    categories: dict
    body_sites: tuple[str, ...]  # sites on fixture/object bodies (move with them)
    table_regions: tuple[str, ...]  # arena regions, per-task geometry
    joints: tuple[str, ...]  # articulated joints of fixtures/objects
    layout: PredicateLayout
    pairs: np.ndarray  # (P, 2) contact groups: entity indices, plus E (left finger) and E+1 (right finger)
    park: np.ndarray  # (N_obj, 3) parking positions

    @property
    def entities(self) -> tuple[str, ...]:
        return self.objects + self.fixtures

    @functools.cached_property
    def model(self) -> mujoco.MjModel:
        """The native model (with contact-pair sensors)."""
        return _build_spec(self, contact_sensors=True).compile()

    @functools.cached_property
    def mjx_model_host(self) -> mujoco.MjModel:
        """The same physics for MJX: without contact sensors (MJX's jax impl lacks body-level contact sensors) and
        with fixtures as static bodies placed per world through a batched `body_pos` (MJX moves a mocap body but
        not its children, so mocap drawers would stay behind)."""
        return _build_spec(self, contact_sensors=False, mocap_fixtures=False).compile()

    @functools.cached_property
    def sensors(self) -> SensorMap:
        return _sensor_map(self.model, self)

    def task_index(self, name: str) -> int:
        for i, t in enumerate(self.tasks):
            if t.name == name:
                return i
        raise MissingEntityError("task is not part of this scene", task=name, field="scene", token=self.key)


def _arena_of(task: TaskSpec) -> tuple[str, str]:
    arenas = [(n, c) for n, c in task.fixtures.items() if c in assets.ARENA_CATEGORIES]
    if len(arenas) != 1:
        raise UnknownCategoryError("a task needs exactly one arena fixture (table / floor)", file=task.file,
                                   task=task.name, field=":fixtures", token=str([c for _, c in arenas]))
    return arenas[0]


def build_scene(tasks: list[TaskSpec] | tuple[TaskSpec, ...]) -> Scene:
    """The shared scene of `tasks` (all must have the same `scene` key)."""
    tasks = tuple(tasks)
    keys = {t.scene for t in tasks}
    if len(keys) != 1:
        raise ValueError(f"tasks from several scenes: {sorted(keys)}")
    arena_name, arena_cat = _arena_of(tasks[0])
    cats: dict[str, str] = {}
    objects: list[str] = []
    fixtures: list[str] = []
    for t in tasks:
        if _arena_of(t) != (arena_name, arena_cat):
            raise ValueError(f"task {t.name} has another arena than {tasks[0].name}")
        for kind, table in (("object", t.objects), ("fixture", t.fixtures)):
            for name, cat in table.items():
                if cat in assets.ARENA_CATEGORIES:
                    continue
                assets.standin(cat)  # raises UnknownCategoryError for a category without a stand-in
                if name in cats and cats[name] != cat:
                    raise UnknownCategoryError(f"{name} has category {cats[name]} in another task of the scene",
                                               file=t.file, task=t.name, field=f":{kind}s", token=cat)
                if name not in cats:
                    cats[name] = cat
                    (objects if kind == "object" else fixtures).append(name)
    body_sites, site_joint_names, joints, joint_owner = [], [], [], []
    for name in objects + fixtures:
        s = assets.standin(cats[name])
        for j in s.joints:
            joints.append(f"{name}_{j.suffix}")
            joint_owner.append((name, j.body))
    for name in objects + fixtures:
        s = assets.standin(cats[name])
        for site in s.sites:
            body_sites.append(f"{name}_{site.suffix}")
            site_joint_names.append({f"{name}_{j.suffix}" for j in s.joints if j.body == site.body and site.body})
    table_regions = sorted({r for t in tasks for r, reg in t.regions.items() if reg.target == arena_name})
    entities = tuple(objects + fixtures)
    sites = tuple(body_sites) + tuple(table_regions)
    J = len(joints)
    entity_joints = np.zeros((len(entities), J), bool)
    for j, (owner, _) in enumerate(joint_owner):
        entity_joints[entities.index(owner), j] = True
    site_joints = np.zeros((len(sites), J), bool)
    for s_i, names in enumerate(site_joint_names):
        for j, jn in enumerate(joints):
            site_joints[s_i, j] = jn in names
    layout = PredicateLayout(entities=entities, sites=sites, joints=tuple(joints), entity_joints=entity_joints,
                             site_joints=site_joints)
    E, n_obj = len(entities), len(objects)
    # Contact groups the predicates and the grasp record need: object-object, object-fixture, finger-object.
    pairs = [(i, j) for i in range(n_obj) for j in range(i + 1, E)]
    pairs += [(E + f, i) for f in (0, 1) for i in range(n_obj)]
    park = np.array([[4.0 + 0.6 * (i % 6), -3.0 + 0.6 * (i // 6), 0.0] for i in range(n_obj)])
    return Scene(key=tasks[0].scene, tasks=tasks, arena_name=arena_name, arena_category=arena_cat,
                 arena=assets.arena(arena_cat), objects=tuple(objects), fixtures=tuple(fixtures), categories=cats,
                 body_sites=tuple(body_sites), table_regions=tuple(table_regions), joints=tuple(joints),
                 layout=layout, pairs=np.array(pairs, np.int32).reshape(-1, 2), park=park)


def _build_spec(scene: Scene, contact_sensors: bool, region_task: TaskSpec | None = None,
                mocap_fixtures: bool = True) -> mujoco.MjSpec:
    spec = mujoco.MjSpec()
    spec.modelname = scene.key
    robot.apply_physics_options(spec)
    spec.add_material(name="clbench_default", rgba=[0.8, 0.8, 0.8, 1])  # mjx.ray needs >= 1 material
    spec.visual.headlight.ambient = [0.4, 0.4, 0.4]
    spec.visual.headlight.diffuse = [0.6, 0.6, 0.6]
    wb = spec.worldbody
    wb.add_geom(name="ground", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[10, 10, 0.1], rgba=[0.55, 0.5, 0.45, 1])
    wb.add_light(name="top_light", pos=[0, 0, 3.0], dir=[0, 0, -1], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL, castshadow=0)
    arena_body = wb.add_body(name=scene.arena_name)
    assets.build(arena_body, scene.arena_name, scene.arena_category)
    surf = scene.arena.surface_z
    if region_task is not None:  # an exported single-task model: its table regions as real sites
        for r in scene.table_regions:
            if r in region_task.regions:
                pos, half = region_box(region_task.regions[r], surf)
                arena_body.add_site(name=r, type=mujoco.mjtGeom.mjGEOM_BOX, pos=pos, size=half,
                                    rgba=[1, 0, 0, 0.15], group=3)
    for name in scene.fixtures:
        b = wb.add_body(name=name, mocap=mocap_fixtures, pos=[0, 0, -5.0])
        assets.build(b, name, scene.categories[name])
    for i, name in enumerate(scene.objects):
        b = wb.add_body(name=name, pos=scene.park[i].tolist())
        b.add_freejoint(name=f"{name}_joint")
        assets.build(b, name, scene.categories[name])
    robot.add_robot(spec, scene.arena.robot_base)
    # agentview: in front of the robot across the table, looking back at it (as LIBERO's agentview).
    bx = scene.arena.robot_base[0]
    wb.add_camera(name="agentview", pos=[bx + 1.65, 0.0, surf + 0.95], xyaxes=[0, 1, 0, -0.62, 0, 0.78],
                  fovy=45)
    _add_sensors(spec, scene, contact_sensors)
    return spec


def region_box(region, surface_z: float) -> tuple[list[float], list[float]]:
    """A table region (first of its :ranges, as LIBERO) -> (centre, half sizes) of its site box."""
    x0, y0, x1, y1 = region.ranges[0]
    return ([(x0 + x1) / 2, (y0 + y1) / 2, surface_z - REGION_Z_BELOW_SURFACE],
            [(x1 - x0) / 2, (y1 - y0) / 2, REGION_HALF_HEIGHT])


def _add_sensors(spec: mujoco.MjSpec, scene: Scene, contact_sensors: bool) -> None:
    S, O = mujoco.mjtSensor, mujoco.mjtObj

    def add(kind, objtype, objname, **kw):
        spec.add_sensor(type=kind, objtype=objtype, objname=objname, **kw)

    for i in range(1, 8):
        add(S.mjSENS_JOINTPOS, O.mjOBJ_JOINT, f"robot0_joint{i}")
    for j in ("robot0_finger_joint1", "robot0_finger_joint2"):
        add(S.mjSENS_JOINTPOS, O.mjOBJ_JOINT, j)
    for name in scene.entities:
        add(S.mjSENS_FRAMEPOS, O.mjOBJ_XBODY, name)
        add(S.mjSENS_FRAMEQUAT, O.mjOBJ_XBODY, name)
    for name in scene.body_sites:
        add(S.mjSENS_FRAMEPOS, O.mjOBJ_SITE, name)
        add(S.mjSENS_FRAMEQUAT, O.mjOBJ_SITE, name)
    for name in scene.joints:
        add(S.mjSENS_JOINTPOS, O.mjOBJ_JOINT, name)
    if contact_sensors:
        groups = list(scene.entities) + ["robot0_finger_left", "robot0_finger_right"]
        E = len(scene.entities)
        for i, j in scene.pairs:
            ti = O.mjOBJ_BODY if i >= E else O.mjOBJ_XBODY  # a finger is one body; an entity is its subtree
            _add_contact_sensor(spec, ti, groups[i], groups[j])


def _add_contact_sensor(spec, objtype, name1: str, name2: str) -> None:
    s = spec.add_sensor(type=mujoco.mjtSensor.mjSENS_CONTACT, objtype=objtype, objname=name1,
                        reftype=mujoco.mjtObj.mjOBJ_XBODY, refname=name2)
    prm = np.array(s.intprm)
    prm[:3] = [1, 0, 1]  # data = found, reduce = none, num = 1
    s.intprm = prm
    s.dim = 1


def _sensor_map(m: mujoco.MjModel, scene: Scene) -> SensorMap:
    adr, k = m.sensor_adr, 0

    def take(n, width):
        nonlocal k
        out = np.stack([adr[k + i] + np.arange(width) for i in range(n)]) if n else np.zeros((0, width), int)
        k += n
        return out

    arm = take(7, 1)[:, 0]
    fingers = take(2, 1)[:, 0]
    E = len(scene.entities)
    ent = np.stack([adr[k + 2 * i] + np.arange(7) for i in range(E)]) if E else np.zeros((0, 7), int)
    k += 2 * E
    nS = len(scene.body_sites)
    sit = np.stack([adr[k + 2 * i] + np.arange(7) for i in range(nS)]) if nS else np.zeros((0, 7), int)
    k += 2 * nS
    jq = take(len(scene.joints), 1)[:, 0] if scene.joints else np.zeros((0,), int)
    P = len(scene.pairs)
    pf = adr[k:k + P] if m.nsensor >= k + P else np.zeros((0,), int)
    return SensorMap(arm_q=arm, finger_q=fingers, entity_pos=ent[:, :3], entity_quat=ent[:, 3:],
                     site_pos=sit[:, :3], site_quat=sit[:, 3:], joint_q=jq, pair_found=np.asarray(pf))


def export_xml(scene: Scene, task: TaskSpec) -> str:
    """MJCF of the scene with `task`'s table regions as sites (for inspection in any MuJoCo tool)."""
    spec = _build_spec(scene, contact_sensors=True, region_task=task)
    spec.compile()
    return spec.to_xml()
