"""Demonstration generators: where a task's objects start.

- ``confounded`` (LIBERO's own recipe): every object is placed from its BDDL :init region (LIBERO's official
  initial states, then LIBERO's own reset), so a task's target always starts where that task's demonstrations put
  it -- its position alone says which object to fetch.
- ``deconfounded`` (seed 004): per episode, the table placements (`On(obj, <arena region>)` init atoms) are randomly
  permuted among the task's movable objects that are the target of some task of the scene, and LIBERO's own reset
  places the objects by the permuted atoms (sim/sampler.py). Every such object then shows up at every one of
  their slots, as target in its own tasks and as distractor in the others, so the target's position is independent
  of the task and only the instruction names it. Objects that are never a target (a basket) keep their region;
  objects placed on/in a fixture or on another object keep that referent and travel with it.

Both use the same init-bank seeds, the same oracle and the same episode counts; only the placement differs.
A task whose goal object has a same-category twin (libero_spatial's two black bowls, libero_10's left/right
plates) is named by its position, so permuting positions would falsify its instruction: `deconfounded` refuses it
with a :class:`GeneratorError`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from clbench_jax.errors import ClbenchError
from clbench_jax.sim.init_states import InitBank, make_init_bank
from clbench_jax.sim.native import state_to_qpos
from clbench_jax.sim.scene import Scene
from clbench_jax.tasks.spec import Atom, TaskSpec

GENERATORS = ("confounded", "deconfounded")


class GeneratorError(ClbenchError):
    """A generator cannot be applied to a task (unknown name, or a task it would make wrong)."""


def check_generator(name: str) -> str:
    if name not in GENERATORS:
        raise GeneratorError(f"unknown generator; choose one of {', '.join(GENERATORS)}", field="generator",
                             token=name)
    return name


def target_object(scene: Scene, task: TaskSpec) -> str | None:
    """The movable object the task is about: first argument of the first goal atom that names one (None for
    goals over fixtures only, e.g. opening a drawer)."""
    for a in task.goal:
        if a.args and a.args[0] in task.objects and a.args[0] in scene.objects:
            return a.args[0]
    return None


def table_placements(scene: Scene, task: TaskSpec) -> dict[str, str]:
    """Movable object -> the arena region its :init `On` atom places it in (the permutable slots)."""
    out = {}
    for a in task.init:
        if (a.pred == "on" and a.args[0] in scene.objects and a.args[0] in task.objects
                and a.args[1] in task.regions and task.regions[a.args[1]].target == scene.arena_name):
            out[a.args[0]] = a.args[1]
    return out


def _check_permutable(task: TaskSpec) -> None:
    goal_objs = {x for a in task.goal for x in a.args if x in task.objects}
    for g in sorted(goal_objs):
        twins = [o for o, c in task.objects.items() if c == task.objects[g] and o != g]
        if twins:
            raise GeneratorError(
                f"goal object {g} has a same-category twin ({', '.join(twins)}): the instruction names it by its "
                "position, which the deconfounded generator would randomize", file=task.file, task=task.name,
                field=":goal", token=g)


def permuted_task(task: TaskSpec, assignment: dict[str, str]) -> TaskSpec:
    """`task` with the `On(obj, region)` init atoms of the objects in `assignment` pointed at new regions."""
    init = tuple(Atom("on", (a.args[0], assignment[a.args[0]]), a.line)
                 if a.pred == "on" and a.args[0] in assignment else a for a in task.init)
    return dataclasses.replace(task, init=init)


def permutable_objects(scene: Scene, task: TaskSpec) -> list[str]:
    """The task's table-placed objects that are the target of some task of the scene, in scene order. Objects that
    are never a target (libero_object's basket) stay in their region: they confound nothing, and moving a large
    container among small objects makes some layouts infeasible, whose rejection would bias the survivors."""
    targets = {target_object(scene, t) for t in scene.tasks}
    slots = table_placements(scene, task)
    return [o for o in scene.objects if o in slots and o in targets]


def deconfounded_variant(scene: Scene, task: TaskSpec):
    """-> variant(rng): a uniformly random permutation of the task's table placements (for make_init_bank)."""
    _check_permutable(task)
    slots = table_placements(scene, task)
    objs = permutable_objects(scene, task)
    regions = [slots[o] for o in objs]

    def variant(rng: np.random.Generator) -> TaskSpec:
        perm = rng.permutation(len(objs))
        return permuted_task(task, {o: regions[p] for o, p in zip(objs, perm)})

    return variant


def init_bank(scene: Scene, task: TaskSpec, n: int, seed: int, generator: str, start: int = 0) -> InitBank:
    """Initial states start .. start + n - 1 of `task` under `generator` (deterministic in task, seed, index):
    confounded: LIBERO's official states, then LIBERO's own reset; deconfounded: LIBERO's reset of each state's
    permuted :init placements."""
    check_generator(generator)
    variant = deconfounded_variant(scene, task) if generator == "deconfounded" else None
    return make_init_bank(scene, task, n, seed=seed, start=start, variant=variant)


# --------------------------------------------------------------------------------------------- statistics

def object_xy(scene: Scene, state: np.ndarray, name: str) -> np.ndarray:
    """(n, 2) table position of a free object in full physics states (n, nstate)."""
    m = scene.model
    adr = m.jnt_qposadr[m.joint(scene.info[name].joints[0]).id]
    return state_to_qpos(m, state)[:, adr:adr + 2]


def object_slots(scene: Scene, task: TaskSpec, bank: InitBank) -> dict[str, list[str]]:
    """Per table-placed movable object: per initial state, the table slot (an arena region of the task's :init
    placements) nearest its settled position -- measured in the physics, not read from the atoms."""
    placements = table_placements(scene, task)
    slots = sorted(set(placements.values()))
    centres = np.array([_centre(task.regions[r].ranges[0]) for r in slots])
    out = {}
    for obj in placements:
        xy = object_xy(scene, bank.state, obj)
        out[obj] = [slots[i] for i in np.argmin(np.linalg.norm(xy[:, None] - centres[None], axis=-1), axis=1)]
    return out


def slot_records(scene: Scene, task: TaskSpec, bank: InitBank) -> list[dict]:
    """One record per (initial state, candidate target: an object that is the target of some task of the scene):
    task, episode, object, slot, is_target -- the rows the independence statistics are computed from."""
    target = target_object(scene, task)
    cands = set(permutable_objects(scene, task))
    return [{"task": task.name, "episode": i, "object": obj, "slot": slot, "is_target": obj == target}
            for obj, per in object_slots(scene, task, bank).items() if obj in cands for i, slot in enumerate(per)]


def _centre(box) -> np.ndarray:
    x0, y0, x1, y1 = box
    return np.array([(x0 + x1) / 2, (y0 + y1) / 2])


def chi_square(table: np.ndarray) -> float:
    """Pearson's chi-square statistic of a contingency table (rows, cols); empty rows/cols dropped."""
    t = np.asarray(table, float)
    t = t[t.sum(1) > 0][:, t.sum(0) > 0]
    expected = t.sum(1, keepdims=True) * t.sum(0, keepdims=True) / t.sum()
    return float(((t - expected) ** 2 / expected).sum())


def independence_test(labels_a, labels_b, n_perm: int = 2000, seed: int = 0) -> dict:
    """Permutation chi-square test of independence between two label sequences (e.g. task id and target slot).

    -> {"chi2", "p" (fraction of label shuffles with a statistic >= the observed one, add-one smoothed),
    "cramers_v" (0 = independent, 1 = one determines the other), "n", "table"}."""
    a_vals, a = np.unique(np.asarray(labels_a), return_inverse=True)
    b_vals, b = np.unique(np.asarray(labels_b), return_inverse=True)

    def table(bb):
        t = np.zeros((len(a_vals), len(b_vals)))
        np.add.at(t, (a, bb), 1)
        return t

    obs = chi_square(table(b))
    rng = np.random.default_rng(seed)
    null = np.array([chi_square(table(rng.permutation(b))) for _ in range(n_perm)])
    k = min(len(a_vals), len(b_vals)) - 1
    return {"chi2": obs, "p": float((1 + (null >= obs - 1e-9).sum()) / (n_perm + 1)),
            "cramers_v": float(np.sqrt(obs / (len(a) * k))) if k > 0 else 0.0, "n": int(len(a)),
            "table": table(b).astype(int).tolist(), "rows": [str(x) for x in a_vals],
            "cols": [str(x) for x in b_vals]}
