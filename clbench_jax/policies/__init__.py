"""Lifelong-imitation policies: GMM head, ResNet-T / transformer modules, BC-Transformer and BC-RNN."""

from clbench_jax.policies.bc import (
    BCRNNConfig,
    BCTransformerConfig,
    Policy,
    make_bc_rnn,
    make_bc_transformer,
)
from clbench_jax.policies.gmm import GMMDist, GMMHead, log_prob, mode, nll_loss, sample

__all__ = [
    "BCRNNConfig",
    "BCTransformerConfig",
    "Policy",
    "make_bc_rnn",
    "make_bc_transformer",
    "GMMDist",
    "GMMHead",
    "log_prob",
    "mode",
    "nll_loss",
    "sample",
]
