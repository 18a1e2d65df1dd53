"""The accelerator grid's settings and memory plan (the runs themselves: tests/test_backends.py, benchmarks/gpu.sh).

RGB on the mjx backend needs MuJoCo Warp (its ray tracer); the grid names the renderer its frames came from; the
chunk planner counts MuJoCo Warp's per-world data as the backend allocates it (its share of the contact buffer and
its constraint rows) and the renderer's packed pixels.
"""

import pytest

from clbench_jax.errors import ClbenchError
from clbench_jax.eval import chunk_size
from clbench_jax.eval import grid as G
from clbench_jax.lifelong.loop import scene_for
from clbench_jax.sim import mjx_backend
from clbench_jax.tasks.suites import suite_tasks


def _spec(**kw):
    task = suite_tasks("libero_goal")[0]
    return G.GridSpec(tasks=(task,), variants=((G.original_variant(task),),), n_rollouts=2, horizon=5, **kw)


def test_rgb_on_mjx_needs_warp_and_names_the_renderer():
    G.check_spec(_spec(backend="mjx", mjx_impl="warp", obs="rgb"))
    with pytest.raises(ClbenchError, match="mjx_impl warp") as e:
        G.check_spec(_spec(backend="mjx", mjx_impl="jax", obs="rgb"))
    assert e.value.field == "grid.obs"
    assert G.renderer(_spec(backend="mjx", mjx_impl="warp", obs="rgb")) == "mujoco_warp"
    assert G.renderer(_spec(backend="native", obs="rgb")) == "opengl"
    assert G.renderer(_spec(backend="mjx", mjx_impl="warp")) is None


def test_mjx_warp_memory_counts_the_backends_buffers():
    spec = _spec(backend="mjx", mjx_impl="warp", obs="rgb", image_size=64)
    scene = scene_for(spec.tasks[0].scene)
    parts = chunk_size.episode_memory(spec, scene, k=1)
    d = mjx_backend.world_data_shape(scene, "warp")
    # one world's share: CONTACTS_PER_WORLD contacts (geom pair, distance, frame, ...) and ROWS_PER_WORLD rows
    assert d._impl.contact__geom.shape == (mjx_backend.CONTACTS_PER_WORLD, 2)
    assert d._impl.efc__pos.shape[-1] == mjx_backend.ROWS_PER_WORLD
    m = scene.model
    assert parts["physics"]["per_episode"] == chunk_size.MJX_DATA_COPIES * (chunk_size.tree_bytes(d) + 4 * 7 * m.nbody)
    assert parts["images_packed"]["per_episode"] == 2 * 4 * 2 * 64 * 64  # uint32 per pixel, 2 cameras, 2 copies
    assert parts["images"]["per_episode"] == 2 * 64 * 64 * 3 and "images_host" not in parts
