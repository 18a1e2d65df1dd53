"""IsCiL: incremental learning of retrievable skills (Lee et al., "Incremental Learning of Retrievable Skills For
Efficient Continual Task Adaptation", NeurIPS 2024), with LIBERO's choices from DMPEL's public re-implementation
(kavinwkp/DMPEL: algos/iscil.py, models/bc_foundation_iscil_policy.py, configs/policy/adapter/iscillora.yaml).

What is computed (K tasks, each task one skill as in the re-implementation; b a sample):
    state embedding  z_b = [instruction embedding ; mean over the window's steps of the frozen base's features]
    prototypes       task k's "multifacet prototype": n_bases k-means centres (default 20) of z over task k's
                     windows, computed when the task starts, from the frozen base (so never stale)
    retrieval        s_bk = (max_m cos(z_b, p_km) + 1) / 2 over the tasks seen so far; k*_b = argmax_k s_bk
    forward          the frozen base with skill adapter k*_b attached
    new skill        task t's adapter starts as a copy of the adapter its windows retrieve most among tasks < t
                     (task 0: a fresh LoRA init); only task t's adapter trains, earlier adapters are frozen
No task identity at evaluation: acting retrieves among every task seen so far. Defaults: LoRA rank 8 on every
attention's q, v and on the observation encoders; the fusion, proprioception encoder and GMM head as full per-skill
deltas (the re-implementation's per-skill copies of those layers, initialised from the base's weights = a zero
delta); loss: the BC NLL alone.

Differs from the paper: the paper segments demonstrations into sub-goal skills and keeps several prototypes per
skill from a learned state encoder; here (as the re-implementation) one skill per task and the frozen base's own
features embed the state. The retrieval for the new skill's initialisation is restricted to earlier tasks (the
re-implementation also scores the new task's still-empty prototype).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from clbench_jax.algos.peft import copy_slot, frozen_base, jitted, slot_mask, stage_pass
from clbench_jax.algos.protocol import Algorithm
from clbench_jax.errors import ClbenchError
from clbench_jax.policies.adapters import AdaptedPolicy, freeze_mask, gather, init_adapters, normalize_spec, step_mean

DEFAULT_ADAPTERS = (("attn", 8), ("encoder", 8), ("fusion", "full"), ("proprio", "full"), ("head", "full"))


def _unit(x):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def kmeans(x: np.ndarray, k: int, rng: np.random.Generator, n_init: int = 10, iters: int = 100) -> np.ndarray:
    """k centres of x (N, D) by Lloyd's algorithm from k-means++ seeds, best of n_init (lowest inertia), as
    scikit-learn's KMeans(n_init=10) that the re-implementation calls. Fewer points than k: the points, repeated."""
    x = np.asarray(x, np.float64)
    if len(x) <= k:
        return x[np.arange(k) % len(x)].astype(np.float32)
    best, best_inertia = None, np.inf
    sq = (x * x).sum(1)
    for _ in range(n_init):
        c = [x[rng.integers(len(x))]]
        d2 = np.maximum(sq - 2 * x @ c[0] + c[0] @ c[0], 0)
        for _ in range(1, k):
            c.append(x[rng.choice(len(x), p=d2 / d2.sum())] if d2.sum() > 0 else x[rng.integers(len(x))])
            d2 = np.minimum(d2, np.maximum(sq - 2 * x @ c[-1] + c[-1] @ c[-1], 0))
        c = np.stack(c)
        for _ in range(iters):
            dist = sq[:, None] - 2 * x @ c.T + (c * c).sum(1)[None]
            lab = dist.argmin(1)
            new = np.stack([x[lab == j].mean(0) if (lab == j).any() else c[j] for j in range(k)])
            if np.allclose(new, c):
                break
            c = new
        inertia = np.maximum(dist[np.arange(len(x)), lab], 0).sum()
        if inertia < best_inertia:
            best, best_inertia = c, inertia
    return best.astype(np.float32)


@dataclass(frozen=True)
class IsCiLPolicy(AdaptedPolicy):
    """params: {"base", "adapters": K adapter sets, "prototypes": (K, n_bases, D)}; a forward pass also reads
    "visible" (K,) bool, the tasks retrieval may pick (added by train_params / eval_params; all when absent)."""

    n_tasks: int = 1
    n_bases: int = 20

    def query(self, params, obs, lang):
        """The state embedding z: [instruction ; step-mean of frozen features] (B, D)."""
        feat = step_mean(self.features(params["base"], obs, lang), obs)
        return jnp.concatenate([lang.astype(jnp.float32), feat], -1)

    def init_own(self, key, base_params, example_batch):
        d = self.query_dim(base_params, example_batch)
        return {"adapters": init_adapters(key, self.layout(base_params), (self.n_tasks,)),
                "prototypes": jnp.zeros((self.n_tasks, self.n_bases, d), jnp.float32)}

    def retrieve(self, params, obs, lang):
        """-> the skill (task) each sample retrieves among the visible ones (B,)."""
        z = _unit(self.query(params, obs, lang))
        sim = jnp.einsum("bd,kmd->bkm", z, _unit(params["prototypes"])).max(-1)
        visible = params.get("visible", jnp.ones(sim.shape[-1], bool))
        return jnp.argmax(jnp.where(visible, (sim + 1.0) / 2.0, -jnp.inf), axis=-1)

    def forward(self, params, obs, lang, key, train):
        idx = self.retrieve(params, obs, lang)
        dist = self.run(params["base"], obs, lang, gather(params["adapters"], idx), key, train)
        return dist, jnp.zeros((), jnp.float32)


def make_iscil(n_bases: int = 20, adapters=DEFAULT_ADAPTERS, kmeans_init: int = 10, scale: float = 1.0) -> Algorithm:
    if n_bases < 1:
        raise ClbenchError(f"IsCiL n_bases must be >= 1, got {n_bases}", field="algo.n_bases")
    spec = normalize_spec(adapters)

    def network(policy, n_tasks):
        return IsCiLPolicy(policy, spec, scale, n_tasks, n_bases)

    def init_state(params, n_tasks):
        return {"task": np.zeros((), np.int32)}

    def visible(params, t):
        return dict(params, visible=jnp.arange(params["prototypes"].shape[0]) <= t)

    def grad_mask(params, state):
        return frozen_base(params, adapters=slot_mask(params["adapters"], state["task"]),
                           prototypes=freeze_mask(params["prototypes"]))

    def start_task(params, state, t, ctx):
        net = ctx.policy
        z = stage_pass(ctx, jitted(net, "query"), params)
        if t > 0:  # the new skill starts from the earlier skill this task's windows retrieve most
            zn = z / np.maximum(np.linalg.norm(z, axis=-1, keepdims=True), 1e-12)
            p = np.asarray(params["prototypes"][:t])
            pn = p / np.maximum(np.linalg.norm(p, axis=-1, keepdims=True), 1e-12)
            src = int(np.bincount(np.einsum("bd,kmd->bkm", zn, pn).max(-1).argmax(-1), minlength=t).argmax())
            params = dict(params, adapters=copy_slot(params["adapters"], t, src))
            ctx.log["init_from"] = src
        protos = kmeans(z, n_bases, ctx.rng, n_init=kmeans_init)
        params = dict(params, prototypes=params["prototypes"].at[t].set(protos))
        return params, {"task": np.asarray(t, np.int32)}

    return Algorithm(name="iscil", init=init_state, grad_mask=grad_mask, start_task=start_task,
                     train_params=lambda params, state: visible(params, state["task"]),
                     eval_params=lambda params, state, j: visible(params, state["task"]),
                     network=network,
                     config={"n_bases": n_bases, "adapters": [list(e) for e in spec], "kmeans_init": kmeans_init,
                             "scale": scale})
