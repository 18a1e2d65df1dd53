"""The evaluation grid: checkpoints x tasks x instruction variants x rollout seeds, as batched rollouts.

Axes (DESIGN principle 1):
- checkpoint: `Checkpoint(method, seed, stage, load)`; `load(j)` gives the parameters that act on task j (the
  same pytree for most methods, a per-task selection for PackNet-like ones). One policy architecture throughout.
- task j: position in the task order; only cells with j <= stage run.
- instruction variant: (text embedding, goal table, condition). Goal columns of task j (`goal_columns`) are its
  unique executable goals -- the original goal first, then each contrast goal -- and every episode of task j
  records success for all of them (the language metrics need them); `target` names the variant's own column.
- rollout r: initial state r of the task's settled bank and a policy-noise key, both derived from (grid seed,
  task, r) only, so every checkpoint and variant meets the same paired starts and noise.

An episode runs with goal 0 = its stop goal, followed by the task's goal columns. Episodes under the original goal
(original, paraphrase, occ, nonsense) stop once it holds, as LIBERO's do; contrasts and swaps run to the horizon so
both their own goal and the original are known (Target SR and GSA can differ); collisions have no goal and run
the full horizon too.

Which variants a checkpoint meets (`evaluated`): the spec's conditions, at most `max_per_condition` per task and
condition (file order), the `final_only` conditions only at the last stage, and where `only` is given only the
variants it names. The goal columns are every
executable goal of the task's variants whether evaluated or not, so G_j is all audited goals.

Work is cut into chunks of `chunk` episodes: whole (cell, variant) groups of `n_rollouts` episodes, one scene per
chunk, the last chunk padded so every chunk has the same shapes (one compile). `chunk="auto"` sizes chunks from the
memory free when the grid starts (`chunk_plan`; the estimate of one episode's bytes against a safety fraction of the
free memory is eval/chunk_size.py).

This module is the grid's description: its axes, variants, goal columns, chunk plan and settings checks. The grid
folder (grid.json, chunk files, resume) is eval/grid_folder.py; the batched rollouts that fill it, eval/grid_runner.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Sequence

import jax
import numpy as np

from clbench_jax.errors import ClbenchError
from clbench_jax.eval import chunk_size
from clbench_jax.tasks.spec import TaskSpec

# probe: an unverified collision probe (evaluated, reported outside the collision aggregate); swap / occ /
# nonsense: seed 004's faces (eval/faces.py).
CONDITIONS = ("original", "paraphrase", "contrast", "collision", "probe", "swap", "occ", "nonsense")
STOP_AT_GOAL = ("original", "paraphrase", "occ", "nonsense")  # the rest run to the horizon
AUDITED = ("original", "contrast")  # G_j of seed 000: the original goal and the retained contrast goals


@dataclass(frozen=True)
class Variant:
    id: str
    condition: str  # original | paraphrase | contrast | collision
    text: str
    goal: tuple | None  # atoms ((pred, *args), ...); None for collisions (no executable goal)
    slot: str = ""
    kinds: tuple[str, ...] = ()  # paraphrase kinds (language/offline.py), e.g. ("synonym", "question")
    trivial: bool = False  # a contrast whose goal a nudge of the reset state meets (excluded from GSA)


@dataclass(frozen=True)
class Checkpoint:
    method: str
    seed: int
    stage: int
    load: Callable[[int], Any]  # task position j -> parameter pytree acting on task j
    # the policy's parameter shapes -> the shapes `load` gives: an algorithm's per-task selection can change the
    # tree (TAIL hands the network one task's adapters, IsCiL and DMPEL add what retrieval may see); None: the same
    acting: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class GridSpec:
    tasks: tuple[TaskSpec, ...]  # the task order: task j = tasks[j]
    variants: tuple[tuple[Variant, ...], ...]  # per task, original first
    n_rollouts: int = 20
    horizon: int = 600
    warmup: int = 5
    seed: int = 0  # initial-state bank and policy noise
    backend: str = "native"
    mjx_impl: str = "warp"  # MuJoCo Warp (NVIDIA GPUs; CPU for tests); "jax" cannot collide LIBERO's robot mount
    obs: str = "state"
    image_size: int = 128
    deterministic: bool = False
    chunk: int | str = "auto"  # episodes per chunk (per device), or "auto": as many as fit (chunk_plan)
    group_loop: bool | None = None  # policy over parameter groups: lax.map (True) or vmap; None: map on CPUs
    conditions: tuple[str, ...] | None = None  # conditions evaluated (None: all the variants have)
    max_per_condition: int | None = None  # at most this many variants per task and condition (file order)
    final_only: tuple[str, ...] = ()  # conditions only the final stage's checkpoints meet
    only: tuple[str, ...] | None = None  # variant ids evaluated (None: every one the fields above allow)

    @property
    def loop(self) -> bool:
        return jax.default_backend() == "cpu" if self.group_loop is None else self.group_loop

    def settings(self) -> dict:
        """Every field but the task and variant axes."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("tasks", "variants")}
        d["group_loop"] = self.loop
        return d

    def fingerprint(self, checkpoints: Sequence[Checkpoint], policy) -> str:
        d = self.settings()
        d["tasks"] = [t.name for t in self.tasks]
        d["variants"] = [[asdict(v) for v in vs] for vs in self.variants]
        d["checkpoints"] = [(c.method, c.seed, c.stage) for c in checkpoints]
        d["policy"] = repr(policy.cfg)
        from clbench_jax.sim.scene import PHYSICS_REVISION

        d["physics"] = PHYSICS_REVISION  # a folder written under other physics is another grid
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------------- variants
def _atoms(goal) -> tuple:
    return tuple((a.pred, *a.args) if hasattr(a, "pred") else tuple(a) for a in goal)


def original_variant(task: TaskSpec) -> Variant:
    return Variant(f"{task.name}/original", "original", task.instruction, _atoms(task.goal))


def occ_variant(task: TaskSpec) -> Variant:
    """Seed 004's occ face: the original instruction and goal, the policy's perception blanked (eval/faces.py)."""
    return Variant(f"{task.name}/occ", "occ", task.instruction, _atoms(task.goal))


def variants_from_file(path, tasks: Sequence[TaskSpec], suite: str | None = None) -> tuple[tuple[Variant, ...], ...]:
    """Per task: the original instruction, then the file's retained variants (a clbench-variants JSON file,
    language/variants.py): text, condition, and a goal override for contrasts. A file of another suite, or one
    without an entry for a task of the grid, is refused (the grid would silently evaluate only the originals)."""
    from clbench_jax.errors import DataFileError
    from clbench_jax.language.variants import read_variants

    doc = read_variants(path)
    if suite is not None and doc["suite"] != suite:
        raise DataFileError(f"variant file of suite {doc['suite']!r}, the run is on {suite!r}", file=str(path),
                            field="suite")
    by_name = {t["task"]: t for t in doc["tasks"]}
    missing = [t.name for t in tasks if t.name not in by_name]
    if missing:
        raise DataFileError(f"no variants for {len(missing)} task(s) of the grid (build them with `clbench variants "
                            "build`)", file=str(path), task=missing[0], field="tasks")
    out = []
    for task in tasks:
        vs = [original_variant(task)]
        for v in by_name[task.name]["variants"]:
            probe = v["condition"] == "collision" and v.get("probe") == "unverified"
            if not (v["retained"] or probe) or v["condition"] == "original":
                continue
            cond = "probe" if probe else v["condition"]
            goal = v.get("goal")
            if cond in ("collision", "probe"):
                goal = None
            elif goal is None:
                if cond in ("contrast", "swap"):
                    raise ClbenchError(f"a {cond} variant needs a goal", file=str(path), task=task.name,
                                       field=f"variants[{v['id']}].goal")
                goal = vs[0].goal
            vs.append(Variant(v["id"], cond, v["text"], None if goal is None else _atoms(goal), v.get("slot") or "",
                              tuple(v.get("kinds") or ()), bool(v.get("trivial"))))
        out.append(tuple(vs))
    return tuple(out)


def goal_columns(variants: Sequence[Variant]) -> list[tuple]:
    """Task j's goal columns: its unique executable goals, the audited ones first (the original's, then each
    contrast goal, in variant order: the language battery's `audited_goals`), then the other goals (swaps)."""
    cols: list[tuple] = []
    for audited in (True, False):
        for v in variants:
            if v.goal is not None and (v.condition in AUDITED) == audited and v.goal not in cols:
                cols.append(v.goal)
    return cols


def n_audited(variants: Sequence[Variant]) -> int:
    """How many of the leading goal columns are audited goals (G_j)."""
    return len(goal_columns([v for v in variants if v.condition in AUDITED]))


def evaluated(spec: GridSpec, j: int, stage: int) -> list[int]:
    """Indices of task j's variants that a checkpoint of `stage` meets (see the module docstring)."""
    final = stage >= len(spec.tasks) - 1
    count: dict[str, int] = {}
    out = []
    for i, v in enumerate(spec.variants[j]):
        count[v.condition] = count.get(v.condition, 0) + 1
        if spec.conditions is not None and v.condition not in spec.conditions:
            continue
        if spec.max_per_condition is not None and count[v.condition] > spec.max_per_condition:
            continue
        if v.condition in spec.final_only and not final:
            continue
        if spec.only is not None and v.id not in spec.only:
            continue
        out.append(i)
    return out


def target_column(variants: Sequence[Variant], v: Variant) -> int:
    return -1 if v.goal is None else goal_columns(variants).index(v.goal)


def embed_variants(spec: GridSpec, lang: str = "minilm", suite: str | None = None) -> list[np.ndarray]:
    """Per task, (V_j, 384) embeddings: MiniLM of each variant's text, or (lang='onehot', the lifelong loop's
    ablation) the task's suite one-hot for every variant -- then variants differ only in their goal."""
    from clbench_jax.language import EMBED_DIM, one_hot_task_embedding

    if lang == "onehot":
        from clbench_jax.tasks.suites import SUITE_TASK_NAMES

        names = SUITE_TASK_NAMES[suite]
        return [np.repeat(one_hot_task_embedding([names.index(t.name)], len(names), dim=EMBED_DIM), len(vs), 0)
                for t, vs in zip(spec.tasks, spec.variants)]
    if lang != "minilm":
        raise ClbenchError(f"unknown language embedding {lang!r} (minilm | onehot)", field="lang")
    from clbench_jax.language import minilm_embeddings

    flat = minilm_embeddings([v.text for vs in spec.variants for v in vs])
    return np.split(flat, np.cumsum([len(vs) for vs in spec.variants])[:-1])


# ----------------------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class Group:
    """R episodes: one checkpoint, one task, one variant."""
    ck: int
    task: int
    variant: int


def groups_by_scene(spec: GridSpec, checkpoints: Sequence[Checkpoint]) -> dict[str, list[Group]]:
    """The valid cells' groups (j <= stage), per scene, in plan order."""
    by_scene: dict[str, list[Group]] = {}
    for ci, ck in enumerate(checkpoints):
        for j in range(min(ck.stage + 1, len(spec.tasks))):
            for v in evaluated(spec, j, ck.stage):
                by_scene.setdefault(spec.tasks[j].scene, []).append(Group(ci, j, v))
    return by_scene


def plan(spec: GridSpec, checkpoints: Sequence[Checkpoint]) -> list[tuple[str, tuple[Group, ...]]]:
    """Chunks as (scene key, groups): valid cells only, grouped by scene, each chunk chunk // n_rollouts groups.

    run_grid plans with the chunk size of its folder. Called directly with chunk "auto", the size is a fresh
    estimate without the policy's parameters or the folder's record (good for a progress count, not more)."""
    chunk_size.check_chunk(spec.chunk)
    chunk = chunk_plan(spec, checkpoints)["episodes"] if spec.chunk == "auto" else spec.chunk
    per_chunk = max(1, chunk // spec.n_rollouts)
    by_scene = groups_by_scene(spec, checkpoints)
    return [(key, tuple(gs[i:i + per_chunk])) for key, gs in by_scene.items() for i in range(0, len(gs), per_chunk)]


# ----------------------------------------------------------------------------------------------- chunk size
def chunk_plan(spec: GridSpec, checkpoints: Sequence[Checkpoint], policy=None, *, n_devices: int = 1,
               lang_dim: int = 384) -> dict:
    """The chunk size of a grid and why: {"requested", "episodes", ...}. A number asked for is taken as it is;
    "auto" records the estimate: per-part bytes (`episode_memory`, for the scene whose episodes are largest),
    bytes per episode and fixed bytes per pool, the free memory seen, the safety fraction and the groups."""
    chunk_size.check_chunk(spec.chunk)
    if spec.chunk != "auto":
        return {"requested": int(spec.chunk), "episodes": int(spec.chunk)}
    from clbench_jax.eval import shard
    from clbench_jax.lifelong.loop import scene_for

    by_scene = groups_by_scene(spec, checkpoints)
    k = max(len(goal_columns(vs)) for vs in spec.variants)
    parts = max((chunk_size.episode_memory(spec, scene_for(key), policy, k=k, lang_dim=lang_dim)
                 for key in by_scene),
                key=lambda ps: sum(p["per_episode"] for p in ps.values()), default={})
    memory = chunk_size.available_memory()
    max_groups = max((len(gs) for gs in by_scene.values()), default=1)
    episodes = chunk_size.choose_chunk(parts, memory, n_rollouts=spec.n_rollouts, max_groups=max_groups,
                                       n_devices=n_devices)
    episodes = int(shard.from_host0("chunk", str(episodes)))  # every host plans the same chunks: process 0's choice
    per, fixed = chunk_size.pool_totals(parts, memory)
    return {"requested": "auto", "episodes": episodes, "groups_per_chunk": episodes // spec.n_rollouts,
            "max_groups_per_scene": max_groups, "n_devices": n_devices, "fraction": chunk_size.SAFETY,
            "bytes_per_episode": per, "fixed_bytes": fixed, "memory": memory,
            "parts": parts}


def check_spec(spec: GridSpec) -> None:
    """Settings errors stop the grid before it starts (only per-cell trouble is recorded and skipped)."""
    bad = [(f, v) for f, v, ok in (
        ("n_rollouts", spec.n_rollouts, spec.n_rollouts >= 1),
        ("horizon", spec.horizon, spec.horizon >= 1),
        ("backend", spec.backend, spec.backend in ("native", "mjx", "libero")),
        ("obs", spec.obs, spec.obs in ("state", "rgb")),
        ("obs", spec.obs, not (spec.backend == "mjx" and spec.obs == "rgb" and spec.mjx_impl != "warp"))) if not ok]
    if bad:
        f, v = bad[0]
        why = ("the mjx backend renders only with mjx_impl warp (MuJoCo Warp's ray tracer); use it or backend "
               "native for RGB" if f == "obs" and v == "rgb" else "bad value")
        raise ClbenchError(f"{why}: {v!r}", field=f"grid.{f}")
    chunk_size.check_chunk(spec.chunk)
    if len(spec.variants) != len(spec.tasks) or any(not vs or vs[0].condition != "original" for vs in spec.variants):
        raise ClbenchError("every task needs its variants, the original instruction first", field="grid.variants")
    unknown = sorted(({v.condition for vs in spec.variants for v in vs} | set(spec.conditions or ())
                      | set(spec.final_only)) - set(CONDITIONS))
    if unknown:
        raise ClbenchError(f"unknown condition(s) {unknown}; known: {list(CONDITIONS)}", field="grid.conditions")
    if spec.conditions is not None and "original" not in spec.conditions:
        raise ClbenchError("the grid needs the original condition", field="grid.conditions")


def renderer(spec: GridSpec) -> str | None:
    """Which renderer made the policy's frames: MuJoCo's OpenGL renderer (native) or MuJoCo Warp's ray tracer
    (mjx): policies trained on one see a shift on the other. None with state observations."""
    if spec.obs != "rgb":
        return None
    return "opengl" if spec.backend == "native" else "mujoco_warp"


def variant_columns(spec: GridSpec, j: int, i: int) -> dict[str, np.ndarray]:
    """The episode columns that name task j's variant i (n_rollouts rows): what it is, its goal column, its objects."""
    from clbench_jax.eval import faces

    R, vs = spec.n_rollouts, spec.variants[j]
    v, task = vs[i], spec.tasks[j]
    cols = {"task": [j] * R, "task_name": [task.name] * R, "variant": [v.id] * R,
            "condition": [v.condition] * R, "slot": [v.slot] * R, "rollout": np.arange(R),
            "target": [target_column(vs, v)] * R, "n_goals": [len(goal_columns(vs))] * R,
            "n_audited": [n_audited(vs)] * R, "kinds": [",".join(v.kinds)] * R, "trivial": [v.trivial] * R,
            "named_object": [",".join(faces.named_objects(task, v.goal, vs[0].goal))] * R,
            "original_object": [",".join(faces.manipulated(task, vs[0].goal))] * R}
    return {k: np.asarray(x, np.int32 if k in ("task", "rollout", "target", "n_goals", "n_audited") else None)
            for k, x in cols.items()}
