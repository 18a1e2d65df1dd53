"""LIBERO's pretraining experiment (seed 001, Fig. 5): the lifelong metrics on libero_10 from scratch and from the
LIBERO-90 base, one row per method and arm, from the committed run folders.

    python benchmarks/pretraining_table.py     # docs/RESULTS.md's table, from docs/results/pretraining_libero_10/

Each `clbench run configs/pretraining_libero_10.yaml [--pretrained ...]` folder is committed as
<results>/<arm>/s<seed>/<method>/{config.yaml, metrics.json, report.md, episodes.h5, train_metrics.json, *.png};
<arm> is scratch, libero_90 (the committed base, docs/results/libero_90_state_base) or libero_90_first (the first
base, lost with its session); each run's config.yaml must name its arm's base. Its metrics.json (the grid's
success matrix, 5 rollouts per cell) gives the row. Seeds of one method and arm are
averaged here (mean +- std over seeds, as the report does). tests/test_committed_results.py checks that RESULTS
holds this table and that each metrics.json is what the report makes of the committed episodes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "pretraining_libero_10"
# arm folder -> (the table's label, the base its runs' config.yaml must name). The first base lived in a session's
# runs/ and is gone; its runs stay, labelled, beside those of the committed base rebuilt by the same recipe.
ARMS = {"scratch": ("from scratch", None),
        "libero_90_first": ("first LIBERO-90 base (lost)", "runs/pretrained/libero_90_state"),
        "libero_90": ("LIBERO-90 base (committed)", "docs/results/libero_90_state_base")}
NAMES = {"seqft": "SeqFT", "er": "ER", "packnet": "PackNet"}


def rows(results: Path) -> tuple[dict, set]:
    """(method, arm) -> {metric: per-seed values} from <results>/<arm>/s<seed>/<method>/metrics.json, and the
    FWT definitions those files used."""
    import yaml

    out, fwt = {}, set()
    for arm, (_, base) in ARMS.items():
        for f in sorted((results / arm).glob("s[0-9]*/*/metrics.json")):
            named = (yaml.safe_load((f.parent / "config.yaml").read_text()).get("train") or {}).get("pretrained")
            if named != base:
                raise SystemExit(f"{f.parent / 'config.yaml'}: train.pretrained is {named!r}, but the {arm} arm's "
                                 f"runs start from {base!r}")
            doc = json.loads(f.read_text())
            fwt.add(doc["fwt_definition"])
            for m, r in doc["metrics"].items():
                cell = out.setdefault((m, arm), {})
                for k in ("fwt", "nbt", "auc", "final"):
                    cell.setdefault(k, []).extend(r["original"][k]["per_seed"])
    return out, fwt


def table(results: Path = RESULTS) -> str:
    found, fwt = rows(results)
    if not found:
        raise SystemExit(f"no committed run folders (<arm>/s<seed>/<method>/metrics.json) under {results}")
    lines = [f"| method | start | seeds | FWT, {' / '.join(sorted(fwt))} | NBT | AUC | final |", "|---" * 7 + "|"]
    rank = {k: i for i, k in enumerate(NAMES)}
    for m, arm in sorted(found, key=lambda k: (rank.get(k[0], len(rank)), list(ARMS).index(k[1]))):
        v = found[m, arm]
        cells = [f"{100 * np.mean(v[k]):.1f}" + (f" \u00b1 {100 * np.std(v[k]):.1f}" if len(v[k]) > 1 else "")
                 for k in ("fwt", "nbt", "auc", "final")]
        lines.append(f"| {NAMES.get(m, m)} | {ARMS[arm][0]} | {len(v['auc'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="the committed folders (default: %(default)s)")
    print(table(ap.parse_args(argv).results))


if __name__ == "__main__":
    main()
