"""The lifelong loop: tasks in a LIBERO order, one stage per task (one stage for all tasks with multitask).

Per stage s (LIBERO algos/base.py learn_one_task + main.py):
  algo.start_task -> fresh optimizer -> epochs 0..E: epoch 0 only evaluates (zero-shot), epochs >= 1 train one
  pass over the stage's windows; every `eval_every` epochs success is measured by batched rollouts on fixed
  initial states and the best-success parameters are kept (strictly better only, so the first peak wins)
  -> the best checkpoint is restored -> algo.end_task -> every seen task j is evaluated with algo.eval_params(j)
  (task s is not run again where end_task left its evaluation parameters the kept epoch's, bit for bit: it would
  run from the same initial states with the same keys) -> row s of the success matrix -> orbax checkpoint of the
  stage -> callbacks.
A run that dies resumes from its last finished stage and reaches the same numbers: every key and numpy generator
is derived from (seed, purpose, stage, epoch), never from a stream that a restart would reset.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from functools import lru_cache
from typing import Callable, Sequence

import jax
import numpy as np

from clbench_jax.errors import ClbenchError, DataFileError, TrainingError
from clbench_jax.jsonio import write_json, write_text
from clbench_jax.lifelong.config import TrainConfig, dump_config
from clbench_jax.lifelong.data import concat_batches, has_demos, open_dataset, policy_batch

DEFAULT_SEQ_LEN = 10


def _tag(x) -> int:
    return zlib.crc32(x.encode()) if isinstance(x, str) else int(x)


def derive_key(root, *parts):
    """A key for a named purpose: fold_in of each part (strings hashed) into the root key."""
    for p in parts:
        root = jax.random.fold_in(root, _tag(p))
    return root


def derive_rng(seed: int, *parts) -> np.random.Generator:
    return np.random.default_rng([int(seed)] + [_tag(p) for p in parts])


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


def make_policy(cfg: TrainConfig):
    """The network a run trains and acts with: the configured BC policy, wrapped by the algorithm's network when it
    has one (the parameter-efficient methods: a frozen base plus adapters, clbench_jax.policies.adapters)."""
    from clbench_jax.algos import make_algorithm

    base = make_base_policy(cfg)
    algo = make_algorithm(cfg.algo, **cfg.algo_kwargs)
    return base if algo.network is None else algo.network(base, len(run_tasks(cfg)))


def make_base_policy(cfg: TrainConfig):
    """The configured BC policy (bc_transformer | bc_rnn | bc_vilt) itself."""
    from clbench_jax.policies import bc

    factory = {"bc_transformer": bc.make_bc_transformer, "bc_rnn": bc.make_bc_rnn,
               "bc_vilt": bc.make_bc_vilt}[cfg.policy]
    kwargs = {"gmm_min_std": cfg.gmm_min_std}
    kwargs.update({k: _tuples(v) for k, v in cfg.policy_kwargs.items()})  # YAML lists -> tuples (hashable configs)
    try:
        return factory(cfg.obs, **kwargs)
    except TypeError as e:
        raise ClbenchError(f"bad policy_kwargs for {cfg.policy}: {e}", field="policy_kwargs") from e


def task_embeddings(tasks, cfg: TrainConfig) -> np.ndarray:
    """(K, 384) language embeddings of the tasks' instructions (MiniLM), or their suite one-hots padded to 384."""
    from clbench_jax.language import EMBED_DIM, one_hot_task_embedding

    if cfg.lang == "onehot":
        from clbench_jax.tasks.suites import SUITE_TASK_NAMES

        names = SUITE_TASK_NAMES[cfg.suite]
        return one_hot_task_embedding([names.index(t.name) for t in tasks], len(names), dim=EMBED_DIM)
    from clbench_jax.language import minilm_embeddings

    return minilm_embeddings([t.instruction for t in tasks])


@lru_cache(maxsize=None)
def scene_for(scene_key: str):
    """One Scene object per scene key, so compiled rollouts are reused across stages and runs."""
    from clbench_jax.sim.scene import build_scene
    from clbench_jax.tasks.suites import scene_tasks

    return build_scene(scene_tasks(scene_key))


_BANKS: dict = {}
_STEPS: dict = {}


def steps_per_dispatch() -> int:
    """Optimizer steps per dispatch (algos/train.py apply_steps): on accelerators a small policy's step is bound
    by the host, so 8 staged batches train in one scan; on CPUs the step itself dominates (one at a time)."""
    return 1 if jax.default_backend() == "cpu" else 8


def init_bank(scene, task, n: int, seed: int):
    from clbench_jax.sim.init_states import make_init_bank

    key = (id(scene), task.name, n, seed)
    if key not in _BANKS:
        _BANKS[key] = make_init_bank(scene, task, n, seed=seed)
    return _BANKS[key]


class Evaluator:
    """success(params, algo_state, stages) -> (len(stages),) success rates, one batched rollout per scene.
    Episodes of task j start from the same `n_eval` initial states and use the same keys at every call."""

    def __init__(self, cfg: TrainConfig, policy, algo, tasks, langs, root_key, progress: bool):
        from clbench_jax.policies.act import make_policy_fn

        self.cfg, self.policy, self.algo, self.tasks, self.langs = cfg, policy, algo, tasks, langs
        self.root, self.progress = root_key, progress
        self.seq_len = getattr(policy.cfg, "seq_len", DEFAULT_SEQ_LEN)
        kw = dict(deterministic=cfg.deterministic_eval, warmup=cfg.warmup)
        self.fn = make_policy_fn(policy, stacked=algo.task_specific_eval, **kw)

    def __call__(self, params, state, stages: Sequence[int], reuse: tuple | None = None) -> np.ndarray:
        """Success of each task in `stages`. `reuse` = (params0, state0, {task: success}): a task whose evaluation
        parameters equal, bit for bit, those it had under (params0, state0) keeps that success instead of running
        its episodes again (same parameters, initial states and keys)."""
        out = np.zeros(len(stages))
        by_scene: dict[str, list[int]] = {}
        for i, j in enumerate(stages):
            if reuse is not None and j in reuse[2] and self._same_eval_params((params, state), reuse[:2], j):
                out[i] = reuse[2][j]
                continue
            by_scene.setdefault(self.tasks[j].scene, []).append(i)
        for idx in by_scene.values():
            js = [stages[i] for i in idx]
            rec = self.episodes(params, state, js)
            out[idx] = np.asarray(rec.success[:, 0]).reshape(len(js), self.cfg.n_eval).mean(1)
        return out

    def _same_eval_params(self, a: tuple, b: tuple, j: int) -> bool:
        la, lb = (jax.tree.leaves(self.algo.eval_params(p, st, j)) for p, st in (a, b))
        return len(la) == len(lb) and all(x is y or np.array_equal(x, y) for x, y in zip(la, lb))

    def episodes(self, params, state, js: Sequence[int], **rollout_kw):
        """One batched rollout of the `n_eval` episodes of each task in `js` (tasks of one scene), task-major ->
        rollout.rollout's result (`rollout_kw`: e.g. trace=True)."""
        from clbench_jax.policies.act import initial_pstate, obs_spec, stack_params
        from clbench_jax.sim import rollout

        cfg, n = self.cfg, self.cfg.n_eval
        scene = scene_for(self.tasks[js[0]].scene)
        banks = [init_bank(scene, self.tasks[j], n, cfg.eval_seed) for j in js]
        ids = np.repeat([scene.task_index(self.tasks[j].name) for j in js], n)
        keys = np.concatenate([np.asarray(jax.random.split(derive_key(self.root, "eval", j), n)) for j in js])
        goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
        batch = rollout.EpisodeBatch.of(banks, ids, goals, keys)
        if self.algo.task_specific_eval:
            p = stack_params([self.algo.eval_params(params, state, j) for j in js])
        else:
            p = self.algo.eval_params(params, state, js[0])
        lang = np.repeat(self.langs[js], n, axis=0)
        pstate = initial_pstate(p, lang, obs_spec(scene, cfg.obs, cfg.image_size), self.seq_len)
        return rollout.rollout(scene, self.fn, pstate, batch, cfg.horizon, backend=cfg.backend, warmup=cfg.warmup,
                               obs_mode=cfg.obs, image_size=cfg.image_size, progress=self.progress, **rollout_kw)


def _config_to_write(out_dir: str, cfg: TrainConfig) -> str | None:
    """A results folder belongs to one config: the text of config.yaml to write (None: the folder already holds
    this config). A folder holding another config is refused once a stage has finished there; before that
    (a start that failed) nothing would be lost, so the new config replaces it."""
    import yaml

    path = os.path.join(out_dir, "config.yaml")
    text = dump_config(cfg)
    if not os.path.exists(path):
        return text
    try:
        with open(path) as f:
            old = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ClbenchError(f"cannot read the folder's config ({e}); use another --out", file=path) from None
    new = yaml.safe_load(text)
    default = yaml.safe_load(dump_config(TrainConfig()))  # a field added since the folder was made: its default
    for c in (old, new):  # the same demos folder, named relative (to this working directory) or absolute
        if isinstance(c.get("demos_dir"), str):
            c["demos_dir"] = os.path.realpath(c["demos_dir"])
    diff = sorted(k for k in set(old) | set(new) if old.get(k, default.get(k)) != new.get(k))
    if not diff:
        return None
    if finished_stages(out_dir):
        raise ClbenchError(f"results folder holds a run with a different config ({diff[0]}: "
                           f"{old.get(diff[0], default.get(diff[0]))!r} != {new.get(diff[0])!r}); use another --out",
                           file=path, field=diff[0])
    return text


def finished_stages(out_dir) -> list[int]:
    """Finished stages of a lifelong run folder (its orbax step folders)."""
    ck = os.path.join(os.fspath(out_dir), "checkpoints")
    return sorted(int(p) for p in os.listdir(ck) if p.isdigit()) if os.path.isdir(ck) else []


def success_matrix(rows: list[list[float]]) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in r] for r in rows], float)


def summarize(cfg: TrainConfig, tasks, record: dict, complete: bool) -> dict:
    from clbench_jax.lifelong.metrics import lifelong_metrics

    c = success_matrix(record["rows"])
    out = {"config": cfg.to_dict(), "tasks": [t.name for t in tasks], "complete": complete,
           "success_matrix": record["rows"], "curves": record["curves"], "curve_epochs": record["curve_epochs"],
           "losses": record["losses"], "best_epoch": record["best_epoch"], "logs": record["logs"],
           "seconds": record["seconds"]}
    if complete and c.size:
        if c.shape[0] == c.shape[1]:
            out.update(lifelong_metrics(c, record["curves"], cfg.hold_peak))
        # Multitask (one row): the mean final success over tasks; LIBERO's paper reports only an AUC for it.
        out["final_mean_success"] = float(np.nanmean(c[-1]))
    return out


def run_tasks(cfg: TrainConfig) -> list:
    """The run's task sequence: `tasks` by name if given, else LIBERO order `order`; then the first `n_tasks`."""
    from clbench_jax.tasks.suites import ordered_tasks, suite_tasks

    if cfg.tasks is not None:
        by_name = {t.name: t for t in suite_tasks(cfg.suite)}
        return [by_name[n] for n in cfg.tasks][: cfg.n_tasks]
    return ordered_tasks(cfg.suite, cfg.order)[: cfg.n_tasks]


def run_lifelong(cfg: TrainConfig, out_dir: str, *, callbacks: Sequence[Callable[[int, dict], None]] = (),
                 progress: bool = True) -> dict:
    """Train and evaluate a whole lifelong run into `out_dir` (resuming from its checkpoints) -> metrics dict."""
    from tqdm.auto import tqdm

    from clbench_jax.algos import make_algorithm
    from clbench_jax.algos.protocol import TaskContext
    from clbench_jax.algos.train import (OptimConfig, apply_steps, cosine_lr, make_loss_grad, make_optimizer,
                                         make_train_step, make_train_steps)
    from clbench_jax.lifelong.checkpoints import StageCheckpoints

    from clbench_jax.jsonio import check_writable
    from clbench_jax.lifelong.pretrain import check_pretrained, load_pretrained

    # Everything is checked before the folder is written: a failed start leaves nothing that blocks the rerun.
    check_writable(out_dir, folder=True, field="out")
    if cfg.pretrained:
        check_pretrained(cfg)  # before any long work: the checkpoint exists, is finished, fits the policy
    config_text = _config_to_write(out_dir, cfg)
    tasks = run_tasks(cfg)
    n_tasks = len(tasks)
    policy = make_policy(cfg)
    algo = make_algorithm(cfg.algo, **cfg.algo_kwargs)
    seq_len = getattr(policy.cfg, "seq_len", DEFAULT_SEQ_LEN)
    groups = [list(range(n_tasks))] if algo.joint else [[k] for k in range(n_tasks)]
    # train_groups[s]: the tasks whose demos stage s trains on (groups[s] minus, with missing_demos: skip, the
    # tasks without demos); datasets[s] is None for a stage left with none.
    train_groups = [[k for k in g if cfg.missing_demos == "error" or has_demos(cfg.demos_dir, tasks[k])]
                    for g in groups]
    datasets = [open_dataset(cfg.demos_dir, [tasks[k] for k in g], cfg.obs, seq_len) if g else None
                for g in train_groups]
    if not any(ds is not None for ds in datasets):
        raise DataFileError("no task of the run has demos", file=cfg.demos_dir, field="missing_demos")
    if cfg.obs == "rgb":  # the policy must see demo frames and rollout frames of one size
        for g, ds in zip(train_groups, datasets):
            if ds is None:
                continue
            hw = tuple(ds.arrays["agentview_rgb"].shape[1:3])
            if hw != (cfg.image_size, cfg.image_size):
                raise DataFileError(f"demo images are {hw}, rollouts render {cfg.image_size} px (set image_size)",
                                    file=ds.paths[0], task=tasks[g[0]].name, field="obs/agentview_rgb")
    langs = task_embeddings(tasks, cfg)
    root = jax.random.PRNGKey(cfg.seed)

    first = next(s for s, ds in enumerate(datasets) if ds is not None)
    params = policy.init(derive_key(root, "init"),
                         policy_batch(datasets[first].gather(np.arange(1)), langs[train_groups[first]], cfg.obs))
    if cfg.pretrained:
        params = load_pretrained(cfg, policy, params)
    state = algo.init(params, n_tasks)
    os.makedirs(out_dir, exist_ok=True)
    if config_text is not None:
        write_text(os.path.join(out_dir, "config.yaml"), config_text)
    ocfg = OptimConfig(cfg.lr, cfg.end_lr, cfg.weight_decay, cfg.grad_clip)
    optimizer = make_optimizer(ocfg)
    opt_state = optimizer.init(params)
    augment = cfg.obs == "rgb"  # LIBERO augments images (pad-and-crop + colour jitter), never low-dim state
    # Algorithms are pure functions of (name, config): a compiled step is reused by later runs in this process.
    step_key = (policy, algo.name, json.dumps(algo.config, sort_keys=True), ocfg, cfg.mask_padding, augment)
    if step_key not in _STEPS:
        _STEPS[step_key] = tuple(f(policy, algo, optimizer, mask_padding=cfg.mask_padding, augment=augment)
                                 for f in (make_train_step, make_train_steps))
    step, steps = _STEPS[step_key]
    loss_grad = make_loss_grad(policy)
    evaluate = Evaluator(cfg, policy, algo, tasks, langs, root, progress)

    def batches(s, rng):
        ds = datasets[s]
        for i, raw in enumerate(ds.sample_batches(cfg.batch_size, rng, drop_last=len(ds) >= cfg.batch_size)):
            if cfg.max_batches is not None and i >= cfg.max_batches:
                return
            yield policy_batch(raw, langs[train_groups[s]], cfg.obs)

    def replay_batch(pairs):
        parts = []
        for u in np.unique(pairs[:, 0]):
            w = pairs[pairs[:, 0] == u, 1]
            parts.append(policy_batch(datasets[u].gather(w), langs[train_groups[u]], cfg.obs))
        return concat_batches(parts)

    def context(s, purpose):
        """What start_task / end_task of stage s may use: the stage's data, gradients, keys, the network."""
        return TaskContext(stage=s, n_windows=len(datasets[s]), batches=lambda rng: batches(s, rng),
                           grad=loss_grad, fit=None, rng=derive_rng(cfg.seed, purpose, s),
                           key=derive_key(root, purpose, s), policy=policy, gather=replay_batch)

    def fit(params, state, s, epochs, train_epoch0, tag):
        """LIBERO's learn_one_task (train_epoch0=False) or PackNet's post-prune fine-tuning (True)."""
        opt_state = optimizer.init(params)
        best, best_params, best_epoch = -1.0, params, 0
        best_eval = last_eval = None  # (params, state, {task: success}) of an evaluation, for Evaluator's reuse
        curve, eval_epochs, losses = [], [], []
        bar = tqdm(range(epochs + 1), desc=f"stage {s} {tag}", leave=False, disable=not progress)
        for epoch in bar:
            if epoch > 0 or train_epoch0:
                lr = cosine_lr(epoch if train_epoch0 else epoch - 1, cfg.epochs, ocfg)
                rng, key = derive_rng(cfg.seed, "train", tag, s, epoch), derive_key(root, "train", tag, s, epoch)

                def with_replay(rng=rng):  # batch i, then its replay draw: the host rng's order, whatever k
                    for b in batches(s, rng):
                        pairs = algo.replay(state, rng, cfg.batch_size)
                        yield b if pairs is None else concat_batches([b, replay_batch(pairs)])

                params, opt_state, out = apply_steps(step, steps, steps_per_dispatch(), params, opt_state, state,
                                                     with_replay(), key, lr)
                total, nb = 0.0, 0
                for v in (v for x in out for v in (x if np.ndim(x) else (x,))):
                    total, nb = total + v, nb + 1
                losses.append(float(total) / max(nb, 1))
                if not np.isfinite(losses[-1]):
                    names = ", ".join(tasks[k].name for k in train_groups[s])
                    raise TrainingError(f"training loss is {losses[-1]} at stage {s} ({tag}), epoch {epoch}: "
                                        "training diverged; check the demos for extreme values or lower lr",
                                        file=out_dir, task=names, field="lr")
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
            last_eval = None
            if epoch % cfg.eval_every == 0:
                per_task = evaluate(params, state, groups[s])
                succ = float(per_task.mean())
                curve.append(succ)
                eval_epochs.append(epoch)
                last_eval = (params, state, dict(zip(groups[s], per_task.tolist())))
                if succ > best:
                    best, best_params, best_epoch, best_eval = succ, params, epoch, last_eval
                bar.set_postfix(success=f"{succ:.2f}", best=f"{best:.2f}")
        if cfg.select == "last":
            best_params, best_epoch, best_eval = params, epochs, last_eval
        return best_params, opt_state, {"curve": curve, "epochs": eval_epochs, "losses": losses,
                                        "best_epoch": best_epoch}, best_eval

    ckpt = StageCheckpoints(os.path.join(out_dir, "checkpoints"))
    record = {"curves": [], "curve_epochs": [], "losses": [], "best_epoch": [], "rows": [], "logs": [], "seconds": []}
    start = 0
    latest = ckpt.latest()
    if latest is not None:
        try:
            arrays, record = ckpt.restore(latest, {"params": params, "algo_state": state, "opt_state": opt_state})
        except Exception as e:  # noqa: BLE001  (orbax / tensorstore raise many kinds for a damaged folder)
            ckpt.close()
            path = os.path.join(ckpt.directory, str(latest))
            before = f"after stage {latest - 1}" if latest > 0 else "from the start"
            raise DataFileError(f"the checkpoint of stage {latest} is damaged ({type(e).__name__}); drop it with "
                                f"`rm -r {path}` and rerun: training resumes {before}", file=path,
                                field=f"checkpoints/{latest}") from None
        params, state, opt_state = arrays["params"], arrays["algo_state"], arrays["opt_state"]
        start = latest + 1
    stage_bar = tqdm(range(start, len(groups)), desc=f"{cfg.algo} {cfg.suite}", disable=not progress,
                     initial=start, total=len(groups))
    for s in stage_bar:
        t0 = time.perf_counter()
        if datasets[s] is None:  # missing_demos: skip -- nothing to learn from; the algorithm never sees the task
            succ = evaluate(params, state, list(range(s + 1)))
            record["rows"].append([float(v) for v in succ] + [None] * (n_tasks - s - 1))
            record["curves"].append([float(succ[s])])
            record["curve_epochs"].append([0])
            record["losses"].append([])
            record["best_epoch"].append(0)
            record["logs"].append({"skipped": f"no demos for {tasks[s].name}"})
            record["seconds"].append(time.perf_counter() - t0)
            ckpt.save(s, {"params": params, "algo_state": state, "opt_state": opt_state}, record)
            write_json(os.path.join(out_dir, "metrics.json"), summarize(cfg, tasks, record, complete=False))
            continue
        begin = context(s, "start_task")
        params, state = algo.start_task(params, state, s, begin)
        params, opt_state, info, best_eval = fit(params, state, s, cfg.epochs, False, "main")
        ctx = context(s, "end_task")
        ctx.log.update(begin.log)

        def post_fit(p, st, epochs, s=s, ctx=ctx):
            p, _, post, _ = fit(p, st, s, epochs, True, "post")
            ctx.log["post_fit"] = post
            return p

        ctx.fit = post_fit
        params, state = algo.end_task(params, state, s, ctx)
        seen = groups[s] if algo.joint else list(range(s + 1))
        # Tasks whose evaluation parameters end_task left as the kept epoch's (SeqFT, ER, EWC) are not run again.
        succ = evaluate(params, state, seen, reuse=best_eval)
        row = [None] * n_tasks
        for j, v in zip(seen, succ):
            row[j] = float(v)
        record["rows"].append(row)
        record["curves"].append(info["curve"])
        record["curve_epochs"].append(info["epochs"])
        record["losses"].append(info["losses"])
        record["best_epoch"].append(info["best_epoch"])
        record["logs"].append(ctx.log)
        record["seconds"].append(time.perf_counter() - t0)
        ckpt.save(s, {"params": params, "algo_state": state, "opt_state": opt_state}, record)
        write_json(os.path.join(out_dir, "metrics.json"), summarize(cfg, tasks, record, complete=False))
        stage_bar.set_postfix(success=f"{np.mean(succ):.2f}")
        for cb in callbacks:
            cb(s, record)
    ckpt.close()
    for ds in datasets:
        if ds is not None:
            ds.close()
    metrics = summarize(cfg, tasks, record, complete=True)
    write_json(os.path.join(out_dir, "metrics.json"), metrics)
    write_plots(out_dir, tasks, record, cfg)
    return metrics


def write_plots(out_dir: str, tasks, record: dict, cfg: TrainConfig) -> None:
    from clbench_jax.lifelong.plots import plot_learning_curves, plot_success_matrix

    c = success_matrix(record["rows"])
    labels = [f"{i}:{t.name[:28]}" for i, t in enumerate(tasks)]
    title = f"{cfg.algo} / {cfg.policy} ({cfg.obs}) on {cfg.suite}, order {cfg.order}, seed {cfg.seed}"
    plot_success_matrix(c, labels, os.path.join(out_dir, "success_matrix.png"), title)
    curve_labels = ["all tasks"] if len(record["curves"]) == 1 and c.shape[0] == 1 and len(tasks) > 1 else labels
    plot_learning_curves(record["curves"], record["curve_epochs"], curve_labels,
                         os.path.join(out_dir, "learning_curves.png"), title)
