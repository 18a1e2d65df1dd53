"""Offscreen RGB rendering of worlds with MuJoCo's renderer (agentview and eye-in-hand cameras).

Images are upright (row 0 at the top); LIBERO's raw robosuite images are the same pictures vertically flipped
(OpenGL's row order). As robosuite, the collision geoms (group 0) are hidden: only the visual meshes show.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np

from clbench_jax.sim.native import FULL

CAMERAS = ("agentview", "robot0_eye_in_hand")
MAX_THREADS = 8  # renderers (GL contexts) per BatchRenderer; each holds the scene's meshes


class BatchRenderer:
    """Renders (N, n_cameras, H, W, 3) uint8 images of many worlds' states.

    MuJoCo's renderer releases the GIL, so the worlds are split over `threads` renderers, each owned by one worker
    thread (its GL context is only ever current there). Every world's image is the same bit for bit whichever
    renderer draws it (tests/test_sim.py). Threads need a headless GL (MUJOCO_GL=egl or osmesa); GLFW's contexts
    belong to the main thread, so there it renders in one thread.
    """

    def __init__(self, model: mujoco.MjModel, size: int = 128, cameras: tuple[str, ...] = CAMERAS,
                 threads: int | None = None):
        self.m, self.cameras, self.size = model, cameras, size
        if threads is None:
            headless = os.environ.get("MUJOCO_GL", "").lower() in ("egl", "osmesa")
            threads = min(len(os.sched_getaffinity(0)), MAX_THREADS) if headless else 1
        self.threads = max(1, threads)
        self._local, self._made, self._lock = threading.local(), [], threading.Lock()
        self.opt = mujoco.MjvOption()
        self.opt.sitegroup[:] = 0  # no site markers (regions, grip site) in observations
        self.opt.geomgroup[0] = 0  # robosuite hides the collision geoms (render_collision_mesh=False)
        self._pool = ThreadPoolExecutor(self.threads, "render") if self.threads > 1 else None
        if self._pool is None:
            self._renderer()  # a missing GL fails here, not at the first step of a rollout

    def _renderer(self):
        """This thread's renderer, made on first use (so its GL context belongs to the thread)."""
        if not hasattr(self._local, "r"):
            r = mujoco.Renderer(self.m, self.size, self.size)
            self._local.r, self._local.d = r, mujoco.MjData(self.m)
            with self._lock:
                self._made.append(r)
        return self._local.r, self._local.d

    def _render_into(self, out: np.ndarray, rows: np.ndarray, state: np.ndarray, mocap: np.ndarray) -> None:
        r, d = self._renderer()
        for i in rows:
            mujoco.mj_setState(self.m, d, state[i], FULL)
            d.mocap_pos[:] = mocap[i, :, :3]
            d.mocap_quat[:] = mocap[i, :, 3:]
            mujoco.mj_kinematics(self.m, d)
            mujoco.mj_camlight(self.m, d)
            for k, cam in enumerate(self.cameras):
                r.update_scene(d, camera=cam, scene_option=self.opt)
                out[i, k] = r.render()

    def render(self, state: np.ndarray, mocap: np.ndarray, active: np.ndarray | None = None) -> np.ndarray:
        """Images of every world, or only of the worlds where `active` (n,) is true (the others stay black)."""
        n = state.shape[0]
        out = np.zeros((n, len(self.cameras), self.size, self.size, 3), np.uint8)
        rows = np.arange(n) if active is None else np.flatnonzero(active)
        if self._pool is None:
            self._render_into(out, rows, state, mocap)
        else:  # interleaved chunks: finished episodes tend to cluster, this keeps the threads' loads even
            chunks = [rows[j::self.threads] for j in range(min(self.threads, len(rows)))]
            for f in [self._pool.submit(self._render_into, out, c, state, mocap) for c in chunks]:
                f.result()
        return out

    def close(self):
        if self._pool is not None:
            self._pool.shutdown()
        with self._lock:
            for r in self._made:
                r.close()
            self._made.clear()


def save_png(path, image: np.ndarray) -> None:
    """Write an (H, W, 3) uint8 image as PNG atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    from clbench_jax.jsonio import atomic_path

    with atomic_path(path, suffix=".png") as tmp:
        mpimg.imsave(tmp, image)
