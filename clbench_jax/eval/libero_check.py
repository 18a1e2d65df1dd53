"""The sim-to-LIBERO check: `clbench check libero --suite libero_goal`.

Per task, from the same LIBERO initial states (the official ones; fixture placements and controller reset joints
as the init bank draws them), on this project's native backend and in LIBERO's own environment (the `libero`
backend):
- the scripted oracle closed-loop in both: success in each (LIBERO's episodes also judged by LIBERO's own
  `_check_success`), and every reading's goal atoms judged by LIBERO's code and the jnp predicates on LIBERO's state;
- open-loop replay of the oracle's native actions in both: hand and object divergence over time, and whether the
  replayed actions still succeed in LIBERO.
Results go to a JSON file (written after every task: an interrupted check resumes where it stopped) and, with
`--doc`, a markdown table between markers in a document.
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import numpy as np

from clbench_jax import jsonio
from clbench_jax.errors import ConfigError

SCHEMA = 1
CHECKPOINTS = (10, 25, 50, 100, 200, 300, 400)  # control steps after reset at which divergence is reported


def _batch(scene, task, n: int, seed: int):
    from clbench_jax.sim import rollout
    from clbench_jax.sim.init_states import make_init_bank

    bank = make_init_bank(scene, task, n, seed=seed)
    ids = np.full(n, scene.task_index(task.name))
    goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
    keys = np.asarray(jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), 0xC4EC), n))
    return rollout.EpisodeBatch.of([bank], ids, goals, keys)


def _rates(rec, warmup: int) -> dict:
    from clbench_jax.sim.rollout import FAIL_REASONS

    succ = np.asarray(rec.success[:, 0])
    fails = {}
    for f in np.asarray(rec.fail_reason):
        if f:
            fails[FAIL_REASONS[int(f)]] = fails.get(FAIL_REASONS[int(f)], 0) + 1
    return {"success": float(succ.mean()), "n": int(succ.size),
            "mean_length": float(rec.length[succ].mean()) if succ.any() else None, "failures": fails}


def divergence(trace_a: dict, trace_b: dict, lengths: np.ndarray, objects: np.ndarray) -> dict:
    """Per-step distance between two traces of the same episodes: hand (grip site) and the worst task object,
    (N, T) arrays in metres, NaN past each episode's `lengths` (readings 0 .. length)."""
    hand = np.linalg.norm(trace_a["ee_pos"] - trace_b["ee_pos"], axis=-1)
    obj = np.linalg.norm(trace_a["entity_pos"][:, :, objects] - trace_b["entity_pos"][:, :, objects], axis=-1)
    obj = obj.max(-1) if objects.size else np.zeros_like(hand)
    past = np.arange(hand.shape[1])[None] > lengths[:, None]
    return {"hand": np.where(past, np.nan, hand), "object": np.where(past, np.nan, obj)}


def _summary(d: np.ndarray) -> dict:
    """Median over episodes at each checkpoint (mm), the worst value and the first step an episode passed 1 cm."""
    out = {}
    for t in CHECKPOINTS:
        if t < d.shape[1] and np.isfinite(d[:, t]).any():
            out[f"t{t}_mm"] = float(np.nanmedian(d[:, t]) * 1e3)
    out["max_mm"] = float(np.nanmax(d) * 1e3) if np.isfinite(d).any() else None
    over = [int(np.argmax(row > 0.01)) for row in d if np.nanmax(row) > 0.01]
    out["episodes_over_1cm"] = len(over)
    out["median_step_over_1cm"] = float(np.median(over)) if over else None
    return out


def check_task(scene, task, n: int, seed: int, horizon: int, warmup: int, workers: int, progress: bool) -> dict:
    """The check of one task (see the module docstring) -> a JSON-able dict."""
    from clbench_jax.data.oracle import make_oracle
    from clbench_jax.sim import rollout

    t0 = time.perf_counter()
    batch = _batch(scene, task, n, seed)
    policy, p0 = _oracle(scene, make_oracle)
    kw = dict(warmup=warmup, trace=True, progress=progress)
    rn, tn = rollout.rollout(scene, policy, p0(n), batch, horizon, backend="native", **kw)
    t1 = time.perf_counter()
    (rl, tl), rep = rollout.rollout(scene, policy, p0(n), batch, horizon, backend="libero", libero_workers=workers,
                                    libero_report=True, **kw)
    t_libero = time.perf_counter() - t1
    # open loop: the native run's actions (warm-up included) replayed in both, for the native episode's length
    actions = np.asarray(tn["action"])
    steps = int(rn.length.max())
    replay, r0 = rollout.replay_policy(actions)
    rkw = dict(warmup=warmup, trace=True, stop_at_success=False)
    qn, qtn = rollout.rollout(scene, replay, r0, batch, steps, backend="native", **rkw)
    (ql, qtl), qrep = rollout.rollout(scene, replay, r0, batch, steps, backend="libero", libero_workers=workers,
                                      libero_report=True, **rkw)
    objects = np.array([scene.entities.index(o) for o in task.objects])
    div = divergence(qtl, qtn, np.asarray(rn.length) + warmup, objects)
    lib = _rates(rl, warmup)
    lib["libero_own_success"] = float(rep.libero_success.mean())
    lib["errors"] = sorted(set(rep.errors.values()))[:3]
    nat = _rates(rn, warmup)
    agree = {}
    for r in (rep, qrep):
        for p, v in r.totals().items():
            a = agree.setdefault(p, {"checked": 0, "disagree": 0, "native_disagree": 0})
            for k in a:
                a[k] += v[k]
    return {
        "native": nat, "libero": lib,
        "gap_points": 100.0 * (nat["success"] - lib["success"]),
        "predicates": agree, "predicate_examples": (rep.examples + qrep.examples)[:5],
        "replay": {"native_success": float(qn.success[:, 0].mean()),
                   "native_equals_closed_loop": bool(np.array_equal(qn.success[:, 0], rn.success[:, 0])),
                   "libero_success": float(ql.success[:, 0].mean()),
                   "libero_own_success": float(qrep.libero_success.mean()),
                   "hand": _summary(div["hand"]), "object": _summary(div["object"])},
        "libero_steps_per_s": float((rl.length.sum() + warmup * n) / max(t_libero, 1e-9)),
        "workers": workers, "seconds": time.perf_counter() - t0,
    }


_ORACLES: dict = {}


def _oracle(scene, make_oracle):
    if id(scene) not in _ORACLES:
        _ORACLES.clear()  # one scene at a time (a compiled oracle is large)
        _ORACLES[id(scene)] = (scene, make_oracle(scene))
    return _ORACLES[id(scene)][1]


def settings_of(n, seed, horizon, warmup) -> dict:
    return {"n": n, "seed": seed, "horizon": horizon, "warmup": warmup}


def run_check(suite: str, out: str | Path, n: int = 10, seed: int = 0, horizon: int = 600, warmup: int | None = None,
              workers: int = 2, tasks: list[int] | None = None, progress: bool = True) -> dict:
    """Check `suite`'s tasks (all, or the indices `tasks`), one scene at a time, writing `out` after every task;
    tasks already in `out` with the same settings are kept (resume)."""
    from clbench_jax.data.oracle import WARMUP
    from clbench_jax.sim import libero_backend, libero_source
    from clbench_jax.sim.scene import build_scene
    from clbench_jax.tasks.suites import scene_tasks, suite_tasks

    libero_backend.require_libero()
    warmup = WARMUP if warmup is None else warmup
    all_tasks = suite_tasks(suite)
    chosen = list(range(len(all_tasks))) if tasks is None else list(tasks)
    for i in chosen:
        if not 0 <= i < len(all_tasks):
            raise ConfigError(f"task index {i} is not in 0..{len(all_tasks) - 1}", field="--tasks", token=str(i))
    settings = settings_of(n, seed, horizon, warmup)
    out = Path(out)
    doc = {"schema": SCHEMA, "suite": suite, "settings": settings, "tasks": {}}
    if out.is_file():
        old = jsonio.read_json(out, "libero check results")
        if old.get("settings") == settings and old.get("suite") == suite:
            doc["tasks"] = old.get("tasks", {})
    doc["versions"] = libero_source.versions()
    doc["machine"] = _machine()
    todo = [all_tasks[i] for i in chosen if all_tasks[i].name not in doc["tasks"]]
    by_scene: dict[str, list] = {}
    for t in todo:
        by_scene.setdefault(t.scene, []).append(t)
    for key, ts in by_scene.items():
        scene = build_scene(scene_tasks(key))
        for t in ts:
            if progress:
                print(f"checking {suite}/{t.name} ...", flush=True)
            try:
                doc["tasks"][t.name] = check_task(scene, t, n, seed, horizon, warmup, workers, progress)
            except Exception as e:  # noqa: BLE001  (a failed cell is recorded; the check goes on)
                doc["tasks"][t.name] = {"error": f"{type(e).__name__}: {e}"}
            doc["summary"] = summarize(doc)
            jsonio.write_json(out, doc, indent=1)
        del scene
        _ORACLES.clear()
    doc["summary"] = summarize(doc)
    jsonio.write_json(out, doc, indent=1)
    return doc


def _machine() -> dict:
    import os
    import platform

    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}


def summarize(doc: dict) -> dict:
    rows = [r for r in doc["tasks"].values() if "error" not in r]
    if not rows:
        return {}
    agree: dict = {}
    for r in rows:
        for p, v in r["predicates"].items():
            a = agree.setdefault(p, {"checked": 0, "disagree": 0, "native_disagree": 0})
            for k in a:
                a[k] += v[k]
    nat = float(np.mean([r["native"]["success"] for r in rows]))
    lib = float(np.mean([r["libero"]["success"] for r in rows]))
    return {"tasks": len(rows), "failed_tasks": len(doc["tasks"]) - len(rows), "native_success": nat,
            "libero_success": lib,
            "libero_own_success": float(np.mean([r["libero"]["libero_own_success"] for r in rows])),
            "gap_points": 100.0 * (nat - lib),
            "tasks_over_10_points": [name for name, r in doc["tasks"].items()
                                     if "error" not in r and abs(r["gap_points"]) > 10],
            "replay_libero_success": float(np.mean([r["replay"]["libero_success"] for r in rows])),
            "predicates": agree,
            "predicate_agreement": 1.0 - sum(a["disagree"] for a in agree.values())
            / max(1, sum(a["checked"] for a in agree.values()))}


def markdown(doc: dict) -> str:
    """The check's table for a document."""
    s, st = doc.get("summary", {}), doc["settings"]
    lines = [f"#### {doc['suite']}: oracle in this project's sim vs LIBERO's own environment "
             f"(n = {st['n']} initial states per task, horizon {st['horizon']})", "",
             "| task | native | LIBERO | LIBERO's own check | gap (pts) | replay in LIBERO | hand @100 (mm) | "
             "object @100 (mm) | atoms checked (disagree) |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in doc["tasks"].items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:80]} | | | | | | | |")
            continue
        checked = sum(v["checked"] for v in r["predicates"].values())
        dis = sum(v["disagree"] for v in r["predicates"].values())
        h, o = r["replay"]["hand"].get("t100_mm"), r["replay"]["object"].get("t100_mm")
        f = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
        lines.append(f"| {name} | {r['native']['success']:.0%} | {r['libero']['success']:.0%} | "
                     f"{r['libero']['libero_own_success']:.0%} | {r['gap_points']:+.0f} | "
                     f"{r['replay']['libero_success']:.0%} | {f(h)} | {f(o)} | {checked} ({dis}) |")
    if s:
        lines += ["", f"Mean success: native {s['native_success']:.1%}, LIBERO {s['libero_success']:.1%} "
                      f"(gap {s['gap_points']:+.1f} points); predicate agreement {s['predicate_agreement']:.4%} "
                      f"over {sum(a['checked'] for a in s['predicates'].values()):,} atom checks."]
    return "\n".join(lines) + "\n"


def write_doc(path: str | Path, doc: dict) -> None:
    """Put the suite's table between `<!-- LIBERO CHECK suite BEGIN/END -->` markers (appended when absent)."""
    path = Path(path)
    begin, end = f"<!-- LIBERO CHECK {doc['suite']} BEGIN -->", f"<!-- LIBERO CHECK {doc['suite']} END -->"
    text = path.read_text() if path.is_file() else ""
    block = f"{begin}\n{markdown(doc)}{end}"
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    jsonio.write_text(path, text)


def cmd_check_libero(a):
    from clbench_jax.cli import check_args, check_out
    from clbench_jax.tasks.suites import suite_tasks

    check_args(a, n=1, horizon=1, seed=0, workers=1, warmup=0)
    suite_tasks(a.suite)  # an unknown suite fails here, naming the suites
    out = a.out or f"benchmarks/results/libero_check_{a.suite}.json"
    check_out(out)
    if a.doc:
        check_out(a.doc, field="--doc")
    try:
        tasks = [int(x) for x in a.tasks.split(",")] if a.tasks else None
    except ValueError:
        raise ConfigError(f"must be comma-separated task indices, not {a.tasks!r}", field="--tasks") from None
    doc = run_check(a.suite, out, n=a.n, seed=a.seed, horizon=a.horizon, warmup=a.warmup, workers=a.workers,
                    tasks=tasks, progress=not a.quiet)
    if a.doc:
        write_doc(a.doc, doc)
    print(markdown(doc))
    print(f"wrote {out}" + (f" and the table in {a.doc}" if a.doc else ""))


def register(sub) -> None:
    c = sub.add_parser("check", help="checks against LIBERO itself").add_subparsers(dest="sub", required=True)
    lc = c.add_parser("libero", help="the sim-to-LIBERO check: the oracle closed-loop and its actions open-loop in "
                                     "this project's sim and in LIBERO's own environment, per task")
    lc.add_argument("--suite", default="libero_goal", help="libero_spatial | libero_object | libero_goal | libero_10 "
                                                           "| libero_90 (default libero_goal)")
    lc.add_argument("--n", type=int, default=10, help="LIBERO initial states per task (default 10; at most 50 "
                                                      "official ones)")
    lc.add_argument("--tasks", default=None, help="comma-separated task indices of the suite (default: all)")
    lc.add_argument("--workers", type=int, default=2, help="LIBERO worker processes (about 1 GB each)")
    lc.add_argument("--horizon", type=int, default=600, help="control steps per episode (default 600, LIBERO's)")
    lc.add_argument("--warmup", type=int, default=None, help="zero-action steps after loading a state (default: "
                                                             "LIBERO's evaluation's)")
    lc.add_argument("--seed", type=int, default=0, help="fixture placement, reset noise and oracle noise (default 0)")
    lc.add_argument("--out", default=None, help="JSON file (default benchmarks/results/libero_check_SUITE.json); "
                                                "tasks already in it with the same settings are kept")
    lc.add_argument("--doc", default=None, help="also put the table in this markdown file (between markers)")
    lc.add_argument("--quiet", action="store_true", help="no progress bars")
    lc.set_defaults(fn=cmd_check_libero)
