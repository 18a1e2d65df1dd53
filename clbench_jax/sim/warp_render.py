"""RGB on the accelerator: MuJoCo Warp's batch ray tracer (reached through MJX) for the policy's cameras.

The same cameras as the native renderer (sim/render.py: agentview and eye-in-hand), the same geoms (robosuite hides
the collision geoms, group 0; sites never show), LIBERO's textures, no shadows; frames come out as the policy's
input, (cameras, H, W, 3) uint8 with row 0 at the top, like the native frames (tests/test_backends.py compares the
two). They are ray-traced, not rasterized by OpenGL: lighting and texture filtering differ, so a policy trained on
native frames sees a shift when evaluated on these (results name the renderer they used).

MuJoCo Warp sizes its render buffers for a fixed number of worlds: a `WarpCameras` serves batches of exactly `n`
worlds, rendered inside `jax.vmap` over them (as Playground's vision environments do).
"""

from __future__ import annotations

import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from clbench_jax.sim.render import CAMERAS

VISIBLE_GROUPS = (1, 2)  # MuJoCo's default visible geom groups (0, 1, 2) without robosuite's collision geoms (0)
RENDERER = "mujoco_warp"  # the name results carry (the native renderer: "opengl")


class WarpCameras:
    """The cameras of `n` worlds of an MJX-Warp model, rendered on the device."""

    def __init__(self, m: mujoco.MjModel, mx: mjx.Model, n: int, size: int = 128,
                 cameras: tuple[str, ...] = CAMERAS):
        self.mx, self.n, self.size, self.cameras = mx, n, size, cameras
        self.rc = mjx.create_render_context(m, nworld=n, cam_res=(size, size), render_rgb=True, render_depth=False,
                                            use_textures=True, use_shadows=False,
                                            enabled_geom_groups=list(VISIBLE_GROUPS), cam_active=list(cameras))
        self.handle = self.rc.pytree()
        # The context numbers its active cameras in model order; pixels of camera k start at rgb_adr[k].
        ids = [m.camera(c).id for c in cameras]
        slot = {cam_id: k for k, cam_id in enumerate(sorted(ids))}
        adr = np.asarray(self.rc.rgb_adr.numpy())
        res = np.asarray(self.rc.cam_res.numpy())
        self.adr = tuple(int(adr[slot[i]]) for i in ids)
        if any(tuple(res[slot[i]]) != (size, size) for i in ids):
            raise ValueError(f"render context resolutions {res.tolist()} differ from {size} px")

    def render(self, d: mjx.Data) -> tuple[jnp.ndarray, mjx.Data]:
        """One world's frames (cameras, H, W, 3) uint8 and its data (carrying the renderer's token); call it under
        jax.vmap over the `n` worlds."""
        d = mjx.refit_bvh(self.mx, d, self.handle)
        packed, _, d = mjx.render(self.mx, d, self.handle)
        return jnp.stack([unpack_rgb(packed[a:a + self.size * self.size], self.size) for a in self.adr]), d


def unpack_rgb(packed: jnp.ndarray, size: int) -> jnp.ndarray:
    """MuJoCo Warp's packed pixels (uint32: blue in the low byte, then green, red) -> (size, size, 3) uint8, rows
    top to bottom. Straight to bytes: no float frame per world (thousands of worlds x two cameras)."""
    p = packed.reshape(size, size)
    return jnp.stack([(p >> 16) & 0xFF, (p >> 8) & 0xFF, p & 0xFF], axis=-1).astype(jnp.uint8)
