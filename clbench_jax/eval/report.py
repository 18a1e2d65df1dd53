"""The run report: metrics.json, report.md and PNG plots, from the run folder's files only.

Success numbers come from grid/episodes.h5 (aggregate.py: per variant, then variants, then mean / std across
seeds); FWT uses the training runs' learning curves (train/*/metrics.json, LIBERO's definition). `clbench report
RUN` rebuilds everything from those files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from clbench_jax.errors import ClbenchError


def _pm(d: dict | None, scale: float = 100.0) -> str:
    if not d or d.get("mean") is None:
        return "n/a"
    return f"{scale * d['mean']:.1f} ± {scale * d['std']:.1f}"


def learning_curves(run_dir: Path) -> dict:
    """{method: {seed: curves}} from train/*/metrics.json (runs without curves are skipped)."""
    out: dict = {}
    for p in sorted((run_dir / "train").glob("*/metrics.json")):
        m = json.loads(p.read_text())
        cfg = m.get("config", {})
        if m.get("curves") and cfg.get("algo") is not None:
            out.setdefault(cfg["algo"], {})[cfg["seed"]] = m["curves"]
    return out


def finalize(run_dir: str | os.PathLike) -> dict:
    """Aggregate grid/episodes.h5 into metrics.json and write report.md + plots -> the metrics dict."""
    from clbench_jax.eval import aggregate
    from clbench_jax.eval.episodes import read_columns

    run_dir = Path(run_dir)
    path = run_dir / "grid" / "episodes.h5"
    if not path.exists():
        raise ClbenchError("no episode file: the grid has not finished (rerun `clbench run` to resume it)",
                           file=str(path))
    cols, meta = read_columns(path)
    tasks = meta["tasks"]
    tensors = aggregate.success_tensors(cols, len(tasks))
    curves = learning_curves(run_dir)
    metrics = aggregate.seed_metrics(tensors, curves)
    failed = sorted({(str(m), int(s), int(t), int(j), str(st)) for m, s, t, j, st in
                     zip(cols["method"], cols["seed"], cols["stage"], cols["task"], cols["status"])
                     if str(st).startswith("failed cell")})
    physics = int(np.char.startswith(cols["status"].astype(str), "physics").sum())
    doc = {"tasks": tasks, "episodes": int(len(cols["method"])), "episode_file": "grid/episodes.h5",
           "success": aggregate.to_json(tensors), "metrics": metrics, "language": language_battery(cols, len(tasks)),
           "failed_cells": [dict(zip(("method", "seed", "stage", "task", "reason"), f)) for f in failed],
           "physics_failures": physics}
    tmp = run_dir / "metrics.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, run_dir / "metrics.json")
    write_report(run_dir, doc, tensors, curves)
    return doc


LANGUAGE = {"contrast": ("target_sr", "gsa", "original_persistence"), "collision": ("ogp", "cgar", "air")}


def language_battery(cols: dict, n_tasks: int) -> dict:
    """Seed 000's Table II / Figure 4 numbers for the final checkpoint (stage K - 1), per method: contrast Target
    SR / GSA / Original Persistence and collision OGP / CGAR / AIR (eval/language_metrics.py), per seed, then
    mean / std across seeds."""
    from clbench_jax.eval import language_metrics as L
    from clbench_jax.eval.aggregate import mean_std

    ran = np.asarray([str(x) == "ok" or str(x).startswith("physics") for x in cols["status"]])
    out: dict = {}
    for m in sorted(set(cols["method"].tolist())):
        per: dict = {}
        for seed in sorted(set(cols["seed"][cols["method"] == m].tolist())):
            base = ran & (cols["method"] == m) & (cols["seed"] == seed) & (cols["stage"] == n_tasks - 1)
            for cond, keys in LANGUAGE.items():
                r = base & (cols["condition"] == cond)
                if not r.any():
                    continue
                if cond == "contrast":
                    res = L.contrast_metrics(cols["task"][r], cols["variant"][r], cols["slot"][r], cols["target"][r],
                                             cols["success"][r])
                else:
                    res = L.collision_metrics(cols["task"][r], cols["variant"][r], cols["success"][r],
                                              cols["held_at_reset"][r], cols["action_initiated"][r])
                for k in keys:
                    per.setdefault(cond, {}).setdefault(k, []).append(res[k])
        out[m] = {c: {k: mean_std(v) for k, v in d.items()} for c, d in per.items()}
    return out


def write_report(run_dir: Path, doc: dict, tensors: dict, curves: dict) -> None:
    from clbench_jax.lifelong.plots import plot_learning_curves, plot_success_matrix

    tasks = doc["tasks"]
    labels = [f"{i}:{t[:28]}" for i, t in enumerate(tasks)]
    cfg_path = run_dir / "config.yaml"
    lines = ["# clbench run report", ""]
    if cfg_path.exists():
        lines += ["Run config (`config.yaml`):", "", "```yaml", cfg_path.read_text().strip(), "```", ""]
    lines += [f"{doc['episodes']:,} evaluated episodes in `{doc['episode_file']}`; every success number below is "
              "computed from them by `clbench_jax/eval/aggregate.py`: an episode succeeds when its variant's goal "
              "column (`target`) held; rollouts are averaged per variant, variants equally within (stage t, task "
              "j, condition c), then mean ± std (ddof 0) across seeds. FWT uses the training runs' learning "
              "curves (`train/*/metrics.json`, LIBERO's definition) where they exist, else S[j, j]. "
              "Percentages.", "", "## FWT / NBT / AUC (original instructions)", "",
              "| method | seeds | FWT ↑ | NBT ↓ | AUC ↑ | final success ↑ |", "|---|---|---|---|---|---|"]
    for m, res in doc["metrics"].items():
        o = res.get("original", {})
        lines.append(f"| {m} | {len(tensors[m]['seeds'])} | {_pm(o.get('fwt'))} | {_pm(o.get('nbt'))} | "
                     f"{_pm(o.get('auc'))} | {_pm(o.get('final'))} |")
    conds = sorted({c for res in doc["metrics"].values() for c in res if c not in ("original", "paraphrase_gap")})
    if conds:
        lines += ["", "## Other instruction conditions", "", "| method | condition | NBT | AUC | final success |",
                  "|---|---|---|---|---|"]
        for m, res in doc["metrics"].items():
            for c in conds:
                if c in res:
                    lines.append(f"| {m} | {c} | {_pm(res[c]['nbt'])} | {_pm(res[c]['auc'])} | "
                                 f"{_pm(res[c]['final'])} |")
        gaps = {m: r["paraphrase_gap"] for m, r in doc["metrics"].items() if "paraphrase_gap" in r}
        if gaps:
            lines += ["", "Paraphrase gap (original − paraphrase, points):", "",
                      "| method | AUC gap | final gap | signed gap over all (t, j ≤ t) |", "|---|---|---|---|"]
            lines += [f"| {m} | {_pm(g['auc_gap'])} | {_pm(g['final_gap'])} | {_pm(g['signed_gap'])} |"
                      for m, g in gaps.items()]
    if any(doc["language"].values()):
        lines += ["", "## Language battery, final checkpoint (seed 000's definitions)", "",
                  "| method | contrast target SR | GSA | original persistence | collision OGP | CGAR | AIR |",
                  "|---|---|---|---|---|---|---|"]
        for m, res in doc["language"].items():
            c, x = res.get("contrast", {}), res.get("collision", {})
            lines.append(f"| {m} | " + " | ".join(_pm(c.get(k)) for k in LANGUAGE["contrast"]) + " | "
                         + " | ".join(_pm(x.get(k)) for k in LANGUAGE["collision"]) + " |")
    lines += ["", "## Final success per task (original instructions, after the last stage)", "",
              "| task | " + " | ".join(tensors) + " |", "|---|" + "---|" * len(tensors)]
    for j, t in enumerate(tasks):
        cells = []
        for m, d in tensors.items():
            mu, sd = d["mean"][-1, j, 0], d["std"][-1, j, 0]
            cells.append("n/a" if not np.isfinite(mu) else f"{100 * mu:.1f} ± {100 * sd:.1f}")
        lines.append(f"| {j}: {t} | " + " | ".join(cells) + " |")
    lines += ["", "## Success matrices and learning curves", ""]
    for m, d in tensors.items():
        png = f"success_{m}.png"
        plot_success_matrix(d["mean"][:, :, 0], labels, str(run_dir / png),
                            f"{m}: S[t, j] (original), mean of {len(d['seeds'])} seed(s)")
        lines.append(f"![{m} success matrix]({png})")
        for seed, cv in sorted(curves.get(m, {}).items()):
            cpng = f"curves_{m}_s{seed}.png"
            epochs = _curve_epochs(run_dir, m, seed, cv)
            plot_learning_curves(cv, epochs, labels[:len(cv)], str(run_dir / cpng), f"{m} seed {seed}")
            lines.append(f"![{m} seed {seed} learning curves]({cpng})")
        lines.append("")
    if doc["failed_cells"] or doc["physics_failures"]:
        lines += ["## Failures", "", f"Episodes whose physics failed (counted as unsuccessful): "
                  f"{doc['physics_failures']}.", ""]
        lines += [f"- {f['method']} seed {f['seed']} stage {f['stage']} task {f['task']}: {f['reason']}"
                  for f in doc["failed_cells"]]
    tmp = run_dir / "report.md.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, run_dir / "report.md")


def _curve_epochs(run_dir: Path, method: str, seed: int, curves) -> list:
    p = run_dir / "train" / f"{method}_s{seed}" / "metrics.json"
    if p.exists():
        ep = json.loads(p.read_text()).get("curve_epochs")
        if ep:
            return ep
    return [list(range(len(c))) for c in curves]
