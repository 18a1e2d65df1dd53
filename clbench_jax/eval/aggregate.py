"""Episode table -> success tensors S[t, j, c] and per-seed metrics, as seed 000 defines them.

For each (method, seed): an episode's success is its variant's goal column (`target`) having held; episodes are
averaged per variant, then variants equally within (stage t, task j, condition c). Collisions have no executable
goal and no S (their statistics are in eval/language_metrics.py). Episodes of a failed cell (it did not run) are
left out, so a cell with no episode is NaN; an episode whose physics failed counts as a failure, as in LIBERO.
Metrics (NBT, AUC, final success) are computed per seed and reported as mean and standard deviation (ddof 0)
across seeds.
"""

from __future__ import annotations

import warnings

import numpy as np

S_CONDITIONS = ("original", "paraphrase", "contrast")


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
    seeds; plus the original-vs-paraphrase gaps when both exist. `curves[method][seed]` (learning curves from
    training) give LIBERO's FWT; without them FWT_j = S[j, j, c]."""
    from clbench_jax.eval.language_metrics import paraphrase_metrics, stage_metrics
    from clbench_jax.lifelong.metrics import fwt_per_task

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
