"""Test-session setup: pick MuJoCo's offscreen GL backend before any test module imports mujoco."""

import clbench_jax  # noqa: F401  (sets MUJOCO_GL / PYOPENGL_PLATFORM when no display is present)

import pytest  # noqa: E402

from clbench_jax import caches  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """After each test module, drop every compiled executable. One pytest process compiles thousands of XLA
    executables; each maps code pages, and past vm.max_map_count (65530) XLA's compiler segfaults. Clearing also keeps
    id()-keyed caches from outliving the scenes they describe."""
    yield
    caches.release()
