"""Experience replay (LIBERO algos/er.py).

LIBERO's code keeps the first `n_memories` = 1000 *windows* (dataset items of seq_len 10, by index) of every earlier
task -- not 1000 trajectories as the paper says -- and concatenates a batch of `batch_size` windows drawn at random
from the union of those buffers to every new-task batch. `selection="random"` keeps 1000 windows drawn uniformly
without replacement instead. The buffer holds (stage, window index) pairs, so it is small and checkpointable; the
loop gathers the windows from the earlier stages' datasets.
"""

from __future__ import annotations

import numpy as np

from clbench_jax.algos.protocol import Algorithm
from clbench_jax.errors import ClbenchError


def make_er(n_memories: int = 1000, selection: str = "first") -> Algorithm:
    if selection not in ("first", "random"):
        raise ClbenchError(f"ER selection must be 'first' or 'random', got {selection!r}", field="algo.selection")
    if n_memories < 1:
        raise ClbenchError(f"ER n_memories must be >= 1, got {n_memories}", field="algo.n_memories")

    def init(params, n_tasks):
        m = n_tasks * n_memories  # fixed shape: room for every task
        return {"task": np.full(m, -1, np.int32), "window": np.zeros(m, np.int32), "size": np.zeros((), np.int32)}

    def end_task(params, state, t, ctx):
        n = min(n_memories, ctx.n_windows)
        if selection == "first":
            w = np.arange(n)
        else:
            w = np.sort(ctx.rng.choice(ctx.n_windows, n, replace=False))
        size = int(state["size"])
        task, window = np.array(state["task"]), np.array(state["window"])
        task[size:size + n], window[size:size + n] = t, w
        ctx.log["buffer_added"] = n
        return params, {"task": task, "window": window, "size": np.asarray(size + n, np.int32)}

    def replay(state, rng, n):
        size = int(state["size"])
        if size == 0:
            return None
        idx = rng.integers(0, size, n)  # uniform over the union of the earlier tasks' buffers
        return np.stack([np.asarray(state["task"])[idx], np.asarray(state["window"])[idx]], 1)

    return Algorithm(name="er", init=init, end_task=end_task, replay=replay,
                     config={"n_memories": n_memories, "selection": selection})
