"""More initial states than LIBERO ships, drawn by LIBERO's own reset.

LIBERO's official initial states are what its environment's `reset()` leaves (time 0, zero velocities): objects
placed by its region samplers (BDDL :init regions, the objects' own rotation ranges, no overlaps by their
horizontal radii, objects on fixture sites and on other objects), fixtures sampled in their regions, the arm at
init_qpos plus noise. So further states are drawn the same way: LIBERO's environment of the task, reset with a
seeded generator, its state read out and mapped into this project's model by joint name, with the fixture poses
and the controller's reset joints of that same reset. A `variant` (a TaskSpec with other :init atoms, e.g. the
deconfounded generator's permuted placements) is drawn from LIBERO's environment of a BDDL file with the variant's
:init block. Banks are cached on disk per (task or variant file, seed, n): robosuite runs once per bank.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Callable

import numpy as np

from clbench_jax import jsonio
from clbench_jax.paths import cache_dir
from clbench_jax.sim import libero_source
from clbench_jax.sim.init_states import InitBank, init_predicates_hold, map_libero_states, task_rng
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


def _draw(bddl_file: str, seeds: list[int]) -> dict:
    """LIBERO's reset for each seed -> raw states (n, 1 + nq + nv), fixture poses, controller reset joints."""
    env = libero_source.make_env(bddl_file)
    try:
        states, fixtures, q0 = [], [], []
        m = env.sim.model._model
        for s in seeds:
            np.random.seed(s)  # robosuite and LIBERO's samplers draw from numpy's global generator
            env.reset()
            states.append(env.sim.get_state().flatten())
            fixtures.append({name: [*m.body_pos[m.body(fx.root_body).id], *m.body_quat[m.body(fx.root_body).id]]
                             for name, fx in env.fixtures_dict.items()})
            q0.append(list(env.robots[0].controller.initial_joint))
        return {"states": np.array(states).tolist(), "fixtures": fixtures, "q0": q0}
    finally:
        env.close()


def make_sampled_bank(scene: Scene, task: TaskSpec, n: int, seed: int = 0, valid_only: bool = True,
                      max_rounds: int = 5, variant: Callable[[np.random.Generator], TaskSpec] | None = None
                      ) -> InitBank:
    """`n` initial conditions of `task` from LIBERO's reset (see module doc), deterministic in (task, seed).
    With `valid_only`, draws whose :init predicates (of the task, or of their variant) fail are replaced by
    further draws (up to `max_rounds` rounds); `init_ok` says which returned states are valid."""
    rng = task_rng(task, seed, "sampler")
    states, mocaps, q0s, oks, inits = [], [], [], [], []
    for _ in range(max_rounds if valid_only else 1):
        variants = [variant(rng) for _ in range(n)] if variant is not None else [task] * n
        seeds = [int(x) for x in rng.integers(0, 2 ** 31 - 1, n)]
        raw = {}
        for v in dict.fromkeys(variants):  # one LIBERO environment per distinct variant
            idx = [i for i, w in enumerate(variants) if w is v or w == v]
            raw[id(v)] = (idx, _cached_draw(task, v, [seeds[i] for i in idx]))
        state = np.zeros((n, _nstate(scene)))
        mocap = np.zeros((n, scene.model.nmocap, 7))
        q0 = np.zeros((n, 7))
        for idx, draw in raw.values():
            state[idx] = map_libero_states(scene, task, np.asarray(draw["states"]), file=task.file)
            mocap[idx] = [_mocap(scene, task, f) for f in draw["fixtures"]]
            q0[idx] = draw["q0"]
        ok = init_predicates_hold(scene, task, state, mocap, variants if variant is not None else None)
        states.append(state), mocaps.append(mocap), q0s.append(q0), oks.append(ok)
        inits.extend(v.init for v in variants)
        if not valid_only or sum(o.sum() for o in oks) >= n:
            break
    state, mocap, q0, ok = map(np.concatenate, (states, mocaps, q0s, oks))
    order = np.argsort(~ok, kind="stable")[:n] if valid_only else np.arange(n)  # valid ones first, in order
    return InitBank(task=task.name, state=state[order], mocap=mocap[order], q0=q0[order], init_ok=ok[order],
                    source="sampler", inits=tuple(inits[i] for i in order) if variant is not None else ())


def _nstate(scene: Scene) -> int:
    import mujoco

    from clbench_jax.sim.native import FULL

    return mujoco.mj_stateSize(scene.model, FULL)


def _mocap(scene: Scene, task: TaskSpec, fixtures: dict) -> np.ndarray:
    from clbench_jax.sim.init_states import fixture_placements

    out = fixture_placements(scene, task, np.random.default_rng(0))  # parks the fixtures the task lacks
    m = scene.model
    for name, pose in fixtures.items():
        out[m.body_mocapid[m.body(scene.info[name].root_body).id]] = pose
    return out


def _cached_draw(task: TaskSpec, variant: TaskSpec, seeds: list[int]) -> dict:
    text = Path(task.file).read_text() if variant is task else variant_bddl(task, variant)
    key = hashlib.sha256((text + repr(seeds) + repr(libero_source.versions())).encode()).hexdigest()[:16]
    root = cache_dir() / "sampled_states"
    path = root / f"{task.name}-{key}.json"
    if path.is_file():
        import json

        return json.loads(path.read_text())
    bddl = task.file
    if variant is not task:
        bddl = str(root / "bddl" / f"{task.name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.bddl")
        jsonio.write_text(bddl, text)
    draw = _draw(bddl, seeds)
    jsonio.write_json(path, draw, indent=None)
    return draw
