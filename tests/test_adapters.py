"""The shared adapter module (clbench_jax.policies.adapters): no adapter = the policy's own outputs, bit for bit;
LoRA / full deltas = the policy with merged weights; per-sample adapters = one sample at a time; stacked checkpoints
act through act.make_policy_fn like the base policies; bad specs are typed errors naming the layer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from clbench_jax.errors import AdapterError
from clbench_jax.policies import make_bc_rnn, make_bc_transformer, make_bc_vilt
from clbench_jax.policies.adapters import (adapter_layout, attached, gather, get_leaf, init_adapters, layer_group,
                                           step_mean)

B, T, E = 3, 3, 4
TINY_T = dict(embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, seq_len=T, gmm_hidden=(32,),
              gmm_modes=2, dropout=0.0)
TINY_V = dict(embed_dim=16, spatial_layers=1, spatial_heads=2, spatial_head_dim=8, spatial_mlp_dim=16,
              temporal_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=16, seq_len=T, gmm_hidden=(16,),
              gmm_modes=2, dropout=0.0)
TINY_R = dict(rnn_hidden=16, rnn_layers=1, gmm_hidden=(16,), gmm_modes=2, image_dim=8, text_dim=8, object_dim=8)
POLICIES = {"transformer": (make_bc_transformer, TINY_T), "vilt": (make_bc_vilt, TINY_V), "rnn": (make_bc_rnn, TINY_R)}
SPECS = {"transformer": (("gmm/logits", "full"), ("attn", 4), ("mlp", 3), ("encoder", 2), ("fusion", "full"),
                         ("proprio", 2), ("head", 2)),
         "vilt": (("gmm/logits", "full"), ("attn", 4), ("encoder", 4), ("encoder_mlp", 2), ("fusion", 3),
                  ("proprio", "full"), ("head", 2)),
         "rnn": (("gmm/logits", "full"), ("encoder", 2), ("fusion", 4), ("head", 2))}


def _batch(seed=0, n=B):
    rng = np.random.default_rng(seed)
    obs = {"joint_states": rng.normal(size=(n, T, 7)).astype(np.float32),
           "gripper_states": rng.normal(size=(n, T, 2)).astype(np.float32),
           "ee_pos": rng.normal(size=(n, T, 3)).astype(np.float32),
           "tokens": rng.normal(size=(n, T, E, 32)).astype(np.float32), "token_mask": np.ones((n, T, E), bool)}
    obs["token_mask"][:, :, -1] = False
    return {"obs": obs, "lang": rng.normal(size=(n, 384)).astype(np.float32),
            "actions": rng.uniform(-0.9, 0.9, (n, T, 7)).astype(np.float32)}


def _policy(name):
    make, kw = POLICIES[name]
    p = make("state", **kw)
    return p, p.init(jax.random.PRNGKey(0), _batch())


def _random_adapters(key, layout, lead=()):
    """Non-zero adapters (B and full deltas random too), so every adapted layer changes the output."""
    ad = init_adapters(key, layout, lead)
    return jax.tree.map(lambda a: a + 0.05 * jax.random.normal(jax.random.fold_in(key, a.size), a.shape), ad)


def _merged(params, layout, adapters, scale=1.0):
    """The base parameters with every adapter folded into its layer's weights (the reference)."""
    out = jax.tree.map(lambda x: x, params)
    for layer in layout:
        node = out
        for k in layer.path:
            node = node[k]
        leaf = get_leaf(adapters, layer)
        c0, c1 = layer.cols
        dw = scale * leaf["A"] @ leaf["B"] if "A" in leaf else leaf["W"]
        node["kernel"] = node["kernel"].at[:, c0:c1].add(dw)
        if "b" in leaf:
            node["bias"] = node["bias"].at[c0:c1].add(leaf["b"])
    return out


@pytest.mark.parametrize("name", ["transformer", "vilt", "rnn"])
def test_zero_adapters_leave_outputs_bit_identical(name):
    """A fresh adapter (LoRA B = 0, deltas 0) attached to every adaptable layer changes no output bit: adding
    adapters to a policy cannot change what it did without them."""
    policy, params = _policy(name)
    b = _batch(1)
    layout = adapter_layout(params, SPECS[name])
    adapters = init_adapters(jax.random.PRNGKey(3), layout)

    def with_adapters(p, a, obs, lang):
        with attached(a, layout):
            return policy.apply(p, obs, lang)

    # compiled against compiled (XLA's fusion alone moves the last bit between a compiled and an eager run)
    plain = jax.jit(policy.apply)(params, b["obs"], b["lang"])
    got = jax.jit(with_adapters)(params, adapters, b["obs"], b["lang"])
    for x, y in zip(plain, got):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("name", ["transformer", "vilt", "rnn"])
def test_adapters_equal_merged_weights(name):
    """y = x W0 + b + s (x A) B (+ x dW + db) equals the policy run with W0 + s A B (and the deltas) merged in,
    for LoRA on q, v column blocks, whole layers and full deltas with and without bias."""
    policy, params = _policy(name)
    b = _batch(2)
    layout = adapter_layout(params, SPECS[name])
    assert {layer.part for layer in layout} >= ({"q", "v", "all"} if name != "rnn" else {"all"})
    adapters = _random_adapters(jax.random.PRNGKey(4), layout)
    with attached(adapters, layout, scale=2.0):
        got = policy.apply(params, b["obs"], b["lang"])
    want = policy.apply(_merged(params, layout, adapters, scale=2.0), b["obs"], b["lang"])
    base = policy.apply(params, b["obs"], b["lang"])
    assert not np.allclose(np.asarray(got.means), np.asarray(base.means), atol=1e-4)  # the adapters act
    for x, y in zip(got, want):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name", ["transformer", "vilt"])
def test_per_sample_adapters_equal_one_sample_at_a_time(name):
    """Leaves with a leading sample axis act on their own sample (BC-ViLT's spatial layers see B*T rows)."""
    policy, params = _policy(name)
    b = _batch(3)
    layout = adapter_layout(params, (("gmm/logits", "full"), ("attn", 4), ("encoder", 2)))
    pool = _random_adapters(jax.random.PRNGKey(5), layout, lead=(4,))
    idx = jnp.array([2, 0, 3])

    @jax.jit
    def run(adapters, obs, lang):
        with attached(adapters, layout):
            return policy.apply(params, obs, lang)

    got = run(gather(pool, idx), b["obs"], b["lang"])
    for n in range(B):
        one = gather(pool, idx[n:n + 1])
        want = run(one, jax.tree.map(lambda x: x[n:n + 1], b["obs"]), b["lang"][n:n + 1])
        for x, y in zip(got, want):
            np.testing.assert_allclose(np.asarray(x)[n:n + 1], np.asarray(y), rtol=2e-4, atol=2e-5)


def test_stacked_checkpoints_act_like_each_alone():
    """TAIL's acting parameters for two tasks, stacked, go through act.make_policy_fn(stacked=True) (jax.vmap over
    checkpoints) and give each group the actions of its own checkpoint acting alone."""
    from clbench_jax.algos import make_tail
    from clbench_jax.policies.act import initial_pstate, make_policy_fn, stack_params

    policy, _ = _policy("transformer")
    algo = make_tail(adapters=[["attn", 4], ["head", "full"]])
    net = algo.network(policy, 2)
    params = net.init(jax.random.PRNGKey(0), _batch())
    params = dict(params, adapters=_random_adapters(jax.random.PRNGKey(6), net.layout(params["base"]), (2,)))
    state = algo.init(params, 2)
    per_task = [algo.eval_params(params, state, j) for j in range(2)]
    spec = {k: (v.shape[2:], v.dtype) for k, v in _batch()["obs"].items()}
    m = 2
    b = _batch(4, n=2 * m)
    obs = {k: jnp.asarray(v[:, 0]) for k, v in b["obs"].items()}
    keys = jax.random.split(jax.random.PRNGKey(1), 2 * m)
    fn = jax.jit(make_policy_fn(net, stacked=True, deterministic=True))
    acts, _ = fn(obs, initial_pstate(stack_params(per_task), b["lang"], spec, T), keys)
    one = jax.jit(make_policy_fn(net, deterministic=True))
    for j in range(2):
        sl = slice(j * m, (j + 1) * m)
        want, _ = one(jax.tree.map(lambda x: x[sl], obs), initial_pstate(per_task[j], b["lang"][sl], spec, T),
                      keys[sl])
        np.testing.assert_allclose(np.asarray(acts[sl]), np.asarray(want), rtol=1e-5, atol=1e-6)
    other, _ = one(jax.tree.map(lambda x: x[:m], obs), initial_pstate(per_task[1], b["lang"][:m], spec, T), keys[:m])
    assert not np.allclose(np.asarray(acts[:m]), np.asarray(other))  # the two tasks' adapters act differently


def test_bad_specs_name_the_layer():
    policy, params = _policy("transformer")
    with pytest.raises(AdapterError, match=r"rank 20 is larger than layer layer_0/qkv:q \(16 -> 16\)"):
        adapter_layout(params, [["attn", 20]])
    with pytest.raises(AdapterError, match="gmm/logits"):
        adapter_layout(params, [["head", 4]])  # the logits layer is 2 wide
    with pytest.raises(AdapterError, match="matches no Dense layer"):
        adapter_layout(params, [["lstm", 2]])
    with pytest.raises(AdapterError, match="positive integer or 'full'"):
        adapter_layout(params, [["attn", 0]])
    rnn, rparams = _policy("rnn")
    layout = adapter_layout(rparams, [["rnn", 2]])  # LSTM gates exist as params but are never a Dense call
    with pytest.raises(AdapterError, match="never called"):
        with attached(init_adapters(jax.random.PRNGKey(0), layout), layout):
            rnn.apply(rparams, _batch()["obs"], _batch()["lang"])


def test_groups_and_step_mean():
    assert layer_group(("layer_1", "qkv")) == "attn" and layer_group(("layer_0", "mlp_in")) == "mlp"
    assert layer_group(("spatial_0", "qkv")) == "encoder" and layer_group(("spatial_down",)) == "encoder"
    assert layer_group(("gmm", "mean")) == "head" and layer_group(("lang_proj",)) == "fusion"
    x = jnp.arange(12.0).reshape(2, 3, 2)
    np.testing.assert_allclose(step_mean(x, {}), [[2, 3], [8, 9]])
    mask = jnp.array([[True, False, False], [True, True, False]])
    np.testing.assert_allclose(step_mean(x, {"step_mask": mask}), [[0, 1], [7, 8]])
