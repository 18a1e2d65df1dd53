"""Optimizer and the jitted train step shared by every algorithm.

LIBERO (configs/train/optimizer/adam_w.yaml, scheduler/cosine_annealing.yaml, algos/base.py): AdamW lr 1e-4, weight
decay 1e-4, gradient norm clipped at 100, CosineAnnealingLR(T_max = n_epochs, eta_min = 1e-5) stepped once per epoch,
and a fresh optimizer for every task. The learning rate is fed to the step as an argument (optax.inject_hyperparams),
so one compiled step serves every task and epoch whatever the dataset sizes.

On an accelerator a small policy's step is bound by the host (dispatch and transfer: ~3.7 ms of CPU per step on the
H200 whatever the batch), so `make_train_steps` runs K optimizer steps in one dispatch: a `lax.scan` over K batches
staged on the device together (`apply_steps` groups a stream of batches that way).
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass
from typing import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from clbench_jax.algos.protocol import Algorithm


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-4
    end_lr: float = 1e-5
    weight_decay: float = 1e-4
    grad_clip: float = 100.0


def make_optimizer(cfg: OptimConfig = OptimConfig()) -> optax.GradientTransformation:
    """clip(global norm) -> AdamW with an injectable learning rate (set per epoch by the step's `lr` argument)."""
    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.inject_hyperparams(optax.adamw)(learning_rate=cfg.lr, weight_decay=cfg.weight_decay),
    )


def cosine_lr(i: int, t_max: int, cfg: OptimConfig = OptimConfig()) -> float:
    """torch CosineAnnealingLR after `i` scheduler steps (closed form): end + (lr - end) (1 + cos(pi i / t_max)) / 2."""
    return cfg.end_lr + (cfg.lr - cfg.end_lr) * (1.0 + math.cos(math.pi * i / max(t_max, 1))) / 2.0


def _set_lr(opt_state, lr):
    clip_state, adam_state = opt_state
    hp = dict(adam_state.hyperparams, learning_rate=jnp.asarray(lr, jnp.float32))
    return clip_state, adam_state._replace(hyperparams=hp)


def _update(policy, algo: Algorithm, optimizer: optax.GradientTransformation, mask_padding: bool, augment: bool):
    """The pure optimizer step (params, opt_state, algo_state, batch, key, lr) -> (params, opt_state, info)."""
    aug = None
    if augment:
        from clbench_jax.policies.augment import augment_batch as aug

    def loss_fn(params, state, batch, key):
        k_drop, k_aug = jax.random.split(key)
        if aug is not None:
            batch = dict(batch, obs=aug(k_aug, batch["obs"]))
        if not mask_padding:
            batch = {k: v for k, v in batch.items() if k != "mask"}
        bc = policy.loss(algo.train_params(params, state), batch, k_drop, train=True)
        return bc + algo.penalty(params, state), bc

    def update(params, opt_state, state, batch, key, lr):
        (loss, bc), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, batch, key)
        updates, opt_state = optimizer.update(grads, _set_lr(opt_state, lr), params)
        mask = algo.grad_mask(params, state)
        if mask is not None:
            updates = jax.tree.map(lambda u, m: u * m.astype(u.dtype), updates, mask)
        params = optax.apply_updates(params, updates)
        return params, opt_state, {"loss": loss, "bc_loss": bc, "grad_norm": optax.tree.norm(grads)}

    return update


def make_train_step(policy, algo: Algorithm, optimizer: optax.GradientTransformation, *, mask_padding: bool = False,
                    augment: bool = False):
    """-> jitted step(params, opt_state, algo_state, batch, key, lr) -> (params, opt_state, info).

    loss = BC NLL of the network on algo.train_params(params, state) (plus a network's auxiliary loss) +
    algo.penalty; gradients clipped by global norm before AdamW (as torch clip_grad_norm_ then
    step); algo.grad_mask multiplies the final updates, so masked weights stay exactly where they are (no weight
    decay either). `mask_padding` drops padded steps from the NLL (LIBERO keeps them: default off). `augment` applies
    clbench_jax.policies.augment.augment_batch to the image keys (RGB mode)."""
    return jax.jit(_update(policy, algo, optimizer, mask_padding, augment))


def make_train_steps(policy, algo: Algorithm, optimizer: optax.GradientTransformation, *,
                     mask_padding: bool = False, augment: bool = False):
    """-> jitted steps(params, opt_state, algo_state, batches, keys, lr) -> (params, opt_state, infos): K optimizer
    steps in one dispatch, a lax.scan over `batches` (every leaf stacked on a leading axis of K) with keys (K, 2);
    the same arithmetic as K calls of make_train_step's step (tests/test_train_scan.py), infos stacked (K,)."""
    update = _update(policy, algo, optimizer, mask_padding, augment)

    @jax.jit
    def steps(params, opt_state, state, batches, keys, lr):
        def body(carry, xs):
            params, opt_state, info = update(*carry, state, *xs, lr)
            return (params, opt_state), info

        (params, opt_state), infos = jax.lax.scan(body, (params, opt_state), (batches, keys))
        return params, opt_state, infos

    return steps


def apply_steps(step: Callable, steps: Callable, k: int, params, opt_state, state, batches: Iterable[dict], key,
                lr) -> tuple:
    """Train on a stream of batches in order -> (params, opt_state, losses: one device array per dispatch).

    Batch i gets key fold_in(key, i). Runs of k batches of one shape go to the device together (stacked on the
    host, one transfer) and train in one dispatch of `steps`; a shorter tail or a batch of another shape (the last
    of an epoch) takes single `step`s. k = 1: one dispatch per batch. The stream is read lazily, one batch after
    another, so whatever draws the batches (host random generators) draws in the same order either way."""
    losses: list = []
    staged: list[tuple[int, dict]] = []

    def one(p, o, i, b):
        p, o, info = step(p, o, state, b, jax.random.fold_in(key, i), lr)
        losses.append(info["loss"])
        return p, o

    def flush(p, o):
        if len(staged) == k and k > 1:
            stacked = jax.device_put(jax.tree.map(lambda *x: np.stack(x), *[b for _, b in staged]))
            keys = jnp.stack([jax.random.fold_in(key, i) for i, _ in staged])
            p, o, infos = steps(p, o, state, stacked, keys, lr)
            losses.append(infos["loss"])
        else:
            for i, b in staged:
                p, o = one(p, o, i, b)
        staged.clear()
        return p, o

    shape = lambda b: jax.tree.map(np.shape, b)  # noqa: E731
    for i, b in enumerate(batches):
        if staged and shape(b) != shape(staged[0][1]):
            params, opt_state = flush(params, opt_state)
        staged.append((i, b))
        if len(staged) == k:
            params, opt_state = flush(params, opt_state)
    params, opt_state = flush(params, opt_state)
    return params, opt_state, losses


@lru_cache(maxsize=None)
def make_loss_grad(policy):
    """Jitted gradient of the batch-mean log-likelihood (train mode, as LIBERO's EWC computes its Fisher)."""

    @jax.jit
    def grad(params, batch, key):
        batch = {k: v for k, v in batch.items() if k != "mask"}
        return jax.grad(lambda p: -policy.loss(p, batch, key, train=True))(params)

    return grad
