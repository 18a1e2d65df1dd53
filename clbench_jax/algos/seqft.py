"""Sequential fine-tuning (LIBERO's `Sequential`, the paper's SeqL): plain BC on each new task, nothing else."""

from clbench_jax.algos.protocol import Algorithm


def make_seqft() -> Algorithm:
    return Algorithm(name="seqft")
