"""Offscreen RGB rendering of worlds with MuJoCo's renderer (agentview and eye-in-hand cameras).

Images are upright (row 0 at the top); LIBERO's raw robosuite images are the same pictures vertically flipped
(OpenGL's row order). As robosuite, the collision geoms (group 0) are hidden: only the visual meshes show.
"""

from __future__ import annotations

import mujoco
import numpy as np

from clbench_jax.sim.native import FULL

CAMERAS = ("agentview", "robot0_eye_in_hand")


class BatchRenderer:
    """Renders (N, n_cameras, H, W, 3) uint8 images of many worlds' states, one after the other."""

    def __init__(self, model: mujoco.MjModel, size: int = 128, cameras: tuple[str, ...] = CAMERAS):
        self.m, self.cameras = model, cameras
        self.r = mujoco.Renderer(model, size, size)
        self.d = mujoco.MjData(model)
        self.opt = mujoco.MjvOption()
        self.opt.sitegroup[:] = 0  # no site markers (regions, grip site) in observations
        self.opt.geomgroup[0] = 0  # robosuite hides the collision geoms (render_collision_mesh=False)

    def render(self, state: np.ndarray, mocap: np.ndarray, active: np.ndarray | None = None) -> np.ndarray:
        """Images of every world, or only of the worlds where `active` (n,) is true (the others stay black)."""
        n = state.shape[0]
        out = np.zeros((n, len(self.cameras), self.r.height, self.r.width, 3), np.uint8)
        for i in range(n) if active is None else np.flatnonzero(active):
            mujoco.mj_setState(self.m, self.d, state[i], FULL)
            self.d.mocap_pos[:] = mocap[i, :, :3]
            self.d.mocap_quat[:] = mocap[i, :, 3:]
            mujoco.mj_kinematics(self.m, self.d)
            mujoco.mj_camlight(self.m, self.d)
            for k, cam in enumerate(self.cameras):
                self.r.update_scene(self.d, camera=cam, scene_option=self.opt)
                out[i, k] = self.r.render()
        return out

    def close(self):
        self.r.close()


def save_png(path, image: np.ndarray) -> None:
    """Write an (H, W, 3) uint8 image as PNG atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    from clbench_jax.jsonio import atomic_path

    with atomic_path(path, suffix=".png") as tmp:
        mpimg.imsave(tmp, image)
