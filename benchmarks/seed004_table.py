"""Seed 004's table from the three arms of configs/seed004/ (confounded, deconfounded, rank-32 update): per arm,
the battery's rates from each run's metrics.json (written by `clbench run` / `clbench report`), with both floors.

    python benchmarks/seed004_table.py runs/seed004 [--out benchmarks/results/seed004_libero_object_state.json]

Rates are seed 004's: success on the variant's own goal; for swaps also the rate at which the hand first reached,
or the fingers first closed on, the newly named object; the original goal's rate under the swapped instruction.
Each is balanced over variants within a task and over tasks (eval/language_metrics.face_metrics); mean and std
over the run's seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import machine, write_json  # noqa: E402


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


def _get(d, path):
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def arm_rows(run_dir: str) -> dict:
    """{label: {column: mean_std}} for the arm's methods and floors."""
    with open(os.path.join(run_dir, "metrics.json")) as f:
        doc = json.load(f)
    rows = {}
    entries = list(doc.get("language", {}).items()) + [(f"floor: {k}", v) for k, v in
                                                      doc.get("floors", {}).get("language", {}).items()]
    for label, entry in entries:
        rows[label] = {c: _get(entry, p) for c, p in COLUMNS.items()}
    return {"rows": rows, "episodes": doc.get("episodes"), "seeds": sorted({int(s) for s in
                                                                         _seeds(run_dir)})}


def _seeds(run_dir):
    train = os.path.join(run_dir, "train")
    return [d.rsplit("_s", 1)[1] for d in sorted(os.listdir(train)) if "_s" in d] if os.path.isdir(train) else []


def _pm(d):
    if not d or d.get("mean") is None:
        return "n/a"
    return f"{100 * d['mean']:.0f}" + (f" ± {100 * d['std']:.0f}" if len(d.get("per_seed", [])) > 1 else "")


def markdown(result: dict) -> str:
    cols = list(COLUMNS)
    lines = ["| arm | policy | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for arm, r in result["arms"].items():
        for label, row in r["rows"].items():
            if label.startswith("floor") and arm != next(iter(result["arms"])):
                continue  # floors read neither instruction nor policy: one arm's are every arm's
            name = "all" if label.startswith("floor") else arm
            lines.append(f"| {name} | {label} | " + " | ".join(_pm(row[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="folder holding the arms' run folders (confounded/, deconfounded/, lora/)")
    ap.add_argument("--out", default="benchmarks/results/seed004_libero_object_state.json")
    a = ap.parse_args(argv)
    arms = {arm: arm_rows(os.path.join(a.root, arm)) for arm in ARMS
            if os.path.exists(os.path.join(a.root, arm, "metrics.json"))}
    if not arms:
        raise SystemExit(f"no finished arm under {a.root} (want {', '.join(ARMS)} with metrics.json)")
    result = {"benchmark": "seed004_battery", "machine": machine(), "suite": "libero_object", "obs": "state",
              "configs": {arm: f"configs/seed004/{arm}.yaml" for arm in arms},
              "command": f"python benchmarks/seed004_table.py {a.root}", "arms": arms}
    result["markdown"] = markdown(result)
    write_json(a.out, result)
    print(result["markdown"])
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
