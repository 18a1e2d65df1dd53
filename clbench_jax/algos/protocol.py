"""The one protocol every lifelong algorithm follows: a record of pure functions over pytrees.

The loop (clbench_jax.lifelong.loop) only ever calls these fields; an algorithm never touches the loop.
Task indices are *stage* indices (position in the chosen task order, 0-based), as in LIBERO's code.

    init(params, n_tasks)              -> state            fixed-shape pytree (it is checkpointed and jitted over)
    penalty(params, state)             -> scalar           added to the BC loss inside the jitted step (EWC)
    grad_mask(params, state)           -> pytree | None    multiplies the optimizer's updates: 1 train, 0 frozen
    start_task(params, state, t, ctx)  -> (params, state)  before training stage t (PackNet hands out free weights,
                                                           IsCiL builds the task's prototypes from ctx's data)
    end_task(params, state, t, ctx)    -> (params, state)  after the best checkpoint of stage t is restored; may use
                                                           `ctx` (TaskContext) for data, gradients or more training
    train_params(params, state)        -> params           what the network sees in a training step: params plus
                                                           any per-task state its forward reads (default: params)
    eval_params(params, state, j)      -> params           the parameters that act on (seen) task j
    replay(state, rng, n)              -> (n, 2) int | None  (stage, window) pairs of earlier tasks to add to a batch
    network(policy, n_tasks)           -> policy-like      the network trained and acted with, built around the base
                                                           policy (a frozen base plus adapters: policies.adapters);
                                                           None: the base policy itself
    joint                                                  True: one stage over all tasks at once (multitask)
    task_specific_eval                                     True when eval_params depends on j (evaluate stacked)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

Params = Any
State = Any


@dataclass
class TaskContext:
    """What the loop lends `end_task` for stage `stage`.

    batches(rng)                     one shuffled pass over the stage's training batches (policy-ready dicts)
    n_windows                        number of windows in the stage's dataset (ER's buffer indexes them)
    grad(params, batch, key)         jitted gradient of the batch-mean BC log-likelihood (train mode)
    fit(params, state, epochs)       train more on the stage's data with a fresh optimizer, evaluating success and
                                     keeping the best checkpoint as LIBERO's PackNet fine-tuning does -> params
    rng                              numpy Generator derived from (seed, stage, "end_task" | "start_task")
    key                              JAX key derived from (seed, stage, "end_task" | "start_task")
    policy                           the network being trained (algo.network's, else the base policy)
    gather(pairs)                    policy batch of earlier stages' windows, pairs (n, 2) of (stage, window)
    """

    stage: int
    n_windows: int
    batches: Callable[[np.random.Generator], Any]
    grad: Callable[[Params, Any, Any], Params]
    fit: Callable[[Params, State, int], Params]
    rng: np.random.Generator
    key: Any
    log: dict = field(default_factory=dict)  # anything the algorithm wants recorded in metrics.json
    policy: Any = None
    gather: Callable[[np.ndarray], Any] | None = None


def _no_penalty(params, state):
    return jnp.zeros((), jnp.float32)


def _no_mask(params, state):
    return None


def _same(params, state, t, *rest):
    return params, state


def _eval_same(params, state, j):
    return params


def _train_same(params, state):
    return params


def _no_replay(state, rng, n):
    return None


@dataclass(frozen=True)
class Algorithm:
    name: str
    init: Callable[[Params, int], State] = lambda params, n_tasks: {}
    penalty: Callable[[Params, State], Any] = _no_penalty
    grad_mask: Callable[[Params, State], Any] = _no_mask
    start_task: Callable[..., tuple] = _same
    end_task: Callable[..., tuple] = _same
    eval_params: Callable[[Params, State, int], Params] = _eval_same
    train_params: Callable[[Params, State], Params] = _train_same
    replay: Callable[[State, np.random.Generator, int], Any] = _no_replay
    network: Callable[[Any, int], Any] | None = None
    joint: bool = False
    task_specific_eval: bool = False
    config: dict = field(default_factory=dict)  # the hyper-parameters, recorded with the run

    def replace(self, **kw) -> "Algorithm":
        return dataclasses.replace(self, **kw)
