"""Seed 004's table from the three arms of configs/seed004/ (confounded, deconfounded, rank-32 update): per arm,
the battery's rates from the metrics.json of each seed's run folder ROOT/s<seed>/<arm>/ (written by `clbench run` /
`clbench report`), with both floors (those of the first seed's folder: floors read neither instruction nor policy).

    python benchmarks/seed004_table.py runs/seed004 [--out benchmarks/results/seed004_libero_object_state.json]

Rates are seed 004's: success on the variant's own goal; for swaps also the rate at which the hand first reached,
or the fingers first closed on, the newly named object; the original goal's rate under the swapped instruction.
Each is balanced over variants within a task and over tasks (eval/language_metrics.face_metrics); mean and std
over the run's seeds.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import machine, write_json  # noqa: E402

from clbench_jax.eval.report import _get  # noqa: E402  (the report's path lookup in metrics.json)


ARMS = ("confounded", "deconfounded", "lora")
COLUMNS = {  # column -> path in a method's (or floor's) language entry
    "original SR": ("faces", "original", "success"),
    "swap: named goal": ("faces", "swap", "success"),
    "swap: first reach named": ("faces", "swap", "first_reach", "named"),
    "swap: first grasp named": ("faces", "swap", "first_grasp", "named"),
    "swap: original goal": ("faces", "swap", "original_goal"),
    "nonsense SR": ("faces", "nonsense", "success"),
    "occ SR": ("faces", "occ", "success"),
    "swap failures: grasped named": ("faces", "swap", "failed_first_grasp", "named"),
    "swap failures: grasped original": ("faces", "swap", "failed_first_grasp", "original"),
}


def _rows(run_dir: str) -> dict:
    """{label: {column: mean_std}} for a run folder's methods and floors."""
    with open(os.path.join(run_dir, "metrics.json")) as f:
        doc = json.load(f)
    entries = list(doc.get("language", {}).items()) + [(f"floor: {k}", v) for k, v in
                                                      doc.get("floors", {}).get("language", {}).items()]
    return {label: {c: _get(entry, *p) for c, p in COLUMNS.items()} for label, entry in entries}


def arm_rows(folders: list[str]) -> dict:
    """One arm over its seed folders: per-seed values pooled, mean and std across seeds; floors from the first."""
    from clbench_jax.eval.aggregate import mean_std

    per = [_rows(f) for f in folders]
    rows = {}
    for label in per[0]:
        use = per[:1] if label.startswith("floor") else [r for r in per if label in r]
        rows[label] = {c: mean_std([v for r in use for v in ((r[label][c] or {}).get("per_seed") or [None])])
                       for c in COLUMNS}
    return {"folders": folders, "rows": rows, "training": [_training(f) for f in folders]}


def _training(run_dir: str) -> dict:
    """A run folder's training budget and success curve (its train/<method>_s<seed>/metrics.json)."""
    (path,) = glob.glob(os.path.join(run_dir, "train", "*", "metrics.json"))
    with open(path) as f:
        doc = json.load(f)
    return {"epochs": doc["config"]["epochs"], "curve_epochs": doc["curve_epochs"][0], "curve": doc["curves"][0],
            "select": doc["config"].get("select", "best"), "best_epoch": doc["best_epoch"][0]}


def _pm(d):
    if not d or d.get("mean") is None:
        return "n/a"
    return f"{100 * d['mean']:.0f}" + (f" ± {100 * d['std']:.0f}" if len(d.get("per_seed", [])) > 1 else "")


def markdown(result: dict) -> str:
    cols = list(COLUMNS)
    lines = ["| arm | policy | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    arms = result["arms"]
    rows = [(f"{arm} ({len(r['folders'])} seed(s), {'/'.join(sorted({str(t['epochs']) for t in r['training']}))} "
             "epochs)", label, row) for arm, r in arms.items()
            for label, row in r["rows"].items() if not label.startswith("floor")]
    first = next(iter(arms.values()))  # floors read neither instruction nor policy: one arm's are every arm's
    rows += [("all", label, row) for label, row in first["rows"].items() if label.startswith("floor")]
    for name, label, row in rows:
        lines.append(f"| {name} | {label} | " + " | ".join(_pm(row[c]) for c in cols) + " |")
    lines.append("")
    for arm, r in arms.items():  # the training curves: is each arm's policy converged?
        for folder, t in zip(r["folders"], r["training"]):
            pts = ", ".join(f"{e}: {100 * v:.0f}" for e, v in zip(t["curve_epochs"], t["curve"]))
            lines.append(f"- {arm}, `{folder}`: success by epoch {pts} (%; kept: epoch {t['best_epoch']}, "
                         f"`select: {t['select']}`)")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="folder holding the arms' run folders (confounded/, deconfounded/, lora/)")
    ap.add_argument("--out", default="benchmarks/results/seed004_libero_object_state.json")
    a = ap.parse_args(argv)
    seeds = sorted((d for d in os.listdir(a.root) if d[:1] == "s" and d[1:].isdigit()), key=lambda d: int(d[1:]))
    arms = {}
    for arm in ARMS:
        folders = [os.path.join(a.root, d, arm) for d in seeds
                   if os.path.exists(os.path.join(a.root, d, arm, "metrics.json"))]
        if folders:
            arms[arm] = arm_rows(folders)
    if not arms:
        raise SystemExit(f"no finished arm under {a.root} (want s<seed>/<arm>/metrics.json, arm in {ARMS})")
    result = {"benchmark": "seed004_battery", "machine": machine(), "suite": "libero_object", "obs": "state",
              "configs": {arm: f"configs/seed004/{arm}.yaml" for arm in arms},
              "command": f"python benchmarks/seed004_table.py {a.root}", "arms": arms}
    result["markdown"] = markdown(result)
    write_json(a.out, result)
    print(result["markdown"])
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
