"""K optimizer steps in one dispatch (a lax.scan over staged batches) against K single steps.

Same policy (a small BC-Transformer with dropout on, so the keys matter), same batches, same keys, sequential
fine-tuning and PackNet (a gradient mask): on this CPU the scan reproduces the single steps bit for bit; the test
allows float32 rounding (rtol 1e-5) because XLA may fuse the scanned step differently on other machines. A stream
with a last, smaller batch trains its full runs in scans and the rest in single steps, in order.
"""

import jax
import numpy as np
import pytest

from clbench_jax.algos import make_algorithm
from clbench_jax.algos.train import OptimConfig, apply_steps, make_optimizer, make_train_step, make_train_steps
from clbench_jax.policies import make_bc_transformer

B, T, E = 4, 3, 4


def _batch(seed, b=B):
    rng = np.random.default_rng(seed)
    obs = {"joint_states": rng.normal(size=(b, T, 7)).astype(np.float32),
           "gripper_states": rng.normal(size=(b, T, 2)).astype(np.float32),
           "ee_pos": rng.normal(size=(b, T, 3)).astype(np.float32),
           "tokens": rng.normal(size=(b, T, E, 32)).astype(np.float32), "token_mask": np.ones((b, T, E), bool)}
    return {"obs": obs, "lang": rng.normal(size=(b, 384)).astype(np.float32),
            "actions": rng.uniform(-0.9, 0.9, (b, T, 7)).astype(np.float32), "mask": np.ones((b, T), bool)}


@pytest.fixture(scope="module")
def setup():
    policy = make_bc_transformer("state", embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32,
                                 seq_len=T, gmm_hidden=(32,), gmm_modes=2, dropout=0.1)
    return policy, policy.init(jax.random.PRNGKey(0), _batch(0))


@pytest.fixture(scope="module")
def compiled(setup):
    """(algorithm name -> (algo, optimizer, step, steps)), compiled once per module."""
    cache = {}

    def get(name):
        if name not in cache:
            algo, opt = make_algorithm(name), make_optimizer(OptimConfig(lr=1e-3))
            cache[name] = (algo, opt, make_train_step(setup[0], algo, opt), make_train_steps(setup[0], algo, opt))
        return cache[name]

    return get


def _close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("algo_name", ["seqft", "packnet"])
def test_k_steps_in_one_scan_equal_k_single_steps(setup, compiled, algo_name):
    policy, params = setup
    algo, opt, step, steps = compiled(algo_name)
    params, state = algo.start_task(params, algo.init(params, 2), 0)
    batches = [_batch(1 + i) for i in range(4)]
    key, lr = jax.random.PRNGKey(7), 1e-3
    p1, o1, losses = params, opt.init(params), []
    for i, b in enumerate(batches):
        p1, o1, info = step(p1, o1, state, b, jax.random.fold_in(key, i), lr)
        losses.append(float(info["loss"]))
    stacked = jax.tree.map(lambda *x: np.stack(x), *batches)
    keys = np.stack([jax.random.fold_in(key, i) for i in range(4)])
    p2, o2, infos = steps(params, opt.init(params), state, stacked, keys, lr)
    assert infos["loss"].shape == (4,)
    np.testing.assert_allclose(np.asarray(infos["loss"]), losses, rtol=1e-5)
    _close(p1, p2)
    _close(o1, o2)
    moved = max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in
                zip(jax.tree.leaves(p2), jax.tree.leaves(params)))
    assert moved > 1e-4  # the four steps trained
    if algo_name == "packnet":  # PackNet's mask acts inside the scan too: biases and norm scales stay frozen
        frozen = [(x, y) for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(params), jax.tree.leaves(p2))
                  if path[-1].key in ("bias", "scale")]
        assert frozen and all(np.array_equal(x, y) for x, y in frozen)


def test_apply_steps_groups_a_stream_in_order(setup, compiled):
    policy, params = setup
    algo, opt, step, steps = compiled("seqft")
    stream = [_batch(10 + i) for i in range(7)] + [_batch(20, b=3)]  # 7 full batches, then a short last one
    key = jax.random.PRNGKey(3)
    p1, o1, l1 = apply_steps(step, steps, 1, params, opt.init(params), {}, iter(stream), key, 1e-3)
    p3, o3, l3 = apply_steps(step, steps, 3, params, opt.init(params), {}, iter(stream), key, 1e-3)
    assert len(l1) == 8 and [np.shape(x) for x in l3] == [(3,), (3,), (), ()]  # 2 scans of 3, then 2 singles
    np.testing.assert_allclose(np.concatenate([np.ravel(x) for x in l3]), [float(x) for x in l1], rtol=1e-5)
    _close(p1, p3)
    _close(o1, o3)


def test_lifelong_loop_trains_the_same_with_scanned_steps(tmp_path, monkeypatch):
    """ER over two stages (stage 1 concatenates replay drawn from the host rng after each batch): 3 steps per
    dispatch give the losses and optimizer state of one step per dispatch (the CPU default)."""
    from test_lifelong import BASE, _write_synthetic

    from clbench_jax.lifelong import loop
    from clbench_jax.lifelong.config import make_config
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.tasks.suites import ordered_tasks

    demos = tmp_path / "demos"
    demos.mkdir()
    tasks = ordered_tasks(BASE["suite"], 0)[:2]
    spec = obs_spec(loop.scene_for(tasks[0].scene), "state")
    for i, t in enumerate(tasks):
        _write_synthetic(str(demos), t, spec, seed=i)
    cfg = make_config(dict(BASE, algo="er", demos_dir=str(demos), epochs=1, max_batches=4, n_eval=1))
    out = {}
    for k in (1, 3):
        monkeypatch.setattr(loop, "steps_per_dispatch", lambda k=k: k)
        out[k] = loop.run_lifelong(cfg, str(tmp_path / f"k{k}"), progress=False)
    assert [len(x) for x in out[1]["losses"]] == [1, 1]
    np.testing.assert_allclose(np.ravel(out[3]["losses"]), np.ravel(out[1]["losses"]), rtol=1e-5)
    from test_lifelong import _params

    _close(*(_params(str(tmp_path / f"k{k}"), 1, "opt_state") for k in (1, 3)))
