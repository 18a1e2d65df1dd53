"""Test-session setup: pick MuJoCo's offscreen GL backend before any test module imports mujoco."""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on two cores: one XLA compute thread each. With XLA's default pool per worker the
    # workers' threads contend (measured on two test sets run side by side: about 10% longer and 10% more CPU time than this).
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_cpu_multi_thread_eigen=false",
                                        "intra_op_parallelism_threads=1"]).strip()

import clbench_jax  # noqa: E402,F401  (sets MUJOCO_GL / PYOPENGL_PLATFORM when no display is present)

import pytest  # noqa: E402

from clbench_jax import caches  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """After each test module, drop every compiled executable. One pytest process compiles thousands of XLA
    executables; each maps code pages, and past vm.max_map_count (65530) XLA's compiler segfaults. Clearing also keeps
    id()-keyed caches from outliving the scenes they describe."""
    yield
    caches.release()
