"""Turn a Policy into a rollout policy_fn: (obs, pstate, keys) -> (actions, pstate).

The parameters and the per-episode language embeddings live in `pstate`, so one compiled rollout serves every
checkpoint and task (rollout caches its compiled step per policy_fn object; `make_policy_fn` is memoised). pstate
also keeps the last `seq_len` observations: the window is filled left to right and then slides, and the action is
read at the newest step. With block-causal attention (BC-Transformer) this is exactly LIBERO's growing queue of at
most seq_len steps; BC-RNN re-runs its LSTM over the window (as in training) instead of carrying the hidden state.

Stacked parameters (leading axis C, e.g. many checkpoints): episodes are grouped C x M in order (episode i uses
params[i // M]) and the policy is jax.vmap-ed over the C groups.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from clbench_jax.policies import gmm
from clbench_jax.policies.bc import RGB_KEYS, STATE_KEYS

PSTATE_KEYS = ("params", "lang", "hist", "n")


def obs_keys(policy) -> tuple[str, ...]:
    return RGB_KEYS if policy.cfg.mode == "rgb" else STATE_KEYS


def obs_spec(scene, mode: str, image_size: int = 128) -> dict[str, tuple[tuple, Any]]:
    """One step's (shape, dtype) per policy obs key for episodes in `scene`'s rollouts."""
    from clbench_jax.sim import env, rollout

    spec = {"joint_states": ((7,), np.float32), "gripper_states": ((2,), np.float32)}
    if mode == "rgb":
        for k in ("agentview_rgb", "eye_in_hand_rgb"):
            spec[k] = ((image_size, image_size, 3), np.uint8)
    else:
        e = rollout._consts(scene).sens_entity_pos.shape[0]
        spec["ee_pos"] = ((3,), np.float32)
        spec["tokens"] = ((e, env.TOKEN_DIM), np.float32)
        spec["token_mask"] = ((e,), np.bool_)
    return spec


def initial_pstate(params, lang, spec: dict, seq_len: int) -> dict:
    """pstate0 for N = len(lang) episodes: params (stacked or not), lang (N, D), an empty history."""
    n = np.shape(lang)[0]
    hist = {k: jnp.zeros((n, seq_len) + tuple(shape), dtype) for k, (shape, dtype) in spec.items()}
    return {"params": params, "lang": jnp.asarray(lang, jnp.float32), "hist": hist, "n": jnp.zeros((), jnp.int32)}


def push(hist: dict, obs: dict, n) -> dict:
    """Write this step's obs at slot n while the window is filling, else slide left and write at the end."""
    def one(h, o):
        o = o.astype(h.dtype)
        t = h.shape[1]
        slid = jnp.concatenate([h[:, 1:], o[:, None]], axis=1)
        filled = jax.lax.dynamic_update_index_in_dim(h, o, jnp.minimum(n, t - 1), axis=1)
        return jnp.where(n < t, filled, slid)
    return {k: one(h, obs[k]) for k, h in hist.items()}


@lru_cache(maxsize=None)
def make_policy_fn(policy, *, stacked: bool = False, deterministic: bool = False, warmup: int = 0):
    """The rollout policy_fn for `policy` (see module docstring). `deterministic`: the mean of the most likely
    mixture component instead of a sample (LIBERO samples). `warmup`: the rollout's zero-action warm-up steps;
    observations of those steps do not enter the history (LIBERO steps the dummy action without the policy)."""
    keys_needed = obs_keys(policy)

    def act(params, window, lang, pos, keys):
        b, t = next(iter(window.values())).shape[:2]
        # which steps of the window hold observations (read by adapted policies' queries; base policies ignore it)
        window = dict(window, step_mask=jnp.broadcast_to(jnp.arange(t) <= pos, (b, t)))
        dist = policy.apply(params, window, lang, None, train=False)
        dist = jax.tree.map(lambda x: x[:, pos], dist)  # (B, K, A...) at the newest step
        if deterministic:
            a = gmm.mode(dist)
        else:
            a = jax.vmap(lambda d, k: gmm.sample(d, k))(dist, keys)
        return jnp.clip(a, -1.0, 1.0)

    def policy_fn(obs, pstate, keys):
        n = pstate["n"] - warmup  # observations already in the window
        record = n >= 0
        hist = pstate["hist"]
        new = push(hist, {k: obs[k] for k in keys_needed}, jnp.maximum(n, 0))
        hist = jax.tree.map(lambda a, b: jnp.where(record, a, b), new, hist)
        t = next(iter(hist.values())).shape[1]
        pos = jnp.clip(n, 0, t - 1)
        if stacked:
            c = jax.tree.leaves(pstate["params"])[0].shape[0]
            group = lambda x: x.reshape((c, x.shape[0] // c) + x.shape[1:])
            a = jax.vmap(act, in_axes=(0, 0, 0, None, 0))(
                pstate["params"], jax.tree.map(group, hist), group(pstate["lang"]), pos, group(keys))
            a = a.reshape((-1,) + a.shape[2:])
        else:
            a = act(pstate["params"], hist, pstate["lang"], pos, keys)
        return a, dict(pstate, hist=hist, n=pstate["n"] + 1)

    return policy_fn


def stack_params(trees) -> Any:
    """Stack parameter pytrees along a new leading axis (for `stacked=True`)."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)
