"""TAIL: task-specific adapters for imitation learning (Liu et al., "TAIL: Task-specific Adapters for Imitation
Learning with Large Pretrained Models", ICLR 2024).

Followed from the paper: the pretrained policy stays frozen; every new task trains its own parameter-efficient
adapters, LoRA being the paper's best variant (the LoRA update h = W0 x + B A x, Hu et al. 2022 Eq. 3; A random,
B zero at init); the adapters of a finished task are stored and never trained again, and acting on task j attaches
task j's adapters: the task identity is given at evaluation (the paper's continual setting).

From DMPEL's public re-implementation on LIBERO (kavinwkp/DMPEL: algos/tail.py, models/bc_foundation_tail_policy.py,
configs/policy/bc_foundation_tail_policy.yaml), the default here:
  - LoRA rank 16 on the temporal decoder's q and v, rank 8 on the observation encoders (their CLIP encoders' q, v);
  - the language fusion (FiLM), proprioception encoder and GMM head trained whole per task: here `full` adapters,
    a per-task dense delta on those layers, which is the same function class as a per-task copy;
  - a new task's adapters start from the previous task's plus N(0, 1e-3) noise on every tensor (`init: previous`);
    `init: fresh` starts each task from a new LoRA init (A random, B and deltas zero).
Not here: TAIL's other adapter kinds (bottleneck adapters, prefix tuning); their CLIP encoders (the base is this
project's BC policy).

Parameters: {"base", "adapters": one adapter set per task, leading axis K}. The grad mask trains task t's slot only,
so earlier slots (and the base) stay bit-identical; train_params / eval_params hand the network one slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from clbench_jax.algos.peft import copy_slot, frozen_base, slot_mask
from clbench_jax.algos.protocol import Algorithm
from clbench_jax.errors import ClbenchError
from clbench_jax.policies.adapters import AdaptedPolicy, init_adapters, normalize_spec

DEFAULT_ADAPTERS = (("attn", 16), ("encoder", 8), ("fusion", "full"), ("proprio", "full"), ("head", "full"))


@dataclass(frozen=True)
class TAILPolicy(AdaptedPolicy):
    """params for a forward pass: {"base", "adapter": one task's adapter set} (train_params / eval_params pick
    it); the network's own init parameters act with task 0's."""

    n_tasks: int = 1

    def init_own(self, key, base_params, example_batch):
        return {"adapters": init_adapters(key, self.layout(base_params), (self.n_tasks,))}

    def forward(self, params, obs, lang, key, train):
        adapter = params["adapter"] if "adapter" in params else jax.tree.map(lambda a: a[0], params["adapters"])
        return self.run(params["base"], obs, lang, adapter, key, train), jnp.zeros((), jnp.float32)


def make_tail(adapters=DEFAULT_ADAPTERS, init: str = "previous", noise: float = 1e-3, scale: float = 1.0) -> Algorithm:
    if init not in ("previous", "fresh"):
        raise ClbenchError(f"TAIL init must be 'previous' or 'fresh', got {init!r}", field="algo.init")
    spec = normalize_spec(adapters)

    def network(policy, n_tasks):
        return TAILPolicy(policy, spec, scale, n_tasks)

    def init_state(params, n_tasks):
        return {"task": np.zeros((), np.int32)}

    def grad_mask(params, state):
        return frozen_base(params, adapters=slot_mask(params["adapters"], state["task"]))

    def start_task(params, state, t, ctx=None):
        if t > 0 and init == "previous":
            params = dict(params, adapters=copy_slot(params["adapters"], t, t - 1, ctx.rng, noise))
        return params, {"task": np.asarray(t, np.int32)}

    def select(params, j):
        return {"base": params["base"], "adapter": jax.tree.map(lambda a: a[j], params["adapters"])}

    return Algorithm(name="tail", init=init_state, grad_mask=grad_mask, start_task=start_task,
                     train_params=lambda params, state: select(params, state["task"]),
                     eval_params=lambda params, state, j: select(params, j), network=network,
                     task_specific_eval=True,
                     config={"adapters": [list(e) for e in spec], "init": init, "noise": noise, "scale": scale})
