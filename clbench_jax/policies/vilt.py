"""BC-ViLT (LIBERO's BCViLTPolicy, written from its description and config, sizes as policy/bc_vilt_policy.yaml).

Per time step a *spatial* transformer reads one sequence
``[spatial token, patches of camera 1, patches of camera 2, language token]``
(learned patch-position and modality embeddings added; full attention) and its
spatial-token output, projected 128 -> 64, summarises the step. The *temporal*
part is BC-Transformer's: per step the tokens ``[language, spatial summary,
joint, gripper]``, sinusoidal time encoding, block-causal decoder, token 0 of
each step into the GMM head.

Sizes (LIBERO): patch encoder 7x7/2 conv 64 ch + 8x8/8 conv -> 64 patches per
128 px camera, embed 128; spatial transformer 7 layers, 8 heads of 120, MLP 256,
dropout 0.1; temporal 64-d, 4 layers, 6 heads of 64, MLP 256; GMM 5 modes.

STATE mode: the object tokens (B,T,E,D) replace the image patches -- each valid
token is projected to the spatial width and masked-out tokens are hidden from
attention (keys), so the spatial transformer pools a variable set of objects.

Parameter count equals LIBERO's BCViLTPolicy built with the same sizes
(tests/test_policies.py). Deviations: GroupNorm instead of BatchNorm in the
patch encoder (same parameters, but stateless, so params vmap); dropout on
residual branches instead of LIBERO's per-sample drop-path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from clbench_jax.policies.gmm import GMMDist, GMMHead
from clbench_jax.policies.modules import DecoderBlock, PatchEncoder, proprio_inputs, temporal_decoder, with_hand_offset

CAMERAS = ("agentview_rgb", "eye_in_hand_rgb")


@dataclass(frozen=True)
class BCViLTConfig:
    mode: str = "rgb"
    action_dim: int = 7
    embed_dim: int = 128            # spatial width (LIBERO embed_size)
    patch_size: int = 8
    stem_width: int = 64
    spatial_layers: int = 7
    spatial_heads: int = 8
    spatial_head_dim: int = 120
    spatial_mlp_dim: int = 256
    temporal_dim: int = 64          # spatial_down_sample_embed_size
    num_layers: int = 4
    num_heads: int = 6
    head_dim: int = 64
    mlp_dim: int = 256
    dropout: float = 0.1
    seq_len: int = 10
    time_period: float = 10.0
    gmm_hidden: tuple = (1024, 1024, 1024)
    gmm_modes: int = 5
    gmm_min_std: float = 1e-4


_init = nn.initializers.normal(1.0)  # LIBERO draws these embeddings with torch.randn


class BCViLTNet(nn.Module):
    cfg: BCViLTConfig

    def _spatial_tokens(self, obs, b, t):
        """-> ((B*T, N, E) tokens, (B*T, N) valid mask or None, modality id per token)."""
        c = self.cfg
        e = c.embed_dim
        if c.mode == "rgb":
            toks, ids = [], []
            for i, cam in enumerate(CAMERAS):
                img = obs[cam]
                p = PatchEncoder(e, c.patch_size, c.stem_width, name=f"{cam.removesuffix('_rgb')}_patches")(
                    img.reshape(b * t, *img.shape[2:]))
                toks.append(p)
                ids += [i] * p.shape[1]
            x = jnp.concatenate(toks, axis=1)
            x = x + self.param("patch_pos_embed", _init, (x.shape[1], e))
            return x, None, ids
        if c.mode == "state":
            tok = with_hand_offset(obs["tokens"], obs["ee_pos"])
            tok = tok.reshape(b * t, *tok.shape[2:])
            x = nn.Dense(e, name="object_proj")(nn.gelu(nn.Dense(e, name="object_in")(tok)))
            return x, obs["token_mask"].astype(bool).reshape(b * t, -1), [0] * x.shape[1]
        raise ValueError(f"mode must be 'rgb' or 'state', got {c.mode!r}")

    @nn.compact
    def __call__(self, obs: Mapping[str, jax.Array], lang: jax.Array, train: bool = False) -> GMMDist:
        c = self.cfg
        joint, grip, lang = proprio_inputs(obs, lang)
        b, t = joint.shape[:2]
        e, d = c.embed_dim, c.temporal_dim

        # --- spatial: [summary, patches/objects..., language] per step, full attention
        x, valid, ids = self._spatial_tokens(obs, b, t)
        text = nn.Dense(e, name="lang_spatial")(lang)  # (B,E)
        text = jnp.broadcast_to(text[:, None, None], (b, t, 1, e)).reshape(b * t, 1, e)
        x = jnp.concatenate([x, text], axis=1)
        modality = self.param("modality_embed", _init, (max(ids) + 2, e))
        x = x + modality[jnp.asarray(ids + [max(ids) + 1])]
        summary = jnp.broadcast_to(self.param("spatial_token", _init, (e,)), (b * t, 1, e))
        x = jnp.concatenate([summary, x], axis=1)
        mask = None
        if valid is not None:  # summary and language always visible; padded objects never
            ones = jnp.ones((b * t, 1), bool)
            mask = jnp.concatenate([ones, valid, ones], axis=1)[:, None, None, :]
        for i in range(c.spatial_layers):
            x = DecoderBlock(c.spatial_heads, c.spatial_head_dim, c.spatial_mlp_dim, c.dropout,
                             name=f"spatial_{i}")(x, mask, train)
        step = nn.Dense(d, name="spatial_down")(x[:, 0]).reshape(b, t, d)

        # --- temporal: [language, spatial summary, joint, gripper] per step, as BC-Transformer
        toks = jnp.stack([
            jnp.broadcast_to(nn.Dense(d, name="lang_temporal")(lang)[:, None], (b, t, d)),
            step,
            nn.Dense(d, name="joint_proj")(joint),
            nn.Dense(d, name="gripper_proj")(grip),
        ], axis=2)
        feat = temporal_decoder(toks, num_layers=c.num_layers, num_heads=c.num_heads, head_dim=c.head_dim,
                                mlp_dim=c.mlp_dim, dropout=c.dropout, time_period=c.time_period, train=train)
        return GMMHead(c.action_dim, c.gmm_hidden, c.gmm_modes, c.gmm_min_std, name="gmm")(feat)
