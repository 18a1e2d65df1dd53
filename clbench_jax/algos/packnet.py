"""PackNet (LIBERO algos/packnet.py): one network, a disjoint subset of the conv/linear weights per task.

Every `kernel` leaf (Dense, Conv, attention projections, LSTM gates) carries an owner array: 0 free, k owned by
stage k - 1. Stage t: free weights go to t + 1 (`start_task`); only weights owned by t + 1 train; biases and norm
scales never train (LIBERO zeroes their gradients on every task, the first included); other leaves (e.g. the object
encoder's pooling query) train freely, as LIBERO's non-Linear parameters do. `end_task` keeps the largest
(1 - prune_perc) of the task's weights by magnitude (LIBERO: remove |w| <= the round(0.75 n)-th smallest), zeroes the
rest and frees them, then fine-tunes the kept weights for `post_prune_epochs` (+1, LIBERO trains on epoch 0 too)
with a fresh optimizer, keeping the best-success checkpoint. Acting on task j zeroes weights owned by later tasks
and free weights. Deviation: masked updates also skip AdamW's weight decay (LIBERO decays frozen weights by
lr * wd = 1e-8 per step); LSTM gate kernels are pruned here (LIBERO's nn.LSTM is not a Linear, so it is not).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from clbench_jax.algos.protocol import Algorithm
from clbench_jax.errors import ClbenchError

FROZEN_LEAVES = ("bias", "scale")


def _name(path) -> str:
    last = path[-1]
    return str(getattr(last, "key", getattr(last, "name", last)))


def is_prunable(path) -> bool:
    return _name(path) == "kernel"


def prune_kernel(w: np.ndarray, owner: np.ndarray, t: int, prune_perc: float) -> np.ndarray:
    """New owner array: of the weights owned by stage t (owner t + 1), free those with |w| <= the
    round(prune_perc * n)-th smallest magnitude (ties go too, as torch's kthvalue + le)."""
    owned = owner == t + 1
    k = round(prune_perc * int(owned.sum()))
    if k < 1:
        return owner
    cutoff = np.partition(np.abs(w[owned]).ravel(), k - 1)[k - 1]
    return np.where((np.abs(w) <= cutoff) & owned, 0, owner).astype(owner.dtype)


def make_packnet(prune_perc: float = 0.75, post_prune_epochs: int = 50) -> Algorithm:
    if not 0.0 <= prune_perc < 1.0:
        raise ClbenchError(f"PackNet prune_perc must be in [0, 1), got {prune_perc}", field="algo.prune_perc")

    def init(params, n_tasks):
        owner = jax.tree_util.tree_map_with_path(
            lambda p, x: np.zeros(np.shape(x) if is_prunable(p) else (), np.int32), params)
        return {"owner": owner, "task": np.zeros((), np.int32)}

    def grad_mask(params, state):
        def m(p, x, o):
            if is_prunable(p):
                return o == state["task"] + 1
            return jnp.asarray(_name(p) not in FROZEN_LEAVES)
        return jax.tree_util.tree_map_with_path(m, params, state["owner"])

    def start_task(params, state, t, ctx=None):
        owner = jax.tree.map(lambda o: np.where(np.asarray(o) == 0, t + 1, np.asarray(o)).astype(np.int32),
                             state["owner"])
        # Non-prunable placeholders are 0-d: their value never matters.
        return params, {"owner": owner, "task": np.asarray(t, np.int32)}

    def end_task(params, state, t, ctx):
        def prune(p, w, o):
            return prune_kernel(np.asarray(w), np.asarray(o), t, prune_perc) if is_prunable(p) else np.asarray(o)
        owner = jax.tree_util.tree_map_with_path(prune, params, state["owner"])
        params = jax.tree_util.tree_map_with_path(
            lambda p, w, o: jnp.where(o == 0, 0.0, w).astype(w.dtype) if is_prunable(p) else w, params, owner)
        kept = sum(int((o == t + 1).sum()) for p, o in jax.tree_util.tree_leaves_with_path(owner) if is_prunable(p))
        ctx.log["kept_weights"] = kept
        state = {"owner": owner, "task": np.asarray(t, np.int32)}
        if post_prune_epochs > 0:
            params = ctx.fit(params, state, post_prune_epochs)
        return params, state

    def eval_params(params, state, j):
        return jax.tree_util.tree_map_with_path(
            lambda p, w, o: jnp.where((o == 0) | (o > j + 1), 0.0, w).astype(w.dtype) if is_prunable(p) else w,
            params, state["owner"])

    return Algorithm(name="packnet", init=init, grad_mask=grad_mask, start_task=start_task, end_task=end_task,
                     eval_params=eval_params, task_specific_eval=True,
                     config={"prune_perc": prune_perc, "post_prune_epochs": post_prune_epochs})
