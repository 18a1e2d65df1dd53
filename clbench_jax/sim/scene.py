"""TaskSpecs -> one MuJoCo model per LIBERO scene (LIBERO's own MJCF), plus the static tables that turn sensor
readings into arrays.

The model is the MJCF LIBERO's environment compiles for the scene's tasks (`libero_source`), compiled with plain
MuJoCo, with four additions that do not change the physics:
- fixtures (LIBERO's welded cabinet, stove, rack, ...) are mocap bodies, so each world can hold its own fixture
  placement (LIBERO samples one at every reset and writes it into `body_pos` / `body_quat`). A welded root is part
  of the world body, which MuJoCo's parent filter never applies to; a mocap root is a body of its own, and the filter
  would drop the contacts between a fixture's frame and its moving parts (a drawer would slide through the back of its
  cabinet). Those geom pairs are added back as explicit contact pairs, mixed as MuJoCo mixes dynamic contacts
  (`frame_pairs`);
- sensors: arm and finger joints, every BDDL entity's root body frame, the region sites the predicates read,
  the articulated joints, and contact sensors for the entity / finger pairs the predicates and records need;
- `nuserdata` slots that carry each world's OSC goal to the native controller (`native_osc`);
- tasks of one scene with different object sets (libero_object: 7 of 11 objects per task) share a union model:
  objects a task lacks are parked out of reach, away from everything.
Names are LIBERO's compiled names: bodies `akita_black_bowl_1_main`, joints `wooden_cabinet_1_middle_level`,
sites `wooden_cabinet_1_top_region`; entities are addressed by their BDDL names (`akita_black_bowl_1`).
Table regions (`main_table_plate_region`) are per-task arrays (`env.TaskArrays`): tasks of a scene may place
one region name differently.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import mujoco
import numpy as np

from clbench_jax.errors import MissingEntityError, UnknownCategoryError
from clbench_jax.sim import libero_source, robot
from clbench_jax.sim.libero_source import Entity, TaskSource
from clbench_jax.sim.predicates import PredicateLayout
from clbench_jax.tasks.spec import TaskSpec

# Bumped whenever a change alters the simulated physics (results written before it are not comparable; a grid
# folder records it in its fingerprint). 2: fixture frames collide with their drawers and knob (frame_pairs).
PHYSICS_REVISION = 2
GOAL_ROWS = 4  # padded goal-table rows: libero_10 goals have 2 atoms; contrasts may add more
INIT_ROWS = 16
TOKEN_SHAPES = 16  # one-hot width for shape classes in object tokens
MAX_TOKEN_JOINTS = 3
TOKEN_DIM = 3 + 4 + 3 + 3 + TOKEN_SHAPES + MAX_TOKEN_JOINTS
# The union model attaches other tasks' objects under their own (LIBERO's) names, with no prefix; MuJoCo warns at
# every compile that such a model may not save back to XML correctly (export_xml's output is checked by tests).
warnings.filterwarnings("ignore", message="Attaching a spec with an empty prefix")
ARENA_CATEGORIES = frozenset({"table", "kitchen_table", "living_room_table", "study_table", "floor"})
PARK_Z = 0.0  # parked objects rest on the floor plane, far from the scene


@dataclass(frozen=True)
class SensorMap:
    """Addresses into `sensordata` (static numpy index arrays)."""

    arm_q: np.ndarray  # (7,)
    finger_q: np.ndarray  # (2,)
    entity_pos: np.ndarray  # (E, 3)
    entity_quat: np.ndarray  # (E, 4)
    site_pos: np.ndarray  # (S_body, 3) region sites carried by entity bodies
    site_quat: np.ndarray  # (S_body, 4)
    joint_q: np.ndarray  # (J,)
    pair_found: np.ndarray  # (P,) contact sensors (native model only)


@dataclass(frozen=True)
class Scene:
    key: str
    tasks: tuple[TaskSpec, ...]
    sources: tuple[TaskSource, ...]  # LIBERO's scene of each task
    arena_name: str  # the BDDL arena fixture (main_table, floor, ...)
    objects: tuple[str, ...]  # BDDL names of movable objects (free joints), union over the tasks
    fixtures: tuple[str, ...]  # BDDL names of non-arena fixtures (mocap bodies)
    info: dict  # BDDL name -> libero_source.Entity
    body_sites: tuple[str, ...]  # region sites on entity bodies (move with them)
    table_regions: tuple[str, ...]  # arena regions: per-task geometry in TaskArrays
    joints: tuple[str, ...]  # articulated joints of fixtures / objects
    layout: PredicateLayout
    pairs: np.ndarray  # (P, 2) contact groups: entity indices, plus E (left finger) and E+1 (right finger)
    park: np.ndarray  # (N_obj, 3) parking positions of absent objects

    @property
    def entities(self) -> tuple[str, ...]:
        return self.objects + self.fixtures

    @property
    def categories(self) -> dict[str, str]:
        return {n: e.category for n, e in self.info.items()}

    @functools.cached_property
    def model(self) -> mujoco.MjModel:
        """The native model (with contact-pair sensors)."""
        return _build_spec(self, contact_sensors=True).compile()

    @functools.cached_property
    def frame_pairs(self) -> tuple[dict, ...]:
        return tuple(frame_pairs(self))

    @functools.cached_property
    def sensors(self) -> SensorMap:
        return _sensor_map(self.model, self)

    @functools.cached_property
    def robot(self) -> "robot.RobotModel":
        return robot.RobotModel.from_model(self.model, self.sources[0])

    def task_index(self, name: str) -> int:
        for i, t in enumerate(self.tasks):
            if t.name == name:
                return i
        raise MissingEntityError("task is not part of this scene", task=name, field="scene", token=self.key)

    def task_source(self, task: TaskSpec) -> TaskSource:
        return self.sources[self.task_index(task.name)]


def _arena_of(task: TaskSpec) -> str:
    arenas = [n for n, c in task.fixtures.items() if c in ARENA_CATEGORIES]
    if len(arenas) != 1:
        raise UnknownCategoryError("a task needs exactly one arena fixture (table / floor)", file=task.file,
                                   task=task.name, field=":fixtures", token=str(arenas))
    return arenas[0]


def build_scene(tasks: list[TaskSpec] | tuple[TaskSpec, ...]) -> Scene:
    """The shared scene of `tasks` (all must have the same `scene` key), from LIBERO's own MJCF of each task."""
    tasks = tuple(tasks)
    keys = {t.scene for t in tasks}
    if len(keys) != 1:
        raise ValueError(f"tasks from several scenes: {sorted(keys)}")
    libero_source.prepare(list(tasks), workers=2)  # first use: LIBERO builds the uncached tasks, two at a time
    sources = tuple(libero_source.source(t) for t in tasks)
    arena = _arena_of(tasks[0])
    info: dict[str, Entity] = {}
    objects: list[str] = []
    fixtures: list[str] = []
    for t, src in zip(tasks, sources):
        if _arena_of(t) != arena:
            raise ValueError(f"task {t.name} has another arena than {tasks[0].name}")
        for e in src.entities:
            if e.name in info:
                if (info[e.name].category, info[e.name].root_body) != (e.category, e.root_body):
                    raise UnknownCategoryError(f"{e.name} is another object in another task of the scene",
                                               file=t.file, task=t.name, token=e.category)
                continue
            info[e.name] = e
            (objects if e.kind == "object" else fixtures).append(e.name)
        for name in list(t.objects) + [f for f, c in t.fixtures.items() if c not in ARENA_CATEGORIES]:
            if name not in info:
                raise MissingEntityError("LIBERO's environment built no body for this BDDL entity", file=t.file,
                                         task=t.name, token=name)
    if len({s.digest for s in sources}) > 1 and fixtures and any(
            {p.name for p in s.placements} != {p.name for p in sources[0].placements} for s in sources):
        raise ValueError(f"tasks of scene {tasks[0].scene} place different fixtures")
    joints: list[str] = []
    for name in objects + fixtures:
        if info[name].kind == "fixture":
            joints += info[name].joints
    region_sites = {}
    for src in sources:
        region_sites.update(src.sites)
    body_sites = tuple(sorted(s for s, v in region_sites.items() if v["parent"] is not None))
    table_regions = tuple(sorted({r for t in tasks for r, reg in t.regions.items() if reg.target == arena}))
    entities = tuple(objects + fixtures)
    sites = body_sites + table_regions
    J = len(joints)
    entity_joints = np.zeros((len(entities), J), bool)
    for e, name in enumerate(entities):
        for jn in info[name].joints:
            if jn in joints:
                entity_joints[e, joints.index(jn)] = True
    site_joints = np.zeros((len(sites), J), bool)
    for s, name in enumerate(body_sites):
        for jn in region_sites[name]["joints"]:
            site_joints[s, joints.index(jn)] = True
    layout = PredicateLayout(entities=entities, sites=sites, joints=tuple(joints), entity_joints=entity_joints,
                             site_joints=site_joints)
    E, n_obj = len(entities), len(objects)
    # Contact groups the predicates and the grasp record need: object-object, object-fixture, finger-object.
    pairs = [(i, j) for i in range(n_obj) for j in range(i + 1, E)]
    pairs += [(E + f, i) for f in (0, 1) for i in range(n_obj)]
    park = np.array([[4.0 + 0.6 * (i % 6), -3.0 + 0.6 * (i // 6), PARK_Z] for i in range(n_obj)])
    return Scene(key=tasks[0].scene, tasks=tasks, sources=sources, arena_name=arena, objects=tuple(objects),
                 fixtures=tuple(fixtures), info=info, body_sites=body_sites, table_regions=table_regions,
                 joints=tuple(joints), layout=layout, pairs=np.array(pairs, np.int32).reshape(-1, 2), park=park)


def _base_spec(scene: Scene) -> mujoco.MjSpec:
    """LIBERO's MJCF of the scene's first task, with every other task's missing objects attached (union)."""
    spec = mujoco.MjSpec.from_string(scene.sources[0].resolved_xml())
    have = {b.name for b in spec.bodies}
    for src in scene.sources[1:]:
        missing = [e for e in src.entities if e.kind == "object" and e.root_body not in have]
        if not missing:
            continue
        other = mujoco.MjSpec.from_string(src.resolved_xml())
        keep = {e.root_body for e in missing}
        # attach copies the other spec's assets too: drop its other bodies, then its assets already here
        for b in list(other.worldbody.bodies):
            if b.name not in keep:
                other.delete(b)
        for kind in ("meshes", "textures", "materials"):
            names = {a.name for a in getattr(spec, kind)}
            for a in list(getattr(other, kind)):
                if a.name in names:
                    other.delete(a)
        for e in missing:
            spec.worldbody.add_frame().attach_body(other.body(e.root_body), "", "")
            have.add(e.root_body)
    return spec


def _mocap_spec(scene: Scene) -> mujoco.MjSpec:
    spec = _base_spec(scene)
    for name in scene.fixtures:
        spec.body(scene.info[name].root_body).mocap = True
    return spec


REACH_SLACK = 0.01  # m: a frame / moving-part geom pair is kept if it comes this close anywhere in the joint's reach


def frame_pairs(scene: Scene) -> list[dict]:
    """Explicit contact pairs (keyword arguments of `MjSpec.add_pair`) that give each fixture's frame (its root's
    welded geoms) the contacts with its moving parts that LIBERO's welded root has: every geom pair that
    contype / conaffinity let collide and that comes within REACH_SLACK of touching somewhere in the moving part's
    joint range (plus 10% either side; the joints are one-dof slides and hinges, sampled every ~1/40 of the range).
    Pairs that never come that close make no contact in LIBERO either; leaving them out keeps MJX's collision work
    small. Parameters mix the two geoms' as MuJoCo does for dynamic contacts of equal priority and solmix: max condim,
    friction, margin and gap; mean solref and solimp."""
    m = _mocap_spec(scene).compile()
    d = mujoco.MjData(m)
    out = []
    for name in scene.fixtures:
        root = m.body(scene.info[name].root_body).id
        bodies = [b for b in range(m.nbody) if m.body_rootid[b] == root]  # mocap bodies are children of the world
        frame = [g for g in range(m.ngeom)
                 if m.geom_bodyid[g] in bodies and m.body_weldid[m.geom_bodyid[g]] == m.body_weldid[root]]
        for j in range(m.njnt):
            b = int(m.jnt_bodyid[j])
            # the parent filter drops only a moving body's contacts with its parent's weld (the frame)
            if (b not in bodies or m.body_weldid[m.body_parentid[b]] != m.body_weldid[root]
                    or m.jnt_type[j] not in (int(mujoco.mjtJoint.mjJNT_SLIDE), int(mujoco.mjtJoint.mjJNT_HINGE))):
                continue
            moving = [g for g in range(m.ngeom) if m.geom_bodyid[g] == b]
            cand = [(g1, g2) for g1 in frame for g2 in moving
                    if m.geom_contype[g1] & m.geom_conaffinity[g2] or m.geom_contype[g2] & m.geom_conaffinity[g1]]
            if not cand:
                continue
            lo, hi = m.jnt_range[j] if m.jnt_limited[j] else (-np.pi, np.pi)
            near = {p: np.inf for p in cand}
            for q in np.linspace(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), 41):
                d.qpos[:] = m.qpos0
                d.qpos[m.jnt_qposadr[j]] = q
                mujoco.mj_kinematics(m, d)
                for p in cand:
                    near[p] = min(near[p], mujoco.mj_geomDistance(m, d, *p, 2 * REACH_SLACK, None))
            for g1, g2 in cand:
                if near[(g1, g2)] >= REACH_SLACK + max(m.geom_margin[g1], m.geom_margin[g2]):
                    continue
                if not (m.geom(g1).name and m.geom(g2).name):
                    raise ValueError(f"{scene.key}: fixture {name} has an unnamed geom (an explicit pair needs names)")
                f = np.maximum(m.geom_friction[g1], m.geom_friction[g2])
                out.append(dict(geomname1=m.geom(g1).name, geomname2=m.geom(g2).name,
                                condim=int(max(m.geom_condim[g1], m.geom_condim[g2])),
                                friction=[f[0], f[0], f[1], f[2], f[2]],
                                solref=list(0.5 * (m.geom_solref[g1] + m.geom_solref[g2])),
                                solimp=list(0.5 * (m.geom_solimp[g1] + m.geom_solimp[g2])),
                                margin=float(max(m.geom_margin[g1], m.geom_margin[g2])),
                                gap=float(max(m.geom_gap[g1], m.geom_gap[g2]))))
    return out


def _build_spec(scene: Scene, contact_sensors: bool) -> mujoco.MjSpec:
    spec = _mocap_spec(scene)
    for kw in scene.frame_pairs:
        spec.add_pair(**kw)
    spec.nuserdata = robot.NUSERDATA
    _add_sensors(spec, scene, contact_sensors)
    return spec


def _add_sensors(spec: mujoco.MjSpec, scene: Scene, contact_sensors: bool) -> None:
    """Sensors named `clb:<kind>:<object>` (LIBERO's model has sensors of its own: robosuite's force-torque)."""
    S, O = mujoco.mjtSensor, mujoco.mjtObj

    def add(kind, objtype, objname, tag, **kw):
        return spec.add_sensor(name=f"clb:{tag}:{objname}", type=kind, objtype=objtype, objname=objname, **kw)

    for j in robot.ARM_JOINTS + robot.FINGER_JOINTS:
        add(S.mjSENS_JOINTPOS, O.mjOBJ_JOINT, j, "q")
    for name in scene.entities:
        add(S.mjSENS_FRAMEPOS, O.mjOBJ_XBODY, scene.info[name].root_body, "pos")
        add(S.mjSENS_FRAMEQUAT, O.mjOBJ_XBODY, scene.info[name].root_body, "quat")
    for name in scene.body_sites:
        add(S.mjSENS_FRAMEPOS, O.mjOBJ_SITE, name, "pos")
        add(S.mjSENS_FRAMEQUAT, O.mjOBJ_SITE, name, "quat")
    for name in scene.joints:
        add(S.mjSENS_JOINTPOS, O.mjOBJ_JOINT, name, "q")
    if contact_sensors:
        groups = [scene.info[n].root_body for n in scene.entities] + list(robot.FINGER_BODIES)
        for i, j in scene.pairs:
            # found flag of any contact between the two subtrees (LIBERO's check_contact over their geoms)
            s = add(S.mjSENS_CONTACT, O.mjOBJ_XBODY, groups[i], f"contact:{groups[j]}",
                    reftype=O.mjOBJ_XBODY, refname=groups[j])
            prm = np.array(s.intprm)
            prm[:3] = [1, 0, 1]  # data = found, reduce = none, num = 1
            s.intprm = prm
            s.dim = 1


def _sensor_map(m: mujoco.MjModel, scene: Scene) -> SensorMap:
    def adr(tag: str, name: str, width: int) -> np.ndarray:
        return m.sensor_adr[m.sensor(f"clb:{tag}:{name}").id] + np.arange(width)

    def rows(tag, names, width):
        return np.stack([adr(tag, n, width) for n in names]) if names else np.zeros((0, width), int)

    roots = [scene.info[n].root_body for n in scene.entities]
    groups = roots + list(robot.FINGER_BODIES)
    try:
        pf = np.array([adr(f"contact:{groups[j]}", groups[i], 1)[0] for i, j in scene.pairs], int)
    except KeyError:  # a model built without contact sensors
        pf = np.zeros((0,), int)
    return SensorMap(arm_q=rows("q", robot.ARM_JOINTS, 1)[:, 0], finger_q=rows("q", robot.FINGER_JOINTS, 1)[:, 0],
                     entity_pos=rows("pos", roots, 3), entity_quat=rows("quat", roots, 4),
                     site_pos=rows("pos", scene.body_sites, 3), site_quat=rows("quat", scene.body_sites, 4),
                     joint_q=rows("q", scene.joints, 1)[:, 0] if scene.joints else np.zeros((0,), int),
                     pair_found=pf)


def export_xml(scene: Scene, task: TaskSpec | None = None) -> str:
    """MJCF of the scene's model (for inspection in any MuJoCo tool)."""
    spec = _build_spec(scene, contact_sensors=True)
    spec.compile()
    return spec.to_xml()
