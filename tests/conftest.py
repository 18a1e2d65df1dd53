"""Test-session setup: pick MuJoCo's offscreen GL backend before any test module imports mujoco."""

import clbench_jax  # noqa: F401  (sets MUJOCO_GL / PYOPENGL_PLATFORM when no display is present)

import functools  # noqa: E402
import gc  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

# Module-level caches of compiled functions and of objects keyed by id() (see sim/rollout.py, data/oracle.py, ...).
_CACHE_DICTS = {"_JITTED", "_CONSTS", "_TASK_STACKS", "_ORACLES", "_SCENES", "_STREAM_FNS", "_STEPS"}


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """After each test module, drop every compiled executable. One pytest process compiles thousands of XLA
    executables; each maps code pages, and past vm.max_map_count (65530) XLA's compiler segfaults. Clearing also keeps
    id()-keyed caches from outliving the scenes they describe."""
    yield
    import jax

    for name, mod in list(sys.modules.items()):
        if not name.startswith("clbench_jax"):
            continue
        for attr, val in list(vars(mod).items()):
            if isinstance(val, functools._lru_cache_wrapper):
                val.cache_clear()
            elif attr in _CACHE_DICTS and isinstance(val, dict):
                val.clear()
    jax.clear_caches()
    gc.collect()
