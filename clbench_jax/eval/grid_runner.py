"""The grid's runner: `run_grid` runs (or resumes) a grid into its folder, D chunks of one scene per batched
rollout (shard.py spreads them over D devices). A cell that cannot run (parameters of the wrong shape, non-finite
parameters, an exception in its chunk) is recorded with the reason and the grid goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import numpy as np

from clbench_jax.eval import chunk_size, episodes
from clbench_jax.eval.grid import (STOP_AT_GOAL, Checkpoint, GridSpec, Group, check_spec, embed_variants, evaluated,
                                   goal_columns, plan, variant_columns)
from clbench_jax.eval.grid_folder import chunk_path, merge, open_folder, pending_chunks
from clbench_jax.sim.predicates import NEVER  # stop goal of a full-horizon episode; goal-column padding


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
                episodes.write_columns(chunk_path(out, i), cols, {"fingerprint": fp, "chunk": i})
                bar.update(len(chunks[i][1]) * spec.n_rollouts)
                if on_chunk is not None:
                    on_chunk(i)
    bar.close()
    shard.wait_for_hosts("clbench-grid")
    return merge(out, len(chunks), fp)


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
