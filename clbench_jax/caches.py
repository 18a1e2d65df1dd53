"""Releasing the module-level caches of compiled functions and of id()-keyed objects (scenes, oracles, task stacks).

Those caches pin every scene they saw (so an id() is never reused while an entry lives); a long job that walks many
scenes (the oracle table over 130 tasks) or one process running many tests calls `release()` between them, or
memory and XLA's mapped code pages only grow."""

from __future__ import annotations

import functools
import gc
import sys

# the dicts that hold compiled functions or id()-keyed objects (sim/rollout.py, data/oracle.py, ...)
CACHE_DICTS = {"_JITTED", "_CONSTS", "_TASK_STACKS", "_ORACLES", "_SCENES", "_STREAM_FNS", "_STEPS"}


def release() -> None:
    """Drop every cache of the project's modules and jax's compiled executables."""
    import jax

    for name, mod in list(sys.modules.items()):
        if not name.startswith("clbench_jax"):
            continue
        for attr, val in list(vars(mod).items()):
            if isinstance(val, functools._lru_cache_wrapper):
                val.cache_clear()
            elif attr in CACHE_DICTS and isinstance(val, dict):
                val.clear()
    jax.clear_caches()
    gc.collect()
