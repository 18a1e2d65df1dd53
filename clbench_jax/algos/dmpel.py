"""DMPEL: dynamic mixture of progressive parameter-efficient experts (Lei et al., "Dynamic Mixture of Progressive
Parameter-Efficient Expert Library for Lifelong Robot Learning", arXiv 2506.05985, 2025), following the authors'
public re-implementation on LIBERO (kavinwkp/DMPEL: algos/dmpel.py, models/bc_foundation_dmpel_policy.py,
models/modules/adapter.py, configs/policy/bc_foundation_dmpel_policy.yaml, configs/lifelong/dmpel.yaml).

What is computed (E experts in the library so far, G coefficient groups, b a sample):
    query        q_b = [instruction embedding ; step-mean of the frozen base's features ; step-mean of joint and
                 gripper states]
    router       c_b = 2 * sigmoid(MLP(q_b)) in (0, 2)^(G x E_max) (two hidden layers of 256, tanh-GELU), experts
                 not yet in the library masked, the top-k (3) kept per group, the rest 0; during training each
                 coefficient is dropped with p = 0.15 (inverted dropout)
    mixture      per adapted layer of group g: A_b = sum_e c_bge A_e, B_b = sum_e c_bge B_e and the layer adds
                 x A_b B_b (merge "weight", the re-implementation's default); merge "output" adds
                 sum_e c_bge x A_e B_e instead
    library      every task adds one expert (LoRA rank 16, rank 8 on the encoders): its A orthogonal to the
                 earlier experts' A (flattened, unit norm), B = 0; earlier experts are frozen; the router is
                 re-initialised (output bias so every coefficient starts at 1 / min(k, E)) and trains with the
                 new expert
    coefficient  after task t, the top-k coefficients of the task's windows are stored; from the second task on,
    replay       the router is retrained for 10 epochs on all stored (query, coefficients) pairs (MSE between the
                 router's top-k coefficient vector and the stored one; AdamW lr 1e-3, wd 1e-2, clip 100; the epoch
                 with the lowest mean loss is kept)
No task identity at evaluation. The stored pairs are (stage, window) indices plus coefficients; the queries are
recomputed from the frozen base when the router is retrained (they are a function of the frozen base and the
window only, so they equal the queries at storing time).

Differs from the re-implementation: their six coefficient groups are fixed module families (CLIP image and text
encoders, proprio encoder, fusion, temporal decoder, head); here each adapter-spec entry is a group. Layers narrower
than the LoRA rank (the GMM logits, proprioception inputs) take full deltas, which a LoRA of rank >= the width equals.
At most `replay_per_task` windows per task are stored (the re-implementation stores all: sample ratio 1.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
import optax

from clbench_jax.algos.peft import frozen_base, jitted, slot_mask
from clbench_jax.algos.protocol import Algorithm
from clbench_jax.errors import ClbenchError
from clbench_jax.policies.adapters import (AdaptedPolicy, build, freeze_mask, get_leaf, init_adapters,
                                           normalize_spec, step_mean)

DEFAULT_ADAPTERS = (("gmm/logits", "full"), ("proprio", "full"), ("attn", 16), ("encoder", 8), ("fusion", 16),
                    ("head", 16))


def router_init(key, d_in: int, hidden: int, d_out: int, n_active: int, topk: int) -> dict:
    """torch-Linear-initialised MLP whose output bias makes every coefficient 2 * sigmoid(b) = 1 / min(k, E)."""
    ks = jax.random.split(key, 6)
    sizes = [(d_in, hidden), (hidden, hidden), (hidden, d_out)]
    out = {}
    for i, (a, b) in enumerate(sizes):
        bound = 1.0 / np.sqrt(a)
        out[f"l{i}"] = {"kernel": jax.random.uniform(ks[2 * i], (a, b), jnp.float32, -bound, bound),
                        "bias": jax.random.uniform(ks[2 * i + 1], (b,), jnp.float32, -bound, bound)}
    p = 0.5 / max(min(topk, n_active), 1)
    out["l2"]["bias"] = jnp.full((d_out,), np.log(p / (1 - p)), jnp.float32)
    return out


def route(router: dict, q: jax.Array, n_experts, groups: int, topk: int) -> jax.Array:
    """Dense top-k coefficients (B, G, E_max): 2 sigmoid(MLP(q)), experts >= n_experts masked, top-k per group."""
    h = jax.nn.gelu(q @ router["l0"]["kernel"] + router["l0"]["bias"], approximate=True)
    h = jax.nn.gelu(h @ router["l1"]["kernel"] + router["l1"]["bias"], approximate=True)
    c = 2.0 * jax.nn.sigmoid(h @ router["l2"]["kernel"] + router["l2"]["bias"])
    c = c.reshape(q.shape[0], groups, -1)
    e = c.shape[-1]
    c = jnp.where(jnp.arange(e) < n_experts, c, -jnp.inf)
    vals, ids = jax.lax.top_k(c, min(topk, e))
    vals = jnp.where(jnp.isfinite(vals), vals, 0.0)
    return jnp.einsum("bgk,bgke->bge", vals, jax.nn.one_hot(ids, e, dtype=vals.dtype))


@lru_cache(maxsize=None)
def _recall_step(groups: int, topk: int, lr: float, weight_decay: float):
    """(optimizer, jitted step) of coefficient replay: AdamW (clip 100) on the MSE between the router's dense top-k
    coefficients and the stored ones."""
    opt = optax.chain(optax.clip_by_global_norm(100.0), optax.adamw(lr, weight_decay=weight_decay))

    @jax.jit
    def step(router, o, q, target, n_experts):
        loss, g = jax.value_and_grad(lambda r: jnp.mean((route(r, q, n_experts, groups, topk) - target) ** 2))(router)
        u, o = opt.update(g, o, router)
        return optax.apply_updates(router, u), o, loss

    return opt, step


def orthogonal_to(existing: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A unit vector orthogonal to the rows of `existing` (n, m) (random when n == 0 or no complement is left)."""
    v = rng.standard_normal(existing.shape[1])
    if len(existing):
        q, _ = np.linalg.qr(existing.T.astype(np.float64))
        w = v - q @ (q.T @ v)
        v = w if np.linalg.norm(w) > 1e-12 else v
    return v / np.linalg.norm(v)


@dataclass(frozen=True)
class DMPELPolicy(AdaptedPolicy):
    """params: {"base", "experts": E_max adapter sets, "router": MLP}; a forward pass also reads "n_experts" (the
    library's size, added by train_params / eval_params; the whole library when absent)."""

    max_experts: int = 1
    topk: int = 3
    hidden: int = 256
    merge: str = "weight"
    coeff_dropout: float = 0.15

    @property
    def groups(self) -> int:
        return len(self.adapters)

    def query(self, params, obs, lang):
        feats = [lang.astype(jnp.float32), step_mean(self.features(params["base"], obs, lang), obs)]
        feats += [step_mean(obs[k].astype(jnp.float32), obs) for k in ("joint_states", "gripper_states")]
        return jnp.concatenate(feats, -1)

    def init_own(self, key, base_params, example_batch):
        d = self.query_dim(base_params, example_batch)
        k_exp, k_router = jax.random.split(key)
        return {"experts": init_adapters(k_exp, self.layout(base_params), (self.max_experts,)),
                "router": router_init(k_router, d, self.hidden, self.groups * self.max_experts, 1, self.topk)}

    def coefficients(self, params, obs, lang):
        """The router's dense top-k coefficients (B, G, E_max), evaluation mode (no dropout)."""
        n = params.get("n_experts", self.max_experts)
        return route(params["router"], self.query(params, obs, lang), n, self.groups, self.topk)

    def mixture(self, layout, experts, c):
        def one(layer):
            leaf, cg = get_leaf(experts, layer), c[:, layer.group]
            if "A" in leaf and self.merge == "output":  # sum_e c_e x A_e B_e as one rank-(E r) adapter per sample
                a = jnp.einsum("be,edr->bder", cg, leaf["A"])
                a = a.reshape(a.shape[0], a.shape[1], -1)
                b = jnp.broadcast_to(leaf["B"].reshape(-1, leaf["B"].shape[-1]), (cg.shape[0],) +
                                     (leaf["B"].shape[0] * leaf["B"].shape[1], leaf["B"].shape[-1]))
                return {"A": a, "B": b}
            return jax.tree.map(lambda x: jnp.tensordot(cg, x, axes=1), leaf)
        return build(layout, one)

    def forward(self, params, obs, lang, key, train):
        c = self.coefficients(params, obs, lang)
        if train and self.coeff_dropout > 0 and key is not None:
            key, k_drop = jax.random.split(key)
            keep = jax.random.bernoulli(k_drop, 1.0 - self.coeff_dropout, c.shape)
            c = jnp.where(keep, c / (1.0 - self.coeff_dropout), 0.0)
        adapters = self.mixture(self.layout(params["base"]), params["experts"], c)
        return self.run(params["base"], obs, lang, adapters, key, train), jnp.zeros((), jnp.float32)


def make_dmpel(adapters=DEFAULT_ADAPTERS, topk: int = 3, hidden: int = 256, experts_per_task: int = 1,
               merge: str = "weight", coeff_dropout: float = 0.15, expert_init: str = "ortho",
               recall_epochs: int = 10, recall_lr: float = 1e-3, recall_weight_decay: float = 1e-2,
               recall_batch: int = 32, replay_per_task: int = 10000, scale: float = 1.0) -> Algorithm:
    for name, ok in (("merge", merge in ("weight", "output")), ("expert_init", expert_init in ("ortho", "random")),
                     ("topk", topk >= 1), ("experts_per_task", experts_per_task >= 1),
                     ("replay_per_task", replay_per_task >= 1), ("recall_epochs", recall_epochs >= 0)):
        if not ok:
            raise ClbenchError(f"bad DMPEL {name}", field=f"algo.{name}")
    spec = normalize_spec(adapters)
    groups = len(spec)

    def network(policy, n_tasks):
        return DMPELPolicy(policy, spec, scale, n_tasks * experts_per_task, topk, hidden, merge, coeff_dropout)

    def init_state(params, n_tasks):
        e = jax.tree.leaves(params["experts"])[0].shape[0]
        cap = n_tasks * replay_per_task
        return {"n_experts": np.zeros((), np.int32), "task": np.zeros((), np.int32),
                "stage": np.full(cap, -1, np.int32), "window": np.zeros(cap, np.int32),
                "coeff": np.zeros((cap, groups, e), np.float32), "size": np.zeros((), np.int32)}

    def with_count(params, state):
        return dict(params, n_experts=jnp.asarray(state["n_experts"]))

    def grad_mask(params, state):
        n = state["n_experts"]
        return frozen_base(params, experts=slot_mask(params["experts"], n - experts_per_task, n),
                           router=freeze_mask(params["router"], True))

    def start_task(params, state, t, ctx):
        n = int(state["n_experts"])
        new = n + experts_per_task
        if new > jax.tree.leaves(params["experts"])[0].shape[0]:
            raise ClbenchError(f"DMPEL's library is full ({n} experts)", field=f"stage {t}")

        def grow(path, a):
            a = np.array(a)
            if path[-1].key != "A" or expert_init != "ortho":
                return jnp.asarray(a)
            for slot in range(n, new):
                if slot > 0:  # the first expert keeps its random LoRA init
                    flat = a[:slot].reshape(slot, -1)
                    a[slot] = orthogonal_to(flat, ctx.rng).reshape(a.shape[1:])
            return jnp.asarray(a)

        experts = jax.tree_util.tree_map_with_path(grow, params["experts"])
        d_in = params["router"]["l0"]["kernel"].shape[0]
        d_out = params["router"]["l2"]["kernel"].shape[1]
        router = router_init(ctx.key, d_in, hidden, d_out, new, topk)
        ctx.log["n_experts"] = new
        return dict(params, experts=experts, router=router), dict(state, n_experts=np.asarray(new, np.int32),
                                                                  task=np.asarray(t, np.int32))

    def batched(ctx, fn, params, pairs, chunk=256):
        """fn(params, obs, lang) over the windows `pairs` (one stage each chunk, fixed chunk shape)."""
        out = []
        for s in np.unique(pairs[:, 0]):
            ps = pairs[pairs[:, 0] == s]
            for i in range(0, len(ps), chunk):
                part = ps[i:i + chunk]
                padded = np.concatenate([part, np.repeat(part[-1:], chunk - len(part), 0)])
                b = ctx.gather(padded)
                out.append(np.asarray(fn(params, b["obs"], b["lang"]))[:len(part)])
        return np.concatenate(out)

    def end_task(params, state, t, ctx):
        net = ctx.policy
        full = with_count(params, state)
        n = min(ctx.n_windows, replay_per_task)
        w = np.arange(n) if n == ctx.n_windows else np.sort(ctx.rng.choice(ctx.n_windows, n, replace=False))
        pairs = np.stack([np.full(n, t), w], 1).astype(np.int32)
        size = int(state["size"])
        stage, window, coeff = np.array(state["stage"]), np.array(state["window"]), np.array(state["coeff"])
        stage[size:size + n], window[size:size + n] = pairs[:, 0], pairs[:, 1]
        coeff[size:size + n] = batched(ctx, jitted(net, "coefficients"), full, pairs)
        size += n
        state = dict(state, stage=stage, window=window, coeff=coeff, size=np.asarray(size, np.int32))
        ctx.log["replay_stored"] = size
        if t > 0 and recall_epochs > 0:
            q = batched(ctx, jitted(net, "query"), full, np.stack([stage[:size], window[:size]], 1))
            router, losses = recall(params["router"], q, coeff[:size], int(state["n_experts"]), ctx.rng)
            params = dict(params, router=router)
            ctx.log["recall_losses"] = losses
        return params, state

    def recall(router, q, target, n_experts, rng):
        """Coefficient replay: the router fitted to the stored coefficients; the best epoch's router is kept."""
        opt, step = _recall_step(groups, topk, recall_lr, recall_weight_decay)
        o = opt.init(router)
        best, best_loss, losses = router, np.inf, []
        for _ in range(recall_epochs):
            perm = rng.permutation(len(q))
            total = 0.0
            for i in range(0, len(q), recall_batch):
                idx = perm[i:i + recall_batch]
                router, o, loss = step(router, o, q[idx], target[idx], n_experts)
                total += float(loss) * len(idx)
            losses.append(total / len(q))
            if losses[-1] < best_loss:
                best, best_loss = router, losses[-1]
        return best, losses

    return Algorithm(name="dmpel", init=init_state, grad_mask=grad_mask, start_task=start_task, end_task=end_task,
                     train_params=with_count, eval_params=lambda params, state, j: with_count(params, state),
                     network=network,
                     config={"adapters": [list(e) for e in spec], "topk": topk, "hidden": hidden,
                             "experts_per_task": experts_per_task, "merge": merge, "coeff_dropout": coeff_dropout,
                             "expert_init": expert_init, "recall_epochs": recall_epochs, "recall_lr": recall_lr,
                             "recall_weight_decay": recall_weight_decay, "recall_batch": recall_batch,
                             "replay_per_task": replay_per_task, "scale": scale})
