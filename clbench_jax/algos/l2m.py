"""L2M: Learning to Modulate pre-trained models (Schmied et al., "Learning to Modulate pre-trained Models in RL",
NeurIPS 2023), with LIBERO's choices from DMPEL's public re-implementation (kavinwkp/DMPEL:
models/bc_foundation_l2m_policy.py, configs/policy/adapter/l2mlora.yaml) and the authors' code (ml-jku/L2M:
src/algos/prompt/l2p.py, l2m.py) for the key matching, which L2M takes from L2P (Wang et al., CVPR 2022).

What is computed (per training window or acting window; b a sample, P the pool size):
    query      q_b = mean over the window's steps of the frozen base's features (the input of its GMM head)
    matching   s_bi = cos(q_b, k_i);  while training from the second task on, s_bi <- (s_bi + 1) / 2 * w_i with
               w = normalize(1 / (c + 1e-6)), c the keys' selection frequencies so far (L2P's usage penalty)
    retrieval  i*_b = argmax_i s_bi  (top-1)
    forward    the frozen base with modulator i*_b's LoRA attached: W0 x + B_i* A_i* x
    loss       NLL - 0.5 * mean_b cos(q_b, k_{i*_b})   (the "pull constraint" drawing keys to their queries)
Keys and modulators train on every task (no task boundary inside the method: it is task-agnostic); the base is
frozen. Defaults (LIBERO_FACTS / the re-implementation): 30 modulators, LoRA rank 8 on every attention's q and v and
on the observation encoders (the re-implementation's CLIP q, v), keys U(-1, 1), pull coefficient 0.5, LoRA scale 1.

Deviation: the selection frequencies c are counted once per task, over one pass of the task's windows with its
final keys (running mean over batches, as the authors' add_counts), rather than after every training step: the
protocol's jitted step keeps no running statistics. As in the authors' code, the penalty for task t uses the counts
of the tasks before it (their set_task_id refreshes the weights at a task's start).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from clbench_jax.algos.peft import frozen_base, jitted
from clbench_jax.algos.protocol import Algorithm
from clbench_jax.errors import ClbenchError
from clbench_jax.policies.adapters import AdaptedPolicy, freeze_mask, gather, init_adapters, normalize_spec, step_mean

DEFAULT_ADAPTERS = (("attn", 8), ("encoder", 8))


def _unit(x):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


@dataclass(frozen=True)
class L2MPolicy(AdaptedPolicy):
    """params: {"base", "keys": (P, E), "pool": P adapter sets}; training adds "usage" (P,) (the penalty weights)."""

    pool_size: int = 30
    pull: float = 0.5

    def query(self, params, obs, lang):
        """q: the step-mean of the frozen base's features (B, E)."""
        return step_mean(self.features(params["base"], obs, lang), obs)

    def init_own(self, key, base_params, example_batch):
        k_keys, k_pool = jax.random.split(key)
        e = self.query_dim(base_params, example_batch)
        return {"keys": jax.random.uniform(k_keys, (self.pool_size, e), jnp.float32, -1.0, 1.0),
                "pool": init_adapters(k_pool, self.layout(base_params), (self.pool_size,))}

    def match(self, params, obs, lang):
        """-> (selected modulator per sample (B,), the pull term mean_b cos(q_b, k_sel))."""
        q = _unit(self.query(params, obs, lang))
        k = _unit(params["keys"])
        sim = q @ k.T
        score = sim if "usage" not in params else (sim + 1.0) / 2.0 * params["usage"]
        idx = jnp.argmax(score, axis=-1)
        return idx, jnp.mean(jnp.sum(q * k[idx], axis=-1))

    def forward(self, params, obs, lang, key, train):
        idx, pull = self.match(params, obs, lang)
        dist = self.run(params["base"], obs, lang, gather(params["pool"], idx), key, train)
        return dist, -self.pull * pull

    def selection(self, params, obs, lang):
        return self.match(params, obs, lang)[0]


def make_l2m(pool_size: int = 30, adapters=DEFAULT_ADAPTERS, pull: float = 0.5, count_penalty: bool = True,
             scale: float = 1.0) -> Algorithm:
    if pool_size < 1:
        raise ClbenchError(f"L2M pool_size must be >= 1, got {pool_size}", field="algo.pool_size")
    spec = normalize_spec(adapters)

    def network(policy, n_tasks):
        return L2MPolicy(policy, spec, scale, pool_size, pull)

    def init_state(params, n_tasks):
        return {"counts": np.zeros(pool_size, np.float32), "n": np.zeros((), np.float32),
                "task": np.zeros((), np.int32)}

    def usage(state):
        if not count_penalty:
            return jnp.ones(pool_size)
        inv = 1.0 / (jnp.asarray(state["counts"]) + 1e-6)
        return jnp.where((state["task"] > 0) & (state["n"] > 0), inv / jnp.sum(inv), jnp.ones(pool_size))

    def grad_mask(params, state):
        return frozen_base(params, keys=freeze_mask(params["keys"], True), pool=freeze_mask(params["pool"], True))

    def start_task(params, state, t, ctx=None):
        return params, dict(state, task=np.asarray(t, np.int32))

    def end_task(params, state, t, ctx):
        net = ctx.policy
        select = jitted(net, "selection")
        full = dict(params, usage=usage(state))
        counts, n = np.asarray(state["counts"], np.float64), float(state["n"])
        for b in ctx.batches(ctx.rng):  # running mean over batches of each key's share of the batch (L2P's counts)
            idx = np.asarray(select(full, b["obs"], b["lang"]))
            n += 1
            counts += (np.bincount(idx, minlength=pool_size) / len(idx) - counts) / n
        ctx.log["keys_used"] = int((counts > 0).sum())
        return params, {"counts": counts.astype(np.float32), "n": np.asarray(n, np.float32),
                        "task": np.asarray(t, np.int32)}

    return Algorithm(name="l2m", init=init_state, grad_mask=grad_mask, start_task=start_task, end_task=end_task,
                     train_params=lambda params, state: dict(params, usage=usage(state)),
                     network=network,
                     config={"pool_size": pool_size, "adapters": [list(e) for e in spec], "pull": pull,
                             "count_penalty": count_penalty, "scale": scale})

