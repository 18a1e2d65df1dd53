"""`clbench run`: demos -> lifelong training (every method x seed) -> the evaluation grid -> the report.

A run folder holds everything and every phase resumes:

    RUN/config.yaml            the resolved run config
    RUN/train/<method>_s<seed>/  one lifelong run each (clbench_jax.lifelong: config, metrics.json, checkpoints/)
    RUN/grid/                  grid.json, chunks/, episodes.h5 (one row per evaluated episode)
    RUN/metrics.json           S[t, j, c] mean / std across seeds and the per-seed metrics, from episodes.h5
    RUN/report.md + *.png      the report (`clbench report RUN` regenerates it)

Demos go to `demos.dir` (shared between runs; finished task files are reused).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clbench_jax.errors import ClbenchError
from clbench_jax.jsonio import write_text
from clbench_jax.lifelong.config import read_yaml_mapping


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


GRID_KEYS = {"variants": None,  # a clbench-variants JSON file; None: original instructions only
             "conditions": ["original", "paraphrase", "contrast", "collision"],  # kept from the file
             "max_per_condition": None,  # at most this many variants per task and condition (file order)
             "n_rollouts": 20, "horizon": 600, "warmup": 5, "seed": 0, "backend": "native",
             "chunk": "auto",  # episodes per chunk per device, or "auto": as many as fit (grid.chunk_plan)
             "mjx_impl": "jax",
             "deterministic": None,  # None: as the training evaluation (train.deterministic_eval)
             "devices": None}


def load_run_config(path: str | os.PathLike, **overrides) -> RunConfig:
    where = os.fspath(path)
    values = read_yaml_mapping(where)
    values.update({k: v for k, v in overrides.items() if v is not None})
    names = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ClbenchError(f"unknown key(s) {unknown}; known: {sorted(names)}", file=where, field=unknown[0])
    bad_grid = sorted(set(values.get("grid") or {}) - set(GRID_KEYS))
    if bad_grid:
        raise ClbenchError(f"unknown grid key(s) {bad_grid}; known: {sorted(GRID_KEYS)}", file=where,
                           field=f"grid.{bad_grid[0]}")
    for k in ("methods", "seeds"):
        if k in values:
            if not values[k]:
                raise ClbenchError("must list at least one entry", file=where, field=k)
            values[k] = tuple(values[k])
    cfg = RunConfig(**values)
    for k in ("suite", "algo", "seed", "order", "n_tasks"):
        if k in cfg.train:
            raise ClbenchError(f"set {k} at the top level of a run config, not under train", file=where,
                               field=f"train.{k}")
    from clbench_jax.algos import ALGORITHMS

    for m in cfg.methods:
        if m not in ALGORITHMS:
            raise ClbenchError(f"unknown method {m!r}; choose from {sorted(ALGORITHMS)}", file=where, field="methods")
    train_config(cfg, cfg.methods[0], cfg.seeds[0], where=where)  # validates the train keys
    from clbench_jax.eval.grid import check_chunk

    chunk = grid_settings(cfg)["chunk"]
    try:  # a bad grid.chunk fails here, before hours of training
        check_chunk(chunk)
    except ClbenchError as e:
        raise ClbenchError(f"bad value {chunk!r}: a positive number of episodes or 'auto'", file=where,
                           field="grid.chunk") from e
    return cfg


def train_config(cfg: RunConfig, method: str, seed: int, where: str | None = None):
    from clbench_jax.lifelong.config import make_config

    demos_dir = cfg.demos.get("dir", os.path.join("runs", "demos"))
    values = dict(cfg.train, suite=cfg.suite, algo=method, seed=seed, order=cfg.order, n_tasks=cfg.n_tasks,
                  demos_dir=demos_dir, algo_kwargs=cfg.algo_kwargs.get(method, {}))
    return make_config(values, where)


def grid_settings(cfg: RunConfig) -> dict:
    return {**GRID_KEYS, **cfg.grid}


def run_tasks(cfg: RunConfig):
    from clbench_jax.tasks.suites import ordered_tasks

    return tuple(ordered_tasks(cfg.suite, cfg.order)[: cfg.n_tasks])


def _check_folder(out: Path, cfg: RunConfig) -> None:
    """A run folder belongs to one run config (like the lifelong loop's results folders)."""
    path = out / "config.yaml"
    new = cfg.to_dict()
    if path.exists():
        old = yaml.safe_load(path.read_text()) or {}
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if diff:
            raise ClbenchError(f"run folder holds a run with a different config ({diff[0]}); use another --out",
                               file=str(path), field=diff[0])
        return
    write_text(path, yaml.safe_dump(new, sort_keys=False))


# ---------------------------------------------------------------------------------------------- checkpoints
def stage_checkpoints(train_dir: str | os.PathLike, tcfg, n_tasks: int, method: str) -> list:
    """grid.Checkpoint per finished stage of a lifelong run; `load(j)` restores the stage (orbax, once per
    stage) and applies the algorithm's per-task parameter selection (PackNet's masks)."""
    import jax

    from clbench_jax.algos import make_algorithm
    from clbench_jax.algos.train import OptimConfig, make_optimizer
    from clbench_jax.eval.grid import Checkpoint, param_shapes
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

    # A joint (multitask) run has one stage that has seen every task.
    return [Checkpoint(method, tcfg.seed, n_tasks - 1 if algo.joint else s, lambda j, s=s: load(s, j))
            for s in stages]


def grid_spec(cfg: RunConfig, tasks, obs: str, image_size: int):
    from clbench_jax.eval import grid as G

    g = grid_settings(cfg)
    G.check_chunk(g["chunk"])
    if g["variants"]:
        path = Path(g["variants"])
        if not path.exists() and not path.is_absolute():  # configs name files relative to the repository
            path = Path(__file__).resolve().parents[2] / path
        variants = G.variants_from_file(path, tasks)
    else:
        variants = tuple((G.original_variant(t),) for t in tasks)
    kept = []
    for vs in variants:
        count: dict[str, int] = {}
        keep = []
        for v in vs:
            count[v.condition] = count.get(v.condition, 0) + 1
            if v.condition in g["conditions"] and (g["max_per_condition"] is None or
                                                   count[v.condition] <= g["max_per_condition"]):
                keep.append(v)
        if not keep or keep[0].condition != "original":
            raise ClbenchError("the grid needs the original condition", field="grid.conditions")
        kept.append(tuple(keep))
    return G.GridSpec(tasks=tasks, variants=tuple(kept), n_rollouts=g["n_rollouts"], horizon=g["horizon"],
                      warmup=g["warmup"], seed=g["seed"], backend=g["backend"], mjx_impl=g["mjx_impl"], obs=obs,
                      image_size=image_size,
                      deterministic=(train_config(cfg, cfg.methods[0], cfg.seeds[0]).deterministic_eval
                                     if g["deterministic"] is None else g["deterministic"]), chunk=g["chunk"])


# ---------------------------------------------------------------------------------------------- the main job
def run(cfg: RunConfig, out_dir: str | os.PathLike, progress: bool = True, log=None) -> dict:
    """Run (or resume) the whole job into `out_dir` -> metrics dict."""
    from tqdm.auto import tqdm

    log = log or tqdm.write  # phase lines above the progress bars

    from clbench_jax.data.collect import CollectConfig, collect_tasks
    from clbench_jax.eval.grid import pending_chunks, plan, run_grid
    from clbench_jax.eval.report import finalize
    from clbench_jax.lifelong.loop import make_policy, run_lifelong

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _check_folder(out, cfg)
    tasks = run_tasks(cfg)
    runs = [(m, s) for m in cfg.methods for s in cfg.seeds]
    tcfgs = {r: train_config(cfg, *r) for r in runs}
    first = tcfgs[runs[0]]
    stages = {r: 1 if r[0] == "multitask" else len(tasks) for r in runs}
    # Overall bar: one unit per demo task, per training stage and per grid chunk (the grid's count is known
    # once training is done; until then one unit per (run, stage) cell stands in for it).
    overall = tqdm(total=len(tasks) + 2 * sum(stages.values()), desc="clbench run", unit="step",
                   disable=not progress, position=0)

    log(f"[1/4] demos -> {first.demos_dir}")
    dcfg = CollectConfig(**{k: v for k, v in cfg.demos.items() if k != "dir"})
    for t in tasks:
        collect_tasks([t], first.demos_dir, dcfg, progress=progress, log=lambda *_: None)
        overall.update(1)

    log(f"[2/4] training {len(runs)} run(s): {', '.join(f'{m} seed {s}' for m, s in runs)}")
    for r in runs:
        tdir = out / "train" / f"{r[0]}_s{r[1]}"
        done = len(finished_stages(tdir))
        overall.update(done)
        run_lifelong(tcfgs[r], str(tdir), progress=progress,
                     callbacks=[lambda s, rec: overall.update(1)] if done < stages[r] else [])

    log("[3/4] evaluation grid")
    policy = make_policy(first)
    cks = [c for r in runs for c in stage_checkpoints(out / "train" / f"{r[0]}_s{r[1]}", tcfgs[r], len(tasks), r[0])]
    spec = grid_spec(cfg, tasks, first.obs, first.image_size)
    # Fix the chunk size now (grid.json; a resumed grid keeps its own) so the grid's real unit count, its pending
    # chunks, can replace its stand-in on the overall bar.
    from clbench_jax.eval import shard
    from clbench_jax.eval.grid import open_folder

    (out / "grid").mkdir(exist_ok=True)
    n_dev = shard.device_mesh(grid_settings(cfg)["devices"]).size
    spec, _ = open_folder(out / "grid", spec, cks, policy, n_dev)
    overall.total = overall.n + len(pending_chunks(out / "grid", len(plan(spec, cks))))
    overall.refresh()
    run_grid(spec, cks, policy, out / "grid", lang=first.lang, suite=cfg.suite, n_devices=grid_settings(cfg)["devices"],
             progress=progress, on_chunk=lambda i: overall.update(1))
    overall.close()
    log("[4/4] report")
    return finalize(out)


def finished_stages(train_dir: Path) -> list[int]:
    """Finished stages of a lifelong run folder (its orbax step folders)."""
    ck = train_dir / "checkpoints"
    return sorted(int(p.name) for p in ck.iterdir() if p.name.isdigit()) if ck.exists() else []
