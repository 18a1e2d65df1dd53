"""The pretrained base: multitask BC on every task of a suite (LIBERO-90 in LIBERO's pretraining experiment, seed
001's Fig. 5, and as the base of the methods in seed 000), saved with orbax; a run starts from it with
`pretrained: <folder>` (the frozen base of l2m / tail / iscil / dmpel, the starting point of the others).

Pretraining is LIBERO's Multitask without the success-based checkpoint selection: one fresh AdamW, the cosine
schedule over `epochs`, each epoch one shuffled pass over the windows of every task's demos; the base is the last
epoch's parameters (DMPEL's re-implementation starts its methods from the last epoch of such a run:
multitask_model_ep10.pth). One orbax checkpoint per epoch, so a killed run resumes to the same numbers; the base is
written last, so its presence means the run finished.

Folder: config.yaml (the run's TrainConfig), checkpoints/<epoch>/ (params, optimizer state, record),
base/0/ (the base's params and record), pretrain.json (losses per epoch, tasks, seconds).
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import numpy as np
import yaml

from clbench_jax.errors import PretrainedError
from clbench_jax.jsonio import write_json

# TrainConfig fields that fix the base's parameter shapes and meaning; a run must match its pretrained base on them.
POLICY_FIELDS = ("policy", "obs", "policy_kwargs", "gmm_min_std", "lang", "image_size")


def pretrain_command(cfg, out: str) -> str:
    """The two commands that make a LIBERO-90 base for `cfg` (its own demos are another suite's: not the base's)."""
    images = " --no-images" if cfg.obs == "state" else ""
    return (f"clbench demos collect --suite libero_90 --n 50{images} --out runs/demos, then clbench pretrain "
            f"--suite libero_90 --policy {cfg.policy} --obs {cfg.obs} --demos runs/demos --out {out}  (with --config "
            "for policy_kwargs, e.g. configs/pretrain_libero_90.yaml)")


def _is_run(path: str) -> bool:
    """A lifelong run's folder (`clbench train` / `clbench run`'s train/<method>_s<seed>) rather than a pretraining
    run's: it writes metrics.json."""
    return os.path.exists(os.path.join(path, "metrics.json"))


def _base_dir(path: str) -> str:
    """Where the base's params are: a pretraining run's base/, or a finished multitask run's checkpoints/ (its one
    stage, the checkpoint LIBERO's Multitask selects by success)."""
    return os.path.join(path, "checkpoints" if _is_run(path) else "base")


def check_pretrained(cfg) -> dict:
    """Fail early, naming the folder and the command that makes it, unless cfg.pretrained holds a finished
    pretraining run, or a finished multitask run, of the same policy -> that run's config (dict)."""
    path = cfg.pretrained
    cfg_file = os.path.join(path, "config.yaml")
    if not os.path.exists(cfg_file):
        raise PretrainedError(f"no pretrained checkpoint at {path}; make it with: {pretrain_command(cfg, path)}, "
                              "or name a finished multitask run (RUN/train/multitask_s<seed>)", file=path,
                              field="pretrained")
    with open(cfg_file) as f:
        old = yaml.safe_load(f) or {}
    if _is_run(path) and (old.get("algo") != "multitask" or (old.get("algo_kwargs") or {}).get("adapters")):
        raise PretrainedError(f"{path} is a {old.get('algo')} run; a base is a `clbench pretrain` folder or a "
                              "multitask run without adapters (e.g. RUN/train/multitask_s0)", file=cfg_file,
                              field="pretrained")
    if not os.path.isdir(_base_dir(path)) or not os.listdir(_base_dir(path)):
        raise PretrainedError(f"the pretraining run at {path} is unfinished; rerun the command that made it to "
                              f"resume it ({pretrain_command(cfg, path)})", file=path, field="pretrained")
    new = yaml.safe_load(yaml.safe_dump(_plain(cfg.to_dict())))
    for k in POLICY_FIELDS:
        if old.get(k) != new.get(k):
            raise PretrainedError(f"the pretrained base was made with {k} {old.get(k)!r}, this run has "
                                  f"{new.get(k)!r}", file=cfg_file, field=k)
    return old


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return [_plain(v) for v in x] if isinstance(x, (list, tuple)) else x


def load_pretrained(cfg, policy, params):
    """params with the base replaced by the pretrained one (the whole tree for a plain policy, params["base"] for
    an adapted one)."""
    from clbench_jax.lifelong.checkpoints import StageCheckpoints
    from clbench_jax.policies.adapters import AdaptedPolicy

    check_pretrained(cfg)
    adapted = isinstance(policy, AdaptedPolicy)
    like = params["base"] if adapted else params
    store = StageCheckpoints(_base_dir(cfg.pretrained))
    try:
        arrays, _ = store.restore(store.latest(), {"params": like}, partial=True)
    finally:
        store.close()
    base = arrays["params"]
    return dict(params, base=base) if adapted else base


def pretrain(cfg, out_dir: str, *, progress: bool = True) -> dict:
    """Multitask BC over every task of cfg's run into `out_dir` (resuming from its last epoch) -> record dict."""
    from tqdm.auto import tqdm

    from clbench_jax.algos import make_seqft
    from clbench_jax.algos.train import OptimConfig, cosine_lr, make_optimizer, make_train_step
    from clbench_jax.lifelong.checkpoints import StageCheckpoints
    from clbench_jax.lifelong.data import has_demos, open_dataset, policy_batch
    from clbench_jax.jsonio import check_writable, write_text
    from clbench_jax.lifelong.loop import (DEFAULT_SEQ_LEN, _config_to_write, derive_key, derive_rng,
                                           make_base_policy, run_tasks, task_embeddings)

    if cfg.pretrained:
        raise PretrainedError("a pretraining run starts from scratch; drop `pretrained`", field="pretrained")
    cfg = dataclasses.replace(cfg, algo="multitask")
    check_writable(out_dir, folder=True, field="out")
    config_text = _config_to_write(out_dir, cfg)  # written once the demos are known to load
    tasks = [t for t in run_tasks(cfg) if cfg.missing_demos == "error" or has_demos(cfg.demos_dir, t)]
    policy = make_base_policy(cfg)
    ds = open_dataset(cfg.demos_dir, tasks, cfg.obs, getattr(policy.cfg, "seq_len", DEFAULT_SEQ_LEN))
    os.makedirs(out_dir, exist_ok=True)
    if config_text is not None:
        write_text(os.path.join(out_dir, "config.yaml"), config_text)
    langs = task_embeddings(tasks, cfg)
    root = jax.random.PRNGKey(cfg.seed)
    params = policy.init(derive_key(root, "init"), policy_batch(ds.gather(np.arange(1)), langs, cfg.obs))
    ocfg = OptimConfig(cfg.lr, cfg.end_lr, cfg.weight_decay, cfg.grad_clip)
    opt = make_optimizer(ocfg)
    opt_state = opt.init(params)
    step = make_train_step(policy, make_seqft(), opt, mask_padding=cfg.mask_padding, augment=cfg.obs == "rgb")
    record = {"tasks": [t.name for t in tasks], "epochs": cfg.epochs, "losses": [], "seconds": []}
    ckpt = StageCheckpoints(os.path.join(out_dir, "checkpoints"))
    first = 1
    if ckpt.latest() is not None:
        arrays, record = ckpt.restore(ckpt.latest(), {"params": params, "opt_state": opt_state})
        params, opt_state, first = arrays["params"], arrays["opt_state"], ckpt.latest() + 1
    for epoch in tqdm(range(first, cfg.epochs + 1), desc=f"pretrain {cfg.suite}", disable=not progress):
        t0 = time.perf_counter()
        lr = cosine_lr(epoch - 1, cfg.epochs, ocfg)
        rng, key = derive_rng(cfg.seed, "pretrain", epoch), derive_key(root, "pretrain", epoch)
        total, nb = 0.0, 0
        n_batches = len(ds) // cfg.batch_size if len(ds) >= cfg.batch_size else 1
        batches = ds.sample_batches(cfg.batch_size, rng, drop_last=len(ds) >= cfg.batch_size)
        for i, raw in enumerate(tqdm(batches, total=n_batches, desc=f"epoch {epoch}", leave=False,
                                     disable=not progress)):
            if cfg.max_batches is not None and i >= cfg.max_batches:
                break
            params, opt_state, info = step(params, opt_state, {}, policy_batch(raw, langs, cfg.obs),
                                           jax.random.fold_in(key, i), lr)
            total, nb = total + info["loss"], nb + 1
        record["losses"].append(float(total) / max(nb, 1))
        record["seconds"].append(time.perf_counter() - t0)
        ckpt.save(epoch, {"params": params, "opt_state": opt_state}, record)
    ckpt.close()
    ds.close()
    base = StageCheckpoints(_base_dir(out_dir))
    if base.latest() is None:
        base.save(0, {"params": params}, record)
    base.close()
    write_json(os.path.join(out_dir, "pretrain.json"), {"config": cfg.to_dict(), **record})
    return record
