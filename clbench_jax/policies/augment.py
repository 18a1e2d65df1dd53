"""Training-time image augmentation as LIBERO does it, in JAX (jit-able, per-sample randomness from one key).

LIBERO (policy/bc_*_policy.yaml -> data_augmentation/batch_wise_img_color_jitter_group_aug.yaml and
translation_aug.yaml; models/base_policy.py, modules/data_augmentation.py) augments in this order:

1. Color jitter, per sample (``BatchWiseImgColorJitterAug``): with probability 1 - epsilon = 0.9 a sample gets
   torchvision ``ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.3)``: factors
   b, c, s ~ U[0.7, 1.3], hue shift ~ U[-0.3, 0.3] (fraction of a turn), the four applied in a random order.
2. Translation (``TranslationAug``, translation 8): replicate-pad 4 px on each side, crop back to H x W at a
   uniformly random offset in {0..8}^2.

LIBERO concatenates all cameras along time before augmenting (``DataAugGroup``), so one sample's jitter and crop
are shared by all its time steps and all its cameras; contrast uses each frame's own mean grey. This module does
the same. Images are float in [0, 1] while augmenting (as robomimic feeds LIBERO); uint8 input comes back as uint8
(rounded), float input as the same float dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import jax
import jax.numpy as jnp

from clbench_jax.errors import ObservationError

GREY = jnp.array([0.2989, 0.587, 0.114], jnp.float32)  # torchvision rgb_to_grayscale weights


@dataclass(frozen=True)
class AugmentConfig:
    brightness: float = 0.3
    contrast: float = 0.3
    saturation: float = 0.3
    hue: float = 0.3
    jitter_prob: float = 0.9  # LIBERO epsilon 0.1: a sample is left un-jittered with probability 0.1
    pad: int = 4              # LIBERO translation 8 = 4 px replicate pad per side


def rgb_keys(obs: Mapping[str, jax.Array]) -> list[str]:
    return sorted(k for k in obs if k.endswith("_rgb"))


# ---------------------------------------------------------------- colour ops on float images (..., H, W, 3)

def _grey(x: jax.Array) -> jax.Array:
    return jnp.einsum("...c,c->...", x, GREY)[..., None]


def _blend(x: jax.Array, ref: jax.Array, f: jax.Array) -> jax.Array:
    return jnp.clip(f * x + (1.0 - f) * ref, 0.0, 1.0)


def adjust_brightness(x, f):
    return _blend(x, jnp.zeros((), x.dtype), f)


def adjust_contrast(x, f):
    return _blend(x, jnp.mean(_grey(x), axis=(-3, -2, -1), keepdims=True), f)


def adjust_saturation(x, f):
    return _blend(x, _grey(x), f)


def adjust_hue(x, h):
    """Rotate hue by h turns (HSV round trip, as torchvision's adjust_hue on float images)."""
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    v = jnp.max(x, axis=-1)
    delta = v - jnp.min(x, axis=-1)
    s = jnp.where(v > 0, delta / jnp.where(v > 0, v, 1.0), 0.0)
    d = jnp.where(delta > 0, delta, 1.0)
    hue = jnp.where(v == r, (g - b) / d, jnp.where(v == g, 2.0 + (b - r) / d, 4.0 + (r - g) / d))
    hue = jnp.where(delta > 0, hue / 6.0, 0.0)
    hue = jnp.mod(hue + h, 1.0)
    # HSV -> RGB in closed form: channel n in (5, 3, 1) is v - v s clip(min(k, 4 - k), 0, 1), k = (n + 6 hue) mod 6
    k = jnp.mod(jnp.array([5.0, 3.0, 1.0]) + 6.0 * hue[..., None], 6.0)
    return v[..., None] * (1.0 - s[..., None] * jnp.clip(jnp.minimum(k, 4.0 - k), 0.0, 1.0))


def color_jitter(x: jax.Array, factors: jax.Array, order: jax.Array) -> jax.Array:
    """One sample's frames x (..., H, W, 3) in [0,1]; factors (4,) = (brightness, contrast, saturation, hue);
    order (4,) a permutation of 0..3 giving which op runs at each position (torchvision's fn_idx)."""
    ops = (lambda y: adjust_brightness(y, factors[0]), lambda y: adjust_contrast(y, factors[1]),
           lambda y: adjust_saturation(y, factors[2]), lambda y: adjust_hue(y, factors[3]))
    for k in range(4):
        x = jax.lax.switch(order[k], ops, x)
    return x


def translate(x: jax.Array, offset: jax.Array, pad: int) -> jax.Array:
    """One sample's frames x (N, H, W, C): replicate-pad `pad` px, crop H x W at offset (dy, dx) in [0, 2 pad]."""
    n, h, w, c = x.shape
    padded = jnp.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    return jax.lax.dynamic_slice(padded, (0, offset[0], offset[1], 0), (n, h, w, c))


# ---------------------------------------------------------------- per-sample parameters and the batch function

def sample_params(key: jax.Array, batch: int, cfg: AugmentConfig = AugmentConfig()) -> dict:
    """Per-sample draws: apply (B,) bool, factors (B,4), order (B,4) permutations, offset (B,2) int32."""
    k_apply, k_f, k_order, k_off = jax.random.split(key, 4)
    lo = jnp.array([max(0.0, 1 - cfg.brightness), max(0.0, 1 - cfg.contrast), max(0.0, 1 - cfg.saturation), -cfg.hue])
    hi = jnp.array([1 + cfg.brightness, 1 + cfg.contrast, 1 + cfg.saturation, cfg.hue])
    return {
        "apply": jax.random.bernoulli(k_apply, cfg.jitter_prob, (batch,)),
        "factors": jax.random.uniform(k_f, (batch, 4), minval=lo, maxval=hi),
        "order": jax.vmap(lambda k: jax.random.permutation(k, 4))(jax.random.split(k_order, batch)),
        "offset": jax.random.randint(k_off, (batch, 2), 0, 2 * cfg.pad + 1),
    }


def _check(obs, keys):
    shape = None
    for k in keys:
        x = obs[k]
        if x.ndim != 5 or x.shape[-1] != 3:
            raise ObservationError(f"image must be (B,T,H,W,3), got shape {tuple(x.shape)}", field=k)
        if not (x.dtype == jnp.uint8 or jnp.issubdtype(x.dtype, jnp.floating)):
            raise ObservationError(f"image must be uint8 or float, got {x.dtype}", field=k)
        if shape is not None and x.shape[:2] != shape:
            raise ObservationError(f"batch/time dims {tuple(x.shape[:2])} differ from {keys[0]}'s {shape}", field=k)
        shape = x.shape[:2]


def augment_batch(key: jax.Array, obs: Mapping[str, jax.Array], cfg: AugmentConfig = AugmentConfig()) -> dict:
    """Colour-jitter then pad-and-crop every ``*_rgb`` entry (B,T,H,W,3) of obs; other entries pass through."""
    keys = rgb_keys(obs)
    out = dict(obs)
    if not keys:
        return out
    _check(obs, keys)
    prm = sample_params(key, obs[keys[0]].shape[0], cfg)

    def one(args):  # one sample: every camera's (T,H,W,3) float frames; only the drawn ops run (lax.map + switch)
        xs, apply, factors, order, offset = args
        xs = [jax.lax.cond(apply, color_jitter, lambda y, *_: y, x, factors, order) for x in xs]
        return [translate(x, offset, cfg.pad) for x in xs]

    floats = [obs[k].astype(jnp.float32) / 255.0 if obs[k].dtype == jnp.uint8 else obs[k].astype(jnp.float32)
              for k in keys]
    outs = jax.lax.map(one, (floats, prm["apply"], prm["factors"], prm["order"], prm["offset"]))
    for k, y in zip(keys, outs):
        x = obs[k]
        out[k] = jnp.round(y * 255.0).astype(jnp.uint8) if x.dtype == jnp.uint8 else y.astype(x.dtype)
    return out
