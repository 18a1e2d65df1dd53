"""LIBERO's lifelong metrics (paper section 5.1, eq. 3) from the success matrix and the learning curves.

c[i][j]: success on task j after learning task i (i >= j; entries above the diagonal are unused, NaN).
curve[k]: task k's successes at the evaluation epochs (0, 5, ..., 50 in LIBERO: 11 points).

FWT_k = mean(curve[k]) -- LIBERO's code (algos/base.py) first holds the curve at its peak from the first peak
        onward (the agent "stops learning" there); `hold_peak=False` gives the paper's plain mean.
NBT_k = mean_{t > k} (c[k][k] - c[t][k])        averaged over the K - 1 tasks that have a later task: the last
        task has no NBT (the paper leaves it undefined); with K = 1 NBT is None.
AUC_k = (FWT_k + sum_{t > k} c[t][k]) / (K - k + 1)   (1-based k), averaged over all K tasks.
"""

from __future__ import annotations

import numpy as np


def held_curve(curve, hold_peak: bool = True) -> np.ndarray:
    """The curve with every point after the first maximum replaced by that maximum (LIBERO's code)."""
    c = np.asarray(curve, float).copy()
    if hold_peak and c.size:
        i = int(np.argmax(c))  # first index of the maximum, like LIBERO's strict `prev < success` update
        c[i:] = c[i]
    return c


def fwt_per_task(curves, hold_peak: bool = True) -> np.ndarray:
    return np.array([held_curve(c, hold_peak).mean() for c in curves])


def nbt_per_task(c) -> np.ndarray:
    """(K - 1,) NBT of each task that has a later task."""
    c = np.asarray(c, float)
    k = c.shape[0]
    return np.array([np.mean([c[i, i] - c[t, i] for t in range(i + 1, k)]) for i in range(k - 1)])


def auc_per_task(c, fwt) -> np.ndarray:
    c = np.asarray(c, float)
    k = c.shape[0]
    return np.array([(fwt[i] + sum(c[t, i] for t in range(i + 1, k))) / (k - i) for i in range(k)])


def lifelong_metrics(c, curves, hold_peak: bool = True) -> dict:
    """{"fwt", "nbt", "auc"} (means; nbt None for one task) plus the per-task lists."""
    c = np.asarray(c, float)
    if c.ndim != 2 or c.shape[0] != c.shape[1] or len(curves) != c.shape[0]:
        raise ValueError(f"need a K x K success matrix and K curves, got {c.shape} and {len(curves)} curves")
    fwt = fwt_per_task(curves, hold_peak)
    nbt = nbt_per_task(c)
    auc = auc_per_task(c, fwt)
    return {"fwt": float(fwt.mean()), "nbt": float(nbt.mean()) if nbt.size else None, "auc": float(auc.mean()),
            "fwt_per_task": fwt.tolist(), "nbt_per_task": nbt.tolist(), "auc_per_task": auc.tolist()}
