"""Test-session setup: pick MuJoCo's offscreen GL backend before any test module imports mujoco."""

import clbench_jax  # noqa: F401  (sets MUJOCO_GL / PYOPENGL_PLATFORM when no display is present)
