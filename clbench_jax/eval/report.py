"""The run report: metrics.json, report.md and PNG plots, from the run folder's files only.

Success numbers come from grid/episodes.h5 (aggregate.py: per variant, then variants, then mean / std across
seeds); FWT uses the training runs' learning curves (train/*/metrics.json, LIBERO's definition). The language
battery adds seed 000's Table II / III and Figures 3-6: contrast and collision metrics of the final checkpoint
(per slot, achieved goals), the action-level metrics (eval/battery.py -> action_level.json, computed when the
checkpoints and demos are there), Spearman correlations over method-task pairs, variant coverage from the run's
variant file, and the final vs temporal paraphrase gap. `clbench report RUN` rebuilds everything from those files.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

import numpy as np

from clbench_jax.errors import ClbenchError
from clbench_jax.jsonio import read_json, save_figure, write_json, write_text


def _pm(d: dict | None, scale: float = 100.0) -> str:
    if not d or d.get("mean") is None:
        return "n/a"
    return f"{scale * d['mean']:.1f} ± {scale * d['std']:.1f}"


def learning_curves(run_dir: Path) -> dict:
    """{method: {seed: curves}} from train/*/metrics.json (runs without curves are skipped)."""
    out: dict = {}
    for p in sorted((run_dir / "train").glob("*/metrics.json")):
        m = read_json(p, "training metrics")
        cfg = m.get("config", {})
        if m.get("curves") and cfg.get("algo") is not None:
            out.setdefault(cfg["algo"], {})[cfg["seed"]] = m["curves"]
    return out


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


def finalize(run_dir: str | os.PathLike, log: Callable[[str], None] | None = None,
             action_note: str | None = None) -> dict:
    """Aggregate grid/episodes.h5 (and the floors' episodes) into metrics.json and write report.md + plots -> the
    metrics dict. Reads the run folder's files only: the action level comes from action_level.json when the run
    wrote one (eval/run.py computes it); `action_note` says why it is missing or stale."""
    from clbench_jax.eval import aggregate, battery
    from clbench_jax.eval.episodes import read_columns

    log = log or _log
    run_dir = Path(run_dir)
    path = run_dir / "grid" / "episodes.h5"
    if not path.exists():
        raise ClbenchError("no episode file: the grid has not finished (rerun `clbench run` to resume it)",
                           file=str(path))
    cols, meta = read_columns(path)
    cols = aggregate.analysis_columns(cols)
    tasks = meta["tasks"]
    tensors = aggregate.success_tensors(cols, len(tasks))
    curves = learning_curves(run_dir)
    metrics = aggregate.seed_metrics(tensors, curves)
    floors = floors_battery(run_dir, len(tasks))
    failed = sorted({(str(m), int(s), int(t), int(j), str(st)) for m, s, t, j, st in
                     zip(cols["method"], cols["seed"], cols["stage"], cols["task"], cols["status"])
                     if str(st).startswith("failed cell")})
    physics = int(np.char.startswith(cols["status"].astype(str), "physics").sum())
    act, note = None, action_note or f"no {battery.FILE} in the run folder"
    if (run_dir / battery.FILE).exists():
        try:
            act, note = battery.read_action_level(run_dir / battery.FILE), action_note
        except ClbenchError as e:
            note = f"unreadable: {e}"
    if note:
        log(f"action-level metrics: {note}")
    cov, cov_note = variant_coverage(run_dir)
    doc = {"tasks": tasks, "episodes": int(len(cols["method"])), "episode_file": "grid/episodes.h5",
           "fwt_definition": aggregate.fwt_definition(tensors, curves),
           "success": aggregate.to_json(tensors), "metrics": metrics, "language": language_battery(cols, len(tasks)),
           "paraphrase_kinds": aggregate.gap_by_kind(cols, len(tasks)), "floors": floors,
           "first_reach_recorded": "first_reach_object" in cols,
           "failed_cells": [dict(zip(("method", "seed", "stage", "task", "reason"), f)) for f in failed],
           "physics_failures": physics,
           "action_level": {"file": battery.FILE if act else None, "note": note, "summary": battery.summary(act)},
           "table3": battery.table3(cols, len(tasks), act),
           "coverage": cov if cov else {"skipped": cov_note}}
    write_json(run_dir / "metrics.json", doc)
    write_report(run_dir, doc, tensors, curves)
    return doc


MERGE_KEYS = ("tasks", "goal_columns", "spec")  # what makes two grid folders parts of one grid


def merge_runs(out_dir: str | os.PathLike, sources: list) -> Path:
    """Merge the finished grids of run folders that evaluated disjoint (method, seed) runs of one grid (seeds run
    on different machines or at different times) into `out_dir` -> out_dir (report it with eval.run.report).

    The grids must agree on tasks, the variants' goal columns and the grid settings, and the folders' config.yaml
    on everything but methods, seeds and the pretrained base's path (runs from a base never merge with runs from
    scratch). out_dir gets grid/episodes.h5 (the sources' episodes, concatenated), config.yaml (methods and seeds
    united; `pretrained_by_run` names each run's base where they differ), train/ links to the sources' runs, the
    floors of the first source that has each (they depend only on the grid), the sources' action-level results
    united (so runs whose checkpoints are gone keep theirs), and a grid.json whose fingerprint names the sources,
    so `clbench run` there refuses to start a new grid over the merged one."""
    import yaml

    from clbench_jax.eval import battery, episodes

    out = Path(out_dir)
    parts, metas, configs, owner = [], [], [], {}  # owner: (method, seed) -> source folder
    for src in map(Path, sources):
        path = src / "grid" / "episodes.h5"
        if not path.exists():
            raise ClbenchError("no episode file: that run's grid has not finished", file=str(path))
        cols, meta = episodes.read_columns(path)
        for k in MERGE_KEYS:
            if metas and meta.get(k) != metas[0].get(k):
                raise ClbenchError(f"not the grid of {sources[0]}: its {k} differs", file=str(path), field=k)
        for m, s in sorted({(str(m), int(s)) for m, s in zip(cols["method"], cols["seed"])}):
            if (m, s) in owner:
                raise ClbenchError(f"{m} seed {s} is also in {owner[m, s]}", file=str(path), field="seed")
            owner[m, s] = src
        cfg = src / "config.yaml"
        configs.append((cfg, yaml.safe_load(cfg.read_text()) if cfg.exists() else None))
        parts.append(cols)
        metas.append(meta)
    for cfg, c in configs[1:]:
        if c is not None and configs[0][1] is not None and _comparable(c) != _comparable(configs[0][1]):
            raise ClbenchError(f"its run config differs from {configs[0][0]} (beyond methods, seeds and the "
                               "pretrained base's path)", file=str(cfg))
    # Runs from different bases (a base rebuilt by the same recipe, or one per seed) merge, each named; runs from a
    # base never merge with runs from scratch: that is another experiment.
    from clbench_jax.lifelong.config import seed_base

    config_of = {src: c for src, (_, c) in zip(map(Path, sources), configs)}
    starts = {(m, s): seed_base((config_of[src].get("train") or {}).get("pretrained"), s)
              for (m, s), src in owner.items() if config_of[src] is not None}
    (m0, s0), base0 = next(iter(starts.items()), ((None, None), None))
    for (m, s), base in starts.items():
        if (base is None) != (base0 is None):
            raise ClbenchError(f"{m} seed {s} starts {'from scratch' if base is None else 'from a pretrained base'} "
                               f"and {m0} seed {s0} does not: another experiment, not another seed",
                               file=str(owner[m, s] / "config.yaml"), field="train.pretrained")
    bases = {f"{m}_s{s}": base for (m, s), base in starts.items()}
    acts = [(p, battery.read_action_level(p)) for p in (src / battery.FILE for src in map(Path, sources)) if p.exists()]
    # Each run's action level is measured on the demos it trained on, so runs whose demo files differ merge (the
    # oracle's demos are byte-identical on one machine, not across machines): the merged file names each run's set.
    # Anything else (windows, policy, tasks, variants) must match.
    but_demos = lambda d: {k: v for k, v in d["settings"].items() if k != "demos"}  # noqa: E731
    for p, d in acts[1:]:
        if but_demos(d) != but_demos(acts[0][1]):
            raise ClbenchError(f"its action-level settings differ from {acts[0][0]} (other variants, windows or "
                               "policy); move one of the two files away to merge without it", file=str(p),
                               field="settings")
    (out / "grid").mkdir(parents=True, exist_ok=True)
    for (m, s), src in owner.items():
        run = (src / "train" / f"{m}_s{s}").resolve()
        link = out / "train" / f"{m}_s{s}"
        if run.exists() and run != link.resolve():
            link.parent.mkdir(exist_ok=True)
            if link.is_symlink():
                link.unlink()
            link.symlink_to(run)
    fp = "merged:" + ",".join(str(m.get("fingerprint")) for m in metas)
    meta = {**{k: metas[0].get(k) for k in MERGE_KEYS}, "fingerprint": fp, "merged_from": list(map(str, sources)),
            "checkpoints": [c for m in metas for c in m.get("checkpoints", [])]}
    episodes.write_columns(out / "grid" / "episodes.h5", episodes.concat(parts), meta)
    write_json(out / "grid" / "grid.json", meta)
    if configs[0][1] is not None:
        merged = dict(configs[0][1], methods=list(dict.fromkeys(m for m, _ in owner)),
                      seeds=sorted({s for _, s in owner}))
        if len(set(bases.values())) > 1:
            merged["pretrained_by_run"] = bases
        write_text(out / "config.yaml", yaml.safe_dump(merged, sort_keys=False))
    from clbench_jax.eval.floors import floor_episode_files

    if acts:
        merged = dict(acts[0][1], runs={k: v for _, d in acts for k, v in d["runs"].items()})
        if any(d["settings"].get("demos") != acts[0][1]["settings"].get("demos") for _, d in acts):
            merged["demo_sets"] = {k: d["settings"].get("demos") for _, d in acts for k in d["runs"]}
        write_json(out / battery.FILE, merged)
    for src in map(Path, reversed(sources)):  # the first source that has a floor wins
        for kind, path in floor_episode_files(src).items():
            cols, meta = episodes.read_columns(path)
            episodes.write_columns(out / "floors" / kind / "episodes.h5", cols, meta)
    return out


def _comparable(c: dict) -> dict:
    """What a run config must share with another to merge: all but its methods, seeds and its base's path."""
    c = {k: v for k, v in c.items() if k not in ("methods", "seeds")}
    if isinstance(c.get("train"), dict):
        c["train"] = {k: v for k, v in c["train"].items() if k != "pretrained"}
    return c


LANGUAGE = {"contrast": ("target_sr", "gsa", "original_persistence"), "collision": ("ogp", "cgar", "air")}
FACE_CONDITIONS = ("original", "paraphrase", "contrast", "swap", "occ", "nonsense")


def seed_battery(c: dict) -> dict:
    """The battery of one (method, seed) from its final-stage episodes `c` (analysis columns, episodes that ran):
    seed 000's contrast numbers (overall, per slot, and the no-switch baseline; trivially reachable contrasts
    apart), collision numbers over the audited goals (verified collisions; unverified probes apart), and seed
    004's reading of every goal condition (`faces`: success, original goal, first grasp -- and first reach when
    recorded -- over all rollouts and over the failures) with the swaps' no-switch baseline."""
    from clbench_jax.eval import faces
    from clbench_jax.eval import language_metrics as L

    out: dict = {}
    cond = np.asarray(c["condition"]).astype(str)
    orig = cond == "original"
    for name in ("contrast", "contrast_trivial"):
        r = cond == name
        if r.any():
            res = L.contrast_metrics(c["task"][r], c["variant"][r], c["slot"][r], c["target"][r], c["success"][r])
            out[name] = {k: res[k] for k in LANGUAGE["contrast"]}
            if name == "contrast":
                out["contrast_per_slot"] = {sl: d if d.get("unavailable") else {k: d[k] for k in LANGUAGE["contrast"]}
                                            for sl, d in res["per_slot"].items()}
    for name in ("contrast", "swap"):
        r = cond == name
        if r.any() and orig.any():
            out[f"{name}_baseline"] = L.switch_baseline(c["task"][r], c["variant"][r], c["target"][r], c["task"][orig],
                                                        c["success"][orig])
    for name in ("collision", "probe"):
        r = cond == name
        if r.any():
            succ, held = L.audited_only(c["success"][r], c["held_at_reset"][r], c["n_audited"][r])
            res = L.collision_metrics(c["task"][r], c["variant"][r], succ, held, c["action_initiated"][r])
            out[name] = {k: res[k] for k in LANGUAGE["collision"]}
            out[f"{name}_achieved"] = res["achieved"]
    if "first_grasp_object" in c:
        grasp = faces.grasp_category(c["first_grasp_object"], c["named_object"], c["original_object"])
        reach = (faces.grasp_category(c["first_reach_object"], c["named_object"], c["original_object"])
                 if "first_reach_object" in c else None)
        for name in FACE_CONDITIONS:
            r = cond == name
            if r.any():
                out.setdefault("faces", {})[name] = L.face_metrics(
                    c["task"][r], c["variant"][r], c["target"][r], c["success"][r], grasp[r],
                    None if reach is None else reach[r])
    return out


def _combine(items: list):
    """Per-seed nested dicts -> the same tree with mean_std at the leaves; a subtree unavailable in every seed stays
    {"unavailable": true}, one missing in a seed counts as missing there."""
    from clbench_jax.eval.aggregate import mean_std

    dicts = [x for x in items if isinstance(x, dict)]
    if not dicts:
        return mean_std([None if x is None or (isinstance(x, float) and x != x) else x for x in items])
    if all(isinstance(x, dict) and x.get("unavailable") for x in items):
        return {"unavailable": True}
    keys = dict.fromkeys(k for d in dicts for k in d if k != "unavailable")
    return {k: _combine([x.get(k) if isinstance(x, dict) and not x.get("unavailable") else None for x in items])
            for k in keys}


def language_battery(cols: dict, n_tasks: int) -> dict:
    """Per method: `seed_battery` of its final checkpoint (stage K - 1) per seed, then mean / std across seeds
    (seed 000's Table II, Figures 3 and 4; seed 004's faces and first-grasp split)."""
    from clbench_jax.eval.battery import ran_episodes
    from clbench_jax.eval.episodes import select

    final = ran_episodes(cols) & (np.asarray(cols["stage"]) == n_tasks - 1)
    method, seed = np.asarray(cols["method"]).astype(str), np.asarray(cols["seed"])
    out: dict = {}
    for m in sorted(set(method.tolist())):
        seeds = sorted(set(seed[method == m].tolist()))
        per = [seed_battery(select(cols, final & (method == m) & (seed == s))) for s in seeds]
        out[m] = _combine(per) if any(per) else {}
    return out


def floors_battery(run_dir: Path, n_tasks: int) -> dict:
    """The floors' numbers (RUN/floors/<floor>/episodes.h5, eval/floors.py) -> {"metrics", "language", "success",
    "paraphrase_kinds", "episodes", "files"} (or {"note"} without floors). A floor runs at the last stage only; it
    does not learn, so its S[t, j] is its final S[K-1, j] at every stage."""
    from clbench_jax.eval import aggregate
    from clbench_jax.eval.episodes import concat, read_columns
    from clbench_jax.eval.floors import floor_episode_files

    files = floor_episode_files(run_dir)
    if not files:
        return {"note": "no floors in the run folder (grid.floors, `clbench run`)"}
    parts = [aggregate.analysis_columns(read_columns(f)[0]) for f in files.values()]
    common = set.intersection(*(set(p) for p in parts))
    cols = concat([{k: p[k] for k in common} for p in parts])
    tensors = aggregate.broadcast_final(aggregate.success_tensors(cols, n_tasks))
    return {"metrics": aggregate.seed_metrics(tensors), "language": language_battery(cols, n_tasks),
            "success": aggregate.to_json(tensors),
            "paraphrase_kinds": aggregate.gap_by_kind(cols, n_tasks), "episodes": int(len(cols["method"])),
            "files": {k: str(v.relative_to(run_dir)) for k, v in files.items()}}


def variant_coverage(run_dir: Path) -> tuple[dict | None, str | None]:
    """Figure 5's numbers: language.variants.coverage of the run's variant file (config.yaml grid.variants) ->
    (coverage, None) or (None, why not)."""
    import yaml

    from clbench_jax.language.variants import coverage, read_variants
    from clbench_jax.paths import repo_file

    cfg = run_dir / "config.yaml"
    if not cfg.exists():
        return None, "no config.yaml in the run folder"
    name = ((yaml.safe_load(cfg.read_text()) or {}).get("grid") or {}).get("variants")
    if not name:
        return None, "the run has no variant file"
    path = repo_file(name)
    try:
        return dict(coverage(read_variants(path)), file=str(path)), None
    except ClbenchError as e:
        return None, str(e)


def _with_floors(doc: dict, key: str):
    """(label, result) for each method, then each floor ("floor: random-motion"), of doc[key] / floors[key]."""
    yield from doc.get(key, {}).items()
    for f, r in doc.get("floors", {}).get(key, {}).items():
        yield f"floor: {f}", r


def _get(d, *keys):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def write_report(run_dir: Path, doc: dict, tensors: dict, curves: dict) -> None:
    from clbench_jax.lifelong.plots import plot_learning_curves, plot_success_matrix

    tasks = doc["tasks"]
    labels = [f"{i}:{t[:28]}" for i, t in enumerate(tasks)]
    cfg_path = run_dir / "config.yaml"
    lines = ["# clbench run report", ""]
    if cfg_path.exists():
        lines += ["Run config (`config.yaml`):", "", "```yaml", cfg_path.read_text().strip(), "```", ""]
    fl = doc.get("floors", {})
    floor_note = (f"Floors (seed 004): the do-nothing and random-motion policies ran the whole battery "
                  f"({fl['episodes']:,} episodes, `{'`, `'.join(fl['files'].values())}`); their rows (`floor: ...`) "
                  "sit under the methods in every table: read each rate against them, not against zero. A floor "
                  "does not learn: its S[t, j] is its last-stage S[K-1, j] at every stage."
                  if "files" in fl else f"Floors: {fl.get('note', 'none')}.")
    lines += [f"{doc['episodes']:,} evaluated episodes in `{doc['episode_file']}`; every success number below is "
              "computed from them by `clbench_jax/eval/aggregate.py`: an episode succeeds when its variant's goal "
              "column (`target`) held; rollouts are averaged per variant, variants equally within (stage t, task "
              "j, condition c), then mean ± std (ddof 0) across seeds. Percentages.", "",
              f"**FWT definition for every condition of this report: {doc['fwt_definition']}** (LIBERO's "
              "learning-curve FWT only when every condition has curves, i.e. original instructions alone; "
              "otherwise the success right after learning task j, from the grid, for all conditions, so AUCs "
              "compare).", "", floor_note, "", "## FWT / NBT / AUC (original instructions)", "",
              "| method | seeds | FWT ↑ | NBT ↓ | AUC ↑ | final success ↑ |", "|---|---|---|---|---|---|"]
    for m, res in _with_floors(doc, "metrics"):
        o = res.get("original", {})
        n = len(tensors[m]["seeds"]) if m in tensors else len((o.get("final") or {}).get("per_seed", []))
        lines.append(f"| {m} | {n} | {_pm(o.get('fwt'))} | {_pm(o.get('nbt'))} | "
                     f"{_pm(o.get('auc'))} | {_pm(o.get('final'))} |")
    conds = sorted({c for res in doc["metrics"].values() for c in res if c not in ("original", "paraphrase_gap")})
    if conds:
        lines += ["", "## Other instruction conditions", "", "| method | condition | NBT | AUC | final success |",
                  "|---|---|---|---|---|"]
        for m, res in _with_floors(doc, "metrics"):
            for c in conds:
                if c in res:
                    lines.append(f"| {m} | {c} | {_pm(res[c]['nbt'])} | {_pm(res[c]['auc'])} | "
                                 f"{_pm(res[c]['final'])} |")
        gaps = [(m, r["paraphrase_gap"]) for m, r in _with_floors(doc, "metrics") if "paraphrase_gap" in r]
        if gaps:
            lines += ["", "Paraphrase gap (original − paraphrase, points):", "",
                      "| method | AUC gap | final gap | signed gap over all (t, j ≤ t) |", "|---|---|---|---|"]
            lines += [f"| {m} | {_pm(g['auc_gap'])} | {_pm(g['final_gap'])} | {_pm(g['signed_gap'])} |"
                      for m, g in gaps]
    kinds = list(_with_floors(doc, "paraphrase_kinds"))
    if kinds:
        names = sorted({k for _, r in kinds for k in r})
        lines += ["", "### Paraphrase gap by kind of rewording", "",
                  "Original − paraphrase over the paraphrases of each kind (a paraphrase has several kinds; "
                  "`composition`: two or more), final stage / signed over all (t, j ≤ t), points; tasks with a "
                  "paraphrase of that kind, equally.", "",
                  "| method | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for m, r in kinds:
            lines.append(f"| {m} | " + " | ".join(
                f"{_pct(r[k]['final_gap'])} / {_pct(r[k]['signed_gap'])}" if k in r else "n/a" for k in names) + " |")
        first = kinds[0][1]
        lines += ["", "Paraphrases per kind (tasks / variants): " + ", ".join(
            f"{k} {first[k]['tasks']} / {first[k]['variants']}" for k in names if k in first) + "."]
    if any(doc["language"].values()):
        lines += ["", "## Language battery, final checkpoint (seed 000's definitions)", "",
                  "GSA beside its no-switch baseline: how often the *original* instruction's rollouts reach the "
                  "contrast goal without the original one (per contrast variant, as the contrasts are averaged). "
                  "Contrasts run to the horizon, so Target SR and GSA can differ. Trivially reachable contrasts "
                  "and unverified collision probes are outside these columns (tables below). Collisions: "
                  "statically verified ones, over the audited goals G_j.", "",
                  "| method | contrast target SR | GSA | GSA no-switch baseline | original persistence | "
                  "collision OGP | CGAR | AIR |", "|---|---|---|---|---|---|---|---|"]
        for m, res in _with_floors(doc, "language"):
            c, x = res.get("contrast", {}), res.get("collision", {})
            lines.append(f"| {m} | {_pm(c.get('target_sr'))} | {_pm(c.get('gsa'))} | "
                         f"{_pm(_get(res, 'contrast_baseline', 'gsa'))} | {_pm(c.get('original_persistence'))} | "
                         + " | ".join(_pm(x.get(k)) for k in LANGUAGE["collision"]) + " |")
        apart = [(m, r) for m, r in _with_floors(doc, "language") if "contrast_trivial" in r or "probe" in r]
        if apart:
            lines += ["", "Reported apart: contrasts whose goal a nudge of the reset state meets (an articulated "
                      "joint moved 0.01 from rest: LIBERO's Close is q > 0 and TurnOff q < 0 while drawers and "
                      "knobs rest at 0), and unverified collision probes.", "",
                      "| method | trivial contrasts: target SR | GSA | original persistence | probes: OGP | CGAR "
                      "| AIR |", "|---|---|---|---|---|---|---|"]
            for m, r in apart:
                c, x = r.get("contrast_trivial", {}), r.get("probe", {})
                lines.append(f"| {m} | " + " | ".join(_pm(c.get(k)) for k in LANGUAGE["contrast"]) + " | "
                             + " | ".join(_pm(x.get(k)) for k in LANGUAGE["collision"]) + " |")
    lines += counterfactual_sections(doc)
    lines += battery_sections(run_dir, doc)
    fs = doc.get("floors", {}).get("success", {})
    lines += ["", "## Final success per task (original instructions, after the last stage)", "",
              "| task | " + " | ".join(list(tensors) + [f"floor: {f}" for f in fs]) + " |",
              "|---|" + "---|" * (len(tensors) + len(fs))]
    for j, t in enumerate(tasks):
        cells = []
        for m, d in tensors.items():
            mu, sd = d["mean"][-1, j, 0], d["std"][-1, j, 0]
            cells.append("n/a" if not np.isfinite(mu) else f"{100 * mu:.1f} ± {100 * sd:.1f}")
        for d in fs.values():
            mu, sd = d["mean"][-1][j][0], d["std"][-1][j][0]
            cells.append("n/a" if mu is None else f"{100 * mu:.1f} ± {100 * sd:.1f}")
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
    write_text(run_dir / "report.md", "\n".join(lines) + "\n")


def counterfactual_sections(doc: dict) -> list[str]:
    """Markdown for seed 004's faces and the first-grasp split of every goal condition's failures."""
    rows = [(m, r["faces"], r) for m, r in _with_floors(doc, "language") if "faces" in r]
    if not rows:
        return ["", "## Counterfactual battery (seed 004)", "",
                "Not available: this grid recorded no first grasp or ran no face (swap / occ / nonsense)."]
    reach = doc.get("first_reach_recorded")
    lines = ["", "## Counterfactual battery (seed 004), final checkpoint", "",
             "swap: the instruction names another object of the scene (its goal: that object where the original "
             "put its own); occ: the original instruction with the cameras blanked (state policies: the object "
             "tokens' identity fields); nonsense: a string with no name in it, judged on the original goal. "
             "First grasp: the object both fingers first closed on. No-switch: the swap goal's rate under the "
             "original instruction.", "",
             "| method | original SR | swap: named goal | swap: original goal | swap: first grasp on the named "
             "object | swap no-switch | occ SR | nonsense SR |" + (" swap: first reach named |" if reach else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if reach else "")]
    for m, f, r in rows:
        cells = [_pm(_get(f, "original", "success")), _pm(_get(f, "swap", "success")),
                 _pm(_get(f, "swap", "original_goal")), _pm(_get(f, "swap", "first_grasp", "named")),
                 _pm(_get(r, "swap_baseline", "target_sr")), _pm(_get(f, "occ", "success")),
                 _pm(_get(f, "nonsense", "success"))]
        if reach:
            cells.append(_pm(_get(f, "swap", "first_reach", "named")))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    if not reach:
        lines += ["", "Which object the end-effector reached first is not recorded by this simulator build "
                  "(`rollout.Records.first_reach`; eval/faces.py `reach_recorded`): the split below uses the "
                  "first grasp only."]
    lines += ["", "### Failures split by the first-grasped object", "",
              "Per goal condition: success, then the failures (rollouts that missed the variant's own goal) by "
              "what the gripper first closed on: the object the instruction names, the one the original goal "
              "moves (named = original unless the variant renames it), another object, or nothing. A failure "
              "that grasped the named object is a motor failure, not a grounding one. Shares of the failures.", "",
              "| method | condition | success | failures | grasped named | grasped original | grasped other | "
              "no grasp |", "|---|---|---|---|---|---|---|---|"]
    for m, f, _ in rows:
        for c in FACE_CONDITIONS:
            if c in f:
                g = f[c].get("failed_first_grasp", {})
                lines.append(f"| {m} | {c} | {_pm(f[c].get('success'))} | {_pm(f[c].get('failures'))} | "
                             + " | ".join(_pm(g.get(k)) for k in ("named", "original", "other", "none")) + " |")
    return lines


def _pct(d: dict | None) -> str:
    return "n/a" if not d or d.get("mean") is None else f"{100 * d['mean']:.1f}"


def _num(d: dict | None) -> str:
    return "n/a" if not d or d.get("mean") is None else f"{d['mean']:.3f} ± {d['std']:.3f}"


def battery_sections(run_dir: Path, doc: dict) -> list[str]:
    """Markdown for seed 000's Figures 3-6 and Table III (writes the figures' PNGs) -> lines."""
    from clbench_jax.eval.battery import TABLE3
    from clbench_jax.eval.language_metrics import ACHIEVED, SLOTS

    lang, lines = dict(_with_floors(doc, "language")), []
    slots = {m: r["contrast_per_slot"] for m, r in lang.items() if "contrast_per_slot" in r}
    if slots:
        lines += ["", "### Contrasts per edited slot (Figure 3)", "",
                  "Target SR / GSA / original persistence at the final checkpoint; n/a: no retained contrast of "
                  "that slot in the run's variant set.", "",
                  "| method | " + " | ".join(SLOTS) + " |", "|---|" + "---|" * len(SLOTS)]
        for m, d in slots.items():
            cells = ["n/a" if d.get(sl, {"unavailable": True}).get("unavailable") else
                     " / ".join(_pct(d[sl][k]) for k in LANGUAGE["contrast"]) for sl in SLOTS]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        plot_slots(slots, str(run_dir / "fig3_contrast_slots.png"))
        lines += ["", "![Figure 3: contrasts per slot](fig3_contrast_slots.png)"]
    act = doc["action_level"]["summary"]
    ach = {m: r["collision_achieved"] for m, r in lang.items() if "collision_achieved" in r}
    if ach:
        lines += ["", "### Collision behaviour (Figure 4)", "",
                  "Achieved-goal distribution of the final checkpoint's collision rollouts (newly reached audited "
                  "goals), AIR, and the action-level metrics under the collision instructions (their seeds "
                  "named: a merged folder can hold them for fewer seeds than its rollouts).", "",
                  "| method | " + " | ".join(ACHIEVED) + " | AIR | AD | LM | AD / LM seeds |",
                  "|---|" + "---|" * (len(ACHIEVED) + 4)]
        for m, d in ach.items():
            a = act.get(m, {}).get("collision", {})
            lines.append(f"| {m} | " + " | ".join(_pm(d.get(k)) for k in ACHIEVED) + " | "
                         + f"{_pm(lang[m].get('collision', {}).get('air'))} | {_num(a.get('ad'))} | "
                         f"{_num(a.get('lm'))} | {', '.join(map(str, a.get('seeds', []))) or 'n/a'} |")
        plot_collisions(ach, {m: r.get("collision", {}) for m, r in lang.items()}, act,
                        str(run_dir / "fig4_collisions.png"))
        lines += ["", "![Figure 4: collision behaviour](fig4_collisions.png)"]
    lines += ["", "### Action level (demonstration observations)", ""]
    note = doc["action_level"]["note"]
    if act:
        doc_act = _action_doc(run_dir)
        settings, sets = doc_act.get("settings", {}), doc_act.get("demo_sets", {})
        n_sets = len({json.dumps(v) for v in sets.values()})
        own = (f" Each run on its own demo files: {n_sets} different sets across its {len(sets)} runs (`demo_sets`; "
               "the oracle's demos are byte-identical on one machine, not across machines)." if n_sets > 1 else "")
        lines += [f"Final checkpoint of each method and seed, on up to {settings.get('n_windows', '?')} demo windows "
                  f"per task (`{doc['action_level']['file'] or 'action_level.json'}`, eval/battery.py).{own} AD: distance "
                  "between the mixture-mean actions under the original and the perturbed instruction / 2 sqrt(d_a) "
                  "(0..1); LM: log p(a* | o, original) − log p(a* | o, perturbed) of the expert action (nats; > 0: "
                  "the expert action is likelier under the original). Variants equally within a task, tasks "
                  "equally, mean ± std across seeds." + (f" Note: {note}." if note else ""), "",
                  "| method | condition | seeds | AD | LM |", "|---|---|---|---|---|"]
        lines += [f"| {m} | {c} | {', '.join(map(str, v['seeds']))} | {_num(v.get('ad'))} | {_num(v.get('lm'))} |"
                  for m, cs in act.items() for c, v in cs.items()]
    else:
        lines.append(f"Not computed: {note}.")
    t3 = doc["table3"]
    if t3["rows"]:
        lines += ["", "### Spearman correlations over method-task pairs (Table III)", "",
                  "Eligible pairs: (method, task) with statically validated collisions evaluated at the final "
                  "checkpoint; a pair without a value (CGAR when every audited goal held at reset, AD / LM without "
                  "action-level results) drops out of that correlation. Rho per seed, mean ± std across seeds.", "",
                  "| pair | Spearman ρ | pairs per seed |", "|---|---|---|"]
        lines += [f"| {name} | {_num(t3[k])} | {', '.join(map(str, t3[k]['pairs']))} |" for k, name, _, _ in TABLE3]
    cov = doc["coverage"]
    lines += ["", "### Variant coverage (Figure 5)", ""]
    if "skipped" in cov:
        lines.append(f"Not available: {cov['skipped']}.")
    else:
        from clbench_jax.language.variants import coverage_table, plot_coverage

        plot_coverage([cov], run_dir / "fig5_coverage.png")
        lines += [f"Retained vs excluded variants of `{cov['file']}` (its validation verdicts; collisions: "
                  "statically verified retained, unverified probes apart).", "", coverage_table([cov]), "",
                  "![Figure 5: variant coverage](fig5_coverage.png)"]
    gaps = {m: r["paraphrase_gap"] for m, r in doc["metrics"].items() if "paraphrase_gap" in r}
    if gaps:
        plot_gaps(gaps, str(run_dir / "fig6_paraphrase_gaps.png"))
        lines += ["", "### Final vs temporal paraphrase gap (Figure 6)", "",
                  "Final gap: original − paraphrase success after the last stage; AUC gap: the same on LIBERO's AUC "
                  "(all stages). Numbers in the paraphrase-gap table above.", "",
                  "![Figure 6: final vs AUC paraphrase gap](fig6_paraphrase_gaps.png)"]
    return lines


def _action_doc(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "action_level.json").read_text())
    except (OSError, ValueError):
        return {}


# ------------------------------------------------------------------------------------------- figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ms(d: dict | None, scale: float = 1.0) -> tuple[float, float]:
    if not d or d.get("mean") is None:
        return np.nan, 0.0
    return scale * d["mean"], scale * d["std"]


def plot_slots(slots: dict, path: str) -> None:
    """Figure 3: per slot, one bar per method, for Target SR / GSA / original persistence (percent)."""
    from clbench_jax.eval.language_metrics import SLOTS

    plt = _plt()
    methods = list(slots)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2), sharey=True)
    x, w = np.arange(len(SLOTS)), 0.8 / max(len(methods), 1)
    for ax, k, title in zip(axes, LANGUAGE["contrast"], ("Target SR", "GSA", "Original persistence")):
        for i, m in enumerate(methods):
            ms = [_ms(None if slots[m].get(sl, {}).get("unavailable") else slots[m].get(sl, {}).get(k), 100)
                  for sl in SLOTS]
            ax.bar(x + (i - (len(methods) - 1) / 2) * w, [a for a, _ in ms], w, yerr=[b for _, b in ms],
                   label=m, capsize=2)
        for xi, sl in zip(x, SLOTS):
            if all(slots[m].get(sl, {"unavailable": True}).get("unavailable") for m in methods):
                ax.text(xi, 2, "n/a", ha="center", fontsize=7, color="gray")
        ax.set_xticks(x, SLOTS, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, 105)
    axes[0].set_ylabel("% of contrast rollouts")
    axes[0].legend(fontsize=7)
    fig.suptitle("Minimal contrasts per edited slot, final checkpoint", fontsize=9)
    save_figure(fig, path)
    plt.close(fig)


def plot_collisions(achieved: dict, collision: dict, act: dict, path: str) -> None:
    """Figure 4: per method, the stacked achieved-goal distribution with AIR marked; AD and LM under collisions
    (when computed)."""
    from clbench_jax.eval.language_metrics import ACHIEVED

    plt = _plt()
    methods = list(achieved)
    have_act = any("collision" in act.get(m, {}) for m in methods)
    fig, axes = plt.subplots(1, 3 if have_act else 1, figsize=(12 if have_act else 4.5, 3.4), squeeze=False,
                             constrained_layout=True)
    ax, x = axes[0][0], np.arange(len(methods))
    bottom = np.zeros(len(methods))
    colors = {"original": "#3a7d44", "other": "#e0a030", "multiple": "#6a4c93", "none": "#9a9a9a"}
    for k in ACHIEVED:
        v = np.nan_to_num([_ms(achieved[m].get(k), 100)[0] for m in methods])
        ax.bar(x, v, 0.6, bottom=bottom, label=k, color=colors[k])
        bottom += v
    air = [_ms(collision.get(m, {}).get("air"), 100)[0] for m in methods]
    ax.plot(x, air, "k_", markersize=22, mew=2, label="AIR")
    ax.set_xticks(x, methods, fontsize=8)
    ax.set_ylabel("% of collision rollouts")
    ax.set_ylim(0, 100)
    ax.set_title("achieved goal (AIR: black line)", fontsize=9)
    ax.legend(fontsize=6, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    if have_act:
        for a2, k, title in zip(axes[0][1:], ("ad", "lm"), ("Action Divergence", "Language Margin (nats)")):
            ms = [_ms(act.get(m, {}).get("collision", {}).get(k)) for m in methods]
            a2.bar(x, [a for a, _ in ms], 0.6, yerr=[b for _, b in ms], capsize=3, color="#4a6fa5")
            a2.axhline(0, color="k", lw=0.5)
            a2.set_xticks(x, methods, fontsize=8)
            a2.set_title(title, fontsize=9)
    fig.suptitle("Scene-incompatible (collision) instructions, final checkpoint", fontsize=9)
    save_figure(fig, path)
    plt.close(fig)


def plot_gaps(gaps: dict, path: str) -> None:
    """Figure 6: per method, the final gap and the AUC (temporal) gap, original − paraphrase, in points."""
    plt = _plt()
    methods = list(gaps)
    x = np.arange(len(methods))
    fig, ax = plt.subplots(figsize=(1.5 + 1.2 * len(methods), 3.2))
    for off, k, label in ((-0.2, "final_gap", "final gap"), (0.2, "auc_gap", "AUC gap (temporal)")):
        ms = [_ms(gaps[m].get(k), 100) for m in methods]
        ax.bar(x + off, [a for a, _ in ms], 0.4, yerr=[b for _, b in ms], capsize=3, label=label)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xticks(x, methods, fontsize=8)
    ax.set_ylabel("original − paraphrase (points)")
    ax.legend(fontsize=7)
    ax.set_title("Paraphrase gap: final checkpoint vs all stages", fontsize=9)
    save_figure(fig, path)
    plt.close(fig)


def _curve_epochs(run_dir: Path, method: str, seed: int, curves) -> list:
    p = run_dir / "train" / f"{method}_s{seed}" / "metrics.json"
    if p.exists():
        ep = read_json(p, "training metrics").get("curve_epochs")
        if ep:
            return ep
    return [list(range(len(c))) for c in curves]
