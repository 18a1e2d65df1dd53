"""Shared bits of the benchmarks: machine description, atomic JSON, a fixed random MLP policy, tables."""

from __future__ import annotations

import contextlib
import os
import platform
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

    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "python": platform.python_version(),
            "platform": platform.platform(), "jax_devices": [str(d) for d in jax.devices()],
            "versions": {"jax": jax.__version__, "mujoco": mujoco.__version__, "numpy": np.__version__}}


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
