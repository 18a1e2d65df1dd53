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
free memory is eval/chunk_size.py);
the choice is kept in grid.json and a resumed grid reuses it. D devices run D chunks per rollout
(shard.py). Each finished chunk is written to `chunks/NNNNN.h5` atomically, so an interrupted grid resumes with
the chunks it lacks and ends with identical results. A cell that cannot run (parameters of the wrong shape,
non-finite parameters, an exception in its chunk) is recorded with the reason and the grid goes on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import numpy as np

from clbench_jax.errors import ClbenchError
from clbench_jax.eval import chunk_size, episodes
from clbench_jax.jsonio import write_json
from clbench_jax.sim.predicates import NEVER  # stop goal of a full-horizon episode; goal-column padding
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


# ----------------------------------------------------------------------------------------------- run
def run_grid(spec: GridSpec, checkpoints: Sequence[Checkpoint], policy, out_dir, *, lang: str = "minilm",
             suite: str | None = None, embeddings: list[np.ndarray] | None = None, n_devices: int | None = None,
             progress: bool = True, on_chunk: Callable[[int], None] | None = None,
             policy_fn=None) -> dict[str, np.ndarray]:
    """Run (or resume) the grid into `out_dir` -> the episode columns (also written to episodes.h5).

    `embeddings`: per task (V_j, D) language embeddings (default: `embed_variants(spec, lang, suite)`).
    `on_chunk(i)` is called after chunk i is written (progress hooks; tests interrupt the grid there).
    `policy_fn`: a rollout policy_fn to act instead of the policy's own (the floors, eval/floors.py; `policy`
    still gives the observation keys and parameter shapes)."""
    from tqdm.auto import tqdm

    from clbench_jax.eval import shard

    check_spec(spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mesh = shard.device_mesh(n_devices)
    spec, fp = open_folder(out, spec, checkpoints, policy, mesh.size)  # spec.chunk is a number from here on
    chunks = plan(spec, checkpoints)
    todo = shard.host_share(pending_chunks(out, len(chunks), fp, log=tqdm.write))
    if embeddings is None:
        embeddings = embed_variants(spec, lang, suite)
    runner = _Runner(spec, checkpoints, policy, mesh, embeddings, policy_fn)
    per_scene: dict[str, list[int]] = {}
    for i in todo:
        per_scene.setdefault(chunks[i][0], []).append(i)
    eps = lambda ids: sum(len(chunks[i][1]) for i in ids) * spec.n_rollouts  # noqa: E731
    bar = tqdm(total=eps(range(len(chunks))), initial=eps(range(len(chunks))) - eps(todo), unit="ep",
               desc=f"grid ({mesh.size} device{'s' * (mesh.size > 1)})", disable=not progress)
    for scene_key, ids in per_scene.items():
        for s in range(0, len(ids), mesh.size):
            batch_ids = ids[s:s + mesh.size]
            for i, cols in zip(batch_ids, runner.run(scene_key, [chunks[i][1] for i in batch_ids])):
                episodes.write_columns(_chunk_path(out, i), cols, {"fingerprint": fp, "chunk": i})
                bar.update(len(chunks[i][1]) * spec.n_rollouts)
                if on_chunk is not None:
                    on_chunk(i)
    bar.close()
    shard.wait_for_hosts("clbench-grid")
    return merge(out, len(chunks), fp)


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


def _chunk_path(out: Path, i: int) -> Path:
    return out / "chunks" / f"{i:05d}.h5"


def chunk_problem(path: Path, fp: str, i: int) -> str | None:
    """Why the chunk file at `path` cannot stand as chunk i of grid `fp` (None: it can)."""
    if not path.exists():
        return "missing"
    try:
        cols, meta = episodes.read_columns(path)
    except ClbenchError as e:
        return str(e)
    if meta.get("fingerprint") != fp or meta.get("chunk") != i:
        return f"written for chunk {meta.get('chunk')} of grid {meta.get('fingerprint')}"
    if len({len(v) for v in cols.values()}) != 1 or "status" not in cols:
        return "columns of different lengths or no status column"
    return None


def pending_chunks(out_dir, n_chunks: int, fp: str | None = None, log=None) -> list[int]:
    """Chunks of a grid folder still to run: not written, or (with the grid's fingerprint `fp`) written but
    unreadable, truncated or from another grid -- those are reported through `log` and recomputed."""
    out = []
    for i in range(n_chunks):
        path = _chunk_path(Path(out_dir), i)
        why = ("missing" if not path.exists() else None) if fp is None else chunk_problem(path, fp, i)
        if why is not None:
            out.append(i)
            if why != "missing" and log is not None:
                log(f"grid: chunk file {path} is damaged ({why}); recomputing it")
    return out


def open_folder(out: Path, spec: GridSpec, checkpoints, policy, n_devices: int) -> tuple[GridSpec, str]:
    """-> (spec with its chunk size as a number, fingerprint). A grid folder belongs to one grid: a new one records
    its chunk plan in grid.json; a resumed one keeps the chunk size it started with (its chunk files are cut by
    it), and one of another grid is refused. The fingerprint hashes the chunk size itself, so an "auto" grid resumes
    a folder begun with the same number of episodes per chunk (and older folders, which recorded only that)."""
    path = out / "grid.json"
    doc = None
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:  # a damaged manifest: planned anew; chunk files of this grid are kept
            from tqdm.auto import tqdm

            tqdm.write(f"grid: {path} is damaged ({e}); writing it again (chunk files of this grid are kept)")
            doc = None
    if doc is not None:
        started = (doc.get("chunk") or {}).get("episodes", doc.get("spec", {}).get("chunk"))
        if spec.chunk == "auto" and started is not None:
            spec = replace(spec, chunk=int(started))
        fp = spec.fingerprint(checkpoints, policy)
        if doc.get("fingerprint") != fp:
            raise ClbenchError(f"folder holds another grid (fingerprint {doc.get('fingerprint')}, this grid {fp}); "
                               "use another folder", file=str(path), field="fingerprint")
        return spec, fp
    chunk = chunk_plan(spec, checkpoints, policy, n_devices=n_devices)
    spec = replace(spec, chunk=chunk["episodes"])
    fp = spec.fingerprint(checkpoints, policy)
    if jax.process_index() == 0:  # hosts sharing the folder would race on grid.json's temporary file
        _write_manifest(out, fp, spec, checkpoints, chunk)
    return spec, fp


def _write_manifest(out: Path, fp: str, spec: GridSpec, checkpoints, chunk: dict) -> None:
    path = out / "grid.json"
    doc = {"fingerprint": fp, "tasks": [t.name for t in spec.tasks],
           "checkpoints": [[c.method, c.seed, c.stage] for c in checkpoints],
           "goal_columns": [[list(map(list, g)) for g in goal_columns(vs)] for vs in spec.variants],
           "spec": spec.settings(), "renderer": renderer(spec), "chunk": chunk}
    write_json(path, doc)


def renderer(spec: GridSpec) -> str | None:
    """Which renderer made the policy's frames: MuJoCo's OpenGL renderer (native) or MuJoCo Warp's ray tracer
    (mjx): policies trained on one see a shift on the other. None with state observations."""
    if spec.obs != "rgb":
        return None
    return "opengl" if spec.backend == "native" else "mujoco_warp"


def merge(out: Path, n_chunks: int, fp: str) -> dict[str, np.ndarray] | None:
    """All chunk files, in plan order -> episodes.h5 (None while chunks are missing, e.g. other hosts')."""
    paths = [_chunk_path(out, i) for i in range(n_chunks)]
    if not all(p.exists() for p in paths):
        return None
    parts = []
    for p in paths:
        cols, meta = episodes.read_columns(p)
        if meta.get("fingerprint") != fp:
            raise ClbenchError("chunk file from another grid", file=str(p), field="fingerprint")
        parts.append(cols)
    cols = episodes.concat(parts)
    meta = json.loads((out / "grid.json").read_text())
    if jax.process_index() == 0:
        episodes.write_columns(out / "episodes.h5", cols, meta)
    return cols


class _Runner:
    """Builds and runs the batched rollout of D chunks of one scene."""

    def __init__(self, spec: GridSpec, checkpoints, policy, mesh, embeddings, policy_fn=None):
        from clbench_jax.eval import faces, shard
        from clbench_jax.lifelong.loop import DEFAULT_SEQ_LEN
        from clbench_jax.policies.act import obs_keys

        self.spec, self.checkpoints, self.policy, self.mesh = spec, checkpoints, policy, mesh
        self.lang = [np.asarray(e, np.float32) for e in embeddings]
        self.seq_len = getattr(policy.cfg, "seq_len", DEFAULT_SEQ_LEN)
        self.fn = policy_fn or shard.sharded_policy_fn(policy, mesh, spec.deterministic, spec.warmup, spec.loop)
        # occ episodes share chunks with the others: a per-episode flag in pstate says whom to blank
        self.occ = any(spec.variants[j][i].condition == "occ" for ck in checkpoints
                       for j in range(min(ck.stage + 1, len(spec.tasks))) for i in evaluated(spec, j, ck.stage))
        if self.occ:
            self.fn = faces.occluding_policy_fn(self.fn, faces.occlusion_keys(obs_keys(policy)))
        self.k = max(len(goal_columns(vs)) for vs in spec.variants)
        self._goals: dict[tuple, Any] = {}

    def _scene(self, key):
        from clbench_jax.lifelong.loop import scene_for

        return scene_for(key)

    def _goal_stack(self, scene, j: int, v: int):
        """(1 + K, ...) goal tables of (task j, variant v): its stop goal, then the task's goal columns."""
        from clbench_jax.sim import env
        from clbench_jax.sim.predicates import compile_goal
        from clbench_jax.sim.scene import GOAL_ROWS

        if (j, v) not in self._goals:
            task, vs = self.spec.tasks[j], self.spec.variants[j]
            cols = goal_columns(vs)
            stop = vs[v].goal if vs[v].condition in STOP_AT_GOAL else NEVER
            goals = [stop] + cols + [NEVER] * (self.k - len(cols))
            self._goals[(j, v)] = env.stack([compile_goal(scene.layout, g, GOAL_ROWS, task=task.name,
                                                          file=task.file) for g in goals])
        return self._goals[(j, v)]

    def _reference(self, scene):
        return chunk_size.param_shapes(self.policy, scene.key, self.spec.obs, self.spec.image_size, self.seq_len,
                            self.lang[0].shape[1])

    def _params(self, scene, g: Group, cache: dict):
        """(params, None) or (placeholder, reason) for the cell of group g."""
        key = (g.ck, g.task)
        if key not in cache:
            ref = self._reference(scene)
            if self.checkpoints[g.ck].acting is not None:
                ref = self.checkpoints[g.ck].acting(ref)
            try:
                p = self.checkpoints[g.ck].load(g.task)
                reason = check_params(p, ref)
            except Exception as e:  # a checkpoint that cannot be loaded fails its cell, not the grid
                p, reason = None, f"cannot load parameters: {type(e).__name__}: {e}"
            if reason is not None:
                p = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), ref)
            cache[key] = (p, reason)
        return cache[key]

    def run(self, scene_key: str, chunk_groups: list[tuple[Group, ...]]) -> list[dict[str, np.ndarray]]:
        from clbench_jax.eval import shard
        from clbench_jax.lifelong.loop import derive_key, init_bank
        from clbench_jax.policies.act import initial_pstate, obs_spec, stack_params
        from clbench_jax.sim import rollout

        spec, R = self.spec, self.spec.n_rollouts
        scene = self._scene(scene_key)
        per_chunk = max(1, spec.chunk // R)
        # Pad to D chunks of per_chunk groups each (repeats of the last group; their rows are dropped).
        padded = [list(gs) + [gs[-1]] * (per_chunk - len(gs)) for gs in chunk_groups]
        padded += [padded[-1]] * (self.mesh.size - len(padded))
        flat = [g for gs in padded for g in gs]
        cache: dict = {}
        params = [self._params(scene, g, cache) for g in flat]
        banks = {j: init_bank(scene, spec.tasks[j], R, spec.seed) for j in {g.task for g in flat}}
        keys = {j: np.asarray(jax.random.split(derive_key(jax.random.PRNGKey(spec.seed), "grid", spec.tasks[j].name),
                                               R)) for j in banks}
        rep = lambda xs: np.repeat(np.stack(xs), R, axis=0)  # noqa: E731  (groups) -> (groups * R)
        goals = jax.tree.map(lambda *x: np.repeat(np.stack(x), R, axis=0),
                             *[self._goal_stack(scene, g.task, g.variant) for g in flat])
        # Padding groups and cells that cannot run take no simulation time (native: not stepped or rendered).
        real = [c * per_chunk + i for c, gs in enumerate(chunk_groups) for i in range(len(gs))]
        active = np.zeros(len(flat), bool)
        active[real] = True
        active &= np.array([reason is None for _, reason in params])
        batch = rollout.EpisodeBatch(
            task_ids=rep([scene.task_index(spec.tasks[g.task].name) for g in flat]), goals=goals,
            state=np.concatenate([banks[g.task].state[:R] for g in flat]),
            mocap=np.concatenate([banks[g.task].mocap[:R] for g in flat]),
            keys=np.concatenate([keys[g.task] for g in flat]), active=np.repeat(active, R),
            q0=np.concatenate([banks[g.task].q0[:R] for g in flat]))
        lang = rep([self.lang[g.task][g.variant] for g in flat])
        pstate = initial_pstate(stack_params([p for p, _ in params]), lang,
                                obs_spec(scene, spec.obs, spec.image_size), self.seq_len)
        if self.occ:
            pstate["occ"] = rep([self.spec.variants[g.task][g.variant].condition == "occ" for g in flat])
        if spec.backend == "mjx":  # keep the episodes on their devices for the whole on-device episode
            batch = rollout.EpisodeBatch(task_ids=batch.task_ids, goals=shard.place(batch.goals, self.mesh),
                                         state=shard.place(batch.state, self.mesh), mocap=batch.mocap,
                                         keys=shard.place(batch.keys, self.mesh),
                                         active=shard.place(batch.active, self.mesh), q0=batch.q0)
        failure = None
        try:
            rec = rollout.rollout(scene, self.fn, pstate, batch, spec.horizon, backend=spec.backend,
                                  warmup=spec.warmup, obs_mode=spec.obs, image_size=spec.image_size,
                                  mjx_impl=spec.mjx_impl)
        except Exception as e:  # noqa: BLE001  (recorded per cell; the grid goes on)
            from tqdm.auto import tqdm

            rec, failure = None, f"rollout raised {type(e).__name__}: {e}"
            tqdm.write(f"grid: {len(flat)} groups failed ({failure}); recorded, going on")
        out = []
        for c, gs in enumerate(chunk_groups):
            rows = []
            for i, g in enumerate(gs):
                start = (c * per_chunk + i) * R
                reason = params[c * per_chunk + i][1] or failure
                rows.append(self._rows(scene, g, reason, None if rec is None else
                                       jax.tree.map(lambda x: x[start:start + R], rec)))
            out.append(episodes.concat(rows))
        return out

    def _rows(self, scene, g: Group, reason: str | None, rec) -> dict[str, np.ndarray]:
        from clbench_jax.eval import faces
        from clbench_jax.sim.rollout import FAIL_REASONS

        R, K = self.spec.n_rollouts, self.k
        ck = self.checkpoints[g.ck]
        cols = {"method": np.asarray([ck.method] * R), "seed": np.full(R, ck.seed, np.int32),
                "stage": np.full(R, ck.stage, np.int32), **variant_columns(self.spec, g.task, g.variant)}
        if reason is not None:  # the cell did not run
            cols.update(status=np.full(R, f"failed cell: {reason}"), success=np.zeros((R, K), bool),
                        first_success=np.full((R, K), -1, np.int32), held_at_reset=np.zeros((R, K), bool),
                        ee_disp_max=np.zeros(R, np.float32), gripper_change_max=np.zeros(R, np.float32),
                        first_grasp=np.full(R, -1, np.int32), length=np.zeros(R, np.int32),
                        done=np.zeros(R, bool), fail_reason=np.zeros(R, np.int32),
                        action_initiated=np.zeros(R, bool), first_grasp_object=np.full(R, ""))
            if faces.reach_recorded():
                cols["first_reach_object"] = np.full(R, "")
            return cols
        fr = np.asarray(rec.fail_reason, np.int32)
        cols.update(status=np.array(["ok" if f == 0 else f"physics: {FAIL_REASONS[int(f)]}" for f in fr]),
                    success=np.asarray(rec.success)[:, 1:],
                    first_success=np.asarray(rec.first_success, np.int32)[:, 1:],
                    held_at_reset=np.asarray(rec.held_at_reset)[:, 1:],
                    ee_disp_max=np.asarray(rec.ee_disp_max, np.float32),
                    gripper_change_max=np.asarray(rec.gripper_change_max, np.float32),
                    first_grasp=np.asarray(rec.first_grasp, np.int32), length=np.asarray(rec.length, np.int32),
                    done=np.asarray(rec.done), fail_reason=fr, action_initiated=np.asarray(rec.action_initiated),
                    first_grasp_object=faces.entity_names(scene, rec.first_grasp))
        if faces.reach_recorded():
            cols["first_reach_object"] = faces.entity_names(scene, rec.first_reach)
        return cols


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


def check_params(params, ref) -> str | None:
    """Why `params` cannot act as the policy's parameters (None if they can): tree, shapes, dtypes, finiteness."""
    flat, tree = jax.tree_util.tree_flatten_with_path(params)
    rflat, rtree = jax.tree_util.tree_flatten_with_path(ref)
    if tree != rtree:
        return "parameter tree differs from the policy's"
    for (path, x), (_, r) in zip(flat, rflat):
        name = jax.tree_util.keystr(path)
        if tuple(np.shape(x)) != tuple(r.shape):
            return f"parameter {name} has shape {tuple(np.shape(x))}, the policy expects {tuple(r.shape)}"
        if not np.all(np.isfinite(np.asarray(x))):
            return f"non-finite values in parameter {name}"
    return None
