"""More initial states than LIBERO ships, drawn by LIBERO's own reset.

LIBERO's official initial states are what its environment's `reset()` leaves (time 0, zero velocities): objects
placed by its region samplers (BDDL :init regions, the objects' own rotation ranges, no overlaps by their
horizontal radii, objects on fixture sites and on other objects), fixtures sampled in their regions, the arm at
init_qpos plus noise. So further states are drawn the same way: LIBERO's environment of the task, reset with a
seeded numpy generator (one seed per state index), its state read out and mapped into this project's model by joint
name, with the fixture poses and the controller's reset joints of that same reset. A variant (a TaskSpec with
other :init atoms, e.g. the deconfounded generator's permuted placements) is drawn from LIBERO's environment of a
BDDL file with the variant's :init block. Each state is what the first reset of a freshly built environment of its
file leaves (a function of the file and the seed alone); one environment per task makes them all. Draws are cached
on disk.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import mujoco
import numpy as np

from clbench_jax import jsonio
from clbench_jax.paths import cache_dir
from clbench_jax.sim import libero_source
from clbench_jax.sim.scene import Scene
from clbench_jax.tasks.spec import TaskSpec

_INIT_BLOCK = re.compile(r"\(:init\b.*?\n\s*\)\s*\n", re.S)


def variant_bddl(task: TaskSpec, variant: TaskSpec) -> str:
    """The task's BDDL text with its :init block replaced by the variant's atoms."""
    text = Path(task.file).read_text()
    m = _INIT_BLOCK.search(text)
    if m is None:
        raise ValueError(f"no :init block found in {task.file}")
    atoms = "\n".join(f"    ({a.pred.capitalize()} {' '.join(a.args)})" for a in variant.init)
    return text[:m.start()] + f"(:init\n{atoms}\n  )\n" + text[m.end():]


def _reset_draws(task_file: str, jobs: list[tuple[str, list[int]]]) -> list[list[dict]]:
    """Per (BDDL file, seeds) job: for each seed, what the first reset of a freshly built LIBERO environment of that
    file leaves -> its raw state (1 + nq + nv), fixture poses and controller reset joints.

    One environment of the task serves every job: a hard reset rebuilds the model from the same XML, so each draw
    resets softly from what a fresh build holds instead -- the compiled fixture poses (the reset moves fixtures by
    writing the model, and places objects in fixture regions from the fixtures' current poses), the variant's parsed
    :init, and LIBERO's property samplers as a fresh build has them: LIBERO appends its open/close/turn-on samplers
    at every model load and never clears them, so a fresh environment's first reset runs each twice, and a k-th
    reset k + 1 times, consuming the random stream differently. tests/test_sampler.py checks draws against fresh
    builds bit for bit."""
    import libero.libero.envs.bddl_utils as bddl_utils

    env = libero_source.make_env(task_file, hard_reset=False)
    try:
        m = env.sim.model._model
        built = mujoco.MjModel.from_xml_string(env.model.get_xml())
        out = []
        for bddl, seeds in jobs:
            env.parsed_problem = bddl_utils.robosuite_parse_problem(bddl)
            draws = []
            for s in seeds:
                m.body_pos[:], m.body_quat[:] = built.body_pos, built.body_quat
                env.object_property_initializers = []
                for _ in range(2):  # the constructor's model load and the first reset's
                    env._setup_placement_initializer(env.model.mujoco_arena)
                np.random.seed(s)  # robosuite and LIBERO's samplers draw from numpy's global generator
                env.reset()
                draws.append({"state": env.sim.get_state().flatten().tolist(),
                              "fixtures": {name: [*m.body_pos[m.body(fx.root_body).id],
                                                  *m.body_quat[m.body(fx.root_body).id]]
                                           for name, fx in env.fixtures_dict.items()},
                              "q0": [float(q) for q in env.robots[0].controller.initial_joint]})
            out.append(draws)
        return out
    finally:
        env.close()


def _seed(task: TaskSpec, seed: int, index: int) -> int:
    return int(hashlib.sha256(f"{task.suite}/{task.name}:{seed}:{index}".encode()).hexdigest()[:8], 16) % (2 ** 31)


# Cached draws are keyed by this and the BDDL text: draws made before it depended on how many resets their
# environment had run (see _reset_draws).
_DRAW_KIND = "first-reset"


def _cached_draws(task: TaskSpec, groups: list[tuple[str, list[int]]]) -> list[list[dict]]:
    """Per (BDDL text, seeds) group, its draws: from the disk cache, the missing ones from one LIBERO environment."""
    root = cache_dir() / "sampled_states" / libero_source.cache_root().name
    out, jobs = [], []
    for text, seeds in groups:
        tag = hashlib.sha256(f"{_DRAW_KIND}\n{text}".encode()).hexdigest()[:12]
        paths = {s: root / task.name / f"{tag}-{s}.json" for s in seeds}
        out.append({s: json.loads(p.read_text()) for s, p in paths.items() if p.is_file()})
        todo = [s for s in seeds if s not in out[-1]]
        if todo:
            bddl = root / "bddl" / f"{task.name}-{tag}.bddl"
            if Path(task.file).read_text() == text:
                bddl = Path(task.file)
            elif not bddl.is_file():
                jsonio.write_text(bddl, text)
            jobs.append((len(out) - 1, str(bddl), todo, paths))
    if jobs:
        for (k, _, todo, paths), draws in zip(jobs, _reset_draws(task.file, [(b, t) for _, b, t, _ in jobs])):
            for s, d in zip(todo, draws):
                jsonio.write_json(paths[s], d, indent=None)
                out[k][s] = d
    return [[got[s] for s in seeds] for got, (_, seeds) in zip(out, groups)]


def draw(scene: Scene, task: TaskSpec, indices: list[int], seed: int,
         variants: list[TaskSpec] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """States `indices` of the task's sampled stream -> (full states (n, nstate), mocap (n, nmocap, 7), q0 (n, 7))."""
    from clbench_jax.sim.init_states import fixture_placements, map_libero_states

    n = len(indices)
    state = np.zeros((n, mujoco.mj_stateSize(scene.model, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
    mocap = np.zeros((n, scene.model.nmocap, 7))
    q0 = np.zeros((n, 7))
    groups: dict[str, list[int]] = {}
    texts = {}
    for k in range(n):
        text = Path(task.file).read_text() if variants is None else variant_bddl(task, variants[k])
        h = hashlib.sha256(text.encode()).hexdigest()
        groups.setdefault(h, []).append(k)
        texts[h] = text
    m = scene.model
    all_draws = _cached_draws(task, [(texts[h], [_seed(task, seed, indices[k]) for k in ks])
                                     for h, ks in groups.items()])
    for ks, draws in zip(groups.values(), all_draws):
        state[ks] = map_libero_states(scene, task, np.array([d["state"] for d in draws]), file=task.file)
        for k, d in zip(ks, draws):
            mocap[k] = fixture_placements(scene, task, np.random.default_rng(0))  # parks the fixtures it lacks
            for name, pose in d["fixtures"].items():
                mocap[k, m.body_mocapid[m.body(scene.info[name].root_body).id]] = pose
            q0[k] = d["q0"]
    return state, mocap, q0
