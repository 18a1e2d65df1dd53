"""clbench-jax: LIBERO's lifelong robot imitation benchmark in JAX + MuJoCo."""

import os as _os

# Offscreen rendering: MuJoCo picks its GL backend when first imported. Without a display, use EGL on NVIDIA
# machines and OSMesa (apt-get install libosmesa6) elsewhere, unless the user chose already.
if "MUJOCO_GL" not in _os.environ and not _os.environ.get("DISPLAY"):
    _gl = "egl" if _os.path.exists("/proc/driver/nvidia") else "osmesa"
    _os.environ["MUJOCO_GL"] = _gl
    _os.environ.setdefault("PYOPENGL_PLATFORM", _gl)

__version__ = "0.1.0"
