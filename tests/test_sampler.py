"""States drawn by LIBERO's reset: each one is what a freshly built LIBERO environment of its BDDL file leaves after
its first seeded reset, bit for bit, whatever else the shared environment drew before (checked against fresh builds
of LIBERO's own environment)."""

from __future__ import annotations

import numpy as np
import pytest

from clbench_jax.data import generators as g
from clbench_jax.sim import libero_source, sampler
from clbench_jax.sim.init_states import task_rng
from clbench_jax.sim.scene import build_scene
from clbench_jax.tasks.suites import get_task, suite_tasks


def _fresh_first_reset(bddl: str, seed: int) -> np.ndarray:
    env = libero_source.make_env(bddl)  # LIBERO's default: a hard reset rebuilds the model
    try:
        np.random.seed(seed)
        env.reset()
        return env.sim.get_state().flatten()
    finally:
        env.close()


@pytest.mark.parametrize("task_id", [
    "libero_10:8",       # (Turnon flat_stove_1): LIBERO's property samplers pile up across resets
    "libero_spatial:4",  # (Open ...) and bowls placed in the cabinet's and stove's regions
])
def test_draws_are_fresh_first_resets_in_any_order(task_id):
    t = get_task(task_id)
    seeds = [7, 1234, 99]
    (draws,) = sampler._reset_draws(t.file, [(t.file, seeds)])
    (backwards,) = sampler._reset_draws(t.file, [(t.file, seeds[::-1])])
    for s, d, b in zip(seeds, draws, backwards[::-1]):
        np.testing.assert_array_equal(d["state"], _fresh_first_reset(t.file, s), err_msg=f"seed {s}")
        assert d == b
    assert not np.allclose(draws[0]["state"], draws[1]["state"])  # the seed matters


def test_variant_draws_are_fresh_builds_of_the_variant_file(tmp_path):
    t = get_task("libero_goal:8")
    variant = g.deconfounded_variant(build_scene(suite_tasks("libero_goal")), t)
    files = []
    for i in range(2):
        f = tmp_path / f"v{i}.bddl"
        f.write_text(sampler.variant_bddl(t, variant(task_rng(t, 0, f"variant:{i}"))))
        files.append(str(f))
    got = sampler._reset_draws(t.file, [(f, [5]) for f in files])
    for f, (d,) in zip(files, got):
        np.testing.assert_array_equal(d["state"], _fresh_first_reset(f, 5), err_msg=f)
    assert not np.allclose(got[0][0]["state"], got[1][0]["state"])  # the permuted layouts differ
