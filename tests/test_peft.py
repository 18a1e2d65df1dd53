"""L2M, TAIL, IsCiL and DMPEL: each method's defining property on a real (tiny) BC-Transformer, then each trained
through the real lifelong loop (libero_goal scene, native rollouts, small synthetic demos) from a base made by the
real pretraining: the frozen base is bit-identical to the pretrained one after every stage."""

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from clbench_jax.algos import TaskContext, make_dmpel, make_iscil, make_l2m, make_multitask, make_tail
from clbench_jax.algos.dmpel import route
from clbench_jax.algos.iscil import kmeans
from clbench_jax.algos.train import OptimConfig, make_optimizer, make_train_step
from clbench_jax.policies import make_bc_transformer
from clbench_jax.policies.adapters import step_mean

from test_adapters import TINY_T as TINY, B, T, _batch  # the same tiny policy and batches

REPO = Path(__file__).resolve().parents[1]
TAIL_SPEC = [["attn", 4], ["encoder", 2], ["fusion", "full"], ["proprio", "full"], ["head", "full"]]
DMPEL_SPEC = [["gmm/logits", "full"], ["proprio", "full"], ["attn", 4], ["encoder", 2], ["fusion", 4], ["head", 4]]


@pytest.fixture(scope="module")
def policy():
    return make_bc_transformer("state", **TINY)


def test_a_shared_adapter_set_trains_and_the_base_never_changes(policy):
    """multitask with adapters (seed 004's rank-r update): one adapter set for every task trains (each LoRA B
    leaves its zero init), the base stays bit for bit, and the fresh adapters leave the base's function unchanged."""
    algo = make_multitask(adapters=[["attn", 4], ["encoder", 2], ["fusion", 4]])
    net = algo.network(policy, 3)
    batch = _batch(3)
    params = net.init(jax.random.PRNGKey(0), batch)
    same_fn = net.apply(params, batch["obs"], batch["lang"]).means
    assert np.allclose(same_fn, policy.apply(params["base"], batch["obs"], batch["lang"]).means, atol=1e-6)
    base0 = jax.tree.map(np.asarray, params["base"])
    params = _train(net, algo, params, algo.init(params, 3), batch)
    assert _same(base0, params["base"])
    lora_b = [np.abs(np.asarray(x)).max() for p, x in jax.tree_util.tree_leaves_with_path(params["adapter"])
              if p[-1].key == "B"]
    assert len(lora_b) >= 3 and min(lora_b) > 0


def _ctx(net, stages, s, seed=0):
    """TaskContext for stage s over in-memory stages (one batch each); gather picks (stage, window) rows."""
    def gather(pairs):
        rows = [jax.tree.map(lambda x: x[w:w + 1], stages[u]) for u, w in pairs]
        return jax.tree.map(lambda *xs: np.concatenate(xs), *rows)
    return TaskContext(stage=s, n_windows=len(stages[s]["lang"]), batches=lambda rng: iter([stages[s]]), grad=None,
                       fit=None, rng=np.random.default_rng(seed + s), key=jax.random.PRNGKey(seed + s), policy=net,
                       gather=gather)


_STEPS = {}


def _train(net, algo, params, state, batch, steps=3, lr=1e-2):
    """A few real train steps (the loop's jitted step, compiled once per algorithm object)."""
    opt = make_optimizer(OptimConfig(lr=lr))
    if id(algo) not in _STEPS:
        _STEPS[id(algo)] = (algo, make_train_step(net, algo, opt))
    step = _STEPS[id(algo)][1]
    o = opt.init(params)
    for i in range(steps):
        params, o, info = step(params, o, state, batch, jax.random.PRNGKey(i), lr)
    assert np.isfinite(float(info["loss"]))
    return params


def _same(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_tail_adapters_of_earlier_tasks_and_the_base_never_change(policy):
    algo = make_tail(adapters=TAIL_SPEC)
    net = algo.network(policy, 3)
    stages = [_batch(10 + t) for t in range(3)]
    params = net.init(jax.random.PRNGKey(0), stages[0])
    state = algo.init(params, 3)
    base0 = jax.tree.map(np.asarray, params["base"])
    done = []
    for t in range(3):
        before = jax.tree.map(np.asarray, params["adapters"])
        params, state = algo.start_task(params, state, t, _ctx(net, stages, t))
        if t > 0:  # the re-implementation's start: the previous task's adapters plus N(0, 1e-3) noise
            d = jax.tree.map(lambda a: np.asarray(a[t]) - np.asarray(a[t - 1]), params["adapters"])
            assert 0 < max(np.abs(x).max() for x in jax.tree.leaves(d)) < 1e-2
        params = _train(net, algo, params, state, stages[t])
        params, state = algo.end_task(params, state, t, _ctx(net, stages, t))
        assert not _same(jax.tree.map(lambda a: a[t], before), jax.tree.map(lambda a: a[t], params["adapters"]))
        done.append(jax.tree.map(lambda a: np.asarray(a[t]), params["adapters"]))
        assert _same(base0, params["base"])  # the frozen base, bit for bit
        for j in range(t):  # every earlier task's adapters, bit for bit
            assert _same(done[j], jax.tree.map(lambda a: a[j], params["adapters"]))
    for j in range(3):  # acting on task j attaches task j's adapters
        assert _same(done[j], algo.eval_params(params, state, j)["adapter"])
    fresh = make_tail(adapters=TAIL_SPEC, init="fresh")
    p2, _ = fresh.start_task(params, state, 1, _ctx(net, stages, 1))
    assert _same(p2["adapters"], params["adapters"])


def test_l2m_retrieves_the_matching_key_and_its_usage_penalty(policy):
    algo = make_l2m(pool_size=4, adapters=[["attn", 4], ["encoder", 2]])
    net = algo.network(policy, 2)
    b = _batch(1)
    params = net.init(jax.random.PRNGKey(0), b)
    q = np.asarray(step_mean(net.features(params["base"], b["obs"], b["lang"]), b["obs"]))
    # keys: sample 0's, 1's and 2's queries (in a shuffled order) and one far away
    keys = np.stack([q[2], -q[0], q[0], q[1]])
    params = dict(params, keys=jnp.asarray(keys))
    idx, pull = net.match(params, b["obs"], b["lang"])
    np.testing.assert_array_equal(np.asarray(idx), [2, 3, 0])
    assert float(pull) == pytest.approx(1.0, abs=1e-5)  # each query meets itself: cos = 1
    nll = net.loss(params, b, None, train=False) - net.pull * -1.0
    assert float(nll) == pytest.approx(float(net.loss(params, b, None, train=False)) + 0.5, abs=1e-5)
    # end_task counts each key's share of the task's windows (L2P's running mean over batches)
    state = algo.init(params, 2)
    _, state = algo.end_task(params, state, 0, _ctx(net, [b], 0))
    np.testing.assert_allclose(state["counts"], [1 / 3, 0, 1 / 3, 1 / 3], rtol=1e-6)
    # from the second task on, training divides the score by how often a key was used: the unused key 1 wins a
    # sample whose own key is worn out; acting has no penalty
    params = dict(params, keys=jnp.asarray(np.stack([q[0], q[0] + 0.3 * np.abs(q[0]).mean(), q[1], q[2]])))
    state = dict(state, counts=np.array([0.9, 0.0, 0.05, 0.05], np.float32), task=np.asarray(1, np.int32))
    train_idx = net.selection(algo.train_params(params, state), b["obs"], b["lang"])
    act_idx = net.selection(algo.eval_params(params, state, 0), b["obs"], b["lang"])
    assert int(act_idx[0]) == 0 and int(train_idx[0]) == 1
    # keys and modulators train, the base does not
    new = _train(net, algo, params, state, b)
    assert _same(params["base"], new["base"]) and not _same(params["keys"], new["keys"])


def test_iscil_retrieves_the_skill_whose_prototype_matches(policy):
    algo = make_iscil(n_bases=B, adapters=TAIL_SPEC)
    net = algo.network(policy, 3)
    stages = [_batch(20), _batch(21), _batch(21)]
    stages[2] = dict(stages[2], obs=jax.tree.map(lambda x: x + 0.01 * np.ones_like(x) if x.dtype == np.float32
                                                 else x, stages[2]["obs"]))
    params = net.init(jax.random.PRNGKey(0), stages[0])
    state = algo.init(params, 3)
    base0 = jax.tree.map(np.asarray, params["base"])
    for t in range(3):
        ctx = _ctx(net, stages, t)
        params, state = algo.start_task(params, state, t, ctx)
        # with as many bases as windows the prototypes are the task's own state embeddings
        z = np.asarray(net.query(params, stages[t]["obs"], stages[t]["lang"]))
        np.testing.assert_allclose(np.sort(np.asarray(params["prototypes"][t]), 0), np.sort(z, 0), rtol=1e-5,
                                   atol=1e-6)
        if t == 2:  # stage 2's data is stage 1's, nudged: its skill starts as a copy of skill 1
            assert ctx.log["init_from"] == 1
            assert _same(jax.tree.map(lambda a: a[1], params["adapters"]),
                         jax.tree.map(lambda a: a[2], params["adapters"]))
        before = jax.tree.map(np.asarray, params)
        params = _train(net, algo, params, state, stages[t])
        for j in range(t):
            assert _same(jax.tree.map(lambda a: a[j], before["adapters"]),
                         jax.tree.map(lambda a: a[j], params["adapters"]))
        assert _same(before["prototypes"], params["prototypes"]) and _same(base0, params["base"])
    # retrieval at acting time: every seen task is a candidate, no task id
    full = algo.eval_params(params, state, 0)
    np.testing.assert_array_equal(np.asarray(net.retrieve(full, stages[0]["obs"], stages[0]["lang"])), [0, 0, 0])
    np.testing.assert_array_equal(np.asarray(net.retrieve(full, stages[2]["obs"], stages[2]["lang"])), [2, 2, 2])
    # while task 1 trains, task 2's skill cannot be retrieved
    early = algo.train_params(params, dict(state, task=np.asarray(1, np.int32)))
    np.testing.assert_array_equal(np.asarray(net.retrieve(early, stages[2]["obs"], stages[2]["lang"])), [1, 1, 1])


def test_kmeans_finds_separated_clusters():
    rng = np.random.default_rng(0)
    centres = np.array([[5.0, 0.0], [-5.0, 0.0], [0.0, 5.0]])
    x = np.concatenate([c + 0.1 * rng.normal(size=(30, 2)) for c in centres])
    got = kmeans(x, 3, np.random.default_rng(1))
    np.testing.assert_allclose(np.sort(got, 0), np.sort(centres, 0), atol=0.1)


def test_dmpel_router_top_k_by_hand():
    """2 sigmoid(MLP(q)); experts not yet in the library masked; top-k per group kept, the rest zero."""
    g, e = 2, 4
    router = {"l0": {"kernel": jnp.zeros((3, 5)), "bias": jnp.zeros(5)},
              "l1": {"kernel": jnp.zeros((5, 5)), "bias": jnp.zeros(5)},
              "l2": {"kernel": jnp.zeros((5, g * e)), "bias": jnp.zeros(g * e)}}
    want = np.array([[0.2, 1.6, 1.0, 1.9], [1.5, 0.1, 0.3, 1.2]])  # coefficients 2 sigmoid(b)
    bias = np.log((want / 2) / (1 - want / 2)).reshape(-1)
    router["l2"]["bias"] = jnp.asarray(bias, jnp.float32)
    c = np.asarray(route(router, jnp.zeros((1, 3)), 3, g, 2))[0]  # 3 experts so far: the 4th (1.9) is masked
    np.testing.assert_allclose(c, [[0, 1.6, 1.0, 0], [1.5, 0, 0.3, 0]], rtol=1e-5)
    c = np.asarray(route(router, jnp.zeros((1, 3)), 1, g, 2))[0]
    np.testing.assert_allclose(c, [[0.2, 0, 0, 0], [1.5, 0, 0, 0]], rtol=1e-5)


def test_dmpel_library_grows_orthogonally_and_coefficient_replay_recalls(policy):
    algo = make_dmpel(adapters=DMPEL_SPEC, topk=2, hidden=16, recall_epochs=150, recall_lr=1e-2, recall_batch=4)
    net = algo.network(policy, 3)
    stages = [_batch(30), _batch(31), _batch(32)]
    params = net.init(jax.random.PRNGKey(0), stages[0])
    state = algo.init(params, 3)
    base0 = jax.tree.map(np.asarray, params["base"])
    for t in range(3):
        params, state = algo.start_task(params, state, t, _ctx(net, stages, t))
        assert int(state["n_experts"]) == t + 1  # one new expert per task
        c = np.asarray(net.coefficients(algo.train_params(params, state), stages[t]["obs"], stages[t]["lang"]))
        assert (c[..., t + 1:] == 0).all() and ((c > 0).sum(-1) == min(2, t + 1)).all()
        # the new router's output bias aims every coefficient at 1 / min(k, E) (its random weights move them a bit)
        assert abs(c[c > 0].mean() - 1.0 / min(2, t + 1)) < 0.1
        for leaf in (params["experts"]["layer_0"]["qkv"]["q"]["A"], params["experts"]["gmm"]["mean"]["all"]["A"]):
            a = np.asarray(leaf)[: t + 1].reshape(t + 1, -1)
            if t > 0:  # the new expert's A: unit norm, orthogonal to every earlier expert's
                assert np.linalg.norm(a[t]) == pytest.approx(1.0, rel=1e-5)
                np.testing.assert_allclose(a[:t] @ a[t], 0, atol=1e-5)
        before = jax.tree.map(np.asarray, params)
        params = _train(net, algo, params, state, stages[t])
        for name in ("layer_0", "gmm"):
            old, new = before["experts"][name], params["experts"][name]
            assert _same(jax.tree.map(lambda a: a[:t], old), jax.tree.map(lambda a: a[:t], new))  # frozen experts
        assert _same(base0, params["base"])
        stored_before = int(state["size"])
        unreplayed = algo.eval_params(params, state, 0)  # the router as the task left it, before the replay
        params, state = algo.end_task(params, state, t, (ctx := _ctx(net, stages, t)))
        assert int(state["size"]) == stored_before + B
        if t > 0:  # coefficient replay: the router learns the stored coefficients of every task so far
            losses = ctx.log["recall_losses"]
            assert losses[-1] < 0.2 * losses[0]
    full = algo.eval_params(params, state, 0)
    for s in range(2):  # the replayed router reproduces the earlier tasks' stored coefficients, the unreplayed not
        stored = np.asarray(state["coeff"][s * B:(s + 1) * B])
        err = np.abs(np.asarray(net.coefficients(full, stages[s]["obs"], stages[s]["lang"])) - stored).mean()
        before = np.abs(np.asarray(net.coefficients(unreplayed, stages[s]["obs"], stages[s]["lang"])) - stored).mean()
        assert err < 0.05 and err < 0.3 * before, (s, err, before)


def test_networks_have_abstract_shapes_and_hash_by_value(policy):
    """Evaluation restores checkpoints into jax.eval_shape(policy.init) (eval.chunk_size.param_shapes) and sizes memory
    by acting with those; equal configs give equal (hashable) networks, so compiled steps and rollouts are reused
    across runs."""
    b = _batch()
    for make, kw in ((make_tail, {"adapters": TAIL_SPEC}), (make_l2m, {"pool_size": 3, "adapters": [["attn", 4]]}),
                     (make_iscil, {"n_bases": 2, "adapters": TAIL_SPEC}), (make_dmpel, {"adapters": DMPEL_SPEC})):
        net = make(**kw).network(policy, 2)
        assert net == make(**kw).network(policy, 2) and hash(net) == hash(make(**kw).network(policy, 2))
        shapes = jax.eval_shape(lambda k: net.init(k, b), jax.random.PRNGKey(0))
        real = net.init(jax.random.PRNGKey(0), b)
        assert jax.tree.structure(shapes) == jax.tree.structure(real)
        assert [s.shape for s in jax.tree.leaves(shapes)] == [np.shape(x) for x in jax.tree.leaves(real)]
        # the network's own init parameters act too (eval.grid sizes its memory with them)
        assert jax.eval_shape(lambda p: net.apply(p, b["obs"], b["lang"]), shapes).means.shape == (B, T, 2, 7)


# ------------------------------------------------------------------------------------------------ the real loop
SUITE, K = "libero_goal", 2
LOOP_TINY = dict(embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, gmm_hidden=[32], gmm_modes=2)
BASE = dict(suite=SUITE, n_tasks=K, epochs=1, eval_every=1, n_eval=1, horizon=4, warmup=1, batch_size=8,
            max_batches=2, lang="onehot", policy_kwargs=LOOP_TINY)
METHOD_KWARGS = {
    "tail": {"adapters": TAIL_SPEC},
    "l2m": {"pool_size": 4, "adapters": [["attn", 4], ["encoder", 2]]},
    "iscil": {"n_bases": 4, "adapters": TAIL_SPEC},
    "dmpel": {"adapters": DMPEL_SPEC, "hidden": 16, "recall_epochs": 2},
}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """Synthetic demos of the run's two tasks and a base pretrained on them by the real `pretrain`."""
    from clbench_jax.lifelong.config import make_config
    from clbench_jax.lifelong.loop import scene_for
    from clbench_jax.lifelong.pretrain import pretrain
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.tasks.suites import ordered_tasks
    from test_lifelong import _write_synthetic

    folder = str(tmp_path_factory.mktemp("demos"))
    tasks = ordered_tasks(SUITE, 0)[:K]
    spec = obs_spec(scene_for(tasks[0].scene), "state")
    for i, t in enumerate(tasks):
        _write_synthetic(folder, t, spec, seed=i)
    out = str(tmp_path_factory.mktemp("pretrained"))
    rec = pretrain(make_config(dict(BASE, demos_dir=folder, epochs=2, algo="seqft")), out, progress=False)
    assert len(rec["losses"]) == 2 and np.isfinite(rec["losses"]).all()
    return folder, out


def _stage_params(out, stage):
    from clbench_jax.lifelong.checkpoints import StageCheckpoints

    ck = StageCheckpoints(os.path.join(out, "checkpoints"))
    raw = ck.manager.restore(stage)
    ck.close()
    return raw["arrays"]["params"]


@pytest.mark.parametrize("method", ["tail"] + [pytest.param(m, marks=pytest.mark.slow) for m in ("l2m", "iscil",
                                                                                                  "dmpel")])
def test_method_trains_through_the_lifelong_loop_on_a_frozen_pretrained_base(pretrained, method, tmp_path):
    from clbench_jax.lifelong.checkpoints import StageCheckpoints
    from clbench_jax.lifelong.config import make_config
    from clbench_jax.lifelong.loop import run_lifelong

    demos, base_dir = pretrained
    cfg = make_config(dict(BASE, algo=method, demos_dir=demos, pretrained=base_dir,
                           algo_kwargs=METHOD_KWARGS[method]))
    out = str(tmp_path / method)
    m = run_lifelong(cfg, out, progress=False)
    assert [len(r) for r in m["success_matrix"]] == [K, K] and np.isfinite(m["losses"]).all()
    store = StageCheckpoints(os.path.join(base_dir, "base"))
    base = store.manager.restore(0)["arrays"]["params"]
    store.close()
    for s in range(K):  # the frozen base is the pretrained one, bit for bit, after every stage
        assert _same(base, _stage_params(out, s)["base"])
    if method == "dmpel":
        assert [log["n_experts"] for log in m["logs"]] == [1, 2] and len(m["logs"][1]["recall_losses"]) == 2
    if method == "iscil":
        assert m["logs"][1]["init_from"] == 0
    # the evaluation grid acts with each stage's per-task parameters (TAIL's slot, IsCiL's / DMPEL's visible
    # library): every cell runs, none is a failed cell (the first LIBERO run failed all 825 for TAIL)
    from clbench_jax.eval import grid as G
    from clbench_jax.eval.grid_runner import run_grid
    from clbench_jax.eval.episodes import read_columns
    from clbench_jax.eval.run import stage_checkpoints
    from clbench_jax.lifelong.loop import make_policy
    from clbench_jax.tasks.suites import ordered_tasks

    tasks = tuple(ordered_tasks(SUITE, 0)[:K])
    spec = G.GridSpec(tasks=tasks, variants=tuple((G.original_variant(t),) for t in tasks), n_rollouts=1, horizon=3,
                      chunk=8)
    cks = stage_checkpoints(out, cfg, K, method)
    run_grid(spec, cks, make_policy(cfg), tmp_path / "grid", lang=cfg.lang, suite=SUITE, progress=False)
    cols, _ = read_columns(tmp_path / "grid" / "episodes.h5")
    assert len(cols["status"]) == 3 and set(map(str, cols["status"])) == {"ok"}


def test_a_shared_adapter_update_of_a_finished_multitask_run(pretrained, tmp_path):
    """Seed 004's repair step: a finished multitask run is a base; `multitask` with adapters trains one shared
    adapter set on it (`select: last` keeps them) and leaves the base bit-identical to that run's selected
    parameters. An adapted run is refused as a base, naming it."""
    from clbench_jax.errors import PretrainedError
    from clbench_jax.lifelong.config import make_config
    from clbench_jax.lifelong.loop import run_lifelong

    demos, _ = pretrained
    first = str(tmp_path / "multitask_s0")
    run_lifelong(make_config(dict(BASE, algo="multitask", demos_dir=demos)), first, progress=False)
    spec = [["attn", 4], ["encoder", 4], ["fusion", 4]]
    upd = str(tmp_path / "update")
    m = run_lifelong(make_config(dict(BASE, algo="multitask", demos_dir=demos, pretrained=first, select="last",
                                      algo_kwargs={"adapters": spec})), upd, progress=False)
    assert len(m["success_matrix"]) == 1 and np.isfinite(m["losses"]).all()
    after = _stage_params(upd, 0)
    assert _same(_stage_params(first, 0), after["base"])
    # select: last keeps the trained adapters (best-success selection may keep epoch 0, the untouched base)
    lora_b = [np.abs(np.asarray(x)).max() for p, x in jax.tree_util.tree_leaves_with_path(after["adapter"])
              if p[-1].key == "B"]
    assert len(lora_b) >= 3 and min(lora_b) > 0
    with pytest.raises(PretrainedError, match="is a multitask run; a base is"):  # an adapted run is no base
        run_lifelong(make_config(dict(BASE, algo="multitask", demos_dir=demos, pretrained=upd,
                                      algo_kwargs={"adapters": spec})), str(tmp_path / "x"), progress=False)


def test_a_missing_unfinished_or_mismatched_pretrained_base_is_named_first(pretrained, tmp_path):
    """Checked before any long work: the demos folder here does not exist, yet the pretrained error comes first."""
    import shutil

    from clbench_jax.errors import PretrainedError
    from clbench_jax.lifelong.config import make_config
    from clbench_jax.lifelong.loop import run_lifelong

    demos, base_dir = pretrained
    nope = str(tmp_path / "nope")
    cfg = make_config(dict(BASE, algo="tail", demos_dir=str(tmp_path / "no_demos"), pretrained=nope))
    made_by = "make it with: clbench demos collect --suite libero_90"
    with pytest.raises(PretrainedError, match=f"no pretrained checkpoint at {nope}; {made_by}"):
        run_lifelong(cfg, str(tmp_path / "a"), progress=False)
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(os.path.join(base_dir, "config.yaml"), half)
    with pytest.raises(PretrainedError, match="unfinished"):
        run_lifelong(make_config(dict(BASE, algo="tail", demos_dir=demos, pretrained=str(half))),
                     str(tmp_path / "b"), progress=False)
    other = dict(BASE, algo="seqft", demos_dir=demos, pretrained=base_dir,
                 policy_kwargs=dict(LOOP_TINY, embed_dim=8))
    with pytest.raises(PretrainedError, match="policy_kwargs"):
        run_lifelong(make_config(other), str(tmp_path / "c"), progress=False)


def test_pretraining_resumes_and_starts_a_fine_tuned_run(pretrained, tmp_path):
    """A pretraining run killed after its first epoch resumes to the same base, bit for bit; a plain method (SeqFT)
    loads the whole base as its starting parameters."""
    import json
    import shutil

    from clbench_jax.lifelong.config import make_config
    from clbench_jax.lifelong.loop import make_policy
    from clbench_jax.lifelong.pretrain import load_pretrained, pretrain

    demos, base_dir = pretrained
    copy = str(tmp_path / "copy")
    shutil.copytree(base_dir, copy)
    shutil.rmtree(os.path.join(copy, "base"))
    shutil.rmtree(os.path.join(copy, "checkpoints", "2"))
    cfg = make_config(dict(BASE, demos_dir=demos, epochs=2, algo="seqft"))
    rec = pretrain(cfg, copy, progress=False)
    want = json.load(open(os.path.join(base_dir, "pretrain.json")))
    assert rec["losses"] == want["losses"]

    def base_of(folder):
        from clbench_jax.lifelong.checkpoints import StageCheckpoints

        store = StageCheckpoints(os.path.join(folder, "base"))
        out = store.manager.restore(0)["arrays"]["params"]
        store.close()
        return out

    assert _same(base_of(base_dir), base_of(copy))
    run = make_config(dict(BASE, algo="seqft", demos_dir=demos, pretrained=base_dir))
    policy = make_policy(run)
    params = policy.init(jax.random.PRNGKey(5), _batch_for_loop(demos))
    assert _same(load_pretrained(run, policy, params), base_of(base_dir))


def _batch_for_loop(demos):
    from clbench_jax.lifelong.data import open_dataset, policy_batch
    from clbench_jax.tasks.suites import ordered_tasks

    tasks = ordered_tasks(SUITE, 0)[:K]
    ds = open_dataset(demos, tasks, "state", 10)
    b = policy_batch(ds.gather(np.arange(1)), np.zeros((K, 384), np.float32), "state")
    ds.close()
    return b


@pytest.mark.slow
def test_dmpel_run_killed_after_a_stage_resumes_to_the_same_numbers(pretrained, tmp_path):
    """The library, router, replay buffer and optimizer come back from the stage checkpoint: a run killed after
    stage 0 and resumed ends with the uninterrupted run's metrics and parameters."""
    from clbench_jax.lifelong.config import make_config
    from clbench_jax.lifelong.loop import run_lifelong

    demos, base_dir = pretrained
    cfg = make_config(dict(BASE, algo="dmpel", demos_dir=demos, pretrained=base_dir,
                           algo_kwargs=METHOD_KWARGS["dmpel"]))
    full = run_lifelong(cfg, str(tmp_path / "full"), progress=False)

    def die(stage, record):
        if stage == 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_lifelong(cfg, str(tmp_path / "killed"), callbacks=[die], progress=False)
    resumed = run_lifelong(cfg, str(tmp_path / "killed"), progress=False)
    for k in ("success_matrix", "curves", "losses", "fwt", "nbt", "auc"):
        assert resumed[k] == full[k], k
    assert resumed["logs"][1]["recall_losses"] == full["logs"][1]["recall_losses"]
    assert _same(_stage_params(str(tmp_path / "full"), K - 1), _stage_params(str(tmp_path / "killed"), K - 1))


def test_a_run_mixing_networks_is_refused_before_training():
    """One grid acts through one network: the frozen-base methods' config names all four, so a run of it without
    --methods is refused at load, naming the field and how to run them; one method at a time loads."""
    from clbench_jax.errors import ConfigError
    from clbench_jax.eval.run import load_run_config

    with pytest.raises(ConfigError, match="different networks") as e:
        load_run_config(REPO / "configs" / "evidence_libero_goal_peft.yaml")
    assert e.value.field == "methods" and "--methods" in str(e.value)
    assert load_run_config(REPO / "configs" / "evidence_libero_goal_peft.yaml", methods=["dmpel"]).methods == ("dmpel",)
    with pytest.raises(ConfigError, match="different networks"):
        load_run_config(REPO / "configs" / "evidence_libero_goal_final.yaml", methods=["seqft", "tail"])
