"""Rebuild the cross-seed report of the libero_goal battery from the files committed per method and seed.

    python benchmarks/evidence_merge.py                      # -> runs/evidence_merge/merged/{report.md, metrics.json, *.png}
    python benchmarks/evidence_merge.py --write              # and copy them over docs/results/evidence_libero_goal_final/
    python benchmarks/evidence_merge.py --table              # docs/RESULTS.md's cross-seed table, from the committed merge
    python benchmarks/evidence_merge.py --evidence docs/results/evidence_libero_goal_peft --write   # the PEFT methods
    python benchmarks/evidence_merge.py --table --evidence docs/results/evidence_libero_goal_final \
        --evidence docs/results/evidence_libero_goal_peft   # one table of both (the eight methods)

Each `clbench run` folder of the battery (configs/evidence_libero_goal_final.yaml; the methods on a frozen
LIBERO-90 base: configs/evidence_libero_goal_peft.yaml, in evidence_libero_goal_peft/) is committed as
<evidence>/s<seed>/<method>/{config.yaml, episodes.h5, train_metrics.json, action_level.json}, the floors'
episodes as s0/floors/<floor>.h5. The two configs differ in their methods' settings (a frozen base, algo_kwargs),
so each folder is merged on its own; their grids are the same, so their rows share one table. The checkpoints are not committed, so this puts
each back into a run folder's layout, merges them as `clbench report --merge` does, and reports the merge (the
action-level numbers come from the committed action_level.json files). tests/test_committed_results.py runs it and
checks that the committed metrics.json is what it makes, and that RESULTS holds the table `--table` prints.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "docs" / "results" / "evidence_libero_goal_final"
OUTPUTS = ("report.md", "metrics.json", "action_level.json")


def rebuild_sources(evidence: Path, work: Path) -> list[Path]:
    """Run folders under `work`, one per committed (seed, method), in ORDER (the report's row order), the first one
    holding the floors."""
    found = [p for p in evidence.glob("s[0-9]*/*") if (p / "episodes.h5").exists()]
    sources = []
    for src in sorted(found, key=lambda p: (ORDER.index(p.name) if p.name in ORDER else len(ORDER), p.parent.name)):
        seed = src.parent.name
        dst, train = work / seed / src.name, f"{src.name}_{seed}"
        shutil.rmtree(dst, ignore_errors=True)
        (dst / "grid").mkdir(parents=True)
        (dst / "train" / train).mkdir(parents=True)
        shutil.copy(src / "config.yaml", dst / "config.yaml")
        shutil.copy(src / "episodes.h5", dst / "grid" / "episodes.h5")
        shutil.copy(src / "train_metrics.json", dst / "train" / train / "metrics.json")
        if (src / "action_level.json").exists():
            shutil.copy(src / "action_level.json", dst / "action_level.json")
        sources.append(dst)
    if not sources:
        raise SystemExit(f"no committed run folders (s<seed>/<method>/episodes.h5) under {evidence}")
    for h5 in sorted((evidence / "s0" / "floors").glob("*.h5")):
        (sources[0] / "floors" / h5.stem).mkdir(parents=True)
        shutil.copy(h5, sources[0] / "floors" / h5.stem / "episodes.h5")
    return sources


COLUMNS = ("FWT (S[j, j])", "NBT", "AUC", "final, original", "final, paraphrase",
           "contrast target SR / GSA (no-switch baseline)", "original persistence", "collision OGP / CGAR")
ORDER = ("seqft", "er", "ewc", "packnet", "multitask", "l2m", "tail", "iscil", "dmpel")


def table(*docs: dict) -> str:
    """The cross-seed table of merged metrics.json files of one grid: mean +- std over seeds in %, one row per
    method (its seed count named when it differs from the most common), then the first file's floors' rows."""
    from collections import Counter

    def pct(x, std=True):
        return f"{100 * x['mean']:.1f}" + (f" \u00b1 {100 * x['std']:.1f}" if std else "")

    def row(name, orig, lang, std=True):
        c, base, col = lang["contrast"], lang["contrast_baseline"], lang["collision"]
        cells = [pct(orig[k], std) for k in ("fwt", "nbt", "auc", "final")]
        cells += [pct(lang["faces"]["paraphrase"]["success"], std),
                  f"{pct(c['target_sr'], std)} / {pct(c['gsa'], std)} ({pct(base['gsa'], False)})",
                  pct(c["original_persistence"], std), f"{pct(col['ogp'], std)} / {pct(col['cgar'], std)}"]
        return f"| {name} | " + " | ".join(cells) + " |"

    metrics = {m: r for d in docs for m, r in d["metrics"].items()}
    lang = {m: r for d in docs for m, r in d["language"].items()}
    doc = docs[0]
    seeds = {m: len(r["original"]["final"]["per_seed"]) for m, r in metrics.items()}
    usual = Counter(seeds.values()).most_common(1)[0][0]
    lines = ["| method | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for m in sorted(metrics, key=lambda m: ORDER.index(m) if m in ORDER else len(ORDER)):
        name = {"seqft": "SeqFT", "er": "ER", "ewc": "EWC", "packnet": "PackNet", "l2m": "L2M", "tail": "TAIL",
                "iscil": "IsCiL", "dmpel": "DMPEL"}.get(m, m)
        name += f" ({seeds[m]} seed{'s' * (seeds[m] != 1)})" if seeds[m] != usual else ""
        lines.append(row(name, metrics[m]["original"], lang[m]))
    for f in doc["floors"]["metrics"]:
        lines.append(row(f"floor: {f}", doc["floors"]["metrics"][f]["original"], doc["floors"]["language"][f], False))
    return "\n".join(lines)


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evidence", type=Path, action="append",
                    help=f"the committed folders (default: {EVIDENCE.relative_to(ROOT)}); repeatable with --table")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "evidence_merge",
                    help="where the run folders and the merge are rebuilt (default: %(default)s)")
    ap.add_argument("--write", action="store_true", help="copy report.md, metrics.json and the plots to --evidence")
    ap.add_argument("--table", action="store_true",
                    help="print RESULTS' cross-seed table from --evidence's metrics.json and stop (no rebuild)")
    a = ap.parse_args(argv)
    evidence = a.evidence or [EVIDENCE]
    if a.table:
        import json

        print(table(*(json.loads((e / "metrics.json").read_text()) for e in evidence)))
        return evidence[0]
    if len(evidence) > 1:
        ap.error("--evidence is repeatable with --table only: merge one folder at a time")
    a.evidence = evidence[0]

    from clbench_jax.eval.report import merge_runs
    from clbench_jax.eval.run import report

    sources = rebuild_sources(a.evidence, a.work)
    out = a.work / "merged"
    shutil.rmtree(out, ignore_errors=True)
    merge_runs(out, sources)
    report(out)
    print(f"merged {len(sources)} run folders into {out}: "
          + ", ".join(f"{s.parent.name}/{s.name}" for s in sources))
    if a.write:
        for f in [*OUTPUTS, *sorted(p.name for p in out.glob("*.png"))]:
            shutil.copy(out / f, a.evidence / f)
        print(f"wrote them to {a.evidence}")
    return out


if __name__ == "__main__":
    main()
