"""Multitask learning (LIBERO's `Multitask`, the upper bound): one stage over every task's demonstrations at once.

The loop trains a single stage on the concatenated datasets, selects the checkpoint by mean success over all tasks
and evaluates every task once: the success matrix has one row."""

from clbench_jax.algos.protocol import Algorithm


def make_multitask() -> Algorithm:
    return Algorithm(name="multitask", joint=True)
