"""What an image of LIBERO's scene costs on a CPU renderer, and why: CPU seconds per camera image of libero_goal's
scene as LIBERO renders it (MuJoCo's defaults that robosuite keeps: reflections on, 4x multisampling), and with
each of those turned off, with the share of pixels each change alters.

The project renders LIBERO's look and nothing else (tests/test_libero_backend.py: robosuite's images, pixel for
pixel), so the variants here are not offered as options: they say where the time goes. MuJoCo draws the whole scene
a second time, mirrored, for each reflective plane or box face in view (on this scene the stove's base box,
reflectance 0.5), and multisampling renders 4 samples per pixel.

    MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa python benchmarks/render_cost.py   # results/render_cost_cpu.json
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from common import Clock, goal_worlds, machine, table, write_json  # noqa: E402

from clbench_jax.sim.render import CAMERAS, FULL, BatchRenderer, scene_option  # noqa: E402

REFLECTION = mujoco.mjtRndFlag.mjRND_REFLECTION
VARIANTS = {  # name: (reflections drawn, offscreen samples per pixel)
    "LIBERO's look": (True, None),
    "no reflections": (False, None),
    "no multisampling": (True, 0),
    "neither": (False, 0),
}


def render_variant(model, size, state, mocap, reflections, offsamples, repeats):
    """Images (N, cameras, H, W, 3) and the Clock of `repeats` timed batches, drawn as BatchRenderer draws them
    (one thread) but with the two settings changed."""
    old = model.vis.quality.offsamples
    if offsamples is not None:
        model.vis.quality.offsamples = offsamples  # read when the renderer's GL buffers are made
    r, d = mujoco.Renderer(model, size, size), mujoco.MjData(model)
    model.vis.quality.offsamples = old
    opt = scene_option()
    out = np.zeros((state.shape[0], len(CAMERAS), size, size, 3), np.uint8)

    def batch():
        for i in range(state.shape[0]):
            mujoco.mj_setState(model, d, state[i], FULL)
            d.mocap_pos[:], d.mocap_quat[:] = mocap[i, :, :3], mocap[i, :, 3:]
            mujoco.mj_kinematics(model, d)
            mujoco.mj_camlight(model, d)
            for k, cam in enumerate(CAMERAS):
                r.update_scene(d, camera=cam, scene_option=opt)
                r.scene.flags[REFLECTION] = reflections
                out[i, k] = r.render()
    try:
        batch()  # untimed: meshes and textures are uploaded on first use
        with Clock() as c:
            for _ in range(repeats):
                batch()
    finally:
        r.close()
    return out, c


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worlds", type=int, default=10, help="worlds per batch (one initial state of each task)")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128], help="image sizes in px")
    p.add_argument("--repeats", type=int, default=3, help="timed batches per setting (after one untimed)")
    p.add_argument("--out", default="benchmarks/results/render_cost_cpu.json")
    a = p.parse_args(argv)
    scene, state, mocap = goal_worlds(a.worlds)
    m = scene.model
    reflective = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) for g in range(m.ngeom)
                  if m.geom_type[g] in (mujoco.mjtGeom.mjGEOM_PLANE, mujoco.mjtGeom.mjGEOM_BOX)
                  and m.geom_matid[g] >= 0 and m.mat_reflectance[m.geom_matid[g]] > 0]
    rows = []
    for size in a.sizes:
        reference = None
        for name, (reflections, offsamples) in VARIANTS.items():
            img, c = render_variant(m, size, state, mocap, reflections, offsamples, a.repeats)
            if reference is None:
                reference, base_cpu = img, c.cpu
                r = BatchRenderer(m, size, workers=1)
                same = np.array_equal(r.render(state, mocap), img)
                r.close()
                if not same:
                    raise SystemExit("the benchmark's own drawing loop no longer matches BatchRenderer's images")
            n_images = a.repeats * a.worlds * img.shape[1]
            rows.append({"size_px": size, "variant": name, "cpu_ms_per_image": 1000 * c.cpu / n_images,
                         "wall_ms_per_image": 1000 * c.wall / n_images, "cost_vs_libero_look": c.cpu / base_cpu,
                         "pixels_changed_pct": 100 * float((img != reference).any(-1).mean())})
            print(rows[-1], flush=True)
    print(table(rows, ["size_px", "variant", "cpu_ms_per_image", "cost_vs_libero_look", "pixels_changed_pct"]))
    write_json(a.out, {"benchmark": "render_cost", "machine": machine(), "scene": "libero_goal",
                       "mujoco_gl": os.environ.get("MUJOCO_GL"), "load_average": os.getloadavg(),
                       "offsamples_model": int(m.vis.quality.offsamples), "reflective_planes_and_boxes": reflective,
                       "config": vars(a), "rows": rows})


if __name__ == "__main__":
    main()
