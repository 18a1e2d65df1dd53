"""More initial states than LIBERO ships, drawn by LIBERO's own reset.

LIBERO's official initial states are what its environment's `reset()` leaves (time 0, zero velocities): objects
placed by its region samplers (BDDL :init regions, the objects' own rotation ranges, no overlaps by their
horizontal radii, objects on fixture sites and on other objects), fixtures sampled in their regions, the arm at
init_qpos plus noise. So further states are drawn the same way: LIBERO's environment of the task, reset with a
seeded numpy generator (one seed per state index), its state read out and mapped into this project's model by joint
name, with the fixture poses and the controller's reset joints of that same reset. A variant (a TaskSpec with
other :init atoms, e.g. the deconfounded generator's permuted placements) is drawn from LIBERO's environment of a
BDDL file with the variant's :init block. Draws are cached on disk: robosuite runs once per state.
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


def _reset_draws(bddl_file: str, seeds: list[int]) -> list[dict]:
    """LIBERO's reset for each seed -> its raw state (1 + nq + nv), fixture poses and controller reset joints."""
    env = libero_source.make_env(bddl_file)
    try:
        m = env.sim.model._model
        out = []
        for s in seeds:
            np.random.seed(s)  # robosuite and LIBERO's samplers draw from numpy's global generator
            env.reset()
            out.append({"state": env.sim.get_state().flatten().tolist(),
                        "fixtures": {name: [*m.body_pos[m.body(fx.root_body).id], *m.body_quat[m.body(fx.root_body).id]]
                                     for name, fx in env.fixtures_dict.items()},
                        "q0": [float(q) for q in env.robots[0].controller.initial_joint]})
        return out
    finally:
        env.close()


def _seed(task: TaskSpec, seed: int, index: int) -> int:
    return int(hashlib.sha256(f"{task.suite}/{task.name}:{seed}:{index}".encode()).hexdigest()[:8], 16) % (2 ** 31)


def _cached_draws(task: TaskSpec, text: str, bddl: str, seeds: list[int]) -> list[dict]:
    root = cache_dir() / "sampled_states" / libero_source.cache_root().name
    tag = hashlib.sha256(text.encode()).hexdigest()[:12]
    out, todo = {}, []
    for s in seeds:
        path = root / task.name / f"{tag}-{s}.json"
        if path.is_file():
            out[s] = json.loads(path.read_text())
        else:
            todo.append(s)
    if todo:
        if bddl is None:
            bddl = str(root / "bddl" / f"{task.name}-{tag}.bddl")
            jsonio.write_text(bddl, text)
        for s, draw in zip(todo, _reset_draws(bddl, todo)):
            jsonio.write_json(root / task.name / f"{tag}-{s}.json", draw, indent=None)
            out[s] = draw
    return [out[s] for s in seeds]


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
    for h, ks in groups.items():
        bddl = task.file if variants is None else None
        draws = _cached_draws(task, texts[h], bddl, [_seed(task, seed, indices[k]) for k in ks])
        state[ks] = map_libero_states(scene, task, np.array([d["state"] for d in draws]), file=task.file)
        for k, d in zip(ks, draws):
            mocap[k] = fixture_placements(scene, task, np.random.default_rng(0))  # parks the fixtures it lacks
            for name, pose in d["fixtures"].items():
                mocap[k, m.body_mocapid[m.body(scene.info[name].root_body).id]] = pose
            q0[k] = d["q0"]
    return state, mocap, q0
