"""Lifelong-imitation policies: GMM head, ResNet-T / patch / transformer modules, BC-Transformer, BC-RNN, BC-ViLT;
image augmentation (augment.py)."""

from clbench_jax.policies.bc import (
    BCRNNConfig,
    BCTransformerConfig,
    Policy,
    make_bc_rnn,
    make_bc_transformer,
    make_bc_vilt,
)
from clbench_jax.policies.vilt import BCViLTConfig
from clbench_jax.policies.gmm import GMMDist, GMMHead, log_prob, mode, nll_loss, sample

__all__ = [
    "BCRNNConfig",
    "BCTransformerConfig",
    "BCViLTConfig",
    "Policy",
    "make_bc_rnn",
    "make_bc_transformer",
    "make_bc_vilt",
    "GMMDist",
    "GMMHead",
    "log_prob",
    "mode",
    "nll_loss",
    "sample",
]
