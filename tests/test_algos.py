"""Algorithms and the train step: optimizer schedule, AdamW step by hand, EWC penalty / Fisher arithmetic (code and
paper formulas), ER's first-1000 buffer, PackNet pruning / masks / frozen weights on a real policy."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from clbench_jax.algos import TaskContext, make_algorithm, make_er, make_ewc, make_packnet, make_seqft
from clbench_jax.algos.packnet import prune_kernel
from clbench_jax.algos.train import OptimConfig, cosine_lr, make_optimizer, make_train_step
from clbench_jax.errors import ClbenchError
from clbench_jax.policies import make_bc_transformer

B, T, E = 4, 3, 4
TINY = dict(embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, seq_len=T, gmm_hidden=(32,),
            gmm_modes=2, dropout=0.0)


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    obs = {"joint_states": rng.normal(size=(B, T, 7)).astype(np.float32),
           "gripper_states": rng.normal(size=(B, T, 2)).astype(np.float32),
           "ee_pos": rng.normal(size=(B, T, 3)).astype(np.float32),
           "tokens": rng.normal(size=(B, T, E, 32)).astype(np.float32), "token_mask": np.ones((B, T, E), bool)}
    return {"obs": obs, "lang": rng.normal(size=(B, 384)).astype(np.float32),
            "actions": rng.uniform(-0.9, 0.9, (B, T, 7)).astype(np.float32), "mask": np.ones((B, T), bool)}


@pytest.fixture(scope="module")
def tiny():
    policy = make_bc_transformer("state", **TINY)
    return policy, policy.init(jax.random.PRNGKey(0), _batch())


def _ctx(batches, grad=None, n_windows=0, fit=None, seed=0):
    return TaskContext(stage=0, n_windows=n_windows, batches=lambda rng: iter(batches), grad=grad, fit=fit,
                       rng=np.random.default_rng(seed), key=jax.random.PRNGKey(seed))


def test_cosine_schedule_matches_torch_closed_form():
    c = OptimConfig()
    assert cosine_lr(0, 50, c) == pytest.approx(1e-4)
    assert cosine_lr(50, 50, c) == pytest.approx(1e-5)
    assert cosine_lr(25, 50, c) == pytest.approx(5.5e-5)
    assert cosine_lr(10, 50, c) == pytest.approx(1e-5 + 9e-5 * (1 + math.cos(math.pi / 5)) / 2)


class Quadratic:
    """A two-parameter 'policy': loss = sum (w - 3)^2, so one AdamW step can be worked out by hand."""

    def loss(self, params, batch, key, train=True):
        return jnp.sum((params["w"] - 3.0) ** 2)


def test_first_adamw_step_by_hand_and_clip():
    params = {"w": jnp.array([1.0, 5.0])}
    opt = make_optimizer(OptimConfig(weight_decay=0.1))
    step = make_train_step(Quadratic(), make_seqft(), opt)
    new, _, info = step(params, opt.init(params), {}, {}, jax.random.PRNGKey(0), 0.01)
    # grad (-4, 4), norm 5.66 < 100; Adam's first step is lr * g / (|g| + eps) = +-lr; AdamW adds lr * wd * w.
    want = np.array([1.0 + 0.01 - 0.01 * 0.1 * 1.0, 5.0 - 0.01 - 0.01 * 0.1 * 5.0])
    np.testing.assert_allclose(new["w"], want, rtol=1e-5)
    assert float(info["grad_norm"]) == pytest.approx(math.sqrt(32), rel=1e-5)
    # The lr argument is the step size: half the lr, half the Adam move.
    new2, _, _ = step(params, opt.init(params), {}, {}, jax.random.PRNGKey(0), 0.005)
    np.testing.assert_allclose(new2["w"] - params["w"], (want - np.array([1.0, 5.0])) / 2, atol=1e-6)


def test_train_step_learns_on_real_policy(tiny):
    policy, params = tiny
    opt = make_optimizer(OptimConfig(lr=1e-3))
    step = make_train_step(policy, make_seqft(), opt)
    b, s = _batch(1), opt.init(params)
    first = None
    for i in range(25):
        params, s, info = step(params, s, {}, b, jax.random.PRNGKey(i), 1e-3)
        first = float(info["loss"]) if first is None else first
    assert float(info["loss"]) < first - 1.0


def test_ewc_penalty_and_fisher_by_hand():
    params = {"a": jnp.array([1.0, 2.0]), "b": jnp.array([[3.0]])}
    zero = jax.tree.map(jnp.zeros_like, params)
    grads = [{"a": jnp.array([1.0, 0.0]), "b": jnp.array([[2.0]])},
             {"a": jnp.array([3.0, 2.0]), "b": jnp.array([[0.0]])}]
    ctx = _ctx(batches=[0, 1], grad=lambda p, i, key: grads[i])
    for formula, coef, new_w in (("code", 10.0, 1.0), ("paper", 5.0, 0.1)):
        ewc = make_ewc(e_lambda=10.0, gamma=0.9, formula=formula)
        st = ewc.init(params, 3)
        assert float(ewc.penalty(params, st)) == 0.0  # no penalty on the first task
        _, st = ewc.end_task(params, st, 0, ctx)
        # Fisher = mean of squared grads: a = ((1+9)/2, (0+4)/2) = (5, 2); b = (4+0)/2 = 2.
        np.testing.assert_allclose(st["fisher"]["a"], [5.0, 2.0])
        np.testing.assert_allclose(st["fisher"]["b"], [[2.0]])
        moved = {"a": jnp.array([2.0, 0.0]), "b": jnp.array([[3.5]])}
        # sum F (theta - theta*)^2 = 5*1 + 2*4 + 2*0.25 = 13.5
        assert float(ewc.penalty(moved, st)) == pytest.approx(coef * 13.5)
        _, st2 = ewc.end_task(moved, st, 1, ctx)
        np.testing.assert_allclose(st2["fisher"]["a"], 0.9 * np.array([5.0, 2.0]) + new_w * np.array([5.0, 2.0]))
        np.testing.assert_allclose(st2["anchor"]["b"], [[3.5]])
    assert float(make_ewc().penalty(params, make_ewc().init(params, 2))) == 0.0
    # anchored at theta* itself the penalty vanishes; at zero it is sum F theta*^2 (last anchor, decayed Fisher)
    assert float(ewc.penalty(st2["anchor"], st2)) == 0.0
    fisher = 0.9 * np.array([5.0, 2.0]) + 0.1 * np.array([5.0, 2.0])
    want = 5.0 * (fisher[0] * 2.0 ** 2 + fisher[1] * 0.0 ** 2 + (0.9 * 2.0 + 0.1 * 2.0) * 3.5 ** 2)
    assert float(ewc.penalty(zero, st2)) == pytest.approx(want)


def test_er_buffer_first_1000_windows_and_replay():
    er = make_er()
    st = er.init({}, 3)
    assert er.replay(st, np.random.default_rng(0), 8) is None  # nothing to replay during the first task
    _, st = er.end_task({}, st, 0, _ctx([], n_windows=2500))
    _, st = er.end_task({}, st, 1, _ctx([], n_windows=300))
    assert int(st["size"]) == 1300
    np.testing.assert_array_equal(st["window"][:1000], np.arange(1000))  # LIBERO: the first 1000 by index
    np.testing.assert_array_equal(st["task"][:1300], [0] * 1000 + [1] * 300)
    pairs = er.replay(st, np.random.default_rng(0), 4000)
    assert pairs.shape == (4000, 2) and set(np.unique(pairs[:, 0])) == {0, 1}
    assert (pairs[pairs[:, 0] == 1, 1] < 300).all() and (pairs[:, 1] < 1000).all()
    assert abs((pairs[:, 0] == 0).mean() - 1000 / 1300) < 0.03  # uniform over the union of buffers
    rnd = make_er(n_memories=100, selection="random")
    _, st = rnd.end_task({}, rnd.init({}, 2), 0, _ctx([], n_windows=2500))
    w = st["window"][:100]
    assert len(np.unique(w)) == 100 and w.max() < 2500 and w.max() > 99
    with pytest.raises(ClbenchError, match="selection"):
        make_er(selection="last")


def test_prune_kernel_by_hand():
    w = np.array([0.1, -0.5, 0.3, 0.05, -0.2, 0.4, 0.6, -0.01])
    owner = np.ones(8, np.int32)
    # round(0.75 * 8) = 6 smallest magnitudes go: keep -0.5 and 0.6.
    np.testing.assert_array_equal(prune_kernel(w, owner, 0, 0.75), [0, 1, 0, 0, 0, 0, 1, 0])
    # Weights of an earlier task (owner 1) are never touched; of stage 1's four (owner 2) round(3) go.
    owner = np.array([1, 2, 2, 1, 2, 1, 2, 0], np.int32)
    got = prune_kernel(w, owner, 1, 0.75)
    np.testing.assert_array_equal(got, [1, 0, 0, 1, 0, 1, 2, 0])  # stage 1's |w|: .5 .3 .2 .6 -> keep .6


def test_packnet_masks_on_real_policy(tiny):
    policy, params = tiny
    pn = make_packnet(prune_perc=0.75, post_prune_epochs=0)
    st = pn.init(params, 3)
    params, st = pn.start_task(params, st, 0)
    kernels = lambda tree: [x for p, x in jax.tree_util.tree_leaves_with_path(tree) if p[-1].key == "kernel"]
    assert all((np.asarray(o) == 1).all() for o in kernels(st["owner"]))
    params, st = pn.end_task(params, st, 0, _ctx([]))
    for w, o in zip(kernels(params), kernels(st["owner"])):
        o = np.asarray(o)
        assert abs((o == 1).mean() - 0.25) < 0.5 / o.size + 1e-9  # 25% kept per layer
        assert (np.asarray(w)[o == 0] == 0).all()  # pruned weights zeroed
    params, st = pn.start_task(params, st, 1)
    assert all(set(np.unique(np.asarray(o))) <= {1, 2} for o in kernels(st["owner"]))
    # Train stage 1: only owner-2 kernels move; stage-0 kernels, biases and norm scales are frozen.
    opt = make_optimizer(OptimConfig(lr=1e-2))
    step = make_train_step(policy, pn, opt)
    new, s = params, opt.init(params)
    for i in range(3):
        new, s, _ = step(new, s, st, _batch(2), jax.random.PRNGKey(i), 1e-2)
    for (path, a), b, o in zip(jax.tree_util.tree_leaves_with_path(params), jax.tree.leaves(new),
                               jax.tree.leaves(st["owner"])):
        a, b = np.asarray(a), np.asarray(b)
        name = path[-1].key
        if name == "kernel":
            o = np.asarray(o)
            np.testing.assert_array_equal(a[o == 1], b[o == 1])
            assert not np.array_equal(a[o == 2], b[o == 2])
        elif name in ("bias", "scale"):
            np.testing.assert_array_equal(a, b)
    # Acting on task 0 zeroes stage 1's weights; on task 1 both sets act.
    e0, e1 = pn.eval_params(new, st, 0), pn.eval_params(new, st, 1)
    for w, w0, w1, o in zip(kernels(new), kernels(e0), kernels(e1), kernels(st["owner"])):
        o = np.asarray(o)
        assert (np.asarray(w0)[o == 2] == 0).all()
        np.testing.assert_array_equal(np.asarray(w0)[o == 1], np.asarray(w)[o == 1])
        np.testing.assert_array_equal(np.asarray(w1), np.asarray(w))


def test_registry_errors():
    assert make_algorithm("ewc", e_lambda=1.0).config["e_lambda"] == 1.0
    with pytest.raises(ClbenchError, match="unknown algorithm"):
        make_algorithm("icarl")
    with pytest.raises(ClbenchError, match="hyper-parameters"):
        make_algorithm("er", lam=3)
    with pytest.raises(ClbenchError, match="formula"):
        make_ewc(formula="both")
