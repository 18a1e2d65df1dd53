"""Rollout policy adapter: the sliding observation window matches applying the policy to the true history,
stacked parameters (vmap over checkpoints) match separate calls, warm-up steps stay out of the history."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from clbench_jax.policies import gmm, make_bc_rnn, make_bc_transformer
from clbench_jax.policies.act import initial_pstate, make_policy_fn, stack_params

T, N, E, D = 4, 3, 5, 32
TINY_T = dict(embed_dim=16, num_layers=2, num_heads=2, head_dim=8, mlp_dim=32, dropout=0.1, seq_len=T,
              gmm_hidden=(32,), gmm_modes=3)
SPEC = {"joint_states": ((7,), np.float32), "gripper_states": ((2,), np.float32), "ee_pos": ((3,), np.float32),
        "tokens": ((E, D), np.float32), "token_mask": ((E,), np.bool_)}


def _obs_seq(steps, n=N, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((steps, n, E), bool)
    mask[..., -1] = False
    return [{"joint_states": rng.normal(size=(n, 7)).astype(np.float32),
             "gripper_states": rng.normal(size=(n, 2)).astype(np.float32),
             "tokens": rng.normal(size=(n, E, D)).astype(np.float32),
             "token_mask": mask[s],
             "ee_pos": rng.normal(size=(n, 3)).astype(np.float32),
             "ee_ori": np.zeros((n, 3), np.float32)} for s in range(steps)]  # extra keys are ignored


def _init(policy, seed):
    obs = {k: np.zeros((1, T) + s, d) for k, (s, d) in SPEC.items()}
    return policy.init(jax.random.PRNGKey(seed), {"obs": obs, "lang": np.zeros((1, 384), np.float32)})


def _run(fn, pstate, seq, keys):
    fn = jax.jit(fn)
    acts = []
    for o in seq:
        a, pstate = fn(o, pstate, keys)
        acts.append(np.asarray(a))
    return acts


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_window_matches_true_history(kind):
    policy = (make_bc_transformer("state", **TINY_T) if kind == "transformer" else
              make_bc_rnn("state", rnn_hidden=16, rnn_layers=1, object_dim=8, text_dim=8, gmm_hidden=(32,)))
    params = _init(policy, 0)
    lang = np.random.default_rng(1).normal(size=(N, 384)).astype(np.float32)
    seq = _obs_seq(T + 3)
    keys = jax.random.split(jax.random.PRNGKey(2), N)
    acts = _run(make_policy_fn(policy, deterministic=True), initial_pstate(params, lang, SPEC, T), seq, keys)
    apply = jax.jit(lambda p, o, l: policy.apply(p, o, l, None, train=False))
    for t in (0, 2, T - 1, T + 2):  # filling, full, sliding
        window = seq[max(0, t - T + 1): t + 1]  # LIBERO's queue: at most T newest steps
        obs = {k: jnp.stack([o[k] for o in window], 1) for k in SPEC}
        dist = apply(params, obs, lang)
        want = np.clip(np.asarray(gmm.mode(jax.tree.map(lambda x: x[:, -1], dist))), -1, 1)
        np.testing.assert_allclose(acts[t], want, rtol=1e-4, atol=1e-5)


def test_sampling_uses_per_episode_keys():
    policy = make_bc_transformer("state", **TINY_T)
    params = _init(policy, 0)
    lang = np.zeros((N, 384), np.float32)
    seq = _obs_seq(2)
    fn = make_policy_fn(policy)
    keys = jax.random.split(jax.random.PRNGKey(3), N)
    a1 = _run(fn, initial_pstate(params, lang, SPEC, T), seq, keys)
    a2 = _run(fn, initial_pstate(params, lang, SPEC, T), seq, keys)
    np.testing.assert_array_equal(a1[1], a2[1])  # same keys, same samples
    det = _run(make_policy_fn(policy, deterministic=True), initial_pstate(params, lang, SPEC, T), seq, keys)
    assert not np.allclose(a1[1], det[1])  # a sample is not the mode
    assert np.abs(a1[1]).max() <= 1.0


def test_stacked_params_match_separate_calls():
    policy = make_bc_transformer("state", **TINY_T)
    pa, pb = _init(policy, 0), _init(policy, 1)
    m = 2  # episodes per checkpoint
    lang = np.random.default_rng(4).normal(size=(2 * m, 384)).astype(np.float32)
    seq = _obs_seq(T + 2, n=2 * m, seed=5)
    keys = jax.random.split(jax.random.PRNGKey(6), 2 * m)
    stacked = _run(make_policy_fn(policy, stacked=True),
                   initial_pstate(stack_params([pa, pb]), lang, SPEC, T), seq, keys)
    sep = make_policy_fn(policy)
    half = lambda o, i: {k: v[i * m:(i + 1) * m] for k, v in o.items()}
    a = _run(sep, initial_pstate(pa, lang[:m], SPEC, T), [half(o, 0) for o in seq], keys[:m])
    b = _run(sep, initial_pstate(pb, lang[m:], SPEC, T), [half(o, 1) for o in seq], keys[m:])
    for t in range(len(seq)):
        np.testing.assert_allclose(stacked[t], np.concatenate([a[t], b[t]]), rtol=1e-5, atol=1e-6)
    assert not np.allclose(a[-1], b[-1])  # the two checkpoints really differ


def test_warmup_steps_stay_out_of_history():
    policy = make_bc_transformer("state", **TINY_T)
    params = _init(policy, 0)
    lang = np.zeros((N, 384), np.float32)
    seq = _obs_seq(6, seed=7)
    keys = jax.random.split(jax.random.PRNGKey(8), N)
    warm = _run(make_policy_fn(policy, deterministic=True, warmup=2), initial_pstate(params, lang, SPEC, T), seq, keys)
    plain = _run(make_policy_fn(policy, deterministic=True), initial_pstate(params, lang, SPEC, T), seq[2:], keys)
    for t in range(4):
        np.testing.assert_allclose(warm[t + 2], plain[t], rtol=1e-5, atol=1e-6)
