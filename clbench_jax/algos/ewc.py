"""Elastic weight consolidation, online (LIBERO algos/ewc.py).

LIBERO's code (default, `formula="code"`):
    penalty   = e_lambda * sum F (theta - theta*)^2           (no 1/2), applied from the second task on
    F_new     = mean over the task's batches of (d/dtheta mean log-likelihood of the batch)^2   (train mode)
    F         = F_new after the first task, then gamma * F + F_new   (no (1 - gamma))
The paper's formulas (`formula="paper"`): penalty (e_lambda / 2) sum F (theta - theta*)^2 and
F = gamma * F + (1 - gamma) * F_new (the first task's F_new is taken as is in both).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from clbench_jax.algos.protocol import Algorithm
from clbench_jax.errors import ClbenchError


def fisher_diagonal(ctx, params):
    """Mean over one pass of the stage's batches of the squared gradient of the batch-mean log-likelihood."""
    total, n = jax.tree.map(jnp.zeros_like, params), 0
    for i, batch in enumerate(ctx.batches(ctx.rng)):
        g = ctx.grad(params, batch, jax.random.fold_in(ctx.key, i))
        total = jax.tree.map(lambda a, b: a + b * b, total, g)
        n += 1
    if n == 0:
        raise ClbenchError("EWC: the stage has no training batch to estimate the Fisher from",
                           field=f"stage {ctx.stage}")
    return jax.tree.map(lambda a: a / n, total)


def make_ewc(e_lambda: float = 5e4, gamma: float = 0.9, formula: str = "code") -> Algorithm:
    if formula not in ("code", "paper"):
        raise ClbenchError(f"EWC formula must be 'code' or 'paper', got {formula!r}", field="algo.formula")
    coef = e_lambda if formula == "code" else e_lambda / 2.0
    new_weight = 1.0 if formula == "code" else 1.0 - gamma

    def init(params, n_tasks):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return {"fisher": zeros, "anchor": zeros, "active": jnp.zeros((), jnp.float32)}

    def penalty(params, state):
        terms = jax.tree.map(lambda p, a, f: jnp.sum(f * (p - a) ** 2), params, state["anchor"], state["fisher"])
        return state["active"] * coef * sum(jax.tree.leaves(terms))

    def end_task(params, state, t, ctx):
        new = fisher_diagonal(ctx, params)
        first = float(state["active"]) == 0.0
        fisher = new if first else jax.tree.map(lambda f, g: gamma * f + new_weight * g, state["fisher"], new)
        ctx.log["fisher_mean"] = float(np.mean([float(jnp.mean(f)) for f in jax.tree.leaves(fisher)]))
        anchor = jax.tree.map(jnp.array, params)
        return params, {"fisher": fisher, "anchor": anchor, "active": jnp.ones((), jnp.float32)}

    return Algorithm(name="ewc", init=init, penalty=penalty, end_task=end_task,
                     config={"e_lambda": e_lambda, "gamma": gamma, "formula": formula})
