"""The evaluation grid on real physics: a tiny random-init BC-Transformer stacked over checkpoints, two libero_goal
tasks, an original instruction, goal-override contrasts and an occ face, short horizons.

Checks: only valid cells (j <= stage) run, one row per episode; the contrast is judged on its own goal and runs to
the horizon; a capped contrast is not evaluated but its goal is still a goal column; occ runs at the final stage
only, with the object tokens' identity blanked; failed cells are recorded with their reason while the others run; a
grid interrupted after a chunk resumes without redoing it and ends identical to an uninterrupted one; a grid group
equals the same episodes run directly through the rollout engine."""

from pathlib import Path

import jax
import numpy as np
import pytest

from clbench_jax.errors import ClbenchError
from clbench_jax.eval import grid as G
from clbench_jax.eval.grid_runner import run_grid
from clbench_jax.eval.episodes import read_columns

TINY = dict(embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, seq_len=4, gmm_hidden=(32,),
            gmm_modes=3)
R, H = 2, 10
# Holds after reset: the bowl sits in its :init region, so this contrast succeeds at once (and runs on).
HELD = (("on", "wooden_cabinet_1", "main_table_cabinet_region"),)
TOP = (("open", "wooden_cabinet_1_top_region"),)  # a second contrast, capped by max_per_condition


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def setup():
    from clbench_jax.lifelong.loop import scene_for
    from clbench_jax.policies import make_bc_transformer
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.tasks.suites import suite_tasks

    policy = make_bc_transformer("state", **TINY)
    tasks = tuple(suite_tasks("libero_goal")[:2])
    scene = scene_for(tasks[0].scene)
    ex = {"obs": {k: np.zeros((1, 4) + s, d) for k, (s, d) in obs_spec(scene, "state").items()},
          "lang": np.zeros((1, 384), np.float32)}
    ps = [policy.init(jax.random.PRNGKey(i), ex) for i in range(2)]
    nan = jax.tree.map(lambda x: x.at[(0,) * x.ndim].set(np.nan) if x.ndim else x, ps[0])

    def broken(j):
        raise FileNotFoundError("checkpoint stage 1 missing")

    cks = [G.Checkpoint("m", 0, 0, lambda j: ps[0]), G.Checkpoint("m", 0, 1, lambda j: ps[1]),
           G.Checkpoint("nan", 0, 1, lambda j: nan), G.Checkpoint("gone", 0, 1, broken)]
    orig = G.original_variant(tasks[0])
    variants = ((orig, G.Variant("c", "contrast", "leave the bowl", HELD, "action"),
                 G.Variant("c2", "contrast", "open the top drawer", TOP, "attribute"),
                 G.Variant("o", "occ", orig.text, orig.goal)),
                (G.original_variant(tasks[1]),))
    spec = G.GridSpec(tasks=tasks, variants=variants, n_rollouts=R, horizon=H, chunk=4, max_per_condition=1,
                      final_only=("occ",))
    emb = [np.random.default_rng(j).normal(size=(len(vs), 384)).astype(np.float32) for j, vs in enumerate(variants)]
    emb[0][3] = emb[0][0]  # occ reads the original instruction: only the blanked tokens differ
    return dict(policy=policy, tasks=tasks, scene=scene, ps=ps, cks=cks, spec=spec, emb=emb)


@pytest.fixture(scope="module")
def full(setup, tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    s = setup
    return out, run_grid(s["spec"], s["cks"], s["policy"], out, embeddings=s["emb"], progress=False)


def test_cells_rows_and_outcomes(setup, full):
    out, cols = full
    # cells: (m,0): task 0 x {original, c} (occ is final-only, c2 capped); (m,1), (nan,1), (gone,1): task 0 x
    # {original, c, occ} + task 1 x 1 -> 14 groups x R rows
    assert len(cols["method"]) == 14 * R
    assert (cols["task"] <= cols["stage"]).all() and "c2" not in set(cols["variant"])
    assert not ((cols["condition"] == "occ") & (cols["stage"] == 0)).any()
    # three goal columns: task 0's original and both contrasts (c2 was not evaluated: G_j is every audited goal)
    assert cols["success"].shape == (14 * R, 3) and (cols["n_audited"][cols["task"] == 0] == 3).all()
    ran = cols["status"] == "ok"
    assert set(cols["method"][ran]) == {"m"} and ran.sum() == 6 * R
    nan_cell = cols["status"][cols["method"] == "nan"]
    assert all(s.startswith("failed cell: non-finite values in parameter") for s in nan_cell)
    assert all("FileNotFoundError: checkpoint stage 1 missing" in s for s in cols["status"][cols["method"] == "gone"])
    c = ran & (cols["condition"] == "contrast")
    o = ran & (cols["variant"] == f"{setup['tasks'][0].name}/original")
    assert (cols["target"][c] == 1).all() and (cols["target"][o] == 0).all()
    # The contrast's goal held at reset and at once: success on its column, and the episode runs to the horizon
    # (the original goal is still open).
    assert cols["held_at_reset"][c, 1].all() and cols["success"][c, 1].all()
    assert (cols["first_success"][c, 1] == 1).all() and (cols["length"][c] == H).all()
    # what each variant names: the drawer's cabinet for the original and for the contrast (cabinet in its region)
    assert set(cols["original_object"][o | c]) == {"wooden_cabinet_1"}
    assert set(cols["named_object"][c]) == {"wooden_cabinet_1"} and set(cols["named_object"][o]) == {
        "wooden_cabinet_1"}
    assert set(cols["first_grasp_object"][ran]) <= {""} | {"akita_black_bowl_1", "wooden_cabinet_1", "plate_1",
                                                           "cream_cheese_1", "wine_bottle_1", "flat_stove_1",
                                                           "wine_rack_1"}
    assert ((cols["first_grasp_object"] == "") == (cols["first_grasp"] < 0)).all()
    # occ: same instruction embedding, same starts and noise as the original at stage 1, blanked token identity:
    # the policy acts differently
    occ = ran & (cols["condition"] == "occ")
    o1 = o & (cols["stage"] == 1)
    np.testing.assert_array_equal(cols["rollout"][occ], cols["rollout"][o1])
    assert not np.array_equal(cols["ee_disp_max"][occ], cols["ee_disp_max"][o1])
    # Every episode of task 0 records both columns: the same bowl goal held in the original episodes too.
    assert cols["held_at_reset"][o, 1].all()
    assert (cols["length"][o] == H).all() and not cols["success"][o, 0].any()  # a random policy opens no drawer
    # Task 1 has one goal column; the padding column never holds.
    t1 = ran & (cols["task"] == 1)
    assert (cols["n_goals"][t1] == 1).all() and not cols["success"][t1, 1].any()
    # Paired starts: the same rollout index of a task starts from the same state under every checkpoint.
    m0 = o & (cols["stage"] == 0)
    m1 = o & (cols["stage"] == 1)
    np.testing.assert_array_equal(cols["rollout"][m0], cols["rollout"][m1])
    assert not np.array_equal(cols["ee_disp_max"][m0], cols["ee_disp_max"][m1])  # different parameters act
    # The file on disk is what the function returned.
    back, meta = read_columns(out / "episodes.h5")
    for k in cols:
        np.testing.assert_array_equal(back[k], cols[k])
    assert meta["goal_columns"][0] == [[["open", "wooden_cabinet_1_middle_region"]], [list(HELD[0])],
                                       [list(TOP[0])]]


def test_resume_after_interruption_is_identical(setup, full, tmp_path):
    s = setup
    n_chunks = len(G.plan(s["spec"], s["cks"]))
    assert n_chunks == 7  # 14 groups, 2 per chunk

    def stop_after_two(i):
        if i == 1:
            raise Interrupted

    with pytest.raises(Interrupted):
        run_grid(s["spec"], s["cks"], s["policy"], tmp_path, embeddings=s["emb"], progress=False,
                   on_chunk=stop_after_two)
    done = sorted(p.name for p in (tmp_path / "chunks").iterdir())
    assert done == ["00000.h5", "00001.h5"] and not (tmp_path / "episodes.h5").exists()
    mtime = (tmp_path / "chunks" / "00000.h5").stat().st_mtime_ns
    ran = []
    cols = run_grid(s["spec"], s["cks"], s["policy"], tmp_path, embeddings=s["emb"], progress=False,
                      on_chunk=ran.append)
    assert ran == [2, 3, 4, 5, 6] and (tmp_path / "chunks" / "00000.h5").stat().st_mtime_ns == mtime
    for k, v in full[1].items():
        np.testing.assert_array_equal(cols[k], v, err_msg=k)


def test_group_equals_direct_rollout(setup, full):
    """Checkpoint (m, stage 1), task 0, original variant: the grid rows equal the same episodes run directly."""
    from clbench_jax.lifelong.loop import derive_key, init_bank
    from clbench_jax.policies.act import initial_pstate, make_policy_fn, obs_spec
    from clbench_jax.sim import env, rollout
    from clbench_jax.sim.predicates import compile_goal
    from clbench_jax.sim.scene import GOAL_ROWS

    s, cols = setup, full[1]
    scene, task = s["scene"], s["tasks"][0]
    bank = init_bank(scene, task, R, 0)
    goal = [tuple((a.pred, *a.args) for a in task.goal)]
    tables = env.stack([compile_goal(scene.layout, g, GOAL_ROWS) for g in goal + goal + [HELD, TOP]])
    batch = rollout.EpisodeBatch(
        task_ids=np.full(R, scene.task_index(task.name)), goals=jax.tree.map(lambda x: np.stack([x] * R), tables),
        state=bank.state[:R], mocap=bank.mocap[:R], q0=bank.q0[:R],
        keys=np.asarray(jax.random.split(derive_key(jax.random.PRNGKey(0), "grid", task.name), R)))
    lang = np.repeat(s["emb"][0][:1], R, 0)
    fn = make_policy_fn(s["policy"], warmup=5)
    rec = rollout.rollout(scene, fn, initial_pstate(s["ps"][1], lang, obs_spec(scene, "state"), 4), batch, H,
                          warmup=5)
    m = (cols["method"] == "m") & (cols["stage"] == 1) & (cols["variant"] == f"{task.name}/original")
    np.testing.assert_array_equal(cols["length"][m], rec.length)
    np.testing.assert_array_equal(cols["success"][m], rec.success[:, 1:])
    np.testing.assert_allclose(cols["ee_disp_max"][m], rec.ee_disp_max, rtol=1e-4, atol=1e-5)


def test_refuses_another_grid_in_its_folder(setup, full):
    s = setup
    other = G.GridSpec(tasks=s["spec"].tasks, variants=s["spec"].variants, n_rollouts=R, horizon=H + 1, chunk=4,
                       max_per_condition=1, final_only=("occ",))
    with pytest.raises(ClbenchError, match="another grid"):
        run_grid(other, s["cks"], s["policy"], full[0], embeddings=s["emb"], progress=False)


def test_a_grid_written_under_other_physics_is_another_grid(setup, full, monkeypatch):
    """A folder begun before a physics change (scene.PHYSICS_REVISION) does not resume under the new physics."""
    from clbench_jax.sim import scene as scene_mod

    s = setup
    monkeypatch.setattr(scene_mod, "PHYSICS_REVISION", scene_mod.PHYSICS_REVISION + 1)
    with pytest.raises(ClbenchError, match="another grid"):
        run_grid(s["spec"], s["cks"], s["policy"], full[0], embeddings=s["emb"], progress=False)


def test_variants_from_file():
    from clbench_jax.language.variants import audited_goals, read_variants
    from clbench_jax.tasks.suites import suite_tasks

    path = Path(__file__).parents[1] / "configs" / "variants" / "libero_goal.offline.json"
    tasks = suite_tasks("libero_goal")[:3]
    vs = G.variants_from_file(path, tasks)
    doc = {t["task"]: t for t in read_variants(path)["tasks"]}
    for task, v in zip(tasks, vs):
        assert v[0].condition == "original" and v[0].text == task.instruction
        kept = [x for x in doc[task.name]["variants"] if (x["retained"] or x.get("probe") == "unverified")
                and x["condition"] != "original"]
        assert [x.id for x in v[1:]] == [x["id"] for x in kept]
        # unverified collision probes are evaluated as their own condition, outside the collision aggregate
        assert [x.condition == "probe" for x in v[1:]] == [x.get("probe") == "unverified" for x in kept]
        assert all(x.goal is None for x in v if x.condition in ("collision", "probe"))
        assert all(x.goal == v[0].goal for x in v if x.condition == "paraphrase")
        # Goal columns: the language battery's audited goals, in the same order, then the swaps' other goals.
        cols, k = G.goal_columns(v), G.n_audited(v)
        assert cols[:k] == audited_goals(doc[task.name])
        swaps = [x.goal for x in v if x.condition == "swap"]
        assert set(cols[k:]) == set(swaps) - set(cols[:k]) and len(cols) == len(set(cols))
        assert all(G.target_column(v, x) >= 0 for x in v if x.condition in ("swap", "nonsense"))


def test_settings_errors_stop_the_grid(setup, tmp_path):
    s = setup
    for bad, field in ((dict(obs="rgb", backend="mjx", mjx_impl="jax"), "grid.obs"), (dict(n_rollouts=0), "grid.n_rollouts"),
                       (dict(variants=(s["spec"].variants[0][1:], s["spec"].variants[1])), "grid.variants")):
        spec = G.GridSpec(**{**dict(tasks=s["spec"].tasks, variants=s["spec"].variants), **bad})
        with pytest.raises(ClbenchError, match=field):
            run_grid(spec, s["cks"], s["policy"], tmp_path / field, embeddings=s["emb"], progress=False)
