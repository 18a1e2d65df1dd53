"""Offscreen RGB rendering of worlds with MuJoCo's renderer (agentview and eye-in-hand cameras).

Images are upright (row 0 at the top); LIBERO's raw robosuite images are the same pictures vertically flipped
(OpenGL's row order). As robosuite, the collision geoms (group 0) are hidden: only the visual meshes show.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import mujoco
import numpy as np

from clbench_jax.errors import ClbenchError
from clbench_jax.sim.native import FULL

CAMERAS = ("agentview", "robot0_eye_in_hand")
MAX_WORKERS = 8  # renderer processes per BatchRenderer; each holds the scene's meshes


def scene_option() -> mujoco.MjvOption:
    """What LIBERO's cameras show: visual geoms only, no site markers."""
    opt = mujoco.MjvOption()
    opt.sitegroup[:] = 0  # no site markers (regions, grip site) in observations
    opt.geomgroup[0] = 0  # robosuite hides the collision geoms (render_collision_mesh=False)
    return opt


class _Drawer:
    """One MuJoCo renderer (one GL context) drawing worlds' states from the cameras."""

    def __init__(self, model: mujoco.MjModel, size: int, cameras: tuple[str, ...]):
        self.m, self.cameras, self.size = model, cameras, size
        self.r, self.d, self.opt = mujoco.Renderer(model, size, size), mujoco.MjData(model), scene_option()

    def draw(self, state: np.ndarray, mocap: np.ndarray) -> np.ndarray:
        out = np.zeros((state.shape[0], len(self.cameras), self.size, self.size, 3), np.uint8)
        for i in range(state.shape[0]):
            mujoco.mj_setState(self.m, self.d, state[i], FULL)
            self.d.mocap_pos[:] = mocap[i, :, :3]
            self.d.mocap_quat[:] = mocap[i, :, 3:]
            mujoco.mj_kinematics(self.m, self.d)
            mujoco.mj_camlight(self.m, self.d)
            for k, cam in enumerate(self.cameras):
                self.r.update_scene(self.d, camera=cam, scene_option=self.opt)
                out[i, k] = self.r.render()
        return out


_WORKER_DRAWER: _Drawer | None = None  # the one drawer of a render worker process


def _start_worker(model_mjb: bytes, size: int, cameras: tuple[str, ...]) -> None:
    global _WORKER_DRAWER
    model = mujoco.MjModel.from_binary_path("scene.mjb", {"scene.mjb": model_mjb})
    _WORKER_DRAWER = _Drawer(model, size, cameras)


def _draw_in_worker(state: np.ndarray, mocap: np.ndarray) -> np.ndarray:
    return _WORKER_DRAWER.draw(state, mocap)


class BatchRenderer:
    """Renders (N, n_cameras, H, W, 3) uint8 images of many worlds' states.

    With a headless GL (MUJOCO_GL=egl or osmesa) the worlds are split over `workers` renderer processes, each with
    its own copy of the model (as it is when the renderer is made) and its own GL context. Processes, not threads:
    OSMesa is not safe with contexts in several threads of one process (a threaded version crashed with SIGSEGV
    mid-evaluation). Every world's image is the same bit for bit whichever process draws it (tests/test_sim.py).
    Under GLFW (a window system) it renders in this process. A worker that dies raises ClbenchError.
    """

    def __init__(self, model: mujoco.MjModel, size: int = 128, cameras: tuple[str, ...] = CAMERAS,
                 workers: int | None = None):
        self.cameras, self.size = cameras, size
        if workers is None:
            headless = os.environ.get("MUJOCO_GL", "").lower() in ("egl", "osmesa")
            workers = min(len(os.sched_getaffinity(0)), MAX_WORKERS) if headless else 1
        self.workers = max(1, workers)
        self._drawer = self._pool = None
        if self.workers == 1:
            self._drawer = _Drawer(model, size, cameras)  # a missing GL fails here, not at a rollout's first step
            return
        mjb = np.zeros(mujoco.mj_sizeModel(model), np.uint8)
        mujoco.mj_saveModel(model, None, mjb)  # the model as it is now, bit for bit, for the workers to load
        self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_start_worker, initargs=(mjb.tobytes(), size, cameras))
        self._draw(np.arange(0), np.zeros((0, 0)), np.zeros((0, 0, 7)))  # a missing GL fails here

    def _draw(self, rows: np.ndarray, state: np.ndarray, mocap: np.ndarray) -> np.ndarray:
        """The images of `rows`, drawn by the workers in interleaved chunks (finished episodes tend to cluster,
        this keeps the workers' loads even)."""
        out = np.zeros((len(rows), len(self.cameras), self.size, self.size, 3), np.uint8)
        parts = [np.arange(j, len(rows), self.workers) for j in range(min(self.workers, len(rows)) or 1)]
        try:
            futures = [self._pool.submit(_draw_in_worker, state[rows[k]], mocap[rows[k]]) for k in parts]
            for k, f in zip(parts, futures):
                out[k] = f.result()
        except BrokenProcessPool as e:
            raise ClbenchError(f"a render worker process died ({e}); MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}: "
                               f"see the worker's error above, or render in this process with workers=1") from e
        return out

    def render(self, state: np.ndarray, mocap: np.ndarray, active: np.ndarray | None = None) -> np.ndarray:
        """Images of every world, or only of the worlds where `active` (n,) is true (the others stay black)."""
        n = state.shape[0]
        out = np.zeros((n, len(self.cameras), self.size, self.size, 3), np.uint8)
        rows = np.arange(n) if active is None else np.flatnonzero(active)
        if len(rows):
            out[rows] = self._draw(rows, state, mocap) if self._pool else self._drawer.draw(state[rows], mocap[rows])
        return out

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        if self._drawer is not None:
            self._drawer.r.close()
        self._drawer = self._pool = None


def save_png(path, image: np.ndarray) -> None:
    """Write an (H, W, 3) uint8 image as PNG atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    from clbench_jax.jsonio import atomic_path

    with atomic_path(path, suffix=".png") as tmp:
        mpimg.imsave(tmp, image)
