"""`clbench run`: demos -> lifelong training (every method x seed) -> the evaluation grid -> the report.

A run folder holds everything and every phase resumes:

    RUN/config.yaml            the resolved run config
    RUN/train/<method>_s<seed>/  one lifelong run each (clbench_jax.lifelong: config, metrics.json, checkpoints/)
    RUN/grid/                  grid.json, chunks/, episodes.h5 (one row per evaluated episode)
    RUN/floors/<floor>/        the floors' grids (eval/floors.py): do-nothing and random-motion over the battery
    RUN/action_level.json      seed 000's action-level metrics of the final checkpoints (eval/battery.py)
    RUN/metrics.json           S[t, j, c] mean / std across seeds and the per-seed metrics, from episodes.h5
    RUN/report.md + *.png      the report (`clbench report RUN` regenerates it)

Demos go to `demos.dir` (shared between runs; finished task files are reused). This module runs things; the report
(report.py) only reads the folder's files, and battery.py only computes.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clbench_jax.configs import at_least, check_ranges, one_of, typed_values
from clbench_jax.errors import ClbenchError, ConfigError
from clbench_jax.jsonio import read_json, write_json, write_text
from clbench_jax.lifelong.config import make_config, read_yaml_mapping, seed_base
from clbench_jax.lifelong.loop import finished_stages
from clbench_jax.paths import repo_file


@dataclass(frozen=True)
class RunConfig:
    suite: str = "libero_goal"
    order: int = 0
    n_tasks: int | None = None  # first n tasks of the order (None: the whole suite)
    methods: tuple[str, ...] = ("seqft", "er", "ewc", "packnet")
    seeds: tuple[int, ...] = (0,)
    train: dict = field(default_factory=dict)  # lifelong TrainConfig keys (policy, obs, epochs, ...)
    algo_kwargs: dict = field(default_factory=dict)  # per method: {method: {key: value}}
    demos: dict = field(default_factory=dict)  # data.collect.CollectConfig keys, plus `dir`
    grid: dict = field(default_factory=dict)  # GRID_KEYS

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["methods"], d["seeds"] = list(self.methods), list(self.seeds)
        return d


@dataclass(frozen=True)
class GridSettings:
    """The `grid:` section of a run config (its field types are what the config may hold)."""
    variants: str | None = None  # a clbench-variants JSON file; None: original instructions only
    # evaluated conditions (grid.CONDITIONS): the file's variants, probe = its unverified collision probes,
    # occ = the original instruction with blanked perception (built here, not in the file)
    conditions: tuple[str, ...] = ("original", "paraphrase", "contrast", "collision", "probe", "swap", "occ",
                                   "nonsense")
    max_per_condition: int | None = None  # at most this many variants per task and condition (file order)
    final_only: tuple[str, ...] = ("probe", "swap", "occ", "nonsense")  # met by the final stage's checkpoints only
    floors: tuple[str, ...] = ("do-nothing", "random-motion")  # eval/floors.py; [] for none
    n_rollouts: int = 20
    horizon: int = 600
    warmup: int = 5
    seed: int = 0
    backend: str = "native"
    chunk: int | str = "auto"  # episodes per chunk per device, or "auto": as many as fit (grid.chunk_plan)
    mjx_impl: str = "warp"
    deterministic: bool | None = None  # None: as the training evaluation (train.deterministic_eval)
    devices: int | None = None


GRID_KEYS = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(GridSettings()).items()}


def _grid_rules() -> list:
    from clbench_jax.eval.grid import CONDITIONS

    return [at_least("n_rollouts", 1), at_least("horizon", 1), at_least("warmup", 0), at_least("seed", 0),
            at_least("max_per_condition", 1, optional=True), at_least("devices", 1, optional=True),
            one_of("backend", ("native", "mjx")), one_of("mjx_impl", ("jax", "warp")),
            ("chunk", lambda g: g.chunk == "auto" or (isinstance(g.chunk, int) and g.chunk >= 1),
             "a positive number of episodes or 'auto'"),
            ("conditions", lambda g: set(g.conditions) <= set(CONDITIONS) and "original" in g.conditions,
             "a list of " + ", ".join(CONDITIONS) + " holding original"),
            ("final_only", lambda g: set(g.final_only) <= set(CONDITIONS), "a list of " + ", ".join(CONDITIONS))]


def load_run_config(path: str | os.PathLike, **overrides) -> RunConfig:
    """The run config file plus flag overrides, checked whole before anything runs: every key's type and range,
    the suite and task order, every method's training config and hyper-parameters, the demos settings, and the
    grid (its variant file read and matched to the run's tasks). ConfigError names the file and the field."""
    from clbench_jax.algos import ALGORITHMS, make_algorithm
    from clbench_jax.data.collect import CollectConfig
    from clbench_jax.tasks.spec import SUITES
    from clbench_jax.tasks.suites import task_order

    from clbench_jax.lifelong.config import TrainConfig

    where = os.fspath(path)
    values = read_yaml_mapping(where)
    train_only = sorted(set(values) - {f.name for f in dataclasses.fields(RunConfig)})
    if "algo" in values and set(train_only) <= {f.name for f in dataclasses.fields(TrainConfig)}:
        raise ConfigError("this is a training config (algo, epochs ...): run it with `clbench train --config FILE`",
                          file=where, field="algo")
    pretrained = overrides.pop("pretrained", None)  # the one train key a flag sets: the same run from a base
    values.update({k: v for k, v in overrides.items() if v is not None})
    if pretrained is not None:
        if not isinstance(values.get("train", {}), dict):
            raise ConfigError("must be a mapping of training settings", file=where, field="train")
        values["train"] = {**values.get("train", {}), "pretrained": pretrained}
    cfg = RunConfig(**typed_values(RunConfig, values, file=where))
    check_ranges(cfg, [one_of("suite", SUITES), at_least("order", 0), at_least("n_tasks", 1, optional=True),
                       ("methods", lambda c: c.methods and set(c.methods) <= set(ALGORITHMS)
                        and len(set(c.methods)) == len(c.methods), "distinct methods of " + ", ".join(ALGORITHMS)),
                       ("seeds", lambda c: c.seeds and min(c.seeds) >= 0 and len(set(c.seeds)) == len(c.seeds),
                        "distinct seeds >= 0")], file=where)
    for k in ("suite", "algo", "seed", "order", "n_tasks", "algo_kwargs", "demos_dir"):
        if k in cfg.train:
            raise ConfigError(f"set {k} at the top level of a run config, not under train", file=where,
                              field=f"train.{k}")
    try:
        n_order = len(task_order(cfg.suite, cfg.order))
    except ClbenchError as e:
        raise ConfigError(str(e), file=where, field="order") from None
    if cfg.n_tasks is not None and cfg.n_tasks > n_order:
        raise ConfigError(f"must be at most {n_order} (the tasks of {cfg.suite}), not {cfg.n_tasks}", file=where,
                          field="n_tasks")
    for m, kw in cfg.algo_kwargs.items():
        if not isinstance(kw, dict):
            raise ConfigError(f"must be a mapping of {m}'s hyper-parameters, not {kw!r}", file=where,
                              field=f"algo_kwargs.{m}")
        try:
            make_algorithm(m, **kw)
        except ClbenchError as e:
            raise ConfigError(str(e), file=where, field=f"algo_kwargs.{m}") from None
    for m in cfg.methods:
        train_config(cfg, m, cfg.seeds[0], where=where)  # every method's training config, typed and ranged
    from clbench_jax.lifelong.loop import make_policy

    # The grid acts through one network: a frozen-base method (its adapters, retrieval, router) cannot share a
    # folder with another method; refused now rather than after hours of training.
    nets = {m: make_policy(train_config(cfg, m, cfg.seeds[0])) for m in cfg.methods}
    odd = [m for m in cfg.methods if nets[m] != nets[cfg.methods[0]]]
    if odd:
        raise ConfigError(f"{cfg.methods[0]} and {', '.join(odd)} act through different networks (a frozen base "
                          "with its own adapters), so one evaluation grid cannot hold them together: run them in separate "
                          "folders (--methods) and merge those with `clbench report OUT --merge A B`", file=where,
                          field="methods")
    demos = typed_values(CollectConfig, {k: v for k, v in cfg.demos.items() if k != "dir"}, file=where,
                         prefix="demos.")
    if not isinstance(cfg.demos.get("dir", "runs/demos"), str) or not cfg.demos.get("dir", "runs/demos"):
        raise ConfigError(f"must be a folder name, not {cfg.demos['dir']!r}", file=where, field="demos.dir")
    try:
        CollectConfig(**demos)
    except ClbenchError as e:
        raise ConfigError(str(e), file=where, field=f"demos.{e.field}") from None
    g = GridSettings(**typed_values(GridSettings, cfg.grid, file=where, prefix="grid."))
    check_ranges(g, _grid_rules(), file=where, prefix="grid.")
    from clbench_jax.eval.floors import check_floors

    try:
        check_floors(g.floors)
    except ClbenchError as e:
        raise ConfigError(e.message, file=where, field="grid.floors") from None
    if "occ" in g.conditions:  # a policy with nothing to blank fails here, before any training
        from clbench_jax.eval.faces import occlusion_keys
        from clbench_jax.policies.act import obs_keys

        try:
            occlusion_keys(obs_keys(nets[cfg.methods[0]]))
        except ClbenchError as e:
            raise ConfigError(e.message, file=where, field="grid.conditions", token="occ") from None
    if g.backend == "mjx" and g.mjx_impl != "warp" and train_config(cfg, cfg.methods[0], cfg.seeds[0]).obs == "rgb":
        raise ConfigError("the mjx backend renders only with mjx_impl warp; use it or backend native for RGB",
                          file=where, field="grid.mjx_impl")
    if g.variants:
        from clbench_jax.eval.grid import variants_from_file

        try:
            variants_from_file(repo_file(g.variants), run_tasks(cfg), suite=cfg.suite)
        except ClbenchError as e:
            raise ConfigError(str(e), file=where, field="grid.variants") from None
    return cfg


def train_config(cfg: RunConfig, method: str, seed: int, where: str | None = None):
    demos_dir = cfg.demos.get("dir", os.path.join("runs", "demos"))
    values = dict(cfg.train, suite=cfg.suite, algo=method, seed=seed, order=cfg.order, n_tasks=cfg.n_tasks,
                  demos_dir=demos_dir, algo_kwargs=cfg.algo_kwargs.get(method, {}))
    if isinstance(values.get("pretrained"), str):
        values["pretrained"] = seed_base(values["pretrained"], seed)
    return make_config(values, where, prefix="train.")


def grid_settings(cfg: RunConfig) -> dict:
    return {**GRID_KEYS, **cfg.grid}


def run_tasks(cfg: RunConfig):
    from clbench_jax.tasks.suites import ordered_tasks

    return tuple(ordered_tasks(cfg.suite, cfg.order)[: cfg.n_tasks])


def _check_folder(out: Path, cfg: RunConfig) -> None:
    """A run folder belongs to one run config (like the lifelong loop's results folders): write it, or refuse a
    folder holding another config once work is done there (a finished training stage or grid chunk); before
    that (a start that failed) nothing is lost and the new config replaces the old one."""
    path = out / "config.yaml"
    new = cfg.to_dict()
    if path.exists():
        try:
            old = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ClbenchError(f"cannot read the folder's config ({e}); use another --out", file=str(path)) from None
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if not diff:
            return
        done = any(finished_stages(t) for t in (out / "train").glob("*")) or any((out / "grid").glob("chunks/*.h5"))
        if done:
            raise ClbenchError(f"run folder holds a run with a different config ({diff[0]}); use another --out",
                               file=str(path), field=diff[0])
    write_text(path, yaml.safe_dump(new, sort_keys=False))


# ---------------------------------------------------------------------------------------------- checkpoints
def stage_checkpoints(train_dir: str | os.PathLike, tcfg, n_tasks: int, method: str) -> list:
    """grid.Checkpoint per finished stage of a lifelong run; `load(j)` restores the stage (orbax, once per
    stage) and applies the algorithm's per-task parameter selection (PackNet's masks, TAIL's adapter slot), whose
    shapes `acting` gives."""
    import jax

    from clbench_jax.algos import make_algorithm
    from clbench_jax.algos.train import OptimConfig, make_optimizer
    from clbench_jax.eval.chunk_size import param_shapes
    from clbench_jax.eval.grid import Checkpoint
    from clbench_jax.lifelong.checkpoints import StageCheckpoints
    from clbench_jax.lifelong.loop import DEFAULT_SEQ_LEN, make_policy
    from clbench_jax.tasks.suites import ordered_tasks

    policy = make_policy(tcfg)
    algo = make_algorithm(tcfg.algo, **tcfg.algo_kwargs)
    scene_key = ordered_tasks(tcfg.suite, tcfg.order)[0].scene
    p = param_shapes(policy, scene_key, tcfg.obs, tcfg.image_size, getattr(policy.cfg, "seq_len", DEFAULT_SEQ_LEN),
                     384)
    opt = make_optimizer(OptimConfig(tcfg.lr, tcfg.end_lr, tcfg.weight_decay, tcfg.grad_clip))
    like = {"params": p, "algo_state": jax.eval_shape(lambda q: algo.init(q, n_tasks), p),
            "opt_state": jax.eval_shape(opt.init, p)}
    store = StageCheckpoints(os.path.join(train_dir, "checkpoints"))
    stages = sorted(store.manager.all_steps())
    cache: dict[int, Any] = {}

    def load(stage: int, j: int):
        if stage not in cache:
            cache.clear()  # one stage in memory at a time (the grid visits checkpoints in order)
            cache[stage] = store.restore(stage, like)[0]
        arrays = cache[stage]
        return algo.eval_params(arrays["params"], arrays["algo_state"], j)

    def acting(shapes):
        return jax.eval_shape(lambda q: algo.eval_params(q, algo.init(q, n_tasks), 0), shapes)

    # A joint (multitask) run has one stage that has seen every task.
    return [Checkpoint(method, tcfg.seed, n_tasks - 1 if algo.joint else s, lambda j, s=s: load(s, j), acting)
            for s in stages]


def grid_spec(cfg: RunConfig, tasks, obs: str, image_size: int):
    """The run's GridSpec: every retained variant of the variant file (and the occ face) per task, so the goal
    columns are all audited goals; which of them a checkpoint meets is the spec's conditions / max_per_condition /
    final_only (grid.evaluated)."""
    from clbench_jax.eval import grid as G
    from clbench_jax.eval.chunk_size import check_chunk

    g = grid_settings(cfg)
    check_chunk(g["chunk"])
    if g["variants"]:
        variants = G.variants_from_file(repo_file(g["variants"]), tasks, suite=cfg.suite)
    else:
        variants = tuple((G.original_variant(t),) for t in tasks)
    if "occ" in g["conditions"]:
        variants = tuple(vs + (G.occ_variant(t),) for t, vs in zip(tasks, variants))
    return G.GridSpec(tasks=tasks, variants=variants, n_rollouts=g["n_rollouts"], horizon=g["horizon"],
                      warmup=g["warmup"], seed=g["seed"], backend=g["backend"], mjx_impl=g["mjx_impl"], obs=obs,
                      image_size=image_size,
                      deterministic=(train_config(cfg, cfg.methods[0], cfg.seeds[0]).deterministic_eval
                                     if g["deterministic"] is None else g["deterministic"]), chunk=g["chunk"],
                      conditions=tuple(g["conditions"]), max_per_condition=g["max_per_condition"],
                      final_only=tuple(g["final_only"]))


# ---------------------------------------------------------------------------------------------- the main job
def run(cfg: RunConfig, out_dir: str | os.PathLike, progress: bool = True, log=None) -> dict:
    """Run (or resume) the whole job into `out_dir` -> metrics dict."""
    from tqdm.auto import tqdm

    log = log or tqdm.write  # phase lines above the progress bars

    from clbench_jax import caches
    from clbench_jax.data.collect import CollectConfig, collect_tasks
    from clbench_jax.data.commands import folder_summary
    from clbench_jax.eval.grid import plan
    from clbench_jax.eval.grid_folder import pending_chunks
    from clbench_jax.eval.grid_runner import run_grid
    from clbench_jax.lifelong.loop import make_policy, run_lifelong
    from clbench_jax.lifelong.pretrain import check_pretrained

    from clbench_jax.jsonio import check_writable

    out = Path(out_dir)
    tasks = run_tasks(cfg)
    runs = [(m, s) for m in cfg.methods for s in cfg.seeds]
    tcfgs = {r: train_config(cfg, *r) for r in runs}
    first = tcfgs[runs[0]]
    for t in tcfgs.values():  # each seed's pretrained base exists, before the demos phase
        if t.pretrained:
            check_pretrained(t)
    check_writable(out, folder=True, field="--out")
    check_writable(first.demos_dir, folder=True, field="demos.dir")
    out.mkdir(parents=True, exist_ok=True)
    _check_folder(out, cfg)
    stages = {r: 1 if r[0] == "multitask" else len(tasks) for r in runs}
    # Overall bar: one unit per demo task, per training stage and per grid chunk (the grid's count is known
    # once training is done; until then one unit per (run, stage) cell stands in for it).
    overall = tqdm(total=len(tasks) + 2 * sum(stages.values()), desc="clbench run", unit="step",
                   disable=not progress, position=0)

    log(f"[1/5] demos -> {first.demos_dir}")
    dcfg = CollectConfig(**{k: v for k, v in cfg.demos.items() if k != "dir"})
    collected = False
    for t in tasks:
        rows = collect_tasks([t], first.demos_dir, dcfg, progress=progress, log=lambda *_: None)
        collected |= any(not r["skipped"] for r in rows)
        overall.update(1)
    if collected:  # the collection's scenes, oracles and compiled streams: GBs that training never uses
        caches.release()
    # Which demonstrations this run trains on (their actions' digests: another machine's physics can differ)
    write_json(out / "demos.json", folder_summary(first.demos_dir, {t.name for t in tasks}))

    log(f"[2/5] training {len(runs)} run(s): {', '.join(f'{m} seed {s}' for m, s in runs)}")
    for r in runs:
        tdir = out / "train" / f"{r[0]}_s{r[1]}"
        done = len(finished_stages(tdir))
        overall.update(done)
        run_lifelong(tcfgs[r], str(tdir), progress=progress,
                     callbacks=[lambda s, rec: overall.update(1)] if done < stages[r] else [])

    log("[3/5] evaluation grid")
    policy = make_policy(first)
    cks = [c for r in runs for c in stage_checkpoints(out / "train" / f"{r[0]}_s{r[1]}", tcfgs[r], len(tasks), r[0])]
    spec = grid_spec(cfg, tasks, first.obs, first.image_size)
    # Fix the chunk size now (grid.json; a resumed grid keeps its own) so the grid's real unit count, its pending
    # chunks, can replace its stand-in on the overall bar.
    from clbench_jax.eval import shard
    from clbench_jax.eval.grid_folder import open_folder

    (out / "grid").mkdir(exist_ok=True)
    n_dev = shard.device_mesh(grid_settings(cfg)["devices"]).size
    spec, fp = open_folder(out / "grid", spec, cks, policy, n_dev)
    overall.total = overall.n + len(pending_chunks(out / "grid", len(plan(spec, cks)), fp))
    overall.refresh()
    run_grid(spec, cks, policy, out / "grid", lang=first.lang, suite=cfg.suite, n_devices=grid_settings(cfg)["devices"],
             progress=progress, on_chunk=lambda i: overall.update(1))
    overall.close()
    floors = grid_settings(cfg)["floors"]
    log(f"[4/5] floors: {', '.join(floors) or 'none'}")
    if floors:
        from clbench_jax.eval.floors import FOLDER, run_floors

        run_floors(spec, out / FOLDER, floors, n_devices=grid_settings(cfg)["devices"], progress=progress)
    log("[5/5] report")
    return report(out, log=log)


def report(run_dir, log=None) -> dict:
    """The report of a run folder: the action level of its final checkpoints (computed or reused), then
    report.finalize, which reads the folder's files."""
    from clbench_jax.eval.report import finalize

    log = log or _log
    try:
        _, note = action_level_phase(run_dir, log=log)
    except ClbenchError as e:  # a bad demo file or config: the report goes on without the action level
        note = f"failed: {e}"
    return finalize(run_dir, log=log, action_note=note)


def _log(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr)


def action_level_phase(run_dir, *, n_windows: int | None = None, batch_size: int | None = None,
                       log=_log) -> tuple[dict | None, str | None]:
    """RUN/action_level.json for the run's final checkpoints (eval/battery.py) -> (document or None, a note on why
    it was skipped or reused as it is, or None). Needs config.yaml, the variant file, the demos and the
    checkpoints; without the demos an existing file is reused unchecked."""
    from clbench_jax.errors import DataFileError
    from clbench_jax.eval import battery
    from clbench_jax.eval.grid import embed_variants, evaluated
    from clbench_jax.lifelong.data import demo_path, has_demos
    from clbench_jax.lifelong.loop import make_policy

    run_dir = Path(run_dir)
    out = run_dir / battery.FILE
    grid_meta = run_dir / "grid" / "grid.json"
    if grid_meta.exists() and "merged_from" in read_json(grid_meta):
        # a merged folder: its file is the sources' own results, each measured on the demos that run trained on;
        # its config may unite methods that act through different networks, which no single run may
        if out.exists():
            return battery.read_action_level(out), None
        return None, f"none of the merged sources has an {battery.FILE}"
    if not (run_dir / "config.yaml").exists():
        return None, "no config.yaml in the run folder"
    cfg = load_run_config(run_dir / "config.yaml")
    g = grid_settings(cfg)
    if not g["variants"]:
        return None, "the run has no variant file (original instructions only)"
    tasks = run_tasks(cfg)
    first = train_config(cfg, cfg.methods[0], cfg.seeds[0])

    def demos_of(t):  # True / False (collected, none kept: the oracle never solved it) / None (no file)
        try:
            return has_demos(first.demos_dir, t)
        except DataFileError:
            return None

    have = [demos_of(t) for t in tasks]
    missing = [t.name for t, h in zip(tasks, have) if h is None]
    if missing:
        why = f"no demos for task {missing[0]} in {first.demos_dir}"
        if out.exists():
            return battery.read_action_level(out), f"{why}; using the existing {battery.FILE} as it is"
        return None, why
    spec = grid_spec(cfg, tasks, first.obs, first.image_size)
    # the variants the final checkpoints met in the grid (occ changes observations, not the instruction)
    final = [tuple(spec.variants[j][i] for i in evaluated(spec, j, len(tasks) - 1)
                   if spec.variants[j][i].condition != "occ") for j in range(len(tasks))]
    if not any(v.condition in battery.PERTURBED for vs in final for v in vs):
        return None, "no perturbed instruction in the run's variant set"
    cks, absent, stamps = [], [], {}
    for m in cfg.methods:
        for s in cfg.seeds:
            tdir = run_dir / "train" / f"{m}_s{s}"
            stages = finished_stages(tdir)
            last = [c for c in (stage_checkpoints(tdir, train_config(cfg, m, s), len(tasks), m) if stages else [])
                    if c.stage == len(tasks) - 1]
            if last:
                cks.append(last[-1])
                step = tdir / "checkpoints" / str(stages[-1])
                stamps[f"{m}_s{s}"] = f"{stages[-1]}:{step.stat().st_mtime_ns}"
            else:
                absent.append(f"{m} seed {s}")
    if absent:
        log(f"action level: no final checkpoint for {', '.join(absent)}")
    if not cks:
        if out.exists():  # e.g. a run folder whose checkpoints were deleted
            return battery.read_action_level(out), f"no final checkpoint under train/; using the existing {battery.FILE}"
        return None, "no final checkpoint under train/"
    policy = make_policy(first)
    doc = battery.compute_action_level(
        out, cks, policy, [t.name for t in tasks], final,
        [demo_path(first.demos_dir, t) if h else None for t, h in zip(tasks, have)], obs=first.obs,
        embed=lambda: embed_variants(dataclasses.replace(spec, variants=tuple(final)), first.lang, cfg.suite),
        n_windows=n_windows or battery.N_WINDOWS, seed=g["seed"],
        batch_size=batch_size or (32 if first.obs == "rgb" else None), identity={"lang": first.lang},
        stamps=stamps, log=log)
    return doc, None

