"""Language-perturbation metrics on hand-built episode records; every expected value is worked out by hand."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from clbench_jax.eval import language_metrics as M
from clbench_jax.policies import gmm

NAN = np.nan
S_ORIG = np.array([[0.8, NAN, NAN], [0.6, 0.9, NAN], [0.4, 0.7, 1.0]])
S_PARA = np.array([[0.6, NAN, NAN], [0.5, 0.7, NAN], [0.4, 0.5, 0.6]])


def test_success_matrix_balances_variants_then_tasks():
    # (t=0, j=0): variant a 3/4, variant b 1/2 -> (0.75 + 0.5) / 2 = 0.625 (pooled would be 4/6)
    # (t=1, j=0): one variant 0/2 -> 0; (t=1, j=1): 2/2 -> 1
    stage = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    task = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]
    var = ["a", "a", "a", "a", "b", "b", "a", "a", "c", "c"]
    succ = [1, 1, 1, 0, 1, 0, 0, 0, 1, 1]
    S = M.success_matrix(stage, task, var, succ, 2)
    assert S[0, 0] == pytest.approx(0.625)
    assert S[1, 0] == 0.0 and S[1, 1] == 1.0 and np.isnan(S[0, 1])


def test_stage_metrics_and_paraphrase_gaps():
    o = M.stage_metrics(S_ORIG)
    # NBT: task0 mean(0.8-0.6, 0.8-0.4) = 0.3, task1 0.9-0.7 = 0.2 -> 0.25
    # AUC (FWT = diagonal): (0.8+0.6+0.4)/3 = 0.6, (0.9+0.7)/2 = 0.8, 1.0 -> 0.8;  final (0.4+0.7+1.0)/3 = 0.7
    assert o["nbt"] == pytest.approx(0.25) and o["auc"] == pytest.approx(0.8) and o["final"] == pytest.approx(0.7)
    r = M.paraphrase_metrics(S_ORIG, S_PARA)
    # paraphrase AUC: (0.6+0.5+0.4)/3 = 0.5, (0.7+0.5)/2 = 0.6, 0.6 -> 1.7/3; final 0.5; NBT (0.15 + 0.2)/2
    assert r["paraphrase"]["auc"] == pytest.approx(1.7 / 3)
    assert r["paraphrase"]["nbt"] == pytest.approx(0.175)
    assert r["auc_gap"] == pytest.approx(0.8 - 1.7 / 3)
    assert r["final_gap"] == pytest.approx(0.2)
    # signed gap over the 6 cells of Omega: 0.2 + 0.1 + 0.2 + 0 + 0.2 + 0.4 = 1.1
    assert r["signed_gap"] == pytest.approx(1.1 / 6)
    assert M.signed_gap(S_PARA, S_ORIG) == pytest.approx(-1.1 / 6)


def test_stage_metrics_with_learning_curves_uses_libero_fwt():
    # curves held at their first peak: [0.2, 0.6, 0.4] -> [0.2, 0.6, 0.6] mean 1.4/3; task 1 [0.9] ; task 2 [0.5]
    curves = [[0.2, 0.6, 0.4], [0.9], [0.5]]
    auc = ((1.4 / 3 + 0.6 + 0.4) / 3 + (0.9 + 0.7) / 2 + 0.5) / 3
    assert M.stage_metrics(S_ORIG, curves)["auc"] == pytest.approx(auc)


def test_contrast_metrics_by_hand():
    # audited goals per task: 0 = original, 1.. = contrast goals
    task = [0, 0, 0, 0, 1, 1]
    var = ["v1", "v1", "v2", "v2", "v3", "v3"]
    slot = ["object", "object", "target", "target", "object", "object"]
    target = [1, 1, 2, 2, 1, 1]
    success = np.array([[0, 1, 0],   # v1: modified only -> switch
                        [1, 1, 0],   # v1: both -> target hit, no switch, persists
                        [0, 0, 1],   # v2: switch
                        [1, 0, 0],   # v2: original only
                        [0, 0, 0],   # v3: nothing
                        [0, 1, 0]], bool)  # v3: switch
    r = M.contrast_metrics(task, var, slot, target, success)
    # target SR: task0 = mean(v1 1.0, v2 0.5) = 0.75; task1 = v3 0.5 -> 0.625
    assert r["target_sr"] == pytest.approx(0.625)
    # GSA: task0 = mean(v1 0.5, v2 0.5) = 0.5; task1 0.5 -> 0.5
    assert r["gsa"] == pytest.approx(0.5)
    # original persistence: task0 = mean(0.5, 0.5); task1 0 -> 0.25
    assert r["original_persistence"] == pytest.approx(0.25)
    # object slot: task0 v1 (target 1.0, gsa 0.5), task1 v3 (0.5, 0.5) -> 0.75, 0.5; target slot: v2 only
    assert r["per_slot"]["object"]["target_sr"] == pytest.approx(0.75)
    assert r["per_slot"]["object"]["gsa"] == pytest.approx(0.5)
    assert r["per_slot"]["target"]["target_sr"] == pytest.approx(0.5)
    assert r["per_slot"]["attribute"] == {"unavailable": True}


def test_collision_metrics_by_hand():
    task = [0, 0, 0, 1, 1]
    var = ["c1", "c1", "c1", "c2", "c2"]
    success = np.array([[1, 0], [1, 1], [0, 0], [1, 0], [0, 1]], bool)
    held = np.array([[0, 0], [0, 1], [0, 0], [1, 0], [1, 1]], bool)
    moved = [True, True, False, False, True]
    r = M.collision_metrics(task, var, success, held, moved)
    # OGP: task0 2/3, task1 1/2 -> (2/3 + 1/2) / 2
    assert r["ogp"] == pytest.approx((2 / 3 + 0.5) / 2)
    # CGAR: new = success & ~held: [1,0] [1,0] [0,0] [0,0] [0,0]; row 5 has every goal held at reset: not
    # eligible -> task0 2/3, task1 0/1 -> 1/3
    assert r["cgar"] == pytest.approx(1 / 3)
    # achieved: original, original, none | none, none -> original (2/3 + 0)/2, none (1/3 + 1)/2
    assert r["achieved"]["original"] == pytest.approx(1 / 3)
    assert r["achieved"]["none"] == pytest.approx(2 / 3)
    assert r["achieved"]["other"] == 0.0 and r["achieved"]["multiple"] == 0.0
    # AIR: task0 2/3, task1 1/2
    assert r["air"] == pytest.approx((2 / 3 + 0.5) / 2)


def test_achieved_goal_kinds():
    success = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0]], bool)
    held = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [1, 0, 0]], bool)
    assert list(M.achieved_goals(success, held)) == ["original", "other", "multiple", "none", "none"]


def test_action_divergence_and_mixture_mean():
    assert M.action_divergence(np.ones(4), -np.ones(4)) == pytest.approx(1.0)  # opposite corners: 4 / (2*2)
    assert M.action_divergence([0.5, 0, 0, 0], np.zeros(4)) == pytest.approx(0.125)
    d = gmm.GMMDist(means=jnp.array([[1.0, 0.0], [-1.0, 2.0]]), stds=jnp.ones((2, 2)),
                    logits=jnp.array([0.0, math.log(3.0)]))
    # weights 1/4, 3/4: [0.25 - 0.75, 0 + 1.5]
    np.testing.assert_allclose(M.mixture_mean(d), [-0.5, 1.5], rtol=1e-6)


def test_action_level_on_a_real_policy():
    from clbench_jax.policies import make_bc_rnn

    B, T = 4, 2
    pol = make_bc_rnn("state", image_dim=8, text_dim=8, object_dim=8, rnn_hidden=16, rnn_layers=1,
                      resnet_widths=(8, 16), num_kp=4, gmm_hidden=(16,))
    rng = np.random.default_rng(0)
    obs = {"joint_states": jnp.asarray(rng.normal(size=(B, T, 7)), jnp.float32),
           "gripper_states": jnp.asarray(rng.normal(size=(B, T, 2)), jnp.float32),
           "tokens": jnp.asarray(rng.normal(size=(B, T, 4, 27)), jnp.float32),
           "token_mask": jnp.ones((B, T, 4), bool),
           "ee_pos": jnp.asarray(rng.normal(size=(B, T, 3)), jnp.float32)}
    l1 = jnp.asarray(rng.normal(size=(B, 384)), jnp.float32)
    l2 = jnp.asarray(rng.normal(size=(B, 384)), jnp.float32)
    params = pol.init(jax.random.PRNGKey(0), {"obs": obs, "lang": l1})
    a = jnp.asarray(rng.uniform(-1, 1, size=(B, 7)), jnp.float32)
    same = M.action_level(pol, params, obs, l1, l1, a)
    assert same["ad"] == 0.0 and same["lm"] == 0.0
    r = M.action_level(pol, params, obs, l1, l2, a)
    # cross-check against the formulas applied by hand to the policy's own distributions
    d1 = jax.tree.map(lambda x: x[:, -1], pol.apply(params, obs, l1))
    d2 = jax.tree.map(lambda x: x[:, -1], pol.apply(params, obs, l2))
    m1 = np.sum(np.asarray(jax.nn.softmax(d1.logits))[..., None] * np.asarray(d1.means), -2)
    m2 = np.sum(np.asarray(jax.nn.softmax(d2.logits))[..., None] * np.asarray(d2.means), -2)
    ad = np.mean(np.linalg.norm(m1 - m2, axis=-1) / (2 * math.sqrt(7)))
    lm = np.mean(np.asarray(gmm.log_prob(d1, a)) - np.asarray(gmm.log_prob(d2, a)))
    assert r["ad"] == pytest.approx(ad, rel=1e-5) and r["ad"] > 0
    assert r["lm"] == pytest.approx(lm, rel=1e-4, abs=1e-6)
    # the same numbers in chunks of 2 windows (the dataset need not fit one batch)
    chunked = M.action_level(pol, params, obs, l1, l2, a, batch_size=2)
    np.testing.assert_allclose(chunked["ad_per_sample"], r["ad_per_sample"], rtol=1e-5)
    np.testing.assert_allclose(chunked["lm_per_sample"], r["lm_per_sample"], rtol=1e-4, atol=1e-6)


def test_spearman_with_ties_and_eligibility():
    # y ranks with a tie: [1, 2, 3.5, 5, 3.5]; dx = [-2..2], dy = [-2, -1, .5, 2, .5]: 8 / sqrt(10 * 9.5)
    assert M.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert M.spearman([1, 2, 3, 4, 5, 6], [5, 6, 7, 8, 7, NAN]) == pytest.approx(8 / math.sqrt(95))
    assert M.spearman([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)
    assert math.isnan(M.spearman([1, 2], [2, 1]))
    rows = [{"ad": 0.1, "lm": 1.0, "ogp": 0.9, "air": 0.5, "cgar": 0.4},
            {"ad": 0.2, "lm": 0.5, "ogp": 0.5, "air": 0.7, "cgar": 0.6},
            {"ad": 0.3, "lm": 0.2, "ogp": 0.1, "air": 0.9, "cgar": 0.8}]
    c = M.correlations(rows)
    assert c["ad_vs_ogp"] == pytest.approx(-1.0) and c["lm_vs_ogp"] == pytest.approx(1.0)
    assert c["air_vs_cgar"] == pytest.approx(1.0) and c["pairs"] == 3
