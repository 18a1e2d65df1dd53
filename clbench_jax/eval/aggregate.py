"""Episode table -> success tensors S[t, j, c] and per-seed metrics, as seed 000 defines them.

For each (method, seed): an episode's success is its variant's goal column (`target`) having held; episodes are
averaged per variant, then variants equally within (stage t, task j, condition c). Collisions have no executable
goal and no S (their statistics are in eval/language_metrics.py). Episodes of a failed cell (it did not run) are
left out, so a cell with no episode is NaN; an episode whose physics failed counts as a failure, as in LIBERO.
Metrics (NBT, AUC, final success) are computed per seed and reported as mean and standard deviation (ddof 0)
across seeds.

One FWT definition per report (`fwt_definition`): LIBERO's, from the training runs' learning curves, only when
every condition of the report has curves (the original instructions alone: the grid has no curves for
paraphrases); otherwise S[j, j] for every condition, so AUCs of different conditions compare.

Trivially reachable contrasts (a nudge of the reset state meets their goal) are their own condition,
"contrast_trivial" (`analysis_columns`): outside S[contrast], GSA and the per-slot numbers, reported apart.
"""

from __future__ import annotations

import warnings

import numpy as np

S_CONDITIONS = ("original", "paraphrase", "contrast")
FWT_CURVES, FWT_DIAGONAL = "learning curves (LIBERO)", "S[j, j]"


def analysis_columns(cols: dict) -> dict:
    """The episode columns the metrics read: columns that older episode files lack get their old meaning (every
    goal column audited, no trivial contrast, no paraphrase kinds), and trivially reachable contrasts become the
    condition "contrast_trivial"."""
    out = dict(cols)
    n = len(out["condition"])
    k = np.asarray(out["success"]).shape[1] if n else 1
    out.setdefault("n_audited", np.full(n, k, np.int32))
    out.setdefault("trivial", np.zeros(n, bool))
    out.setdefault("kinds", np.full(n, ""))
    cond = np.asarray(out["condition"]).astype(str)
    out["condition"] = np.where((cond == "contrast") & np.asarray(out["trivial"], bool), "contrast_trivial", cond)
    return out


def fwt_definition(tensors: dict, curves: dict | None) -> str:
    """FWT_CURVES when every (method, seed) has learning curves and no condition but the original has S[j, j];
    FWT_DIAGONAL otherwise (then for every condition)."""
    if not curves:
        return FWT_DIAGONAL
    for m, d in tensors.items():
        if any(curves.get(m, {}).get(s) is None for s in d["seeds"]):
            return FWT_DIAGONAL
        for ci, c in enumerate(d["conditions"]):
            if c != "original" and np.isfinite(np.diagonal(d["per_seed"][:, :, :, ci], axis1=1, axis2=2)).any():
                return FWT_DIAGONAL
    return FWT_CURVES


def broadcast_final(tensors: dict) -> dict:
    """S tensors of policies that do not learn (the floors, evaluated at the last stage only): S[t, j] = S[K-1, j]
    for every t >= j."""
    out = {}
    for m, d in tensors.items():
        ps = d["per_seed"].copy()
        K = ps.shape[1]
        for t in range(K):
            ps[:, t, :t + 1] = ps[:, K - 1, :t + 1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out[m] = dict(d, per_seed=ps, mean=np.nanmean(ps, 0), std=np.nanstd(ps, 0))
    return out


def episode_success(cols: dict) -> np.ndarray:
    """(N,) float: success of each episode on its own goal (NaN for collisions, which have none)."""
    t = np.asarray(cols["target"])
    s = np.asarray(cols["success"], bool)[np.arange(len(t)), np.maximum(t, 0)]
    return np.where(t >= 0, s.astype(float), np.nan)


def _ran(cols: dict) -> np.ndarray:
    return ~np.char.startswith(np.asarray(cols["status"]).astype(str), "failed cell")


def _group_mean(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `keys` (N, k ints) -> (unique keys (G, k), mean of values per key (G,))."""
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return uniq, np.bincount(inv, values, len(uniq)) / np.bincount(inv, minlength=len(uniq))


def success_tensors(cols: dict, n_tasks: int, conditions=S_CONDITIONS) -> dict:
    """{method: {"seeds", "conditions", "per_seed" (n_seeds, T, J, C), "mean" (T, J, C), "std" (T, J, C)}} with
    T = J = n_tasks; NaN where a (t, j, c) has no episode (j > t, an absent condition, a failed cell)."""
    cond = np.asarray(cols["condition"]).astype(str)
    keep = _ran(cols) & np.isin(cond, conditions)
    method = np.asarray(cols["method"]).astype(str)[keep]
    seed = np.asarray(cols["seed"])[keep]
    variant = np.unique(np.asarray(cols["variant"]).astype(str)[keep], return_inverse=True)[1].reshape(-1)
    c_idx = np.array([conditions.index(c) for c in cond[keep]], int)
    stage, task = np.asarray(cols["stage"])[keep], np.asarray(cols["task"])[keep]
    succ = episode_success(cols)[keep]
    out = {}
    for m in sorted(set(method)):
        mm = method == m
        seeds = sorted(set(seed[mm].tolist()))
        s_idx = np.searchsorted(seeds, seed[mm])
        # Per variant (rollouts averaged), then per (seed, t, j, c) (variants averaged equally).
        k, v = _group_mean(np.stack([s_idx, stage[mm], task[mm], c_idx[mm], variant[mm]], 1), succ[mm])
        k, v = _group_mean(k[:, :4], v)
        per_seed = np.full((len(seeds), n_tasks, n_tasks, len(conditions)), np.nan)
        per_seed[k[:, 0], k[:, 1], k[:, 2], k[:, 3]] = v
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells stay NaN
            mean, std = np.nanmean(per_seed, 0), np.nanstd(per_seed, 0)
        out[m] = {"seeds": seeds, "conditions": list(conditions), "per_seed": per_seed, "mean": mean, "std": std}
    return out


def mean_std(values) -> dict:
    a = np.asarray([np.nan if v is None else v for v in values], float)
    ok = np.isfinite(a)
    return {"mean": float(a[ok].mean()) if ok.any() else None, "std": float(a[ok].std()) if ok.any() else None,
            "per_seed": [None if not np.isfinite(x) else float(x) for x in a]}


def seed_metrics(tensors: dict, curves: dict | None = None) -> dict:
    """Per method and condition: FWT / NBT / AUC / final success of S[:, :, c] per seed, then mean and std across
    seeds; plus the original-vs-paraphrase gaps when both exist. FWT (and with it AUC) by `fwt_definition`: the
    learning curves `curves[method][seed]` only when they serve every condition, else S[j, j, c] throughout."""
    from clbench_jax.eval.language_metrics import paraphrase_metrics, stage_metrics
    from clbench_jax.lifelong.metrics import fwt_per_task

    if fwt_definition(tensors, curves) != FWT_CURVES:
        curves = None
    out = {}
    for m, d in tensors.items():
        res = {}
        for ci, c in enumerate(d["conditions"]):
            per = []
            for si, s in enumerate(d["seeds"]):
                S = d["per_seed"][si, :, :, ci]
                if not np.isfinite(np.diag(S)).all():
                    continue  # a condition (or a cell) missing for this seed
                cv = None if curves is None or c != "original" else curves.get(m, {}).get(s)
                fwt = fwt_per_task(cv) if cv is not None else np.diag(S)
                per.append(dict(stage_metrics(S, cv), fwt=float(np.mean(fwt))))
            if per:
                res[c] = {k: mean_std([p[k] for p in per]) for k in ("fwt", "nbt", "auc", "final")}
        if "original" in d["conditions"] and "paraphrase" in d["conditions"]:
            o, p = d["conditions"].index("original"), d["conditions"].index("paraphrase")
            gaps = [paraphrase_metrics(d["per_seed"][si, :, :, o], d["per_seed"][si, :, :, p])
                    for si in range(len(d["seeds"]))
                    if np.isfinite(np.diag(d["per_seed"][si, :, :, p])).all()]
            if gaps:
                res["paraphrase_gap"] = {k: mean_std([g[k] for g in gaps])
                                         for k in ("auc_gap", "final_gap", "signed_gap")}
        out[m] = res
    return out


def to_json(tensors: dict) -> dict:
    """JSON-ready S tensors (NaN -> None)."""
    clean = lambda a: np.where(np.isfinite(a), a, np.nan).tolist()  # noqa: E731
    nan_none = lambda x: [nan_none(v) for v in x] if isinstance(x, list) else (None if x != x else x)  # noqa
    return {m: {"seeds": d["seeds"], "conditions": d["conditions"], "mean": nan_none(clean(d["mean"])),
                "std": nan_none(clean(d["std"])), "per_seed": nan_none(clean(d["per_seed"]))}
            for m, d in tensors.items()}


def gap_by_kind(cols: dict, n_tasks: int) -> dict:
    """The paraphrase gap broken down by paraphrase kind: per method and kind, S_orig - S_kind at the final stage
    (tasks that have a paraphrase of that kind, equally) and over Omega = {(t, j): j <= t} (the signed gap), per
    seed, then mean / std across seeds; with the number of tasks and variants of that kind."""
    cond = np.asarray(cols["condition"]).astype(str)
    kinds = np.asarray(cols.get("kinds", np.full(len(cond), ""))).astype(str)
    para = cond == "paraphrase"
    names = sorted({k for ks in kinds[para] for k in ks.split(",") if k})
    out: dict = {}
    for kind in names:
        has = para & np.array([kind in ks.split(",") for ks in kinds])
        sub = {k: np.asarray(v)[(cond == "original") | has] for k, v in cols.items()}
        tensors = success_tensors(sub, n_tasks, ("original", "paraphrase"))
        for m, d in tensors.items():
            final, signed = [], []
            for si in range(len(d["seeds"])):
                o, p = d["per_seed"][si, :, :, 0], d["per_seed"][si, :, :, 1]
                t, j = np.tril_indices(n_tasks)
                diff = (o - p)[t, j]
                last = (o - p)[n_tasks - 1]
                final.append(float(np.nanmean(last)) if np.isfinite(last).any() else None)
                signed.append(float(np.nanmean(diff)) if np.isfinite(diff).any() else None)
            mm = np.asarray(sub["method"]).astype(str) == m
            sel = has[(cond == "original") | has] & mm
            out.setdefault(m, {})[kind] = {
                "final_gap": mean_std(final), "signed_gap": mean_std(signed),
                "tasks": int(len(set(np.asarray(sub["task"])[sel].tolist()))),
                "variants": int(len(set(np.asarray(sub["variant"])[sel].astype(str).tolist())))}
    return out
