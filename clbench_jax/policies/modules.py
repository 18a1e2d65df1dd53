"""Building blocks for the BC policies (own implementation from LIBERO_FACTS).

* ``ResNetT``: resnet18 conv1..layer2 from scratch, FiLM after every BasicBlock
  (h = (1 + g) h + b from the language embedding), spatial-softmax keypoints,
  linear projection. At 128 px the layer2 map is 16x16x128.
  Normalisation is GroupNorm (stateless, so params are the only state and the
  policy vmaps over stacked params); LIBERO's torchvision resnet uses BatchNorm.
* ``sinusoidal_time_encoding``: standard sin/cos encoding of step indices.
* ``block_causal_mask`` + ``DecoderBlock``: pre-LN transformer block; tokens of
  step t attend to all tokens of steps <= t.
* ``ObjectTokenEncoder``: masked set of object tokens -> one embedding per step, read through
  instruction-conditioned attention queries.
* ``PatchEncoder``: BC-ViLT's image stem (7x7/2 conv, norm, ReLU, then a PxP/P
  conv): one token per patch, (128/2/8)^2 = 64 tokens at 128 px, patch 8.
* ``temporal_decoder``: the block-causal temporal transformer shared by
  BC-Transformer and BC-ViLT (called inside a compact module, so its layers
  are that module's ``layer_i`` params).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def _norm(groups: int = 8) -> nn.Module:
    # GroupNorm where LIBERO has BatchNorm: stateless, so params are the whole state.
    return nn.GroupNorm(num_groups=groups)


class FiLM(nn.Module):
    """h (N,H,W,C), cond (N,D) -> (1 + g) * h + b."""

    @nn.compact
    def __call__(self, h: jax.Array, cond: jax.Array) -> jax.Array:
        c = h.shape[-1]
        gb = nn.Dense(2 * c, kernel_init=nn.initializers.zeros, name="proj")(cond)
        g, b = jnp.split(gb, 2, axis=-1)
        return (1.0 + g[:, None, None, :]) * h + b[:, None, None, :]


class BasicBlock(nn.Module):
    features: int
    stride: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = nn.Conv(self.features, (3, 3), (self.stride, self.stride), padding=1, use_bias=False)(x)
        y = nn.relu(_norm()(y))
        y = nn.Conv(self.features, (3, 3), padding=1, use_bias=False)(y)
        y = _norm()(y)
        if self.stride != 1 or x.shape[-1] != self.features:
            x = nn.Conv(self.features, (1, 1), (self.stride, self.stride), use_bias=False, name="down")(x)
            x = _norm()(x)
        return nn.relu(x + y)


class SpatialSoftmax(nn.Module):
    """(N,H,W,C) -> (N, 2*num_kp) expected (x, y) keypoints in [-1, 1]."""

    num_kp: int = 32
    temperature: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        n, h, w, _ = x.shape
        x = nn.Conv(self.num_kp, (1, 1), name="kp")(x)
        logits = x.reshape(n, h * w, self.num_kp) / self.temperature
        att = jax.nn.softmax(logits, axis=1)
        ys, xs = jnp.meshgrid(jnp.linspace(-1.0, 1.0, h), jnp.linspace(-1.0, 1.0, w), indexing="ij")
        pos = jnp.stack([xs.reshape(-1), ys.reshape(-1)], axis=-1)  # (HW, 2)
        kp = jnp.einsum("npk,pd->nkd", att, pos)
        return kp.reshape(n, 2 * self.num_kp)


def max_pool_3x3_s2(x: jax.Array) -> jax.Array:
    """3x3 / stride 2 / pad 1 max pool (N,H,W,C) as a max over 9 strided slices: the same values as
    nn.max_pool, but its gradient is elementwise selects instead of XLA's select-and-scatter, which is ~4x slower
    on CPU (measured: 0.17 vs 0.67 CPU-s for 80 maps of 64x64x64)."""
    ho, wo = (x.shape[1] - 1) // 2 + 1, (x.shape[2] - 1) // 2 + 1
    xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-jnp.inf)
    out = None
    for dy in range(3):
        for dx in range(3):
            s = xp[:, dy:dy + 2 * ho - 1:2, dx:dx + 2 * wo - 1:2]
            out = s if out is None else jnp.maximum(out, s)
    return out


class ResNetT(nn.Module):
    """uint8/float image (N,H,W,3) + language (N,D) -> (N, out_dim)."""

    out_dim: int = 64
    widths: Sequence[int] = (64, 128)
    num_kp: int = 32
    return_map: bool = False

    @nn.compact
    def __call__(self, img: jax.Array, lang: jax.Array) -> jax.Array:
        x = img.astype(jnp.float32)
        if img.dtype == jnp.uint8:
            x = x / 255.0
        w0, w1 = self.widths
        x = nn.Conv(w0, (7, 7), (2, 2), padding=3, use_bias=False, name="conv1")(x)
        x = nn.relu(_norm()(x))
        x = max_pool_3x3_s2(x)
        for i, (feat, stride) in enumerate([(w0, 1), (w0, 1), (w1, 2), (w1, 1)]):
            x = BasicBlock(feat, stride, name=f"block_{i}")(x)
            x = FiLM(name=f"film_{i}")(x, lang)
        if self.return_map:
            return x
        x = SpatialSoftmax(self.num_kp, name="spatial_softmax")(x)
        return nn.Dense(self.out_dim, name="out")(x)


def sinusoidal_time_encoding(t: jax.Array, dim: int, max_period: float = 10000.0) -> jax.Array:
    """t (...,) integer/float positions -> (..., dim) [sin | cos] encoding."""
    half = dim // 2
    freqs = jnp.exp(-jnp.log(max_period) * jnp.arange(half, dtype=jnp.float32) / max(half, 1))
    ang = jnp.asarray(t, jnp.float32)[..., None] * freqs
    enc = jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], axis=-1)
    if dim % 2:
        enc = jnp.concatenate([enc, jnp.zeros(enc.shape[:-1] + (1,), enc.dtype)], axis=-1)
    return enc


def block_causal_mask(seq_len: int, tokens_per_step: int) -> jax.Array:
    """(L, L) bool, L = seq_len * tokens_per_step: query i may attend key j iff step(j) <= step(i)."""
    step = jnp.arange(seq_len * tokens_per_step) // tokens_per_step
    return step[None, :] <= step[:, None]


class DecoderBlock(nn.Module):
    """Pre-LN self-attention + GELU MLP, both residual. Dropout where LIBERO's TransformerDecoder has it: on the
    attention output and on the MLP hidden and output (LIBERO adds per-sample drop-path on the MLP branch: not here)."""

    num_heads: int = 6
    head_dim: int = 64
    mlp_dim: int = 256
    dropout: float = 0.1

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None, train: bool) -> jax.Array:
        d = x.shape[-1]
        inner = self.num_heads * self.head_dim
        h = nn.LayerNorm(name="ln1")(x)
        qkv = nn.Dense(3 * inner, use_bias=False, name="qkv")(h)
        q, k, v = jnp.split(qkv.reshape(*x.shape[:-1], 3 * self.num_heads, self.head_dim), 3, axis=-2)
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(self.head_dim).astype(x.dtype)
        if mask is not None:
            logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
        att = jax.nn.softmax(logits, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(*x.shape[:-1], inner)
        o = nn.Dense(d, name="out")(o)
        x = x + nn.Dropout(self.dropout)(o, deterministic=not train)
        h = nn.LayerNorm(name="ln2")(x)
        h = nn.gelu(nn.Dense(self.mlp_dim, name="mlp_in")(h))
        h = nn.Dropout(self.dropout)(h, deterministic=not train)
        h = nn.Dense(d, name="mlp_out")(h)
        return x + nn.Dropout(self.dropout)(h, deterministic=not train)


def proprio_inputs(obs, lang: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The inputs every policy reads, as float32: (joint_states, gripper_states, language embedding)."""
    f32 = lambda x: jnp.asarray(x).astype(jnp.float32)  # noqa: E731
    return f32(obs["joint_states"]), f32(obs["gripper_states"]), f32(lang)


def with_hand_offset(tokens: jax.Array, ee_pos: jax.Array) -> jax.Array:
    """tokens (..., E, D) + ee_pos (..., 3) -> (..., E, D + 3): each token's position (its first 3 features) minus
    the end effector's, appended (what an eye-in-hand camera would show)."""
    tokens = tokens.astype(jnp.float32)
    return jnp.concatenate([tokens, tokens[..., :3] - ee_pos.astype(jnp.float32)[..., None, :]], -1)


class ObjectTokenEncoder(nn.Module):
    """tokens (..., E, D_in) + mask (..., E) + cond (..., D_c) [+ ee_pos (..., 3)] -> (..., out_dim).

    Each token is embedded with its offset from the end effector (when ee_pos is given: the policy then sees where
    every object is relative to the hand, as an eye-in-hand camera would) and FiLM-modulated by `cond` (the
    instruction and proprioception). pooling="attention": `num_queries` queries computed from `cond` attend over
    the valid tokens, so which objects are read depends on the instruction (one fixed learned query cannot pick the
    object an instruction names); pooling="mean": masked mean. A step with no valid token pools to zero.
    """

    out_dim: int = 64
    hidden_dim: int = 64
    pooling: str = "attention"
    num_queries: int = 4

    @nn.compact
    def __call__(self, tokens: jax.Array, mask: jax.Array, cond: jax.Array,
                 ee_pos: jax.Array | None = None) -> jax.Array:
        mask = mask.astype(bool)
        x = tokens.astype(jnp.float32) if ee_pos is None else with_hand_offset(tokens, ee_pos)
        cond = cond.astype(jnp.float32)
        h = nn.gelu(nn.Dense(self.hidden_dim, name="in")(x))
        # near-identity FiLM at init (not exactly zero: PackNet ranks weights by magnitude)
        gb = nn.Dense(2 * self.hidden_dim, kernel_init=nn.initializers.normal(1e-3), name="film")(cond)
        g, b = jnp.split(gb[..., None, :], 2, axis=-1)
        h = nn.Dense(self.hidden_dim, name="in2")(nn.gelu((1.0 + g) * h + b))
        if self.pooling == "attention":
            nq, d = self.num_queries, self.hidden_dim
            q = nn.Dense(nq * d, name="query")(cond).reshape(*cond.shape[:-1], nq, d)
            k = nn.Dense(d, use_bias=False, name="key")(h)
            logits = jnp.einsum("...ed,...qd->...qe", k, q) / jnp.sqrt(d)
            logits = jnp.where(mask[..., None, :], logits, -1e9)
            w = jax.nn.softmax(logits, axis=-1) * mask[..., None, :]
            pooled = jnp.einsum("...qe,...ed->...qd", w.astype(h.dtype), h).reshape(*h.shape[:-2], nq * d)
        elif self.pooling == "mean":
            w = mask.astype(h.dtype) / jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1)
            pooled = jnp.einsum("...e,...ed->...d", w, h)
        else:
            raise ValueError(f"unknown pooling {self.pooling!r}")
        return nn.Dense(self.out_dim, name="out")(pooled)


class PatchEncoder(nn.Module):
    """uint8/float image (N,H,W,3) -> (N, (H/2/P)*(W/2/P), embed_dim) patch tokens (row-major)."""

    embed_dim: int = 128
    patch_size: int = 8
    stem_width: int = 64

    @nn.compact
    def __call__(self, img: jax.Array) -> jax.Array:
        x = img.astype(jnp.float32)
        if img.dtype == jnp.uint8:
            x = x / 255.0
        x = nn.Conv(self.stem_width, (7, 7), (2, 2), padding=3, use_bias=False, name="conv1")(x)
        x = nn.relu(_norm()(x))
        p = self.patch_size
        x = nn.Conv(self.embed_dim, (p, p), (p, p), padding="VALID", name="proj")(x)
        x = _norm()(x)
        n, h, w, e = x.shape
        return x.reshape(n, h * w, e)


def temporal_decoder(x: jax.Array, *, num_layers: int, num_heads: int, head_dim: int, mlp_dim: int,
                     dropout: float, time_period: float, train: bool) -> jax.Array:
    """(B,T,n,E) step tokens -> (B,T,E): time encoding, block-causal decoder, token 0 of each step.

    Must be called from inside an ``nn.compact`` method (the layers become the caller's submodules)."""
    b, t, n, e = x.shape
    x = x + sinusoidal_time_encoding(jnp.arange(t), e, time_period)[None, :, None, :]
    x = x.reshape(b, t * n, e)
    mask = block_causal_mask(t, n)
    for i in range(num_layers):
        x = DecoderBlock(num_heads, head_dim, mlp_dim, dropout, name=f"layer_{i}")(x, mask, train)
    return x.reshape(b, t, n, e)[:, :, 0]  # no final norm: LIBERO's TransformerDecoder has none
