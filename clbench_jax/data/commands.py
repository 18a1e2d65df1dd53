"""`clbench demos ...`: collect scripted demonstrations, inspect a demo file, make a video of one demo."""

from __future__ import annotations


def cmd_collect(a):
    from clbench_jax.data.collect import CollectConfig, collect_tasks
    from clbench_jax.data.generators import check_generator
    from clbench_jax.tasks.suites import get_task, suite_tasks

    from clbench_jax.cli import check_args
    from clbench_jax.jsonio import check_writable

    check_args(a, n=1, horizon=1, batch=1, image_size=8, max_attempts=1, give_up_after=0, seed=0)
    check_generator(a.generator)
    check_writable(a.out, folder=True, field="--out")
    tasks = [get_task(t) for t in a.task] if a.task else suite_tasks(a.suite)
    cfg = CollectConfig(n=a.n, generator=a.generator, seed=a.seed, horizon=a.horizon, batch=a.batch,
                        max_attempts=a.max_attempts, give_up_after=a.give_up_after, images=not a.no_images,
                        image_size=a.image_size)
    print(f"collecting {cfg.n} {cfg.generator} demos for each of {len(tasks)} tasks -> {a.out} "
          f"(images {'on' if cfg.images else 'off'}, horizon {cfg.horizon}, batch {cfg.batch}, "
          f"at most {cfg.attempt_cap} attempts per task)")
    rows = collect_tasks(tasks, a.out, cfg)
    att = sum(r.get("attempts") or 0 for r in rows)
    succ = sum(r.get("successes") or 0 for r in rows)
    fail = sum(r.get("failures") or 0 for r in rows)
    kept = sum(r.get("kept") or 0 for r in rows)
    refused = [r["task"] for r in rows if r.get("refused")]
    short = [r["task"] for r in rows if (r.get("kept") or 0) < cfg.n and not r.get("refused")]
    print(f"total: {kept} demos kept; {succ} successes and {fail} failures in {att} attempts"
          + (f" ({succ / att:.0%})" if att else ""))
    if refused:
        print(f"{len(refused)} task(s) refused by the {cfg.generator} generator: {', '.join(refused)}")
    if short:
        print(f"{len(short)} task(s) below {cfg.n} demos (attempt cap reached or abandoned): {', '.join(short)}")


def inspect_file(path: str) -> str:
    """A readable summary of a demo file (ours or LIBERO's)."""
    import numpy as np

    from clbench_jax.data import hdf5

    meta = hdf5.read_meta(path)
    ex = meta["extras_attrs"]
    lines = [f"file:        {path}",
             f"task:        {ex.get('task') or meta['problem_info'].get('language_instruction', '')}",
             f"instruction: {meta['problem_info'].get('language_instruction', '')}",
             f"env_name:    {meta['env_name']}",
             f"bddl file:   {meta['bddl_file_name']}",
             f"generator:   {ex.get('generator', '(not recorded: not a clbench file)')}"]
    if "attempts" in ex:
        lines.append(f"attempts:    {ex['attempts']} ({ex.get('successes')} successes, {ex.get('failures')} failures "
                     f"of which {ex.get('physics_failures', 0)} physics failures; {ex.get('surplus', 0)} surplus "
                     f"attempts uncounted){' -- gave up' if ex.get('gave_up') else ''}; seed {ex.get('seed')}; "
                     f"{ex.get('seconds', 0):.0f} s")
    lines.append(f"demos:       {meta['num_demos']} ({meta['total']} steps)")
    if int(meta["num_demos"]) == 0:
        return "\n".join(lines)
    with hdf5.open_file(path) as f:
        names = hdf5.demo_names(f, path)
        for n in names:  # shapes and keys of every demo (a file without `actions` is named, not a KeyError)
            hdf5.check_demo(f["data"][n], f"data/{n}", path)
        lengths = np.array([f["data"][n]["actions"].shape[0] for n in names])
        lines.append(f"lengths:     min {lengths.min()}, mean {lengths.mean():.1f}, max {lengths.max()}")
        g = f["data"][names[0]]
        lines.append(f"keys of {names[0]}:")
        for k in sorted(g["obs"]):
            lines.append(f"  obs/{k:20s} {str(g['obs'][k].shape):22s} {g['obs'][k].dtype}")
        for k in hdf5.DEMO_ARRAYS:
            if k in g:
                lines.append(f"  {k:24s} {str(g[k].shape):22s} {g[k].dtype}")
        lines.append(f"  attrs: {', '.join(sorted(g.attrs))}")
    return "\n".join(lines)


def actions_digest(path) -> str:
    """SHA-256 of every demo's actions in the file's order (float32 bytes): the same digest means the same
    demonstrations, whatever the file's timings; it changes when the physics does (another CPU can round
    differently, and a long oracle episode then ends elsewhere)."""
    import hashlib

    import numpy as np

    from clbench_jax.data import hdf5

    h = hashlib.sha256()
    with hdf5.open_file(str(path)) as f:
        for n in hdf5.demo_names(f, str(path)):
            h.update(np.ascontiguousarray(f["data"][n]["actions"][()], np.float32).tobytes())
    return h.hexdigest()


def folder_summary(folder: str, tasks: set[str] | None = None) -> dict:
    """Per demo file of a collection folder (its *_demo.hdf5, recursively; with `tasks`, those tasks' only): task,
    demos kept, steps, the oracle's attempts and successes, seconds, whether it gave up, the actions' digest; and
    the totals."""
    from pathlib import Path

    from clbench_jax.data import hdf5
    from clbench_jax.errors import DataFileError

    files = [p for p in sorted(Path(folder).rglob("*_demo.hdf5"))
             if tasks is None or p.name.removesuffix("_demo.hdf5") in tasks]
    if not files:
        raise DataFileError("no *_demo.hdf5 files in this folder", file=str(folder))
    rows = []
    for p in files:
        meta = hdf5.read_meta(str(p))
        ex = meta["extras_attrs"]
        rows.append({"task": ex.get("task") or p.name.removesuffix("_demo.hdf5"), "suite": ex.get("suite"),
                     "demos": int(meta["num_demos"]), "steps": int(meta["total"]),
                     "attempts": ex.get("attempts"), "successes": ex.get("successes"),
                     "seconds": ex.get("seconds"), "gave_up": bool(ex.get("gave_up", False)),
                     "actions_sha256": actions_digest(p)})
    total = {k: sum(r[k] or 0 for r in rows) for k in ("demos", "steps", "attempts", "successes", "seconds")}
    total.update(files=len(rows), without_demos=[r["task"] for r in rows if r["demos"] == 0])
    return {"folder": str(folder), "files": rows, "total": total}


def cmd_inspect(a):
    import os

    if not os.path.isdir(a.path):
        print(inspect_file(a.path))
        return
    doc = folder_summary(a.path)
    for r in doc["files"]:
        rate = f"{100 * r['successes'] / r['attempts']:.0f}%" if r["attempts"] else "n/a"
        print(f"{r['demos']:4d} demos {r['steps']:8d} steps  oracle {r['successes']}/{r['attempts']} ({rate})"
              f"{'  gave up' if r['gave_up'] else ''}  actions {r['actions_sha256'][:12]}  {r['task']}")
    t = doc["total"]
    print(f"total: {t['demos']} demos, {t['steps']} steps in {t['files']} files; oracle {t['successes']} successes "
          f"in {t['attempts']} attempts, {t['seconds'] / 60:.0f} min; no demos: {len(t['without_demos'])}")
    if a.json:
        from clbench_jax.jsonio import write_json

        write_json(a.json, doc)


def demo_frames(path: str, demo: int = 0, size: int = 128):
    """(T, H, 2W, 3) uint8 frames of one demo, agentview | eye-in-hand. Files without images are rendered from
    their `states` (clbench files name their task, so the scene can be rebuilt)."""
    import numpy as np

    from clbench_jax.data import hdf5
    from clbench_jax.errors import DataFileError

    key = f"data/demo_{demo}"
    with hdf5.open_file(path) as f:
        if key not in f:
            raise DataFileError("no such demo", file=path, field=key)
        g = f[key]
        hdf5.check_demo(g, key, path)
        if all(k in g["obs"] for k in hdf5.RGB_KEYS):
            av, eh = g["obs/agentview_rgb"][()], g["obs/eye_in_hand_rgb"][()]
            return np.concatenate([av, eh], axis=2)
        states = g["states"][()]
        mocap = g.attrs.get("clbench_mocap")
        task_name = f["data"].attrs.get("clbench_task")
    if mocap is None or task_name is None:
        raise DataFileError("demo has no images and no clbench task/mocap to render them from", file=path,
                            field=f"{key}/obs/agentview_rgb")
    from clbench_jax.sim.render import BatchRenderer
    from clbench_jax.sim.scene import build_scene
    from clbench_jax.tasks.suites import get_task, scene_tasks

    task = get_task(task_name if isinstance(task_name, str) else task_name.decode())
    scene = build_scene(scene_tasks(task.scene))
    r = BatchRenderer(scene.model, size)
    try:
        img = r.render(states, np.broadcast_to(np.asarray(mocap), (len(states),) + np.shape(mocap)))
    finally:
        r.close()
    return np.concatenate([img[:, 0], img[:, 1]], axis=2)


def save_gif(path: str, frames, fps: int = 20) -> None:
    """Write (T, H, W, 3) uint8 frames as an animated GIF, atomically."""
    from PIL import Image

    from clbench_jax.jsonio import atomic_path

    with atomic_path(path, suffix=".gif") as tmp:
        imgs = [Image.fromarray(fr) for fr in frames]
        imgs[0].save(tmp, format="GIF", save_all=True, append_images=imgs[1:], duration=int(1000 / fps), loop=0)


def cmd_video(a):
    from clbench_jax.cli import check_args, check_out

    check_args(a, demo=0, every=1, size=8)
    check_out(a.out)
    frames = demo_frames(a.file, a.demo, a.size)
    save_gif(a.out, frames[::a.every], fps=max(1, 20 // a.every))
    print(f"wrote {a.out}: demo {a.demo}, {len(frames)} steps, agentview | eye-in-hand")


def independence_report(suite: str, n: int, seed: int = 0) -> str:
    """Both generators on every task of a single-scene suite: is the target's settled slot independent of the task,
    and does an object's slot say whether it is the target? (permutation chi-square tests, docs/DEMOS.md)"""
    from collections import Counter

    from clbench_jax.data import generators as g
    from clbench_jax.data.collect import scene_of
    from clbench_jax.tasks.suites import suite_tasks

    tasks = suite_tasks(suite)
    lines = [f"{suite}: {n} settled initial states per task, seed {seed}"]
    for gen in g.GENERATORS:
        rec = []
        for t in tasks:
            scene = scene_of(t)
            rec += g.slot_records(scene, t, g.init_bank(scene, t, n, seed, gen))
        tg = [r for r in rec if r["is_target"]]
        a = g.independence_test([r["task"] for r in tg], [r["slot"] for r in tg], seed=seed)
        b = g.independence_test([r["slot"] for r in rec], [r["is_target"] for r in rec], seed=seed)
        hits = Counter(r["slot"] for r in tg)
        lines += [f"\n{gen}:",
                  f"  target slot vs task:      chi2 {a['chi2']:8.1f}  p {a['p']:.4f}  Cramer's V {a['cramers_v']:.2f}  "
                  f"({a['n']} episodes with a movable target)",
                  f"  slot vs is-target:        chi2 {b['chi2']:8.1f}  p {b['p']:.4f}  Cramer's V {b['cramers_v']:.2f}  "
                  f"({b['n']} object placements)",
                  f"  'go to the usual target slot' finds the target in "
                  f"{max(hits.values()) / max(len(tg), 1):.0%} of episodes",
                  "  target slot counts per task (" + ", ".join(a["cols"]) + "):"]
        lines += [f"    {row[:60]:60s} {' '.join(f'{c:3d}' for c in counts)}" for row, counts in zip(a["rows"], a["table"])]
    return "\n".join(lines)


def cmd_independence(a):
    from clbench_jax.cli import check_args

    check_args(a, n=1, seed=0)
    print(independence_report(a.suite, a.n, a.seed))


def register(sub) -> None:
    from clbench_jax.data.generators import GENERATORS

    d = sub.add_parser("demos", help="scripted-oracle demonstrations in LIBERO's HDF5 layout: collect, inspect, "
                                     "video").add_subparsers(dest="sub", required=True)
    c = d.add_parser("collect", help="run the oracle batched, keep successful episodes, write one "
                                     "<task>_demo.hdf5 per task under OUT/<suite>/ (resumes: finished tasks are "
                                     "skipped)")
    c.add_argument("--suite", default="libero_goal", help="every task of this suite (default libero_goal)")
    c.add_argument("--task", action="append", help="a task (name or SUITE:INDEX) instead of the whole suite; "
                                                    "repeatable")
    c.add_argument("--n", type=int, default=50, help="successful demos per task (default 50, as LIBERO)")
    c.add_argument("--generator", default="confounded", choices=GENERATORS,
                   help="confounded: LIBERO's placements; deconfounded: table placements permuted per episode, so "
                        "the target's position says nothing about the task (docs/DEMOS.md)")
    c.add_argument("--no-images", action="store_true", help="state-only: skip agentview / eye-in-hand images")
    c.add_argument("--image-size", type=int, default=128)
    c.add_argument("--horizon", type=int, default=500, help="policy steps before an attempt counts as failed")
    c.add_argument("--batch", type=int, default=32, help="worlds stepped together, each starting its next attempt as "
                                                          "soon as one ends (speed only: the demos do not depend on it)")
    c.add_argument("--max-attempts", type=int, default=None, help="per task (default 10 x n)")
    c.add_argument("--give-up-after", type=int, default=96,
                   help="abandon a task after this many attempts without a success (0: never; default 96)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", required=True, help="output folder (files go to OUT/<suite>/)")
    c.set_defaults(fn=cmd_collect)
    i = d.add_parser("inspect", help="summary of a demo file (task, generator, demos, lengths, keys, attempts), "
                     "or of a collection folder (one line per task file, and totals)")
    i.add_argument("path", help="a *_demo.hdf5 file or a folder of them (searched recursively)")
    i.add_argument("--json", help="with a folder: also write its summary to this JSON file")
    i.set_defaults(fn=cmd_inspect)
    ind = d.add_parser("independence", help="does the target's starting position predict the task? both "
                                             "generators, permutation chi-square tests")
    ind.add_argument("--suite", default="libero_goal")
    ind.add_argument("--n", type=int, default=20, help="initial states per task")
    ind.add_argument("--seed", type=int, default=0)
    ind.set_defaults(fn=cmd_independence)
    v = d.add_parser("video", help="GIF of one demo, agentview | eye-in-hand side by side")
    v.add_argument("file")
    v.add_argument("--demo", type=int, default=0)
    v.add_argument("--out", required=True, help="GIF file")
    v.add_argument("--every", type=int, default=1, help="keep every k-th frame")
    v.add_argument("--size", type=int, default=128, help="render size for files without images")
    v.set_defaults(fn=cmd_video)
