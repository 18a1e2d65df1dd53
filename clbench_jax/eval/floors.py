"""Floors (seed 004): a do-nothing policy and a random-motion policy run the whole battery, so every rate in a
report is read against a measured floor rather than against zero.

A floor is a policy-shaped stand-in the grid runs like a final checkpoint (stage K - 1, every task, every variant
and face of the run): `FloorPolicy` gives the grid observation keys and a one-number parameter tree, and `floor_fn` is the rollout policy that acts -- sim/rollout.py's `zero_policy` (hold still, gripper
open: LIBERO's dummy action) or `random_policy` (uniform actions in [-1, 1], a new one every step). Floors read
neither the instruction nor the observations. Their initial states and noise keys come from (grid seed, task,
rollout) like every method's, so they meet the same paired starts.

So a floor's episode of a task is the same under every variant that stops at the same goal: all variants under
the original goal (original, paraphrase, occ, nonsense: they stop when it holds) share one set of episodes, all that
run to the horizon (contrast, collision, probe, swap) another, and every episode records every goal column of its
task. A floor therefore runs two variants per task -- the original and the first that runs to the horizon -- and
its episode file gives every other variant a copy of its class's episodes under its own name and goal column:
the rows a run of every variant would write, at a twelfth of the cost with libero_goal's 12 variants per task
(tests/test_faces.py checks the copies against such a run). The grid of each floor is RUN/floors/<floor>/shared/,
resumable like the main grid; RUN/floors/<floor>/episodes.h5 is written when it is done.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from clbench_jax.errors import ClbenchError

FLOORS = ("do-nothing", "random-motion")
FOLDER = "floors"


@dataclass(frozen=True)
class FloorPolicy:
    kind: str
    mode: str = "state"  # observation keys the grid feeds (floors ignore them; run_floors uses state)
    seq_len: int = 1

    @property
    def cfg(self) -> "FloorPolicy":  # the grid reads policy.cfg.mode / .seq_len and hashes repr(policy.cfg)
        return self

    def init(self, key, example) -> dict:
        import jax.numpy as jnp

        return {"floor": jnp.zeros((1,), jnp.float32)}


def check_floors(names) -> tuple[str, ...]:
    unknown = [n for n in names if n not in FLOORS]
    if unknown:
        raise ClbenchError(f"unknown floor(s) {unknown}; known: {list(FLOORS)}", field="grid.floors")
    return tuple(names)


@lru_cache(maxsize=None)
def floor_fn(kind: str):
    """The rollout policy_fn of a floor (one object per kind: the rollout caches its compiled step by it)."""
    from clbench_jax.sim import rollout

    check_floors([kind])
    return (rollout.zero_policy() if kind == "do-nothing" else rollout.random_policy(1.0))[0]


def run_floors(spec, out_dir, floors, *, n_devices: int | None = None, progress: bool = True,
               on_chunk=None) -> dict[str, Path]:
    """Run (or resume) each floor's grid over `spec` (every task, every variant) into out_dir/<floor>/ ->
    {floor: its episode file}."""
    from clbench_jax.eval.grid import Checkpoint
    from clbench_jax.eval.grid_runner import run_grid

    from clbench_jax.eval import episodes
    from clbench_jax.eval.grid import STOP_AT_GOAL, evaluated, variant_columns

    out = {}
    # Floors read neither instruction nor observations: state observations (no rendering) give the same episodes.
    spec = replace(spec, obs="state")
    final = len(spec.tasks) - 1
    # per task: each evaluated variant -> the variant whose episodes it shares (its stop class's first)
    shares = []
    for j, vs in enumerate(spec.variants):
        first: dict[bool, int] = {}
        shares.append({i: first.setdefault(vs[i].condition in STOP_AT_GOAL, i) for i in evaluated(spec, j, final)})
    run_spec = replace(spec, only=tuple(sorted({spec.variants[j][i].id for j, sh in enumerate(shares)
                                                for i in sh.values()})))
    zeros = [np.zeros((len(vs), 384), np.float32) for vs in spec.variants]
    for kind in check_floors(floors):
        ck = Checkpoint(kind, spec.seed, final, lambda j: {"floor": np.zeros(1, np.float32)})
        folder = Path(out_dir) / kind
        run_grid(run_spec, [ck], FloorPolicy(kind, "state"), folder / "shared", embeddings=zeros,
                 n_devices=n_devices, progress=progress, on_chunk=on_chunk, policy_fn=floor_fn(kind))
        shared, meta = episodes.read_columns(folder / "shared" / "episodes.h5")
        rows = []
        for j, sh in enumerate(shares):
            for i, rep in sh.items():
                m = np.flatnonzero((shared["task"] == j) & (shared["variant"] == spec.variants[j][rep].id))
                m = m[np.argsort(shared["rollout"][m])]
                rows.append({**{k: v[m] for k, v in shared.items()}, **variant_columns(spec, j, i)})
        out[kind] = folder / "episodes.h5"
        episodes.write_columns(out[kind], episodes.concat(rows), {**meta, "shared": "floors.run_floors"})
    return out


def floor_episode_files(run_dir) -> dict[str, Path]:
    """{floor: episodes.h5} of the floors a run folder holds (finished ones only)."""
    base = Path(run_dir) / FOLDER
    return {k: base / k / "episodes.h5" for k in FLOORS if (base / k / "episodes.h5").exists()}
