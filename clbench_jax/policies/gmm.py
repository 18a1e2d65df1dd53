"""Gaussian-mixture action head (LIBERO's GMM head, written from the spec).

MLP (ReLU) -> per mode: mean (tanh-squashed), std (softplus + min_std), and a
mixture logit. Diagonal Gaussians; the log-density marginalises the modes with
logsumexp. ``GMMDist`` is a plain pytree so it passes through jit/vmap.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

LOG_2PI = float(jnp.log(2.0 * jnp.pi))


class GMMDist(NamedTuple):
    """Mixture of diagonal Gaussians. means/stds: (..., K, A); logits: (..., K)."""

    means: jax.Array
    stds: jax.Array
    logits: jax.Array


def component_log_prob(dist: GMMDist, action: jax.Array) -> jax.Array:
    """log N(action | mean_k, diag(std_k^2)) for each mode k -> (..., K)."""
    a = action[..., None, :]
    z = (a - dist.means) / dist.stds
    return jnp.sum(-0.5 * z**2 - jnp.log(dist.stds) - 0.5 * LOG_2PI, axis=-1)


def log_prob(dist: GMMDist, action: jax.Array) -> jax.Array:
    """log sum_k pi_k N(action | mu_k, sigma_k) -> shape (...)."""
    log_w = jax.nn.log_softmax(dist.logits, axis=-1)
    return jax.nn.logsumexp(log_w + component_log_prob(dist, action), axis=-1)


def nll_loss(dist: GMMDist, action: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Mean negative log-likelihood (optionally over entries where mask is true)."""
    lp = log_prob(dist, action)
    if mask is None:
        return -jnp.mean(lp)
    mask = mask.astype(lp.dtype)
    return -jnp.sum(lp * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def sample(dist: GMMDist, key: jax.Array) -> jax.Array:
    """Draw the mode from the mixture, then the action from that Gaussian -> (..., A)."""
    k_mode, k_noise = jax.random.split(key)
    idx = jax.random.categorical(k_mode, dist.logits, axis=-1)
    mean = jnp.take_along_axis(dist.means, idx[..., None, None], axis=-2)[..., 0, :]
    std = jnp.take_along_axis(dist.stds, idx[..., None, None], axis=-2)[..., 0, :]
    return mean + std * jax.random.normal(k_noise, mean.shape, mean.dtype)


def mode(dist: GMMDist) -> jax.Array:
    """Mean of the most likely component (deterministic action) -> (..., A)."""
    idx = jnp.argmax(dist.logits, axis=-1)
    return jnp.take_along_axis(dist.means, idx[..., None, None], axis=-2)[..., 0, :]


class GMMHead(nn.Module):
    """features (..., F) -> GMMDist over actions of size ``action_dim``."""

    action_dim: int = 7
    hidden_sizes: Sequence[int] = (1024, 1024, 1024)
    num_modes: int = 5
    min_std: float = 1e-4

    @nn.compact
    def __call__(self, x: jax.Array) -> GMMDist:
        for i, h in enumerate(self.hidden_sizes):
            x = nn.Dense(h, name=f"mlp_{i}")(x)
            if i < len(self.hidden_sizes) - 1:  # LIBERO's shared MLP has no activation after its last layer
                x = nn.relu(x)
        k, a = self.num_modes, self.action_dim
        lead = x.shape[:-1]
        means = jnp.tanh(nn.Dense(k * a, name="mean")(x)).reshape(*lead, k, a)
        stds = (nn.softplus(nn.Dense(k * a, name="std")(x)) + self.min_std).reshape(*lead, k, a)
        logits = nn.Dense(k, name="logits")(x)
        return GMMDist(means, stds, logits)
