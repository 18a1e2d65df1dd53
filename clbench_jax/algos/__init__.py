"""Lifelong-learning algorithms as records of pure functions (see protocol.py) and the shared train step."""

from __future__ import annotations

from clbench_jax.algos.dmpel import make_dmpel
from clbench_jax.algos.er import make_er
from clbench_jax.algos.ewc import make_ewc
from clbench_jax.algos.iscil import make_iscil
from clbench_jax.algos.l2m import make_l2m
from clbench_jax.algos.multitask import make_multitask
from clbench_jax.algos.packnet import make_packnet
from clbench_jax.algos.protocol import Algorithm, TaskContext
from clbench_jax.algos.seqft import make_seqft
from clbench_jax.algos.tail import make_tail
from clbench_jax.errors import ClbenchError

ALGORITHMS = {"seqft": make_seqft, "er": make_er, "ewc": make_ewc, "packnet": make_packnet,
              "multitask": make_multitask, "l2m": make_l2m, "tail": make_tail, "iscil": make_iscil,
              "dmpel": make_dmpel}


def make_algorithm(name: str, **kwargs) -> Algorithm:
    """An algorithm by name (seqft | er | ewc | packnet | multitask | l2m | tail | iscil | dmpel) with keyword
    hyper-parameters."""
    if name not in ALGORITHMS:
        raise ClbenchError(f"unknown algorithm {name!r}; choose from {sorted(ALGORITHMS)}", field="algo")
    try:
        return ALGORITHMS[name](**kwargs)
    except TypeError as e:
        raise ClbenchError(f"bad hyper-parameters for {name}: {e}", field="algo_kwargs") from e


__all__ = ["Algorithm", "TaskContext", "ALGORITHMS", "make_algorithm", "make_dmpel", "make_er",
           "make_ewc", "make_iscil", "make_l2m", "make_multitask", "make_packnet", "make_seqft", "make_tail"]
