"""LIBERO's pretraining experiment (seed 001, Fig. 5): the lifelong metrics on libero_10 from scratch and from the
LIBERO-90 base, one row per method and arm, from the committed run folders.

    python benchmarks/pretraining_table.py     # docs/RESULTS.md's table, from docs/results/pretraining_libero_10/
    python benchmarks/pretraining_table.py --plot docs/results/pretraining_libero_10/fig5.png   # and its bars

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


def plot(results: Path, path: Path) -> None:
    """Seed 001's Fig. 5 as bars: FWT, NBT and AUC per method, one bar per arm (mean, +- std over seeds)."""
    from clbench_jax.eval.report import _plt

    found, _ = rows(results)
    plt = _plt()
    methods = [m for m in NAMES if any(k[0] == m for k in found)]
    arms = [a for a in ARMS if any(k[1] == a for k in found)]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
    width = 0.8 / len(arms)
    for ax, metric in zip(axes, ("fwt", "nbt", "auc")):
        for i, arm in enumerate(arms):
            vals = [found.get((m, arm), {}).get(metric, []) for m in methods]
            ax.bar([j + (i - (len(arms) - 1) / 2) * width for j in range(len(methods))],
                   [100 * np.mean(v) if v else np.nan for v in vals], width,
                   yerr=[100 * np.std(v) if len(v) > 1 else 0 for v in vals] if any(len(v) > 1 for v in vals)
                   else None, label=ARMS[arm][0], capsize=3)
        ax.set_xticks(range(len(methods)), [NAMES[m] for m in methods])
        ax.set_title(metric.upper() + (" (lower is better)" if metric == "nbt" else ""))
        ax.axhline(0, color="k", lw=0.5)
    axes[0].set_ylabel("% (libero_10, 9 tasks)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="the committed folders (default: %(default)s)")
    ap.add_argument("--plot", type=Path, default=None,
                    help="also draw the bars of FWT / NBT / AUC per method and arm to this PNG "
                         "(docs/results/pretraining_libero_10/fig5.png is made so)")
    a = ap.parse_args(argv)
    print(table(a.results))
    if a.plot:
        plot(a.results, a.plot)


if __name__ == "__main__":
    main()
