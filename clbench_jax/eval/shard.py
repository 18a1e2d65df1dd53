"""Spreading the grid over devices (a 1-D jax.sharding.Mesh, axis "d") and hosts (jax.distributed).

A grid chunk is a fixed number of episodes; D devices run D chunks at once, one per device, in one rollout. The
policy -- the only cross-episode computation -- runs under `jax.shard_map`, so each device computes exactly the
program a single device runs for one chunk (same shapes, same ops): the sharded grid reproduces the single-device
grid bit for bit. Physics is per world (native: host threads; mjx: the episode arrays are placed along the mesh
axis and XLA partitions the vmapped step). Hosts split process 0's list of pending chunks round-robin and write
their own chunk files (tests/test_distributed.py: two real processes merge to the one-process table).
"""

from __future__ import annotations

import json
from functools import lru_cache

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "d"


def device_mesh(n_devices: int | None = None) -> Mesh:
    """A 1-D mesh over the first `n_devices` local devices (all by default)."""
    devs = jax.local_devices()
    if n_devices is not None:
        if not 1 <= n_devices <= len(devs):
            raise ValueError(f"asked for {n_devices} devices, {len(devs)} available")
        devs = devs[:n_devices]
    return Mesh(np.array(devs), (AXIS,))


def grouped_policy_fn(policy, deterministic: bool, warmup: int, loop: bool):
    """The rollout policy for C parameter groups of M episodes each (episode i uses params[i // M]).

    loop=False: act.make_policy_fn(stacked=True), jax.vmap over the groups (accelerators). loop=True: a
    jax.lax.map over the groups, each an ordinary batched call -- on CPUs a vmap over convolution weights becomes
    a grouped convolution that runs ~5x slower than C separate calls (benchmarks/grid_vs_libero.py)."""
    from clbench_jax.policies.act import make_policy_fn

    if not loop:
        return make_policy_fn(policy, stacked=True, deterministic=deterministic, warmup=warmup)
    flat = make_policy_fn(policy, deterministic=deterministic, warmup=warmup)

    def policy_fn(obs, pstate, keys):
        c = jax.tree.leaves(pstate["params"])[0].shape[0]
        group = lambda x: x.reshape((c, x.shape[0] // c) + x.shape[1:])  # noqa: E731
        ungroup = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731

        def one(args):
            o, params, lang, hist, k = args
            a, ps = flat(o, {"params": params, "lang": lang, "hist": hist, "n": pstate["n"]}, k)
            return a, ps["hist"]

        a, hist = jax.lax.map(one, (jax.tree.map(group, obs), pstate["params"], group(pstate["lang"]),
                                    jax.tree.map(group, pstate["hist"]), group(keys)))
        return ungroup(a), dict(pstate, hist=jax.tree.map(ungroup, hist), n=pstate["n"] + 1)

    return policy_fn


@lru_cache(maxsize=None)
def sharded_policy_fn(policy, mesh: Mesh, deterministic: bool, warmup: int, loop: bool):
    """grouped_policy_fn run per device: episodes, stacked params, language and history are split along their
    leading axis into one block per device (each block: whole parameter groups)."""
    from clbench_jax.policies.act import obs_keys

    inner = grouped_policy_fn(policy, deterministic, warmup, loop)
    keys = obs_keys(policy)
    d = P(AXIS)
    pspec = {"params": d, "lang": d, "hist": d, "n": P()}
    mapped = jax.shard_map(inner, mesh=mesh, in_specs=(d, pspec, d), out_specs=(d, pspec), check_vma=False)

    def policy_fn(obs, pstate, rng):
        return mapped({k: obs[k] for k in keys}, pstate, rng)

    return policy_fn


def place(tree, mesh: Mesh):
    """Put arrays along the mesh axis (leading axis split over devices)."""
    return jax.device_put(tree, NamedSharding(mesh, P(AXIS)))


# Hosts agree through jax.distributed's coordination service (its key-value store and barriers), not through device
# collectives: on CPUs a host's first gloo collective fails when the other hosts reach it more than 30 s later,
# and hosts finish their chunk shares far apart. Keys are numbered per tag; every host makes the same calls.
HOST_WAIT_S = 7 * 24 * 3600  # how long a host waits for the others
_calls: dict[str, int] = {}


def _key(tag: str) -> str:
    _calls[tag] = _calls.get(tag, 0) + 1
    return f"clbench/{tag}/{_calls[tag]}"


def from_host0(tag: str, value: str) -> str:
    """Process 0's `value` on every host (this host's own on one host)."""
    if jax.process_count() == 1:
        return value
    from jax._src.distributed import global_state

    key = _key(tag)
    if jax.process_index() == 0:
        global_state.client.key_value_set(key, value)
        return value
    return global_state.client.blocking_key_value_get(key, HOST_WAIT_S * 1000)


def host_share(items: list[int]) -> list[int]:
    """This host's share of the pending chunk ids `items`: round-robin over jax.distributed processes (all of them
    on one host). Every host splits process 0's list: a host that lists the chunk files after another has written
    one would otherwise split a shorter list, run some chunks twice and leave others to no one."""
    items = json.loads(from_host0("pending", json.dumps(list(items))))
    return items[jax.process_index()::jax.process_count()]


def wait_for_hosts(tag: str) -> None:
    """Barrier across hosts (no-op on one host) before the merge reads every host's chunk files."""
    if jax.process_count() > 1:
        from jax._src.distributed import global_state

        global_state.client.wait_at_barrier(_key(tag), HOST_WAIT_S * 1000)
