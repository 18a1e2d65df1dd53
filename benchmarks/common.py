"""Shared bits of the benchmarks: machine description, atomic JSON, a fixed random MLP policy, tables."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from clbench_jax import jsonio


def machine() -> dict:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = None
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 2**20, 1)
    import mujoco

    out = {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "python": platform.python_version(),
           "platform": platform.platform(), "jax_devices": [str(d) for d in jax.devices()],
           "versions": {"jax": jax.__version__, "mujoco": mujoco.__version__, "numpy": np.__version__}}
    from importlib import metadata

    for dist in ("mujoco-mjx", "warp-lang", "flax"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out["versions"][dist] = metadata.version(dist)
    if jax.default_backend() != "cpu":
        dev = jax.devices()[0]
        out["accelerator"] = {"device_kind": dev.device_kind, "count": jax.device_count(),
                              "bytes_limit": (dev.memory_stats() or {}).get("bytes_limit")}
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
            out["accelerator"]["nvidia_smi"] = q.stdout.strip()
    return out


def source_commit() -> str | None:
    """The repository's commit, with "+dirty" when clbench_jax/ differs from it: which code a result row measured
    (None outside a git checkout)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "clbench_jax"], cwd=root, timeout=10).returncode
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def write_json(path: str | Path, data: dict) -> None:
    """Benchmark results, written atomically (clbench_jax.jsonio)."""
    jsonio.write_json(path, data, indent=2)


def mlp_policy(obs_dim: int, hidden: int = 256, seed: int = 0):
    """A fixed random 2-layer MLP over proprio + object tokens -> 7-D action (tanh): the benchmarks' policy."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    w1 = jax.random.normal(k1, (obs_dim, hidden)) / np.sqrt(obs_dim)
    w2 = jax.random.normal(k2, (hidden, 7)) / np.sqrt(hidden)

    def policy(obs, pstate, keys):
        x = jnp.concatenate([obs["joint_states"], obs["gripper_states"], obs["ee_pos"],
                             obs["tokens"].reshape(obs["tokens"].shape[0], -1)], axis=1)
        return jnp.tanh(jnp.tanh(x @ w1) @ w2), pstate

    return policy, ()


def bc_transformer_policy(scene, mode: str = "state", image_size: int = 128, seed: int = 0, **overrides):
    """LIBERO's BC-Transformer (default size unless `overrides`), random-init, as a rollout policy (the policy
    samples its GMM, as LIBERO's evaluation does) -> (policy_fn, pstate_for(n)): the initial policy state of n
    episodes (the parameters, a random 384-d language embedding per episode, an empty observation window)."""
    from clbench_jax.policies import make_bc_transformer
    from clbench_jax.policies.act import initial_pstate, make_policy_fn, obs_spec

    pol = make_bc_transformer(mode, **overrides)
    spec = obs_spec(scene, mode, image_size)
    t = pol.cfg.seq_len
    ex = {"obs": {k: np.zeros((1, t) + s, d) for k, (s, d) in spec.items()}, "lang": np.zeros((1, 384), np.float32)}
    params = pol.init(jax.random.PRNGKey(seed), ex)

    def pstate_for(n: int):
        lang = jax.random.normal(jax.random.PRNGKey(seed + 1), (n, 384)) / np.sqrt(384)
        return initial_pstate(params, lang, spec, t)

    return make_policy_fn(pol), pstate_for


def add_profile_arg(parser) -> None:
    """Every benchmark's `--profile DIR`."""
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="write a jax.profiler trace of the measured region to DIR (open it in Perfetto or "
                             "TensorBoard to see where the time goes)")


@contextlib.contextmanager
def maybe_profile(profile_dir: str | None):
    """jax.profiler trace of the measured region when --profile DIR is given."""
    if profile_dir:
        jax.profiler.start_trace(profile_dir)
    try:
        yield
    finally:
        if profile_dir:
            jax.profiler.stop_trace()


def table(rows: list[dict], cols: list[str]) -> str:
    w = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in cols}
    out = ["  ".join(c.ljust(w[c]) for c in cols), "  ".join("-" * w[c] for c in cols)]
    out += ["  ".join(_fmt(r.get(c)).ljust(w[c]) for c in cols) for r in rows]
    return "\n".join(out)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}"
    return "" if v is None else str(v)


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.s = time.perf_counter() - self.t0


def goal_worlds(n: int):
    """libero_goal's scene and n worlds' (state, mocap): the first initial state of each task in turn (seed 0)."""
    from clbench_jax.sim.init_states import make_init_bank
    from clbench_jax.sim.scene import build_scene
    from clbench_jax.tasks.suites import suite_tasks

    tasks = suite_tasks("libero_goal")
    scene = build_scene(tasks)
    banks = [make_init_bank(scene, t, 1, seed=0) for t in tasks]
    pick = [i % len(tasks) for i in range(n)]
    return (scene, np.stack([banks[i].state[0] for i in pick]), np.stack([banks[i].mocap[0] for i in pick]))


class Clock:
    """Wall-clock and process CPU seconds (all threads) of a block."""

    def __enter__(self):
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu, self.wall = time.process_time() - self.cpu, time.perf_counter() - self.wall


def scene_jobs(suites, keep=None) -> list:
    """(suite, scene key, [tasks]) per LIBERO scene of each suite, in task order (libero_spatial / _object / _goal:
    one scene each; libero_10 / _90: one per LIBERO scene), the tasks `keep(suite, task)` allows (default all)."""
    from clbench_jax.tasks.suites import suite_tasks

    jobs = []
    for suite in suites:
        by: dict[str, list] = {}
        for t in suite_tasks(suite):
            if keep is None or keep(suite, t):
                by.setdefault(t.scene, []).append(t)
        jobs += [(suite, k, v) for k, v in by.items()]
    return jobs
