"""Seed 000's action-level battery and Table III: computations only (eval/run.py runs them on a run folder, the
report reads their file).

Action level (RUN/action_level.json): for the final checkpoint of every (method, seed) of the run, on every task j,
a fixed sample of demonstration windows of task j (up to `n_windows`, drawn once per task from the grid seed, the
same windows for every method) is fed to the policy under the original instruction and under each perturbed
instruction of the run's variant set (paraphrase, contrast, collision, probe, swap, nonsense). Per variant: Action Divergence and the
expert-action Language Margin (`language_metrics.action_level`, the last step of each full window); per condition:
variants averaged equally. The file is written atomically after each (method, seed), so an interrupted computation
resumes with the runs it lacks; a file whose fingerprint (windows, seed, policy, tasks, variants, demo files)
matches is reused as it is.

Table III: Spearman's rho across eligible method-task pairs, per seed, then mean / std across seeds: AD vs OGP and
LM vs OGP (both under the collision instructions) and AIR vs CGAR. A (method, task) pair is eligible when the task
has statically validated collisions that ran at the method's final checkpoint (the grid evaluates no other
collisions; unverified probes stay out, as in seed 000); a value that is undefined for a pair (CGAR when every
audited goal held at reset in all its rollouts, AD / LM without action-level results) leaves that pair out of the
correlations that need it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from clbench_jax.errors import DataFileError
from clbench_jax.jsonio import read_versioned, write_json

FORMAT = "clbench-action-level"
VERSION = 1
N_WINDOWS = 256
FILE = "action_level.json"
PERTURBED = ("paraphrase", "contrast", "collision", "probe", "swap", "nonsense")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


# ------------------------------------------------------------------------------------------- demo windows
def demo_windows(path: str, mode: str, seq_len: int, n: int, rng: np.random.Generator):
    """Up to `n` full windows (seq_len steps inside one demo, no end padding) of a demo file, drawn without
    replacement, in file order -> (policy obs {key: (n, L, ...)}, the expert's action at each window's last step
    (n, A)); None when no demo is as long as a window."""
    from clbench_jax.data.hdf5 import SequenceDataset
    from clbench_jax.lifelong.data import OBS_KEYS, policy_batch

    with SequenceDataset([path], seq_len=seq_len, obs_keys=tuple(OBS_KEYS[mode]), pad_end=False) as ds:
        if len(ds) == 0:
            return None
        idx = np.sort(rng.choice(len(ds), size=min(n, len(ds)), replace=False))
        raw = ds.gather(idx)
    return policy_batch(raw, np.zeros((1, 1), np.float32), mode)["obs"], raw["actions"][:, -1]


# ------------------------------------------------------------------------------------------- per task
def task_action_level(policy, params, obs, expert, lang_orig, variants, lang_pert, batch_size=None) -> dict:
    """{variant id: {condition, slot, ad, lm}}: the window means of AD and LM for each perturbed variant, against
    the original instruction's embedding `lang_orig` (D,); lang_pert: (V, D), one row per variant."""
    from clbench_jax.eval.language_metrics import action_level

    n = len(expert)
    lo = np.repeat(np.asarray(lang_orig, np.float32)[None], n, 0)
    out = {}
    for v, e in zip(variants, lang_pert):
        r = action_level(policy, params, obs, lo, np.repeat(np.asarray(e, np.float32)[None], n, 0), expert,
                         batch_size)
        out[v.id] = {"condition": v.condition, "slot": v.slot, "ad": r["ad"], "lm": r["lm"]}
    return out


def by_condition(per_variant: dict) -> dict:
    """{condition: {ad, lm, variants}}: variants averaged equally within the condition."""
    groups: dict = defaultdict(list)
    for r in per_variant.values():
        groups[r["condition"]].append(r)
    return {c: {"ad": float(np.mean([r["ad"] for r in rs])), "lm": float(np.mean([r["lm"] for r in rs])),
                "variants": len(rs)} for c, rs in groups.items()}


# ------------------------------------------------------------------------------------------- the file
def _fingerprint(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_action_level(path: str | os.PathLike) -> dict:
    """Load an action_level.json, checking its format (DataFileError names the file and field)."""
    return read_versioned(path, "action-level file", FORMAT, VERSION, ("fingerprint", "settings", "runs"))


def compute_action_level(out_path, checkpoints, policy, tasks: Sequence[str], variants, demo_paths: Sequence[str],
                         *, obs: str, embed: Callable[[], list], n_windows: int = N_WINDOWS, seed: int = 0,
                         batch_size: int | None = None, identity: dict | None = None, stamps: dict | None = None,
                         log: Callable[[str], None] = _log) -> dict:
    """Compute (or resume, or reuse) the action-level file -> its document.

    checkpoints: the final grid.Checkpoint of each (method, seed); tasks: task names in order; variants: per task
    the run's grid.Variant tuple (original first); demo_paths: per task its demo file; embed(): per task the (V_j, D)
    embeddings of its variants, called only when something has to be computed. identity: more settings the results
    depend on (e.g. the language embedding); stamps: per run key ("<method>_s<seed>") a stamp of its checkpoint
    (a run whose stamp changed is recomputed)."""
    from clbench_jax.lifelong.loop import DEFAULT_SEQ_LEN, derive_rng

    out_path = Path(out_path)
    seq_len = int(getattr(policy.cfg, "seq_len", DEFAULT_SEQ_LEN))
    settings = {"n_windows": int(n_windows), "seed": int(seed), "seq_len": seq_len, "obs": obs,
                "policy": repr(policy.cfg), "tasks": list(tasks),
                "variants": [[[v.id, v.condition, v.text] for v in vs] for vs in variants],
                "demos": [None if p is None else [os.path.basename(p), os.path.getsize(p) if os.path.exists(p) else None]
                          for p in demo_paths], **(identity or {})}
    fp = _fingerprint(settings)
    doc = None
    if out_path.exists():
        try:
            old = read_action_level(out_path)
            doc = old if old["fingerprint"] == fp else None
            if doc is None:
                log(f"{out_path}: settings changed (fingerprint {old['fingerprint']} -> {fp}); recomputing")
        except DataFileError as e:
            log(f"{e}; recomputing")
    doc = doc or {"format": FORMAT, "version": VERSION, "fingerprint": fp, "settings": settings, "runs": {}}
    stamps = stamps or {}
    key = lambda c: f"{c.method}_s{c.seed}"  # noqa: E731
    todo = [c for c in checkpoints if (doc["runs"].get(key(c), {}).get("stage"),
                                       doc["runs"].get(key(c), {}).get("checkpoint")) != (c.stage, stamps.get(key(c)))]
    if not todo:
        return doc
    emb = embed()
    windows: dict = {}
    for c in todo:
        log(f"action level: {c.method} seed {c.seed} (stage {c.stage}), {len(tasks)} task(s)")
        entry = {"method": c.method, "seed": int(c.seed), "stage": int(c.stage), "checkpoint": stamps.get(key(c)),
                 "tasks": []}
        for j, name in enumerate(tasks):
            row = {"task": j, "name": name}
            pert = [i for i, v in enumerate(variants[j]) if v.condition in PERTURBED]
            if j > c.stage or not pert:
                entry["tasks"].append(dict(row, skipped="not learned yet" if j > c.stage else "no perturbed variant"))
                continue
            if demo_paths[j] is None:
                entry["tasks"].append(dict(row, skipped="no demos (the oracle never solved the task)"))
                continue
            if j not in windows:
                windows[j] = demo_windows(demo_paths[j], obs, seq_len, n_windows,
                                          derive_rng(seed, "action_level", name))
            if windows[j] is None:
                entry["tasks"].append(dict(row, skipped=f"no demo of {seq_len} steps"))
                continue
            o, expert = windows[j]
            per_var = task_action_level(policy, c.load(j), o, expert, emb[j][0], [variants[j][i] for i in pert],
                                        np.asarray(emb[j])[pert], batch_size)
            entry["tasks"].append(dict(row, windows=int(len(expert)), conditions=by_condition(per_var),
                                       variants=per_var))
        doc["runs"][key(c)] = entry
        write_json(out_path, doc)  # after every run: an interrupted computation resumes from here
    return doc


# ------------------------------------------------------------------------------------------- summaries
def summary(doc: dict | None) -> dict:
    """{method: {condition: {ad, lm: mean / std across seeds; seeds: the seeds they average}}}: per seed, tasks
    averaged equally. A merged folder's file may hold fewer seeds of a method than its grid (checkpoints gone)."""
    from clbench_jax.eval.aggregate import mean_std

    if not doc:
        return {}
    per: dict = {}
    for r in doc["runs"].values():
        conds: dict = defaultdict(lambda: defaultdict(list))
        for t in r["tasks"]:
            for c, v in t.get("conditions", {}).items():
                for k in ("ad", "lm"):
                    conds[c][k].append(v[k])
        for c, d in conds.items():
            cell = per.setdefault(r["method"], {}).setdefault(c, {"seeds": []})
            cell["seeds"].append(r["seed"])
            for k, vs in d.items():
                cell.setdefault(k, []).append(float(np.mean(vs)))
    return {m: {c: {k: v if k == "seeds" else mean_std(v) for k, v in d.items()} for c, d in sorted(cs.items())}
            for m, cs in per.items()}


def ran_episodes(cols: dict) -> np.ndarray:
    """Episodes that ran (status ok, or physics failed: counted as unsuccessful); failed cells did not."""
    st = np.asarray(cols["status"]).astype(str)
    return (st == "ok") | np.char.startswith(st, "physics")


def pair_rows(cols: dict, n_tasks: int, doc: dict | None = None) -> list[dict]:
    """One row per eligible (method, seed, task): collision OGP / CGAR / AIR (over the audited goal columns) of the
    task's statically verified collision rollouts at the final checkpoint (stage n_tasks - 1) and, from the action-level document, the task's collision AD / LM (NaN when
    absent)."""
    from clbench_jax.eval.language_metrics import audited_only, collision_metrics

    act = {}
    for r in (doc or {}).get("runs", {}).values():
        for t in r["tasks"]:
            c = t.get("conditions", {}).get("collision")
            if c:
                act[(r["method"], r["seed"], t["task"])] = c
    m = ran_episodes(cols) & (np.asarray(cols["stage"]) == n_tasks - 1) & (np.asarray(cols["condition"]) == "collision")
    method, seed, task = (np.asarray(cols[k])[m] for k in ("method", "seed", "task"))
    rows = []
    for key in sorted({(str(a), int(b), int(c)) for a, b, c in zip(method, seed, task)}):
        r = np.flatnonzero(m)[(method == key[0]) & (seed == key[1]) & (task == key[2])]
        k = np.asarray(cols["success"]).shape[1]
        succ, held = audited_only(cols["success"][r], cols["held_at_reset"][r],
                                  np.asarray(cols.get("n_audited", np.full(len(cols["task"]), k)))[r])
        res = collision_metrics(cols["task"][r], cols["variant"][r], succ, held, cols["action_initiated"][r])
        a = act.get(key, {})
        rows.append({"method": key[0], "seed": key[1], "task": key[2], "ogp": res["ogp"], "cgar": res["cgar"],
                     "air": res["air"], "ad": a.get("ad", float("nan")), "lm": a.get("lm", float("nan"))})
    return rows


TABLE3 = (("ad_vs_ogp", "AD vs OGP", "ad", "ogp"), ("lm_vs_ogp", "LM vs OGP", "lm", "ogp"),
          ("air_vs_cgar", "AIR vs CGAR", "air", "cgar"))


def table3(cols: dict, n_tasks: int, doc: dict | None = None) -> dict:
    """Table III: per seed, Spearman's rho over that seed's eligible method-task pairs (language_metrics
    .correlations); then mean / std across seeds, with the number of pairs entering each rho per seed."""
    from clbench_jax.eval.aggregate import mean_std
    from clbench_jax.eval.language_metrics import correlations

    rows = pair_rows(cols, n_tasks, doc)
    seeds = sorted({r["seed"] for r in rows})
    nan_none = lambda v: v if not isinstance(v, float) or np.isfinite(v) else None  # noqa: E731
    out: dict = {"seeds": seeds, "rows": [{k: nan_none(v) for k, v in r.items()} for r in rows]}
    for key, _, x, y in TABLE3:
        rho = []
        for s in seeds:
            rs = [r for r in rows if r["seed"] == s]
            rho.append(correlations(rs)[key])
        out[key] = mean_std(rho)
        out[key]["pairs"] = [int(sum(bool(np.isfinite(r[x]) and np.isfinite(r[y])) for r in rows if r["seed"] == s))
                             for s in seeds]
    return out
