"""Pieces shared by the parameter-efficient methods (L2M, TAIL, IsCiL, DMPEL): the frozen base's grad mask, per-task
slot masks, jitted network methods and a pass over a stage's windows."""

from __future__ import annotations

from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

from clbench_jax.policies.adapters import freeze_mask


def slot_mask(tree, first, stop=None):
    """grad_mask for leaves with a leading slot axis: slots first..stop-1 train (stop = first + 1 by default)."""
    stop = first + 1 if stop is None else stop

    def m(a):
        i = jnp.arange(a.shape[0])
        return ((i >= first) & (i < stop)).reshape((-1,) + (1,) * (a.ndim - 1))
    return jax.tree.map(m, tree)


def frozen_base(params, **trainable) -> dict:
    """{"base": frozen, key: mask, ...}; keys of params not named are frozen too."""
    return {k: trainable[k] if k in trainable else freeze_mask(v) for k, v in params.items()}


@lru_cache(maxsize=None)
def jitted(network, method: str):
    """jax.jit of a network method (networks are hashable by value, so one compile serves every stage and run)."""
    return jax.jit(getattr(network, method))


def copy_slot(tree, dst: int, src: int, rng: np.random.Generator | None = None, noise: float = 0.0):
    """Slot `dst` of every leaf (leading slot axis) set to slot `src`, plus N(0, noise^2) drawn from `rng` (host
    side: no compile per leaf shape)."""
    def one(a):
        a = np.array(a)
        a[dst] = a[src] + (noise * rng.standard_normal(a.shape[1:]) if rng is not None else 0.0)
        return jnp.asarray(a)
    return jax.tree.map(one, tree)


def stage_pass(ctx, fn, params) -> np.ndarray:
    """fn(params, obs, lang) over one shuffled pass of the stage's training batches, concatenated (numpy)."""
    outs = [np.asarray(fn(params, b["obs"], b["lang"])) for b in ctx.batches(ctx.rng)]
    if not outs:
        from clbench_jax.errors import ClbenchError

        raise ClbenchError("the stage has no training batch", field=f"stage {ctx.stage}")
    return np.concatenate(outs)
