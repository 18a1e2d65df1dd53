"""Policies: GMM head maths, ResNet-T shapes, block-causal masking, vmap over params, overfit."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from clbench_jax.errors import ObservationError
from clbench_jax.policies import gmm, make_bc_rnn, make_bc_transformer, make_bc_vilt
from clbench_jax.policies.modules import PatchEncoder, ResNetT, block_causal_mask, sinusoidal_time_encoding

B, T, HW, E_OBJ, D_OBJ, D_LANG = 2, 4, 32, 5, 10, 384

TINY_T = dict(embed_dim=16, num_layers=2, num_heads=2, head_dim=8, mlp_dim=32, dropout=0.1,
              seq_len=T, resnet_widths=(8, 16), num_kp=4, gmm_hidden=(32,))
TINY_V = dict(embed_dim=16, patch_size=4, stem_width=8, spatial_layers=1, spatial_heads=2, spatial_head_dim=8,
              spatial_mlp_dim=32, temporal_dim=16, num_layers=2, num_heads=2, head_dim=8, mlp_dim=32, dropout=0.1,
              seq_len=T, gmm_hidden=(32,))
TINY_R = dict(image_dim=8, text_dim=8, object_dim=8, rnn_hidden=16, rnn_layers=2,
              resnet_widths=(8, 16), num_kp=4, gmm_hidden=(32,))


def make_obs(mode, seed=0):
    rng = np.random.default_rng(seed)
    obs = {
        "joint_states": rng.normal(size=(B, T, 7)).astype(np.float32),
        "gripper_states": rng.normal(size=(B, T, 2)).astype(np.float32),
    }
    if mode == "rgb":
        for k in ("agentview_rgb", "eye_in_hand_rgb"):
            obs[k] = rng.integers(0, 256, size=(B, T, HW, HW, 3), dtype=np.uint8)
    else:
        obs["tokens"] = rng.normal(size=(B, T, E_OBJ, D_OBJ)).astype(np.float32)
        mask = np.ones((B, T, E_OBJ), bool)
        mask[:, :, -2:] = False
        obs["token_mask"] = mask
        obs["ee_pos"] = rng.normal(size=(B, T, 3)).astype(np.float32)
    lang = rng.normal(size=(B, D_LANG)).astype(np.float32)
    return {k: jnp.asarray(v) for k, v in obs.items()}, jnp.asarray(lang)


def make(kind, mode, **kw):
    if kind == "transformer":
        return make_bc_transformer(mode, **{**TINY_T, **kw})
    if kind == "vilt":
        return make_bc_vilt(mode, **{**TINY_V, **kw})
    return make_bc_rnn(mode, **{**TINY_R, **kw})


# ---------------------------------------------------------------- GMM head

def _np_log_prob(means, stds, logits, a):
    w = np.exp(logits - logits.max()); w = w / w.sum()
    dens = [np.prod(np.exp(-0.5 * ((a - m) / s) ** 2) / (s * math.sqrt(2 * math.pi)))
            for m, s in zip(means, stds)]
    return math.log(sum(wi * di for wi, di in zip(w, dens)))


@pytest.mark.parametrize("k", [1, 2])
def test_gmm_log_prob_hand_computed(k):
    rng = np.random.default_rng(k)
    means = rng.uniform(-0.9, 0.9, size=(k, 3))
    stds = rng.uniform(0.2, 1.5, size=(k, 3))
    logits = rng.normal(size=(k,))
    a = rng.uniform(-1, 1, size=(3,))
    dist = gmm.GMMDist(jnp.asarray(means, jnp.float32), jnp.asarray(stds, jnp.float32),
                       jnp.asarray(logits, jnp.float32))
    got = float(gmm.log_prob(dist, jnp.asarray(a, jnp.float32)))
    assert got == pytest.approx(_np_log_prob(means, stds, logits, a), rel=1e-5, abs=1e-5)
    assert float(gmm.nll_loss(dist, jnp.asarray(a, jnp.float32))) == pytest.approx(-got, rel=1e-5)


def test_gmm_head_squash_std_mode_sample():
    head = gmm.GMMHead(action_dim=7, hidden_sizes=(16, 16), num_modes=5)
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 4, 10)) * 50.0
    params = jax.jit(head.init)(jax.random.PRNGKey(1), x)
    d = jax.jit(head.apply)(params, x)
    assert d.means.shape == (3, 4, 5, 7) and d.stds.shape == (3, 4, 5, 7) and d.logits.shape == (3, 4, 5)
    assert float(jnp.abs(d.means).max()) <= 1.0
    assert float(d.stds.min()) >= np.float32(1e-4)
    m = gmm.mode(d)
    best = jnp.argmax(d.logits, -1)
    np.testing.assert_allclose(m[1, 2], d.means[1, 2, best[1, 2]])
    s = gmm.sample(d, jax.random.PRNGKey(2))
    assert s.shape == (3, 4, 7) and bool(jnp.all(jnp.isfinite(s)))
    # With a peaked mixture and tiny std, sampling returns the dominant mean.
    peaked = gmm.GMMDist(d.means, jnp.full_like(d.stds, 1e-6),
                         jnp.zeros_like(d.logits).at[..., 3].set(100.0))
    np.testing.assert_allclose(gmm.sample(peaked, jax.random.PRNGKey(3)), d.means[..., 3, :], atol=1e-4)


# ---------------------------------------------------------------- modules

def test_resnet_t_map_shape_at_128px():
    img = jax.ShapeDtypeStruct((1, 128, 128, 3), jnp.uint8)
    lang = jax.ShapeDtypeStruct((1, 384), jnp.float32)
    enc = ResNetT(out_dim=64, return_map=True)
    params = jax.eval_shape(enc.init, jax.random.PRNGKey(0), img, lang)
    out = jax.eval_shape(enc.apply, params, img, lang)
    assert out.shape == (1, 16, 16, 128)
    vec = jax.eval_shape(ResNetT(out_dim=64).apply,
                         jax.eval_shape(ResNetT(out_dim=64).init, jax.random.PRNGKey(0), img, lang), img, lang)
    assert vec.shape == (1, 64)


def test_block_causal_mask_and_time_encoding():
    m = np.asarray(block_causal_mask(3, 2))
    expect = np.kron(np.tril(np.ones((3, 3), bool)), np.ones((2, 2), bool))
    np.testing.assert_array_equal(m, expect)
    enc = sinusoidal_time_encoding(jnp.arange(5), 16)
    assert enc.shape == (5, 16)
    np.testing.assert_allclose(enc[0], np.r_[np.zeros(8), np.ones(8)], atol=1e-6)


# ---------------------------------------------------------------- policies

@functools.lru_cache(maxsize=None)
def setup(kind, mode):
    """Policy, params and one jitted fn (eval dist, train dist, loss) per (kind, mode), shared by tests."""
    pol = make(kind, mode)
    obs, lang = make_obs(mode)
    params = pol.init(jax.random.PRNGKey(0), {"obs": obs, "lang": lang})

    @jax.jit
    def fwd(params, obs, key):
        ev = pol.apply(params, obs, lang, None, False)
        tr = pol.apply(params, obs, lang, key, True)
        loss = pol.loss(params, {"obs": obs, "lang": lang, "actions": jnp.zeros((B, T, 7))}, key, True)
        return ev, tr, loss

    return pol, params, obs, lang, fwd


@pytest.mark.parametrize("kind", ["transformer", "rnn", "vilt"])
@pytest.mark.parametrize("mode", ["rgb", "state"])
def test_policy_shapes_and_jit(kind, mode):
    pol, params, obs, lang, fwd = setup(kind, mode)
    ev, tr, loss = fwd(params, obs, jax.random.PRNGKey(1))
    for dist in (ev, tr):
        assert dist.means.shape == (B, T, 5, 7)
        assert dist.stds.shape == (B, T, 5, 7)
        assert dist.logits.shape == (B, T, 5)
        assert all(bool(jnp.all(jnp.isfinite(x))) for x in dist)
    assert gmm.mode(ev).shape == (B, T, 7)
    assert np.isfinite(float(loss))
    if kind != "rnn":  # dropout active in train mode only
        assert float(jnp.abs(ev.means - tr.means).max()) > 0


@pytest.mark.parametrize("kind,mode", [("transformer", "state"), ("transformer", "rgb"), ("rnn", "state"),
                                       ("vilt", "rgb"), ("vilt", "state")])
def test_causal_no_future_leak(kind, mode):
    pol, params, obs, lang, fwd = setup(kind, mode)
    apply = lambda o: fwd(params, o, jax.random.PRNGKey(0))[0]
    base = apply(obs)
    for t in range(1, T):
        pert = dict(obs)
        pert["joint_states"] = obs["joint_states"].at[:, t].add(3.0)
        key = "tokens" if mode == "state" else "agentview_rgb"
        pert[key] = (obs[key].at[:, t].add(1.5) if mode == "state"
                     else obs[key].at[:, t].set(255 - obs[key][:, t]))
        out = apply(pert)
        for a, b in zip(base, out):
            np.testing.assert_allclose(a[:, :t], b[:, :t], rtol=1e-5, atol=1e-5)
        assert float(jnp.abs(base.means[:, t] - out.means[:, t]).max()) > 1e-6


@pytest.mark.parametrize("kind", ["transformer", "rnn", "vilt"])
def test_vmap_over_stacked_params(kind):
    pol, _, obs, lang, fwd = setup(kind, "state")
    copies = [pol.init(k, {"obs": obs, "lang": lang}) for k in jax.random.split(jax.random.PRNGKey(7), 3)]
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *copies)
    out = jax.jit(jax.vmap(lambda p: pol.apply(p, obs, lang, None, False)))(stacked)
    assert out.means.shape == (3, B, T, 5, 7)
    for i in range(3):
        single = fwd(copies[i], obs, jax.random.PRNGKey(0))[0]
        for a, b in zip(out, single):
            np.testing.assert_allclose(a[i], b, rtol=1e-4, atol=1e-5)
    assert float(jnp.abs(out.means[0] - out.means[1]).max()) > 1e-4
    assert float(jnp.abs(out.means[1] - out.means[2]).max()) > 1e-4


def test_overfit_one_batch_state_transformer():
    pol = make("transformer", "state", dropout=0.0)
    obs, lang = make_obs("state", seed=3)
    actions = jnp.asarray(np.random.default_rng(4).uniform(-0.8, 0.8, size=(B, T, 7)), jnp.float32)
    batch = {"obs": obs, "lang": lang, "actions": actions}
    params = pol.init(jax.random.PRNGKey(0), batch)
    opt = optax.adam(3e-3)
    state = opt.init(params)

    @jax.jit
    def step(params, state, key):
        loss, g = jax.value_and_grad(pol.loss)(params, batch, key, True)
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss

    losses = []
    key = jax.random.PRNGKey(1)
    for _ in range(50):
        key, sub = jax.random.split(key)
        params, state, loss = step(params, state, sub)
        losses.append(float(loss))
    final = float(jax.jit(pol.loss, static_argnums=3)(params, batch, None, False))
    assert np.all(np.isfinite(losses))
    assert final < losses[0] - 3.0, (losses[0], final)


# ---------------------------------------------------------------- BC-ViLT and sizes vs LIBERO

def test_time_encoding_as_libero_inv_freq_factor_10():
    # LIBERO SinusoidalPositionEncoding(inv_freq_factor=10): inv_freq_k = 10^(-2k/C), [sin | cos]; C = 4, position 3
    enc = np.asarray(sinusoidal_time_encoding(jnp.array([3]), 4, 10.0))[0]
    f = np.array([1.0, 10 ** -0.5])
    np.testing.assert_allclose(enc, np.r_[np.sin(3 * f), np.cos(3 * f)], atol=1e-6)


def test_patch_encoder_tokens_at_128px():
    img = jax.ShapeDtypeStruct((2, 128, 128, 3), jnp.uint8)
    enc = PatchEncoder(embed_dim=128, patch_size=8)
    out = jax.eval_shape(enc.apply, jax.eval_shape(enc.init, jax.random.PRNGKey(0), img), img)
    assert out.shape == (2, 64, 128)  # (128 / 2 / 8)^2 patches, as LIBERO's PatchEncoder


# Parameter counts of LIBERO's own torch policies (rlinf-libero 0.1.3 = LIBERO 8f1084e model code, configs
# policy/*.yaml, 128 px, joint + gripper, language input 384), printed by
#   benchmarks/libero_train_peer.sh --params-only --policies bc_transformer,bc_rnn,bc_vilt --lang-dim 384
# BC-RNN differs by torch's second LSTM bias vector (b_hh: 2 layers x 4 x 1024 = 8,192), which flax does not have.
LIBERO_PARAMS_384 = {"transformer": 4_768_907, "vilt": 7_844_235, "rnn": 18_503_595 - 2 * 4 * 1024}


@pytest.mark.parametrize("kind", ["transformer", "vilt", "rnn"])
def test_full_size_parameter_count_matches_libero(kind):
    maker = {"transformer": make_bc_transformer, "vilt": make_bc_vilt, "rnn": make_bc_rnn}[kind]
    sd = jax.ShapeDtypeStruct
    obs = {"joint_states": sd((1, 10, 7), jnp.float32), "gripper_states": sd((1, 10, 2), jnp.float32),
           "agentview_rgb": sd((1, 10, 128, 128, 3), jnp.uint8), "eye_in_hand_rgb": sd((1, 10, 128, 128, 3), jnp.uint8)}
    pol = maker("rgb")
    params = jax.eval_shape(lambda k: pol.init(k, {"obs": obs, "lang": sd((1, 384), jnp.float32)}),
                            jax.random.PRNGKey(0))
    assert sum(x.size for x in jax.tree_util.tree_leaves(params)) == LIBERO_PARAMS_384[kind]


def test_vilt_state_ignores_masked_tokens_and_language_matters():
    pol, params, obs, lang, fwd = setup("vilt", "state")
    base = fwd(params, obs, jax.random.PRNGKey(0))[0]
    junk = dict(obs, tokens=obs["tokens"].at[:, :, -2:].set(1e3))  # only masked-out slots change
    np.testing.assert_allclose(fwd(params, junk, jax.random.PRNGKey(0))[0].means, base.means, rtol=1e-5, atol=1e-6)
    seen = dict(obs, tokens=obs["tokens"].at[:, :, 0].add(1.0))
    assert float(jnp.abs(fwd(params, seen, jax.random.PRNGKey(0))[0].means - base.means).max()) > 1e-6
    other = jax.jit(lambda l: pol.apply(params, obs, l, None, False))(lang + 1.0)
    assert float(jnp.abs(other.means - base.means).max()) > 1e-6


def test_missing_obs_key_is_a_typed_error():
    pol, params, obs, lang, _ = setup("vilt", "rgb")
    bad = {k: v for k, v in obs.items() if k != "eye_in_hand_rgb"}
    with pytest.raises(ObservationError, match="eye_in_hand_rgb"):
        pol.apply(params, bad, lang)


def test_max_pool_matches_flax_values_and_gradient():
    import flax.linen as nn

    from clbench_jax.policies.modules import max_pool_3x3_s2

    ref = lambda x: nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
    for shape in [(2, 16, 16, 3), (1, 7, 9, 2)]:
        x = jax.random.normal(jax.random.PRNGKey(0), shape)  # continuous: no ties
        np.testing.assert_array_equal(max_pool_3x3_s2(x), ref(x))
        g = lambda f: jax.grad(lambda y: jnp.sum(f(y) ** 2))(x)
        np.testing.assert_allclose(g(max_pool_3x3_s2), g(ref), atol=1e-6)


def test_object_encoder_reads_the_object_the_instruction_names():
    """The state-mode object encoder must pick out of a set the object the instruction names and give its offset
    from the hand: train it alone to regress (position of the named object - ee_pos); a masked junk token must not
    matter. (The old encoder pooled with one instruction-independent query and could not do this.)"""
    from clbench_jax.policies.modules import ObjectTokenEncoder

    rng = np.random.default_rng(0)

    def data(n):
        pos = rng.uniform(-0.5, 0.5, (n, 4, 3)).astype(np.float32)
        colour = np.stack([np.eye(4)[rng.permutation(3).tolist() + [3]] for _ in range(n)]).astype(np.float32)
        named = rng.integers(0, 3, n)
        cond = np.eye(3)[named].astype(np.float32)  # "the red one" / "the green one" / "the blue one"
        ee = rng.uniform(-0.3, 0.3, (n, 3)).astype(np.float32)
        target = pos[np.arange(n), np.argmax(colour[:, :, named].diagonal(axis1=0, axis2=2).T, 1)] - ee
        mask = np.array([True, True, True, False])
        return np.concatenate([pos, colour], -1), np.broadcast_to(mask, (n, 4)), cond, ee, target

    enc = ObjectTokenEncoder(out_dim=3, hidden_dim=32, num_queries=2)
    tok, mask, cond, ee, _ = data(2)
    params = enc.init(jax.random.PRNGKey(0), tok, mask, cond, ee)
    opt = optax.adam(3e-3)
    st = opt.init(params)

    @jax.jit
    def step(p, s, tok, mask, cond, ee, y):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((enc.apply(p, tok, mask, cond, ee) - y) ** 2))(p)
        u, s = opt.update(g, s)
        return optax.apply_updates(p, u), s, loss

    for _ in range(600):
        params, st, _ = step(params, st, *data(256))
    tok, mask, cond, ee, y = data(512)
    pred = enc.apply(params, tok, mask, cond, ee)
    assert float(jnp.mean((pred - y) ** 2)) < 0.1 * float(np.var(y))  # a language-blind pooling stays near var(y)
    junk = tok.copy()
    junk[:, 3] = 7.0  # the masked slot
    np.testing.assert_allclose(enc.apply(params, junk, mask, cond, ee), pred, atol=1e-5)
