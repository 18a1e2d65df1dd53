"""`grid.chunk: auto`: episodes per chunk chosen from the memory free when a grid starts.

Checks: the observation-window estimate equals a hand count of bytes; less memory gives smaller chunks (whole
groups, evened out, at least one group, at most the largest scene's groups over the devices); bad values are typed
errors naming grid.chunk; a grid cut into several chunks by a tiny budget returns the rows of the grid run as one
chunk (outcomes exactly, float maxima closely: see _same_rows); grid.json records the choice and the estimate;
a resumed grid keeps its chunk size (no re-plan)."""

import json

import jax
import numpy as np
import pytest

from clbench_jax.errors import ClbenchError
from clbench_jax.eval import chunk_size as C
from clbench_jax.eval import grid as G
from clbench_jax.eval.grid_folder import pending_chunks
from clbench_jax.eval.grid_runner import run_grid

TINY = dict(embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, seq_len=4, gmm_hidden=(32,),
            gmm_modes=3)
R, H = 2, 8
HELD = (("on", "wooden_cabinet_1", "main_table_cabinet_region"),)
F32, U8, B = np.float32, np.uint8, np.bool_


class Interrupted(Exception):
    pass


def test_history_bytes_by_hand():
    spec = {"joint_states": ((7,), F32), "agentview_rgb": ((128, 128, 3), U8), "token_mask": ((5,), B)}
    assert C.history_bytes(spec, 10) == 10 * (7 * 4 + 128 * 128 * 3 + 5)
    assert C.history_bytes({}, 10) == 0


def test_episode_memory_state_and_rgb():
    from clbench_jax.lifelong.loop import scene_for
    from clbench_jax.policies import make_bc_transformer
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.tasks.suites import suite_tasks

    tasks = tuple(suite_tasks("libero_goal")[:1])
    scene = scene_for(tasks[0].scene)
    assert obs_spec(scene, "state")["tokens"][0] == (7, 32)  # 7 entities of 32 features in the libero_goal scene
    variants = ((G.original_variant(tasks[0]),),)
    policy = make_bc_transformer("state", **TINY)
    spec = G.GridSpec(tasks=tasks, variants=variants, n_rollouts=R)
    parts = C.episode_memory(spec, scene, policy)
    # joint 7 + gripper 2 + ee_pos 3 float32, tokens 7 x 32 float32, token mask 7 bools; seq_len 4
    assert parts["obs_history"]["per_episode"] == 4 * ((7 + 2 + 3) * 4 + 7 * 32 * 4 + 7)
    assert parts["language"]["per_episode"] == 384 * 4
    n_params = sum(x.size for x in jax.tree.leaves(C.param_shapes(policy, scene.key, "state", 128, 4, 384)))
    assert parts["params"]["per_episode"] == -(-n_params * 4 // R)  # one stacked copy per group of R episodes
    assert parts["physics"]["pool"] == "host" and parts["physics"]["per_episode"] > 0
    act = parts["policy_activations"]
    assert act["fixed"] > 0 if spec.loop else act["per_episode"] > 0
    rgb = C.episode_memory(G.GridSpec(tasks=tasks, variants=variants, n_rollouts=R, obs="rgb", image_size=32),
                           scene)
    assert rgb["obs_history"]["per_episode"] == 10 * (7 * 4 + 2 * 4 + 2 * 32 * 32 * 3)  # default seq_len 10
    assert rgb["images"]["per_episode"] == rgb["images_host"]["per_episode"] == 2 * 32 * 32 * 3
    assert "params" not in rgb  # no policy: no parameters or activations


def test_smaller_budget_smaller_chunk():
    parts = {"x": {"pool": "device", "per_episode": 1000, "fixed": 0}}
    choose = lambda free, **kw: C.choose_chunk(parts, {"host": {"free": free}}, **{  # noqa: E731
        "n_rollouts": 10, "max_groups": 100, **kw})
    assert choose(10**12) == 1000  # everything fits: all 100 groups of 10
    assert choose(200_000) == 100  # half of it for 1 kB episodes: 100 episodes = 10 groups
    assert choose(100_000) == 50
    assert choose(0) == 10  # never less than one group
    sizes = [choose(f) for f in np.geomspace(1e3, 1e9, 25)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    # 11 groups under a budget of 8 groups: 2 chunks of 6, not 8 + 3 padded
    assert C.choose_chunk(parts, {"host": {"free": 160_000}}, n_rollouts=10, max_groups=11) == 60
    # 4 devices: at most the groups spread over them; the host's memory is shared by their chunks
    assert C.choose_chunk(parts, {"host": {"free": 10**12}}, n_rollouts=10, max_groups=11, n_devices=4) == 30
    assert C.choose_chunk(parts, {"host": {"free": 400_000}}, n_rollouts=10, max_groups=100, n_devices=4) == 50
    # Fixed bytes come off first; with a "device" pool each part counts against its own pool
    two = {"a": {"pool": "device", "per_episode": 1000, "fixed": 50_000},
           "b": {"pool": "host", "per_episode": 100, "fixed": 0}}
    mem = {"device": {"free": 300_000}, "host": {"free": 10**12}}
    assert C.choose_chunk(two, mem, n_rollouts=10, max_groups=100) == 100
    assert C.choose_chunk(two, {"host": {"free": 300_000}}, n_rollouts=10, max_groups=100) == 90  # 100000 / 1100


@pytest.mark.parametrize("bad", [0, -3, "big", "AUTO", True, 2.5, None])
def test_bad_chunk_values_name_the_field(bad):
    with pytest.raises(ClbenchError, match="grid.chunk"):
        C.check_chunk(bad)


def test_bad_chunk_in_a_run_config():
    from clbench_jax.eval.run import GRID_KEYS, RunConfig, grid_spec
    from clbench_jax.tasks.suites import suite_tasks

    assert GRID_KEYS["chunk"] == "auto" and G.GridSpec(tasks=(), variants=()).chunk == "auto"
    with pytest.raises(ClbenchError, match="grid.chunk"):
        grid_spec(RunConfig(grid={"chunk": 0}), tuple(suite_tasks("libero_goal")[:1]), "state", 128)


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
    cks = [G.Checkpoint("m", 0, 0, lambda j: ps[0]), G.Checkpoint("m", 0, 1, lambda j: ps[1])]
    # a goal that holds at reset under a stop-at-goal condition: those episodes stop at once (short, as before
    # contrasts ran to the horizon; longer episodes carry a chunk size's rounding further)
    variants = ((G.original_variant(tasks[0]), G.Variant("c", "paraphrase", "leave the bowl", HELD)),
                (G.original_variant(tasks[1]),))
    emb = [np.random.default_rng(j).normal(size=(len(vs), 384)).astype(np.float32) for j, vs in enumerate(variants)]
    spec = lambda chunk: G.GridSpec(tasks=tasks, variants=variants, n_rollouts=R, horizon=H, chunk=chunk)  # noqa
    return dict(policy=policy, cks=cks, spec=spec, emb=emb)


def _run(s, chunk, out, **kw):
    return run_grid(s["spec"](chunk), s["cks"], s["policy"], out, embeddings=s["emb"], progress=False, **kw)


def _same_rows(cols, ref):
    """Row for row the same episodes: every outcome exactly; the float maxima (ee_disp_max, gripper_change_max)
    closely, not bitwise. The rollout step and the policy are compiled for the chunk's batch size and XLA:CPU rounds
    differently at another size; the physics carries it on (seen over 8 steps: 1 ulp in 1 of 10 episodes at 2
    groups per chunk, up to 4e-6 relative in 4 of 10 at 1 group per chunk). Only equal chunk sizes (a resumed
    grid, any number of devices) are bit-identical."""
    assert set(cols) == set(ref)
    for k, v in ref.items():
        if np.issubdtype(v.dtype, np.floating):
            np.testing.assert_allclose(cols[k], v, rtol=1e-4, atol=0, err_msg=k)
        else:
            np.testing.assert_array_equal(cols[k], v, err_msg=k)


def _budget(monkeypatch, free):
    monkeypatch.setattr(C, "available_memory", lambda: {"host": {"free": free, "source": "test"}})


@pytest.fixture(scope="module")
def whole(setup, tmp_path_factory):
    """5 groups of R episodes (ck 0: task 0 x 2 variants; ck 1: that + task 1) as one chunk of every episode."""
    out = tmp_path_factory.mktemp("whole")
    return out, _run(setup, 5 * R, out)


def test_auto_under_a_small_budget_gives_the_same_rows(setup, whole, tmp_path, monkeypatch):
    s = setup
    _budget(monkeypatch, 10**15)
    roomy = G.chunk_plan(s["spec"]("auto"), s["cks"], s["policy"])
    assert roomy["episodes"] == 5 * R  # everything fits
    per, fixed = roomy["bytes_per_episode"]["host"], roomy["fixed_bytes"]["host"]
    free = 2 * (fixed + 4 * per)  # room for 4 episodes at the safety fraction 0.5: 2 groups -> 3 chunks of 2
    _budget(monkeypatch, free)
    cols = _run(s, "auto", tmp_path)
    assert len(pending_chunks(tmp_path, 3)) == 0 and not (tmp_path / "chunks" / "00003.h5").exists()
    doc = json.loads((tmp_path / "grid.json").read_text())
    rec = doc["chunk"]
    assert rec["requested"] == "auto" and rec["episodes"] == 4 and doc["spec"]["chunk"] == 4
    assert rec["memory"]["host"]["free"] == free and rec["bytes_per_episode"]["host"] == per
    assert rec["fraction"] == C.SAFETY and rec["parts"]["obs_history"]["per_episode"] > 0
    _same_rows(cols, whole[1])
    assert "chunk" in json.loads((whole[0] / "grid.json").read_text())  # a number asked for is recorded too


def test_resumed_grid_keeps_its_chunk_size(setup, whole, tmp_path, monkeypatch):
    s = setup
    _budget(monkeypatch, 0)  # one group per chunk: 5 chunks

    def stop(i):
        if i == 1:
            raise Interrupted

    with pytest.raises(Interrupted):
        _run(s, "auto", tmp_path, on_chunk=stop)
    assert sorted(p.name for p in (tmp_path / "chunks").iterdir()) == ["00000.h5", "00001.h5"]
    assert json.loads((tmp_path / "grid.json").read_text())["chunk"]["episodes"] == R

    def no_replanning():
        raise AssertionError("a resumed grid must not measure memory again")

    monkeypatch.setattr(C, "available_memory", no_replanning)  # plenty of memory now would mean one chunk
    ran = []
    cols = _run(s, "auto", tmp_path, on_chunk=ran.append)
    assert ran == [2, 3, 4]
    _same_rows(cols, whole[1])
    # A folder begun with a number resumes under "auto" with that number; another number is another grid.
    assert _run(s, "auto", whole[0])["length"].shape == (5 * R,)
    with pytest.raises(ClbenchError, match="another grid"):
        _run(s, R, whole[0])
