"""Image augmentation (LIBERO's colour jitter + 4-px replicate-pad random crop): hand-checked ops and batch properties."""

import colorsys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from clbench_jax.errors import ObservationError
from clbench_jax.policies.augment import (
    AugmentConfig,
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    augment_batch,
    color_jitter,
    sample_params,
    translate,
)

B, T, H, W = 6, 3, 16, 20
NO_JITTER = AugmentConfig(brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0)


def images(seed=0, b=B, dtype=np.uint8):
    rng = np.random.default_rng(seed)
    obs = {k: rng.integers(0, 256, size=(b, T, H, W, 3), dtype=np.uint8) for k in ("agentview_rgb", "eye_in_hand_rgb")}
    if dtype != np.uint8:
        obs = {k: (v / 255.0).astype(dtype) for k, v in obs.items()}
    obs["joint_states"] = rng.normal(size=(b, T, 7)).astype(np.float32)
    return {k: jnp.asarray(v) for k, v in obs.items()}


aug = jax.jit(augment_batch, static_argnums=2)


# ---------------------------------------------------------------- single ops against hand-computed values

def test_colour_ops_hand_computed():
    x = jnp.array([[[[0.2, 0.4, 0.6], [1.0, 0.0, 0.0]]]])  # (1,1,2,3): one frame of 1x2 pixels
    np.testing.assert_allclose(adjust_brightness(x, 2.0), [[[[0.4, 0.8, 1.0], [1.0, 0.0, 0.0]]]], atol=1e-6)
    g = np.array([0.2989 * 0.2 + 0.587 * 0.4 + 0.114 * 0.6, 0.2989])  # grey of each pixel
    np.testing.assert_allclose(adjust_saturation(x, 0.0)[0, 0, :, 0], g, atol=1e-6)  # s=0: pure grey
    np.testing.assert_allclose(adjust_contrast(x, 0.0), np.full((1, 1, 2, 3), g.mean()), atol=1e-6)  # c=0: mean grey
    np.testing.assert_allclose(adjust_contrast(x, 1.5)[0, 0, 0],
                               np.clip(1.5 * np.array([0.2, 0.4, 0.6]) - 0.5 * g.mean(), 0, 1), atol=1e-6)
    # a third of a turn moves red to green, green to blue
    np.testing.assert_allclose(adjust_hue(jnp.array([1.0, 0.0, 0.0]), 1 / 3), [0, 1, 0], atol=1e-5)
    np.testing.assert_allclose(adjust_hue(jnp.array([0.0, 0.6, 0.0]), 1 / 3), [0, 0, 0.6], atol=1e-5)


def test_hue_matches_colorsys():
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(200, 3)).astype(np.float32)
    x[:4] = [[0, 0, 0], [1, 1, 1], [0.5, 0.5, 0.5], [0, 1, 1]]  # greys (no hue) and a tie in the max
    for h in (0.0, 0.17, -0.29):
        got = np.asarray(adjust_hue(jnp.asarray(x), h))
        hsv = [colorsys.rgb_to_hsv(*p) for p in x]
        want = np.array([colorsys.hsv_to_rgb((a + h) % 1.0, s, v) for a, s, v in hsv])
        np.testing.assert_allclose(got, want, atol=2e-6)


def test_jitter_order_matters_and_is_followed():
    x = jax.random.uniform(jax.random.PRNGKey(0), (2, 8, 8, 3))
    f = jnp.array([1.3, 0.7, 1.2, 0.1])
    bcsh = color_jitter(x, f, jnp.array([0, 1, 2, 3]))
    hscb = color_jitter(x, f, jnp.array([3, 2, 1, 0]))
    want = adjust_brightness(adjust_contrast(adjust_saturation(adjust_hue(x, 0.1), 1.2), 0.7), 1.3)
    np.testing.assert_allclose(hscb, want, atol=1e-6)
    assert float(jnp.abs(bcsh - hscb).max()) > 1e-3


def test_translate_is_a_crop_of_the_replicate_padded_image():
    x = jax.random.uniform(jax.random.PRNGKey(2), (T, H, W, 3))
    padded = np.pad(np.asarray(x), ((0, 0), (4, 4), (4, 4), (0, 0)), mode="edge")
    for dy, dx in [(0, 0), (8, 8), (3, 6), (4, 4)]:
        np.testing.assert_array_equal(translate(x, jnp.array([dy, dx]), 4), padded[:, dy:dy + H, dx:dx + W])
    np.testing.assert_array_equal(translate(x, jnp.array([4, 4]), 4), x)  # centre crop = no shift


# ---------------------------------------------------------------- the batch function

def _find_offset(out, img, pad=4):
    """The unique (dy, dx) whose crop of the edge-padded img equals out, else None."""
    padded = np.pad(img, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    hits = [(dy, dx) for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)
            if np.array_equal(padded[:, dy:dy + H, dx:dx + W], out)]
    return hits[0] if len(hits) == 1 else None


def test_shift_only_is_pure_translation_shared_by_time_and_cameras():
    obs = images(3)
    out = aug(jax.random.PRNGKey(5), obs, NO_JITTER)
    offsets = []
    for i in range(B):
        a = _find_offset(np.asarray(out["agentview_rgb"][i]), np.asarray(obs["agentview_rgb"][i]))
        e = _find_offset(np.asarray(out["eye_in_hand_rgb"][i]), np.asarray(obs["eye_in_hand_rgb"][i]))
        assert a is not None and a == e  # every time step (compared whole) and both cameras: one crop
        offsets.append(a)
    assert len(set(offsets)) > 1  # per-sample randomness
    np.testing.assert_array_equal(out["joint_states"], obs["joint_states"])  # non-image keys pass through


def test_identity_at_zero_strength():
    ident = AugmentConfig(brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0, pad=0)
    obs = images(4)
    out = aug(jax.random.PRNGKey(0), obs, ident)
    for k in obs:
        np.testing.assert_array_equal(out[k], obs[k])
    fl = images(4, dtype=np.float32)
    out = aug(jax.random.PRNGKey(0), fl, ident)
    np.testing.assert_allclose(out["agentview_rgb"], fl["agentview_rgb"], atol=2e-6)


def test_default_jitter_range_dtype_determinism_and_per_sample_draws():
    obs = images(6, dtype=np.float32)
    out = aug(jax.random.PRNGKey(1), obs, AugmentConfig())
    x = out["agentview_rgb"]
    assert x.dtype == jnp.float32 and x.shape == obs["agentview_rgb"].shape
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    u8 = aug(jax.random.PRNGKey(1), images(6), AugmentConfig())["agentview_rgb"]
    assert u8.dtype == jnp.uint8
    np.testing.assert_allclose(np.asarray(u8, np.float32) / 255.0, x, atol=0.5 / 255 + 1e-6)  # same draws
    np.testing.assert_array_equal(aug(jax.random.PRNGKey(1), obs, AugmentConfig())["agentview_rgb"], x)
    assert float(jnp.abs(aug(jax.random.PRNGKey(2), obs, AugmentConfig())["agentview_rgb"] - x).max()) > 0.05
    # mean colour shift differs between samples (own jitter per sample)
    shift = jnp.mean(x - obs["agentview_rgb"], axis=(1, 2, 3))  # (B, 3)
    assert float(jnp.std(shift, axis=0).max()) > 1e-3


def test_sample_params_distribution():
    cfg = AugmentConfig()
    p = sample_params(jax.random.PRNGKey(0), 4000, cfg)
    assert 0.88 < float(jnp.mean(p["apply"])) < 0.92  # LIBERO: jitter with probability 1 - epsilon = 0.9
    f = np.asarray(p["factors"])
    assert f[:, :3].min() >= 0.7 and f[:, :3].max() <= 1.3 and np.abs(f[:, 3]).max() <= 0.3
    np.testing.assert_array_equal(np.sort(np.asarray(p["order"]), axis=1), np.tile(np.arange(4), (4000, 1)))
    off = np.asarray(p["offset"])
    assert off.min() == 0 and off.max() == 8 and len(np.unique(off[:, 0])) == 9


def test_bad_images_are_typed_errors():
    obs = images(0)
    with pytest.raises(ObservationError, match="agentview_rgb"):
        augment_batch(jax.random.PRNGKey(0), dict(obs, agentview_rgb=obs["agentview_rgb"][:, 0]))
    with pytest.raises(ObservationError, match="eye_in_hand_rgb"):
        augment_batch(jax.random.PRNGKey(0), dict(obs, eye_in_hand_rgb=obs["eye_in_hand_rgb"][:2]))
    assert augment_batch(jax.random.PRNGKey(0), {"joint_states": obs["joint_states"]}).keys() == {"joint_states"}
