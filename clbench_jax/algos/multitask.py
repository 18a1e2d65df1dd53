"""Multitask learning (LIBERO's `Multitask`, the upper bound): one stage over every task's demonstrations at once.

The loop trains a single stage on the concatenated datasets, selects the checkpoint by mean success over all tasks
and evaluates every task once: the success matrix has one row.

With `adapters` (e.g. [[attn, 32], [fusion, 32], [encoder, full]]) the stage is a parameter-efficient update of a
frozen base (`pretrained:`): one LoRA / full-delta adapter set shared by every task trains, the base stays
bit-identical. This is seed 004's repair step: a rank-32 update of a base trained on confounded demonstrations,
on deconfounded ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp

from clbench_jax.algos.peft import frozen_base
from clbench_jax.algos.protocol import Algorithm
from clbench_jax.policies.adapters import AdaptedPolicy, freeze_mask, init_adapters, normalize_spec


@dataclass(frozen=True)
class SharedAdapterPolicy(AdaptedPolicy):
    """The frozen base with one adapter set for every input: params {"base", "adapter"}."""

    def init_own(self, key, base_params, example_batch):
        return {"adapter": init_adapters(key, self.layout(base_params))}

    def forward(self, params, obs, lang, key, train):
        return self.run(params["base"], obs, lang, params["adapter"], key, train), jnp.zeros((), jnp.float32)


def make_multitask(adapters=None, scale: float = 1.0) -> Algorithm:
    if adapters is None:
        return Algorithm(name="multitask", joint=True)
    spec = normalize_spec(adapters)
    return Algorithm(name="multitask", joint=True,
                     network=lambda policy, n_tasks: SharedAdapterPolicy(policy, spec, scale),
                     grad_mask=lambda params, state: frozen_base(params, adapter=freeze_mask(params["adapter"], True)),
                     config={"adapters": [list(e) for e in spec], "scale": scale})
