"""BC-Transformer, BC-RNN and BC-ViLT policies (RGB and STATE observation modes).

Uniform functional interface (params are a plain pytree, so policies jit and
``jax.vmap`` over stacked params)::

    policy = make_bc_transformer(mode="rgb")            # or make_bc_rnn(...), make_bc_vilt(...)
    params = policy.init(key, {"obs": obs_window, "lang": lang})
    dist   = policy.apply(params, obs_window, lang, key, train=False)  # GMMDist (B,T,K,A)
    loss   = policy.loss(params, batch, key, train=True)  # batch: obs, lang, actions

obs_window keys: agentview_rgb / eye_in_hand_rgb (B,T,H,W,3) uint8,
joint_states (B,T,7), gripper_states (B,T,2); STATE mode replaces images with
tokens (B,T,E,D) + token_mask (B,T,E) and adds ee_pos (B,T,3) (world frame, LIBERO's key), from which the
object encoder takes each object's offset from the hand. lang: (B, D_lang) (384 for MiniLM).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from clbench_jax.errors import ObservationError
from clbench_jax.policies.gmm import GMMDist, GMMHead, nll_loss
from clbench_jax.policies.modules import (
    ObjectTokenEncoder,
    ResNetT,
    proprio_inputs,
    temporal_decoder,
)
from clbench_jax.policies.vilt import BCViLTConfig, BCViLTNet

RGB_KEYS = ("agentview_rgb", "eye_in_hand_rgb", "joint_states", "gripper_states")
STATE_KEYS = ("joint_states", "gripper_states", "ee_pos", "tokens", "token_mask")
MODES = ("rgb", "state")


@dataclass(frozen=True)
class BCTransformerConfig:
    mode: str = "rgb"
    action_dim: int = 7
    embed_dim: int = 64
    num_layers: int = 4
    num_heads: int = 6
    head_dim: int = 64
    mlp_dim: int = 256
    dropout: float = 0.1
    seq_len: int = 10
    time_period: float = 10.0  # LIBERO's SinusoidalPositionEncoding inv_freq_factor
    resnet_widths: tuple = (64, 128)
    num_kp: int = 32
    object_pooling: str = "attention"
    object_queries: int = 4
    gmm_hidden: tuple = (1024, 1024, 1024)
    gmm_modes: int = 5
    gmm_min_std: float = 1e-4


@dataclass(frozen=True)
class BCRNNConfig:
    mode: str = "rgb"
    action_dim: int = 7
    image_dim: int = 64
    text_dim: int = 32
    object_dim: int = 64
    rnn_hidden: int = 1024
    rnn_layers: int = 2
    resnet_widths: tuple = (64, 128)
    num_kp: int = 32
    object_pooling: str = "attention"
    object_queries: int = 4
    gmm_hidden: tuple = (1024, 1024, 1024)
    gmm_modes: int = 5
    gmm_min_std: float = 1e-4


def _encode_images(enc: nn.Module, img: jax.Array, lang: jax.Array) -> jax.Array:
    """(B,T,H,W,C) + (B,D) -> (B,T,out) with the per-batch language repeated over T."""
    b, t = img.shape[:2]
    lang_bt = jnp.broadcast_to(lang[:, None, :], (b, t, lang.shape[-1])).reshape(b * t, -1)
    out = enc(img.reshape(b * t, *img.shape[2:]), lang_bt)
    return out.reshape(b, t, -1)


class BCTransformerNet(nn.Module):
    cfg: BCTransformerConfig

    @nn.compact
    def __call__(self, obs: Mapping[str, jax.Array], lang: jax.Array, train: bool = False) -> GMMDist:
        c = self.cfg
        joint, grip, lang = proprio_inputs(obs, lang)
        b, t = joint.shape[:2]
        e = c.embed_dim
        lang_tok = jnp.broadcast_to(nn.Dense(e, name="lang_proj")(lang)[:, None], (b, t, e))
        if c.mode == "rgb":
            toks = [
                lang_tok,
                nn.Dense(e, name="joint_proj")(joint),
                nn.Dense(e, name="gripper_proj")(grip),
                _encode_images(ResNetT(e, c.resnet_widths, c.num_kp, name="agentview_enc"), obs["agentview_rgb"], lang),
                _encode_images(ResNetT(e, c.resnet_widths, c.num_kp, name="eye_in_hand_enc"), obs["eye_in_hand_rgb"], lang),
            ]
        elif c.mode == "state":
            ee = obs["ee_pos"].astype(jnp.float32)
            prop_tok = nn.Dense(e, name="proprio_proj")(jnp.concatenate([joint, grip, ee], -1))
            cond = jnp.concatenate([lang_tok, prop_tok], -1)
            toks = [
                lang_tok,
                prop_tok,
                ObjectTokenEncoder(e, e, c.object_pooling, c.object_queries, name="object_enc")(
                    obs["tokens"], obs["token_mask"], cond, ee),
            ]
        else:
            raise ValueError(f"mode must be one of {MODES}, got {c.mode!r}")
        feat = temporal_decoder(jnp.stack(toks, axis=2), num_layers=c.num_layers, num_heads=c.num_heads,
                                head_dim=c.head_dim, mlp_dim=c.mlp_dim, dropout=c.dropout,
                                time_period=c.time_period, train=train)
        return GMMHead(c.action_dim, c.gmm_hidden, c.gmm_modes, c.gmm_min_std, name="gmm")(feat)


class BCRNNNet(nn.Module):
    cfg: BCRNNConfig

    @nn.compact
    def __call__(self, obs: Mapping[str, jax.Array], lang: jax.Array, train: bool = False) -> GMMDist:
        c = self.cfg
        joint, grip, lang = proprio_inputs(obs, lang)
        b, t = joint.shape[:2]
        text = jnp.broadcast_to(nn.Dense(c.text_dim, name="lang_proj")(lang)[:, None], (b, t, c.text_dim))
        if c.mode == "rgb":
            feats = [
                _encode_images(ResNetT(c.image_dim, c.resnet_widths, c.num_kp, name="agentview_enc"), obs["agentview_rgb"], lang),
                _encode_images(ResNetT(c.image_dim, c.resnet_widths, c.num_kp, name="eye_in_hand_enc"), obs["eye_in_hand_rgb"], lang),
            ]
        elif c.mode == "state":
            ee = obs["ee_pos"].astype(jnp.float32)
            cond = jnp.concatenate([text, joint, grip, ee], -1)
            feats = [ObjectTokenEncoder(c.object_dim, c.object_dim, c.object_pooling, c.object_queries,
                                        name="object_enc")(obs["tokens"], obs["token_mask"], cond, ee)]
        else:
            raise ValueError(f"mode must be one of {MODES}, got {c.mode!r}")
        x = jnp.concatenate(feats + [text, joint, grip], axis=-1)
        for i in range(c.rnn_layers):
            x = nn.RNN(nn.OptimizedLSTMCell(c.rnn_hidden), name=f"lstm_{i}")(x)
        return GMMHead(c.action_dim, c.gmm_hidden, c.gmm_modes, c.gmm_min_std, name="gmm")(x)


def _split_batch(batch: Mapping[str, Any]):
    obs = batch["obs"] if "obs" in batch else batch
    return obs, batch["lang"]


@dataclass(frozen=True)
class Policy:
    """Functional wrapper: params are a plain pytree; see module docstring."""

    net: nn.Module

    @property
    def cfg(self):
        return self.net.cfg

    def _obs(self, obs: Mapping[str, jax.Array]) -> dict:
        keys = RGB_KEYS if self.cfg.mode == "rgb" else STATE_KEYS
        missing = [k for k in keys if k not in obs]
        if missing:
            raise ObservationError(f"{type(self.net).__name__} in {self.cfg.mode} mode needs obs keys {missing}",
                                   field=missing[0])
        return {k: obs[k] for k in keys}

    def init(self, key: jax.Array, example_batch: Mapping[str, Any]):
        obs, lang = _split_batch(example_batch)
        # lazy_init skips the forward pass (only the initializers run): much faster eagerly.
        sds = lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.asarray(x).dtype if not hasattr(x, "dtype") else x.dtype)
        obs_sd = jax.tree_util.tree_map(sds, self._obs(obs))
        return self.net.lazy_init({"params": key}, obs_sd, sds(lang), False)["params"]

    def apply(self, params, obs_window, lang_embedding, key=None, train: bool = False) -> GMMDist:
        rngs = {}
        if train:
            if key is None:
                raise ValueError("train=True needs a PRNG key for dropout")
            rngs = {"dropout": key}
        return self.net.apply({"params": params}, self._obs(obs_window), lang_embedding, train, rngs=rngs)

    def loss(self, params, batch: Mapping[str, Any], key=None, train: bool = True) -> jax.Array:
        """Mean GMM NLL of batch['actions'] (B,T,A); optional batch['mask'] (B,T)."""
        obs, lang = _split_batch(batch)
        dist = self.apply(params, obs, lang, key, train)
        return nll_loss(dist, batch["actions"], batch.get("mask"))


def make_bc_transformer(mode: str = "rgb", **overrides) -> Policy:
    return Policy(BCTransformerNet(dataclasses.replace(BCTransformerConfig(mode=mode), **overrides)))


def make_bc_rnn(mode: str = "rgb", **overrides) -> Policy:
    return Policy(BCRNNNet(dataclasses.replace(BCRNNConfig(mode=mode), **overrides)))


def make_bc_vilt(mode: str = "rgb", **overrides) -> Policy:
    return Policy(BCViLTNet(dataclasses.replace(BCViLTConfig(mode=mode), **overrides)))
