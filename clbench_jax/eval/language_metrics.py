"""Language-perturbation metrics (seed 000), as pure functions of per-episode records.

Per-episode record columns (one row per rollout; the evaluation grid writes them, e.g. to episodes.parquet):

    seed            int    root seed of the run
    method          str    continual-learning method
    stage           int    t: the checkpoint after learning the t-th task of the order (0-based)
    task            int    j: the task's position in the task order (0-based, j <= t)
    condition       str    "original" | "paraphrase" | "contrast" | "collision"
    variant         str    variant id from the variant file (e.g. "libero_goal:1/contrast/object/0")
    slot            str    edited slot for contrasts / collisions ("" otherwise)
    target          int    index into the task's audited goals of the goal this rollout is judged against:
                           0 for original / paraphrase, the contrast's own goal for a contrast, -1 for a collision
    success         (K,)   bool, goal k held at some step of the rollout        (= rollout.Records.success)
    held_at_reset   (K,)   bool, goal k already held after reset and warm-up     (= rollout.Records.held_at_reset)
    action_initiated bool  EE moved > 0.01 m or a finger joint changed > 0.01 (= rollout.Records.action_initiated)

The K goal columns are the task's audited goals G_j in the order of `variants.audited_goals`: column 0 is the
original goal, then every retained contrast goal of the task, unique, in file order. Episodes of one task share K.

Aggregation is task-balanced as in seed 000: rollouts are averaged per variant, variants equally within a task,
then tasks equally. Success matrices S[t, j] (NaN above the diagonal) feed LIBERO's NBT / AUC from
clbench_jax/lifelong/metrics.py. Without learning curves, FWT_j is taken as S[j, j] (the success right after the
task was learned); pass curves to use LIBERO's curve-based FWT instead.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Sequence

import numpy as np

from clbench_jax.lifelong import metrics as lifelong

SLOTS = ("action", "object", "relation", "target", "attribute")
ACHIEVED = ("original", "other", "multiple", "none")


def _balanced(values, task, variant, mask=None) -> float:
    """Mean per variant, then per task, then over tasks (NaN when nothing is eligible)."""
    values = np.asarray(values, float)
    keep = np.ones(len(values), bool) if mask is None else np.asarray(mask, bool)
    per_var: dict = defaultdict(list)
    for v, t, var, k in zip(values, task, variant, keep):
        if k:
            per_var[(t, var)].append(v)
    per_task: dict = defaultdict(list)
    for (t, _), vs in per_var.items():
        per_task[t].append(np.mean(vs))
    return float(np.mean([np.mean(v) for v in per_task.values()])) if per_task else float("nan")


# ------------------------------------------------------------------------------------------- stage-wise
def success_matrix(stage, task, variant, success, n_tasks: int) -> np.ndarray:
    """S[t, j]: rollouts averaged per variant, variants averaged equally; NaN where (t, j) was not evaluated."""
    stage, task = np.asarray(stage), np.asarray(task)
    S = np.full((n_tasks, n_tasks), np.nan)
    for t in range(n_tasks):
        for j in range(t + 1):
            m = (stage == t) & (task == j)
            if m.any():
                S[t, j] = _balanced(np.asarray(success, float)[m], task[m], np.asarray(variant)[m])
    return S


def stage_metrics(S, curves: Sequence | None = None) -> dict:
    """NBT, AUC and final SR of a success matrix, with LIBERO's definitions (lifelong/metrics.py)."""
    S = np.asarray(S, float)
    K = S.shape[0]
    fwt = lifelong.fwt_per_task(curves) if curves is not None else np.diag(S)
    nbt = lifelong.nbt_per_task(S)
    auc = lifelong.auc_per_task(S, fwt)
    return {"nbt": float(nbt.mean()) if nbt.size else None, "auc": float(auc.mean()),
            "final": float(np.mean(S[K - 1, :K]))}


def signed_gap(S_orig, S_para) -> float:
    """Mean over Omega = {(t, j): j <= t} of S_orig - S_para (negative: paraphrases do better)."""
    S_orig, S_para = np.asarray(S_orig, float), np.asarray(S_para, float)
    t, j = np.tril_indices(S_orig.shape[0])
    return float(np.mean(S_orig[t, j] - S_para[t, j]))


def paraphrase_metrics(S_orig, S_para, curves_orig=None, curves_para=None) -> dict:
    """Original and paraphrase NBT / AUC / final SR, the AUC gap and final gap (Figure 6), the signed gap."""
    o, p = stage_metrics(S_orig, curves_orig), stage_metrics(S_para, curves_para)
    return {"original": o, "paraphrase": p, "auc_gap": o["auc"] - p["auc"], "final_gap": o["final"] - p["final"],
            "signed_gap": signed_gap(S_orig, S_para)}


# ------------------------------------------------------------------------------------------- contrasts
def contrast_metrics(task, variant, slot, target, success) -> dict:
    """Target SR (modified goal reached), Goal-Switch Accuracy (modified reached and original not), Original
    Persistence (original reached), overall and per slot; a slot without episodes is reported unavailable."""
    success = np.asarray(success, bool)
    target = np.asarray(target)
    hit = success[np.arange(len(target)), target]
    orig = success[:, 0]
    task, variant, slot = np.asarray(task), np.asarray(variant), np.asarray(slot)

    def block(m):
        return {"target_sr": _balanced(hit[m], task[m], variant[m]),
                "gsa": _balanced(hit[m] & ~orig[m], task[m], variant[m]),
                "original_persistence": _balanced(orig[m], task[m], variant[m]), "episodes": int(m.sum())}

    out = block(np.ones(len(hit), bool))
    out["per_slot"] = {s: block(slot == s) if (slot == s).any() else {"unavailable": True} for s in SLOTS}
    return out


# ------------------------------------------------------------------------------------------- collisions
def achieved_goals(success, held_at_reset) -> np.ndarray:
    """Per rollout, which audited goals were newly reached: 'original' (only goal 0), 'other' (one other goal),
    'multiple', or 'none'."""
    new = np.asarray(success, bool) & ~np.asarray(held_at_reset, bool)
    n = new.sum(1)
    return np.where(n == 0, "none", np.where(n > 1, "multiple", np.where(new[:, 0], "original", "other")))


def collision_metrics(task, variant, success, held_at_reset, action_initiated) -> dict:
    """OGP, CGAR, the achieved-goal distribution and AIR over collision rollouts.

    CGAR counts a rollout when it newly satisfies any audited goal (one not already held after reset and warm-up);
    rollouts in which every audited goal already held at reset are not eligible."""
    success, held = np.asarray(success, bool), np.asarray(held_at_reset, bool)
    task, variant = np.asarray(task), np.asarray(variant)
    new = success & ~held
    eligible = (~held).any(1)
    kinds = achieved_goals(success, held)
    return {"ogp": _balanced(success[:, 0], task, variant),
            "cgar": _balanced(new.any(1), task, variant, mask=eligible),
            "achieved": {k: _balanced(kinds == k, task, variant) for k in ACHIEVED},
            "air": _balanced(np.asarray(action_initiated, bool), task, variant), "episodes": int(len(task))}


def audited_only(success, held_at_reset, n_audited) -> tuple[np.ndarray, np.ndarray]:
    """Keep the audited goal columns (G_j: the first n_audited of each row) for the collision metrics: the other
    columns (swap goals) neither count as reached nor make a rollout eligible."""
    success, held = np.asarray(success, bool), np.asarray(held_at_reset, bool)
    keep = np.arange(success.shape[1])[None, :] < np.asarray(n_audited).reshape(-1, 1)
    return success & keep, held | ~keep


# ------------------------------------------------------------------------------------------- seed 004
GRASP = ("named", "original", "other", "none")


def switch_baseline(task, variant, target, orig_task, orig_success) -> dict:
    """The no-switch baseline of contrasts / swaps: for each such variant (task j, its goal column k), how often
    rollouts under the *original* instruction of task j reach goal k (Target SR) and reach it without the original
    goal (GSA); per variant, then tasks equally, as the variants themselves are averaged. NaN without original
    rollouts. (Original episodes stop once their goal holds, so the Target SR baseline is a lower bound; the GSA
    baseline is exact: an episode that reached the original goal counts as no switch either way.)"""
    task, variant, target = np.asarray(task), np.asarray(variant), np.asarray(target)
    orig_task, orig_success = np.asarray(orig_task), np.asarray(orig_success, bool)
    tsr, gsa, tk, vk = [], [], [], []
    for v in dict.fromkeys(variant.tolist()):
        m = variant == v
        j, k = task[m][0], target[m][0]
        o = orig_success[orig_task == j]
        if len(o) == 0:
            continue
        tsr.append(o[:, k].mean())
        gsa.append((o[:, k] & ~o[:, 0]).mean())
        tk.append(j)
        vk.append(v)
    return {"target_sr": _balanced(tsr, tk, vk), "gsa": _balanced(gsa, tk, vk)}


def face_metrics(task, variant, target, success, grasp, reach=None) -> dict:
    """Seed 004's reading of a condition's rollouts: success on the variant's own goal, the original goal's rate,
    the first-grasp distribution over all rollouts and over the failures (named / original / other / none: a failure
    that grasped the named object is a motor failure, not a grounding one), and, when the simulator records it, the
    first-reach distribution. Rollouts averaged per variant, variants equally within a task, tasks equally; a
    split over failures skips variants without failures (NaN when there are none at all)."""
    success, target = np.asarray(success, bool), np.asarray(target)
    task, variant, grasp = np.asarray(task), np.asarray(variant), np.asarray(grasp).astype(str)
    hit = success[np.arange(len(target)), target]
    out = {"success": _balanced(hit, task, variant), "original_goal": _balanced(success[:, 0], task, variant),
           "failures": _balanced(~hit, task, variant), "episodes": int(len(task)),
           "first_grasp": {g: _balanced(grasp == g, task, variant) for g in GRASP},
           "failed_first_grasp": {g: _balanced(grasp == g, task, variant, mask=~hit) for g in GRASP}}
    if reach is not None:
        reach = np.asarray(reach).astype(str)
        out["first_reach"] = {g: _balanced(reach == g, task, variant) for g in GRASP}
        out["failed_first_reach"] = {g: _balanced(reach == g, task, variant, mask=~hit) for g in GRASP}
    return out


# ------------------------------------------------------------------------------------------- action level
def mixture_mean(dist):
    """Mean action of a GMM: sum_k softmax(logits)_k * mean_k -> (..., A)."""
    import jax
    import jax.numpy as jnp

    w = jax.nn.softmax(dist.logits, axis=-1)
    return jnp.sum(w[..., None] * dist.means, axis=-2)


def action_divergence(mean_a, mean_b) -> np.ndarray:
    """||mean_a - mean_b|| / (2 sqrt(d_a)), per observation: 0 identical, 1 opposite corners of [-1, 1]^d_a."""
    mean_a, mean_b = np.asarray(mean_a, float), np.asarray(mean_b, float)
    return np.linalg.norm(mean_a - mean_b, axis=-1) / (2.0 * np.sqrt(mean_a.shape[-1]))


@functools.lru_cache(maxsize=None)
def _action_level_fn(policy):
    """One jitted function per policy: per-sample AD and LM from the last step of each window."""
    import jax

    from clbench_jax.policies.gmm import log_prob

    @jax.jit
    def run(params, obs_window, lang_orig, lang_pert, expert_action):
        last = lambda d: type(d)(*(x[:, -1] for x in d))  # noqa: E731  (B, T, ...) -> (B, ...)
        d_o = last(policy.apply(params, obs_window, lang_orig))
        d_p = last(policy.apply(params, obs_window, lang_pert))
        diff = mixture_mean(d_o) - mixture_mean(d_p)
        ad = jax.numpy.linalg.norm(diff, axis=-1) / (2.0 * jax.numpy.sqrt(diff.shape[-1]))
        return ad, log_prob(d_o, expert_action) - log_prob(d_p, expert_action)

    return run


def action_level(policy, params, obs_window, lang_orig, lang_pert, expert_action,
                 batch_size: int | None = None) -> dict:
    """Action Divergence and expert-action Language Margin over demonstration windows, vectorized (one jitted call
    per `batch_size` windows; all at once by default).

    obs_window: (N, T, ...) windows; lang_*: (N, D) embeddings of the original and the perturbed instruction;
    expert_action: (N, A) the demonstrator's action at each window's last step. Uses the last step's distribution.
    Returns per-sample arrays and their means; LM > 0 means the expert action is likelier under the original."""
    import jax

    run = _action_level_fn(policy)
    n = len(expert_action)
    step = batch_size or n
    ad, lm = [], []
    for i in range(0, n, step):
        cut = lambda x: x[i:i + step]  # noqa: E731
        a, m = run(params, jax.tree.map(cut, obs_window), cut(lang_orig), cut(lang_pert), cut(expert_action))
        ad.append(np.asarray(a)), lm.append(np.asarray(m))
    ad, lm = np.concatenate(ad), np.concatenate(lm)
    return {"ad": float(ad.mean()), "lm": float(lm.mean()), "ad_per_sample": ad, "lm_per_sample": lm}


# ------------------------------------------------------------------------------------------- correlations
def rank(x) -> np.ndarray:
    """Ranks 1..n, ties get their average rank."""
    x = np.asarray(x, float)
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        m = x == v
        r[m] = r[m].mean()
    return r


def spearman(x, y) -> float:
    """Spearman's rho over the pairs where both values are finite (NaN with < 3 pairs or a constant side)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan")
    rx, ry = rank(x[ok]), rank(y[ok])
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def correlations(rows: Sequence[dict]) -> dict:
    """Table III over method-task pairs (dicts with ad, lm, ogp, air, cgar; NaN marks an ineligible value)."""
    col = lambda k: [r.get(k, np.nan) for r in rows]  # noqa: E731
    return {"ad_vs_ogp": spearman(col("ad"), col("ogp")), "lm_vs_ogp": spearman(col("lm"), col("ogp")),
            "air_vs_cgar": spearman(col("air"), col("cgar")), "pairs": len(rows)}
