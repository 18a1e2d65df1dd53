"""Test-session setup: pick MuJoCo's offscreen GL backend before any test module imports mujoco."""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on two cores: one XLA compute thread each. With XLA's default pool per worker the
    # workers' threads contend (measured on two test sets run side by side: about 10% longer and 10% more CPU time than this).
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_cpu_multi_thread_eigen=false",
                                        "intra_op_parallelism_threads=1"]).strip()

# One XLA compilation cache on disk for the whole test session: both workers, the processes tests start (resume
# kills, two-process training) and every module after `caches.release()` load an executable compiled before instead
# of compiling it again. Keyed by the program, jax's version and flags, so a stale entry is never used; MJX-Warp
# programs are kept out of it (sim/mjx_backend.py). A user's own JAX_COMPILATION_CACHE_DIR is left as it is.
SESSION_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if SESSION_CACHE:
    from clbench_jax.paths import cache_dir  # noqa: E402  (clbench_jax.paths imports neither jax nor mujoco)

    jax_cache = cache_dir() / "jax-tests"
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(jax_cache)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    # No size limit for jax to keep: it would walk the whole folder at every write (~80 ms each, measured). A folder
    # grown past 2 GiB (a full session writes ~100 MB) is emptied here, before the workers start.
    if not os.environ.get("PYTEST_XDIST_WORKER") and jax_cache.is_dir():
        if sum(p.stat().st_size for p in jax_cache.iterdir()) > 2 << 30:
            import shutil

            shutil.rmtree(jax_cache, ignore_errors=True)

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
    if SESSION_CACHE:
        import jax

        jax.config.update("jax_enable_compilation_cache", True)  # an MJX-Warp module turned it off (mjx_backend.py)
