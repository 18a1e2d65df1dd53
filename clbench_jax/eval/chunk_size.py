"""How many episodes fit in one chunk of the grid (`grid.chunk: auto`): what one episode holds, by part and memory
pool (read off the real functions' shapes and XLA's own temp size for the policy), the free memory of each pool,
and the choice of whole groups of rollouts under a safety fraction. eval/grid.py plans its chunks with it; the
CLI's rollout command refuses batches that cannot fit with it."""

from __future__ import annotations

import math
import os
from functools import lru_cache

import jax
import numpy as np

from clbench_jax.errors import ClbenchError

SAFETY = 0.5  # a chunk may fill this fraction of the free memory (the rest: XLA temporaries the estimate misses)
MJX_DATA_COPIES = 3  # mjx.Data live per world during a step (carry in, carry out, step temporaries): a guess


def check_chunk(value) -> None:
    """grid.chunk is a positive number of episodes or "auto"."""
    ok = value == "auto" or (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1)
    if not ok:
        raise ClbenchError(f"episodes per chunk must be a positive integer or 'auto', not {value!r}",
                           field="grid.chunk")


def tree_bytes(tree) -> int:
    """Bytes of a pytree of arrays or jax.ShapeDtypeStructs."""
    return int(sum(math.prod(np.shape(x)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


def history_bytes(obs: dict, seq_len: int) -> int:
    """One episode's observation window in the policy state: obs_spec's {key: (shape, dtype)} x seq_len steps."""
    return seq_len * sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in obs.values())


def available_memory() -> dict[str, dict]:
    """Free bytes per memory pool: "host" (MemAvailable; psutil when installed) and, on accelerators, "device"
    (the first local device's bytes_limit - bytes_in_use). On CPUs the arrays live in host memory: no "device"."""
    try:
        import psutil

        host = {"free": int(psutil.virtual_memory().available), "source": "psutil available"}
    except ImportError:
        with open("/proc/meminfo") as f:
            kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f)}
        host = {"free": kb["MemAvailable"] * 1024, "source": "/proc/meminfo MemAvailable"}
    out = {"host": host}
    dev = jax.local_devices()[0]
    stats = dev.memory_stats() if dev.platform != "cpu" else None
    if stats and "bytes_limit" in stats:
        limit, used = int(stats["bytes_limit"]), int(stats.get("bytes_in_use", 0))
        out["device"] = {"free": limit - used, "limit": limit, "in_use": used,
                         "source": f"{dev.device_kind} memory_stats"}
    return out


def episode_memory(spec, scene, policy=None, *, k: int = 1, lang_dim: int = 384) -> dict[str, dict]:
    """What one episode of a chunk holds, by part: {name: {"pool": "device" | "host", "per_episode": bytes,
    "fixed": bytes per chunk}}. `spec` is the grid's GridSpec (not imported: grid imports this module). Shapes are
    read off the real functions (obs_spec, parameter shapes, records, one mjx.Data); the policy's activations are
    XLA's own temp size for one group of n_rollouts episodes. `k`: goal columns per episode (the stop goal comes on
    top). Without `policy`: no parameters or activations."""
    import mujoco

    from clbench_jax.lifelong.loop import DEFAULT_SEQ_LEN
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.sim import robot, rollout
    from clbench_jax.sim.predicates import NEVER, compile_goal
    from clbench_jax.sim.scene import GOAL_ROWS

    m, R = scene.model, spec.n_rollouts
    seq_len = getattr(getattr(policy, "cfg", None), "seq_len", DEFAULT_SEQ_LEN)
    obs = obs_spec(scene, spec.obs, spec.image_size)
    nstate = mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    npair = len(scene.sensors.pair_found)
    goal = tree_bytes(compile_goal(scene.layout, NEVER, GOAL_ROWS))
    task_row = tree_bytes(rollout.task_stack(scene)) // len(scene.tasks)
    records = tree_bytes(jax.eval_shape(lambda: rollout._init_records(1, 1 + k)))
    f32 = 4
    parts = {
        "obs_history": ("device", history_bytes(obs, seq_len), 0),
        "observation": ("device", history_bytes(obs, 1) + f32 * (m.nsensordata + npair), 0),
        "language": ("device", f32 * lang_dim, 0),
        "episode_inputs": ("device", (1 + k) * goal + task_row + 8 + f32 * (nstate + 7 * m.nmocap), 0),
        "rollout_state": ("device", records + f32 * (3 + 2 + 7 + 2 + 7 + m.nu), 0),
    }
    if spec.obs == "rgb":  # the renderer's (N, 2, H, W, 3) frame, then as the policy's input
        frame = 2 * spec.image_size ** 2 * 3
        parts["images"] = ("device", frame, 0)
        if spec.backend == "native":  # rendered on the host
            parts["images_host"] = ("host", frame, _mjdata_bytes(m) + 8 * spec.image_size ** 2)  # + GL framebuffer
        else:  # MuJoCo Warp's packed uint32 pixels: its own buffer and XLA's copy
            parts["images_packed"] = ("device", 2 * 4 * 2 * spec.image_size ** 2, 0)
    if spec.backend == "native":  # NativeWorlds' per-world buffers (float64); one MjData per thread
        nsub = robot.substeps(m)
        world = 8 * (nstate * (2 + nsub) + m.nsensordata * (1 + nsub) + nsub * (m.nu + 7 * m.nmocap) + 14 * m.nmocap)
        parts["physics"] = ("host", world, (os.cpu_count() or 1) * _mjdata_bytes(m))
    elif spec.backend == "libero":  # this process's readings of LIBERO's states (its workers hold their own)
        parts["physics"] = ("host", 8 * (3 * nstate + 2 * m.nsensordata), _mjdata_bytes(m))
    else:
        from clbench_jax.sim.mjx_backend import world_data_shape

        d = world_data_shape(scene, spec.mjx_impl)
        parts["physics"] = ("device", MJX_DATA_COPIES * (tree_bytes(d) + f32 * 7 * m.nbody), 0)
    if policy is not None:
        params = param_shapes(policy, scene.key, spec.obs, spec.image_size, seq_len, lang_dim)
        parts["params"] = ("device", -(-tree_bytes(params) // R), 0)  # stacked once per group of R episodes
        temp = _activation_bytes(policy, params, obs, seq_len, lang_dim, R)
        parts["policy_activations"] = ("device", 0, temp) if spec.loop else ("device", -(-temp // R), 0)
    return {name: {"pool": pool, "per_episode": int(per), "fixed": int(fixed)}
            for name, (pool, per, fixed) in parts.items()}


def _mjdata_bytes(model) -> int:
    import mujoco

    d = mujoco.MjData(model)
    return int(d.nbuffer + d.narena)


def pool_totals(parts: dict[str, dict], memory: dict[str, dict]) -> tuple[dict[str, int], dict[str, int]]:
    """(bytes per episode, fixed bytes) per memory pool; device parts go to "host" where there is no "device"."""
    per: dict[str, int] = {}
    fixed: dict[str, int] = {}
    for p in parts.values():
        pool = p["pool"] if p["pool"] in memory else "host"
        per[pool] = per.get(pool, 0) + p["per_episode"]
        fixed[pool] = fixed.get(pool, 0) + p["fixed"]
    return per, fixed


def _activation_bytes(policy, params, obs: dict, seq_len: int, lang_dim: int, n: int) -> int:
    """XLA's temporary buffer size for the policy acting on n episodes (one compile, no run)."""
    window = {k: jax.ShapeDtypeStruct((n, seq_len) + tuple(s), d) for k, (s, d) in obs.items()}
    lang = jax.ShapeDtypeStruct((n, lang_dim), np.float32)
    fn = jax.jit(lambda p, o, l: policy.apply(p, o, l, None, train=False))
    try:
        stats = fn.lower(params, window, lang).compile().memory_analysis()
    except Exception:  # noqa: BLE001  (a backend without memory analysis: leave it to the safety fraction)
        return 0
    return int(getattr(stats, "temp_size_in_bytes", 0) or 0)


def choose_chunk(parts: dict[str, dict], memory: dict[str, dict], *, n_rollouts: int, max_groups: int,
                 n_devices: int = 1, fraction: float = SAFETY) -> int:
    """Episodes per chunk (per device): whole groups of n_rollouts, as many as fit in `fraction` of every pool's
    free memory, at least one group, at most the largest scene's groups spread over the devices; then evened out
    (11 groups under a budget of 8: two chunks of 6, not 8 + a padded 3 -- the same count, less padding).
    Device parts count against host memory where there is no "device" pool (CPUs). D devices' chunks share the
    host's memory."""
    per, fixed = pool_totals(parts, memory)
    budget = max_groups
    for pool, b in per.items():
        share = memory[pool]["free"] / (n_devices if pool == "host" else 1)
        episodes = (share * fraction - fixed[pool]) // max(b, 1)
        budget = min(budget, max(1, int(episodes) // n_rollouts))
    n_chunks = -(-max_groups // budget)
    n_chunks = -(-n_chunks // n_devices) * n_devices
    return max(1, -(-max_groups // n_chunks)) * n_rollouts


@lru_cache(maxsize=None)
def param_shapes(policy, scene_key: str, obs: str, image_size: int, seq_len: int, lang_dim: int):
    """Parameter shapes the policy expects in a scene (abstract init, no compute)."""
    from clbench_jax.lifelong.loop import scene_for
    from clbench_jax.policies.act import obs_spec

    spec = obs_spec(scene_for(scene_key), obs, image_size)
    ex = {"obs": {k: np.zeros((1, seq_len) + tuple(s), d) for k, (s, d) in spec.items()},
          "lang": np.zeros((1, lang_dim), np.float32)}
    return jax.eval_shape(lambda k: policy.init(k, ex), jax.random.PRNGKey(0))
