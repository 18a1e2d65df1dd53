"""The `clbench` command."""

from __future__ import annotations

import argparse
import importlib
import sys
import time

import clbench_jax  # noqa: F401  (sets the offscreen GL backend before MuJoCo loads)


# Modules with `register(subparsers)` adding a command group (e.g. `clbench demos ...`); one entry per line.
COMMAND_GROUPS: tuple[str, ...] = (
    "clbench_jax.data.commands",
    "clbench_jax.language.commands",
    "clbench_jax.lifelong.commands",
    "clbench_jax.eval.commands",
    "clbench_jax.eval.libero_check",
)


def check_args(a, **lows) -> None:
    """Integer flags with a lower bound (`n=1` : --n must be >= 1): ConfigError naming the flag, before any work."""
    from clbench_jax.errors import ConfigError

    for name, low in lows.items():
        v = getattr(a, name)
        if v is not None and v < low:
            raise ConfigError(f"must be >= {low}, not {v}", field="--" + name.replace("_", "-"))


def check_out(path, field: str = "--out") -> None:
    from clbench_jax.jsonio import check_writable

    check_writable(path, field=field)


def _check_memory(scene, n_episodes: int, backend: str) -> None:
    """Refuse a batch of rollouts that cannot fit in memory (it would swap or hang, not fail)."""
    from clbench_jax.errors import ConfigError
    from clbench_jax.eval.chunk_size import available_memory, episode_memory, pool_totals
    from clbench_jax.eval.grid import GridSpec

    parts = episode_memory(GridSpec(tasks=(), variants=(), n_rollouts=1, backend=backend), scene)
    memory = available_memory()
    per, fixed = pool_totals(parts, memory)
    for pool, b in per.items():
        need, free = n_episodes * b + fixed[pool], memory[pool]["free"]
        if need > free / 2:
            raise ConfigError(f"{n_episodes:,} episodes need about {need / 2**30:.1f} GiB of {pool} memory, "
                              f"{free / 2**30:.1f} GiB is free; use a smaller --n", field="--n")


def _task(key: str):
    from clbench_jax.tasks.suites import get_task

    return get_task(key)


def _scene_for(task):
    from clbench_jax.sim.scene import build_scene
    from clbench_jax.tasks.suites import scene_tasks

    return build_scene(scene_tasks(task.scene))


def cmd_tasks_list(a):
    from clbench_jax.tasks.format import format_suite_table

    print(format_suite_table(a.suite))
    if a.suite is None:
        print("\n" + pro_suites_table())


def pro_suites_table() -> str:
    """LIBERO-PRO's perturbed task sets installed with LIBERO (`clbench tasks list --suite NAME` lists one)."""
    from clbench_jax.tasks.suites import pro_kind, pro_suites

    rows = [(name, base, pro_kind(name)) for name, base in pro_suites().items()]
    w = max(len(r[0]) for r in rows)
    head = f"{'LIBERO-PRO suite':<{w}}  {'perturbs':<14}  kind"
    return "\n".join([head, "-" * len(head)] + [f"{a:<{w}}  {b:<14}  {c}" for a, b, c in rows])


def cmd_tasks_show(a):
    from clbench_jax.tasks.format import format_task

    print(format_task(_task(a.task)))


def cmd_sim_export(a):
    from clbench_jax.jsonio import write_text
    from clbench_jax.sim.scene import export_xml

    check_out(a.out)
    task = _task(a.task)
    xml = export_xml(_scene_for(task), task)
    write_text(a.out, xml)
    print(f"wrote {a.out} (scene {task.scene}, {len(xml)} bytes)")


def cmd_sim_render(a):
    import numpy as np

    from clbench_jax.sim.init_states import make_init_bank
    from clbench_jax.sim.render import BatchRenderer, save_png

    check_args(a, size=1, seed=0)
    check_out(a.out)
    task = _task(a.task)
    scene = _scene_for(task)
    bank = make_init_bank(scene, task, 1, seed=a.seed)
    r = BatchRenderer(scene.model, a.size, workers=1)  # one picture: no worker processes
    img = r.render(bank.state, bank.mocap)[0]
    r.close()
    save_png(a.out, np.concatenate(list(img), axis=1))
    print(f"wrote {a.out}: {task.name} -- agentview | eye-in-hand, {a.size}x{a.size}")


def _run_random(tasks, scene, n_per_task, horizon, backend, seed, progress=True, policy_name="random"):
    import jax
    import numpy as np

    from clbench_jax.sim import rollout
    from clbench_jax.sim.init_states import make_init_bank

    _check_memory(scene, n_per_task * len(tasks), backend)
    if progress:
        print(f"settling {n_per_task} initial state(s) for each of {len(tasks)} task(s) ...", flush=True)
    banks = [make_init_bank(scene, t, n_per_task, seed=seed) for t in tasks]
    ids = np.concatenate([[scene.task_index(t.name)] * n_per_task for t in tasks])
    stack = rollout.task_stack(scene)
    goals = jax.tree.map(lambda x: x[ids][:, None], stack.goal)
    batch = rollout.EpisodeBatch.of(banks, ids, goals, jax.random.split(jax.random.PRNGKey(seed), len(ids)))
    if policy_name == "oracle":
        from clbench_jax.data.oracle import make_oracle

        policy, p0_fn = make_oracle(scene)
        p0 = p0_fn(len(ids))
    else:
        policy, p0 = rollout.random_policy()
    t0 = time.perf_counter()
    rec = rollout.rollout(scene, policy, p0, batch, horizon, backend=backend, stop_at_success=policy_name == "oracle",
                          progress=progress)
    dt = time.perf_counter() - t0
    return rec, ids, dt, banks


def cmd_sim_rollout(a):
    from clbench_jax.tasks.suites import suite_tasks

    check_args(a, n=1, horizon=1, seed=0)
    tasks = suite_tasks(a.suite) if a.task is None else [_task(a.task)]
    scene = _scene_for(tasks[0])
    rec, ids, dt, _ = _run_random(tasks, scene, a.n, a.horizon, a.backend, a.seed)
    steps = len(ids) * a.horizon
    print(f"{len(ids)} episodes x {a.horizon} steps on {a.backend}: {dt:.1f} s, {steps / dt:,.0f} control steps/s "
          f"(compile included)")
    for t in tasks:
        m = ids == scene.task_index(t.name)
        print(f"  {t.name[:70]:70s} success {rec.success[m, 0].mean():.2f}  moved {rec.action_initiated[m].mean():.2f}")


def cmd_quickstart(a):
    """The main job at this stage: a suite, its scene, settled initial states and batched random rollouts."""
    from clbench_jax.tasks.format import format_suite_table
    from clbench_jax.tasks.suites import suite_tasks

    check_args(a, n=1, horizon=1, seed=0)
    tasks = suite_tasks(a.suite)
    print(format_suite_table(a.suite))
    t0 = time.perf_counter()
    scene = _scene_for(tasks[0])
    m = scene.model
    print(f"\nscene {scene.key}: {len(scene.objects)} objects, {len(scene.fixtures)} fixtures, {m.ngeom} geoms, "
          f"{m.nbody} bodies, built in {time.perf_counter() - t0:.1f} s")
    rec, ids, dt, banks = _run_random(tasks, scene, a.n, a.horizon, "native", a.seed, policy_name=a.policy)
    print(f"\ninitial states (LIBERO's): :init predicates hold in {sum(b.init_ok.sum() for b in banks)}/"
          f"{sum(len(b.init_ok) for b in banks)}")
    steps = int(rec.length.sum()) if a.policy == "oracle" else len(ids) * a.horizon
    print(f"{a.policy} policy, {len(ids)} episodes, up to {a.horizon} steps (native backend): {steps:,} control "
          f"steps in {dt:.1f} s = {steps / dt:,.0f} control steps/s (compilation included)")
    print(f"{'task':60s} {'success':>8s} {'held@reset':>10s} {'moved':>6s}")
    for t in tasks:
        sel = ids == scene.task_index(t.name)
        print(f"{t.name[:60]:60s} {rec.success[sel, 0].mean():8.2f} {rec.held_at_reset[sel, 0].mean():10.2f} "
              f"{rec.action_initiated[sel].mean():6.2f}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clbench", description=(
        "clbench-jax: the LIBERO lifelong robot-learning benchmark in JAX + MuJoCo. "
        "Start with `clbench quickstart`, then `clbench tasks list` and `clbench sim render TASK --out x.png`."))
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure (may go anywhere on the "
                                                        "command line)")
    sub = p.add_subparsers(dest="cmd", required=True)

    q = sub.add_parser("quickstart", help="show a suite, build its scene, run batched random rollouts, print "
                                          "success and throughput")
    q.add_argument("--suite", default="libero_goal", help="libero_spatial | libero_object | libero_goal | "
                                                          "libero_10 | libero_90 (default libero_goal)")
    q.add_argument("--n", type=int, default=4, help="episodes per task (default 4)")
    q.add_argument("--horizon", type=int, default=300, help="control steps per episode at 20 Hz (default 300)")
    q.add_argument("--policy", default="oracle", choices=["oracle", "random"],
                   help="the scripted privileged-state oracle (default; a work in progress, see docs/ORACLE.md) "
                        "or uniform random actions")
    q.add_argument("--seed", type=int, default=0)
    q.set_defaults(fn=cmd_quickstart)

    t = sub.add_parser("tasks", help="list and show LIBERO tasks").add_subparsers(dest="sub", required=True)
    tl = t.add_parser("list", help="index, name and instruction of every task (of one suite), and LIBERO-PRO's "
                                   "perturbed suites")
    tl.add_argument("--suite", default=None, help="a LIBERO suite or a LIBERO-PRO one, e.g. libero_goal_lan")
    tl.set_defaults(fn=cmd_tasks_list)
    ts = t.add_parser("show", help="a readable summary of one task")
    ts.add_argument("task", help="full task name or SUITE:INDEX, e.g. libero_goal:3")
    ts.set_defaults(fn=cmd_tasks_show)

    s = sub.add_parser("sim", help="scenes: export, render, rollouts").add_subparsers(dest="sub", required=True)
    se = s.add_parser("export", help="write a task's scene as MJCF (names are the BDDL names)")
    se.add_argument("task")
    se.add_argument("--out", required=True)
    se.set_defaults(fn=cmd_sim_export)
    sr = s.add_parser("render", help="draw a task's settled initial scene from agentview and eye-in-hand")
    sr.add_argument("task")
    sr.add_argument("--out", required=True, help="PNG file")
    sr.add_argument("--size", type=int, default=256)
    sr.add_argument("--seed", type=int, default=0)
    sr.set_defaults(fn=cmd_sim_render)
    so = s.add_parser("rollout", help="batched random-policy rollouts; prints success and throughput")
    so.add_argument("--suite", default="libero_goal")
    so.add_argument("--task", default=None, help="one task instead of the whole suite")
    so.add_argument("--backend", default="native", choices=["native", "mjx"])
    so.add_argument("--n", type=int, default=4, help="episodes per task")
    so.add_argument("--horizon", type=int, default=100)
    so.add_argument("--seed", type=int, default=0)
    so.set_defaults(fn=cmd_sim_rollout)
    for module in COMMAND_GROUPS:  # groups that live beside their code (cheap to import: heavy imports inside)
        importlib.import_module(module).register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command -> exit code: 0 done, 2 bad input or a failure the message explains (one line: what, where,
    what to do), 130 interrupted (rerun to resume), 1 an unexpected error (a bug). `--debug` (anywhere on the
    line) shows the traceback of any failure."""
    import traceback

    from clbench_jax.errors import ClbenchError

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    args = build_parser().parse_args([x for x in argv if x != "--debug"])
    try:
        args.fn(args)
    except ClbenchError as e:
        if debug:
            traceback.print_exc()
        print(f"clbench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("clbench: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (not an expected failure: say so in one line, traceback on --debug)
        if debug:
            traceback.print_exc()
        print(f"clbench: internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
