"""The lifelong loop end to end on the real libero_goal scene (native MuJoCo rollouts) with small synthetic demo
files: a killed run resumes to exactly the numbers of an uninterrupted one; PackNet / EWC / multitask plug in;
bad input fails with typed errors."""

import json
import os

import jax
import numpy as np
import pytest

from clbench_jax.data.hdf5 import write_demos
from clbench_jax.errors import ClbenchError, DataFileError
from clbench_jax.lifelong.config import load_config, make_config
from clbench_jax.lifelong.loop import run_lifelong, scene_for
from clbench_jax.policies.act import obs_spec
from clbench_jax.tasks.suites import ordered_tasks

SUITE, K = "libero_goal", 2
TINY = dict(embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, gmm_hidden=[32], gmm_modes=2)
BASE = dict(suite=SUITE, n_tasks=K, epochs=2, eval_every=1, n_eval=2, horizon=6, warmup=1, batch_size=8,
            max_batches=2, lang="onehot", policy_kwargs=TINY)


def _write_synthetic(folder, task, spec, seed, n_demos=2, length=12, action_scale=1.0):
    """Demo files in LIBERO's layout with random observations (the loop's data path, not a skill)."""
    rng = np.random.default_rng(seed)
    demos = []
    for _ in range(n_demos):
        obs = {"joint_states": rng.normal(size=(length, 7)).astype(np.float32),
               "gripper_states": rng.normal(size=(length, 2)).astype(np.float32)}
        if "tokens" in spec:
            e, d = spec["tokens"][0]
            mask = np.ones((length, e), bool)
            mask[:, -2:] = False
            obs["object_tokens"] = rng.normal(size=(length, e, d)).astype(np.float32)
            obs["object_token_mask"] = mask
            obs["ee_pos"] = rng.normal(size=(length, 3)).astype(np.float32)
        for k in ("agentview_rgb", "eye_in_hand_rgb"):
            if k in spec:
                obs[k] = rng.integers(0, 256, (length,) + spec[k][0], dtype=np.uint8)
        demos.append({"obs": obs, "actions": action_scale * rng.uniform(-1, 1, (length, 7)),
                      "states": np.zeros((length, 4)), "robot_states": np.zeros((length, 9)),
                      "rewards": np.zeros(length), "dones": np.eye(length)[-1]})
    write_demos(os.path.join(folder, f"{task.name}_demo.hdf5"), demos, env_name="synthetic", problem_info={},
                bddl_file_name=task.file, bddl_file_content="", env_args={})


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("demos"))
    tasks = ordered_tasks(SUITE, 0)[:K]
    spec = obs_spec(scene_for(tasks[0].scene), "state")
    for i, t in enumerate(tasks):
        _write_synthetic(folder, t, spec, seed=i)
    return folder


def _params(out, stage, part="params"):
    from clbench_jax.lifelong.checkpoints import StageCheckpoints

    ck = StageCheckpoints(os.path.join(out, "checkpoints"))
    raw = ck.manager.restore(stage)  # untyped restore: the arrays as saved
    ck.close()
    return raw["arrays"][part]


def test_cli_run_and_resume_between_stages(demos, tmp_path):
    """`clbench train` writes its files; a run stopped after a stage (in this process) resumes to the same numbers.
    The kill of a separate process in the middle of a stage, with non-trivial success, is tests/test_resume.py."""
    from clbench_jax.cli import main

    cfg_file = tmp_path / "tiny.yaml"
    import yaml
    cfg_file.write_text(yaml.safe_dump({k: v for k, v in BASE.items()}))
    full = str(tmp_path / "full")
    rc = main(["train", "--config", str(cfg_file), "--algo", "er", "--demos", demos, "--out", full, "--seed", "3",
               "--quiet"])
    assert rc == 0
    for f in ("config.yaml", "metrics.json", "success_matrix.png", "learning_curves.png"):
        assert os.path.getsize(os.path.join(full, f)) > 0
    m_full = json.load(open(os.path.join(full, "metrics.json")))

    cfg = load_config(cfg_file, algo="er", demos_dir=demos, seed=3)
    killed = str(tmp_path / "killed")

    def die(stage, record):
        if stage == 0:
            raise KeyboardInterrupt("killed after stage 0")

    with pytest.raises(KeyboardInterrupt):
        run_lifelong(cfg, killed, callbacks=[die], progress=False)
    partial = json.load(open(os.path.join(killed, "metrics.json")))
    assert not partial["complete"] and len(partial["success_matrix"]) == 1
    m_res = run_lifelong(cfg, killed, progress=False)

    for k in ("success_matrix", "curves", "curve_epochs", "losses", "best_epoch", "fwt", "nbt", "auc"):
        assert m_res[k] == m_full[k], k
    jax.tree.map(np.testing.assert_array_equal, _params(full, K - 1), _params(killed, K - 1))
    # Every success here is 0, so each stage keeps its epoch-0 parameters (best success, first peak wins): the
    # parameters compared above are the initial ones. The optimizer state shows that training ran and resumed.
    opt = [_params(d, K - 1, "opt_state") for d in (full, killed)]
    jax.tree.map(np.testing.assert_array_equal, *opt)
    assert any(np.abs(x).max() > 0 for x in jax.tree.leaves(opt[0]))
    # Shape of the protocol: K x K lower-triangular matrix, curves at epochs 0..E, success multiples of 1/n_eval.
    c = m_full["success_matrix"]
    assert [len(r) for r in c] == [K, K] and c[0][1] is None and c[1][0] is not None
    assert m_full["curve_epochs"] == [[0, 1, 2]] * K
    assert all(v * BASE["n_eval"] == int(v * BASE["n_eval"]) for row in m_full["curves"] for v in row)
    assert len(m_full["losses"][0]) == BASE["epochs"] and np.isfinite(m_full["losses"]).all()
    assert m_full["logs"][0]["buffer_added"] == min(1000, 2 * 12)  # ER: every window of the small first task


def test_closing_evaluation_runs_only_what_end_task_changed(demos, tmp_path, monkeypatch):
    """After a stage, task s is not run again when end_task left its evaluation parameters the kept epoch's (ER):
    S[s, s] is the kept epoch's success and only the earlier tasks run. PackNet prunes at end_task, so there a
    task whose weights it changed runs again."""
    from clbench_jax.sim import rollout

    real, worlds = rollout.rollout, []

    def counted(scene, policy, pstate0, batch, *a, **kw):  # the real rollout, its batch sizes recorded
        worlds.append(int(np.asarray(batch.task_ids).shape[0]))
        return real(scene, policy, pstate0, batch, *a, **kw)

    monkeypatch.setattr(rollout, "rollout", counted)
    n, evals = BASE["n_eval"], BASE["epochs"] // BASE["eval_every"] + 1
    m = run_lifelong(make_config(dict(BASE, algo="er", demos_dir=demos)), str(tmp_path / "er"), progress=False)
    # stage 0: its curve only; stage 1: its curve, then task 0 alone
    assert worlds == [n] * evals + [n] * evals + [n]
    for s in range(K):
        assert m["success_matrix"][s][s] == m["curves"][s][m["curve_epochs"][s].index(m["best_epoch"][s])]
    worlds.clear()
    cfg = make_config(dict(BASE, algo="packnet", demos_dir=demos, algo_kwargs={"post_prune_epochs": 1}))
    run_lifelong(cfg, str(tmp_path / "packnet"), progress=False)
    # stage 0: the curve, the post-prune curve (epochs 0 and 1), then task 0 again: pruning changed its weights.
    # (Stage 1 keeps its epoch-0 weights, every success being 0 here, and those are stage 0's pruned ones, which
    # pruning leaves as they are: task 1 is rightly not run again there.)
    assert worlds[:evals + 3] == [n] * evals + [n] * 2 + [n]


@pytest.mark.slow
def test_packnet_and_multitask_plug_in(demos, tmp_path):
    cfg = make_config(dict(BASE, algo="packnet", demos_dir=demos, algo_kwargs={"post_prune_epochs": 1}))
    m = run_lifelong(cfg, str(tmp_path / "packnet"), progress=False)
    assert len(m["success_matrix"]) == K
    assert m["logs"][0]["post_fit"]["epochs"] == [0, 1]  # post-prune fine-tuning trains from epoch 0
    kept = m["logs"][0]["kept_weights"]
    params = _params(str(tmp_path / "packnet"), K - 1)
    n_kernel = sum(x.size for p, x in jax.tree_util.tree_leaves_with_path(params) if p[-1].key == "kernel")
    assert kept == pytest.approx(0.25 * n_kernel, abs=len(jax.tree.leaves(params)))

    cfg = make_config(dict(BASE, algo="multitask", demos_dir=demos))
    m = run_lifelong(cfg, str(tmp_path / "mt"), progress=False)
    assert len(m["success_matrix"]) == 1 and all(v is not None for v in m["success_matrix"][0])
    assert "fwt" not in m and 0.0 <= m["final_mean_success"] <= 1.0


def test_missing_demos_skip_trains_nothing_at_that_stage(demos, tmp_path):
    """A task the oracle never solved (its demo file holds 0 demos): `missing_demos: skip` leaves its stage
    untrained and the algorithm untouched (PackNet assigns it no weights), evaluates every seen task, and says so.
    A missing file stays an error even then (a wrong folder must not look like unsolved tasks)."""
    import shutil

    tasks = ordered_tasks(SUITE, 0)[:K]
    folder = str(tmp_path / "partial")
    os.makedirs(folder)
    shutil.copy(os.path.join(demos, f"{tasks[1].name}_demo.hdf5"), folder)
    with pytest.raises(DataFileError, match=f"not found.*{tasks[0].name}"):
        run_lifelong(make_config(dict(BASE, demos_dir=folder, missing_demos="skip")), str(tmp_path / "nofile"),
                     progress=False)
    write_demos(os.path.join(folder, f"{tasks[0].name}_demo.hdf5"), [], env_name="synthetic", problem_info={},
                bddl_file_name=tasks[0].file, bddl_file_content="", env_args={})  # collected, none kept
    cfg = make_config(dict(BASE, algo="packnet", demos_dir=folder, missing_demos="skip",
                           algo_kwargs={"post_prune_epochs": 1}))
    m = run_lifelong(cfg, str(tmp_path / "skip"), progress=False)
    assert m["logs"][0] == {"skipped": f"no demos for {tasks[0].name}"}
    assert m["losses"][0] == [] and len(m["losses"][1]) == BASE["epochs"]
    assert [len(r) for r in m["success_matrix"]] == [K, K] and m["success_matrix"][1][1] is not None
    params = _params(str(tmp_path / "skip"), K - 1)  # stage 0 took no weights, so stage 1 keeps 25% of all
    n_kernel = sum(x.size for p, x in jax.tree_util.tree_leaves_with_path(params) if p[-1].key == "kernel")
    assert m["logs"][1]["kept_weights"] == pytest.approx(0.25 * n_kernel, abs=len(jax.tree.leaves(params)))
    with pytest.raises(DataFileError, match=f"kept no demos.*missing_demos: skip.*task {tasks[0].name}"):
        run_lifelong(make_config(dict(BASE, demos_dir=folder)), str(tmp_path / "err"), progress=False)


def test_bad_input_is_named(demos, tmp_path):
    with pytest.raises(DataFileError, match="task open_the_middle_drawer_of_the_cabinet"):
        run_lifelong(make_config(dict(BASE, demos_dir=str(tmp_path))), str(tmp_path / "x"), progress=False)
    with pytest.raises(ClbenchError, match="unknown key .epoch."):
        make_config(dict(BASE, epoch=3))
    with pytest.raises(ClbenchError, match="algo"):
        run_lifelong(make_config(dict(BASE, algo="nope", demos_dir=demos)), str(tmp_path / "y"), progress=False)
    out = str(tmp_path / "z")
    os.makedirs(os.path.join(out, "checkpoints", "0"))  # a stage of another run finished here
    with open(os.path.join(out, "config.yaml"), "w") as f:
        f.write("seed: 99\n")
    with pytest.raises(ClbenchError, match="different config"):
        run_lifelong(make_config(dict(BASE, demos_dir=demos)), out, progress=False)
    assert open(os.path.join(out, "config.yaml")).read() == "seed: 99\n"


def test_demos_folder_named_relative_or_absolute_is_the_same_config(tmp_path, monkeypatch):
    """A finished run resumes whether its demos folder is named relative to the working directory or absolute;
    another folder is another config."""
    from clbench_jax.lifelong.config import dump_config
    from clbench_jax.lifelong.loop import _config_to_write

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    os.makedirs(out / "checkpoints" / "0")
    (out / "config.yaml").write_text(dump_config(make_config(dict(BASE, demos_dir="demos"))))
    assert _config_to_write(str(out), make_config(dict(BASE, demos_dir=str(tmp_path / "demos")))) is None
    assert _config_to_write(str(out), make_config(dict(BASE, demos_dir="./demos/"))) is None
    with pytest.raises(ClbenchError, match="different config \\(demos_dir"):
        _config_to_write(str(out), make_config(dict(BASE, demos_dir=str(tmp_path / "other"))))


@pytest.mark.slow
def test_rgb_packnet_run(tmp_path):
    """RGB observations end to end: rendered 32 px cameras in the rollouts, image windows in training (augmented
    when clbench_jax.policies.augment exists), PackNet's stacked per-task evaluation."""
    tasks = ordered_tasks(SUITE, 0)[:K]
    spec = obs_spec(scene_for(tasks[0].scene), "rgb", image_size=32)
    for i, t in enumerate(tasks):
        _write_synthetic(str(tmp_path), t, spec, seed=i, length=8)
    tiny = dict(TINY, resnet_widths=[8, 16], num_kp=4)
    cfg = make_config(dict(BASE, obs="rgb", image_size=32, n_eval=1, horizon=3, epochs=1, batch_size=4,
                           max_batches=1, policy_kwargs=tiny, algo="packnet", demos_dir=str(tmp_path),
                           algo_kwargs={"post_prune_epochs": 1}))
    m = run_lifelong(cfg, str(tmp_path / "out"), progress=False)
    assert [len(r) for r in m["success_matrix"]] == [K, K] and np.isfinite(m["losses"]).all()


@pytest.mark.parametrize("algo", ["packnet", "ewc", "er"])
def test_checkpoint_round_trip_of_algorithm_state(tmp_path, algo):
    """Every algorithm's state and the optimizer state come back from orbax exactly, with their structure."""
    from clbench_jax.algos import make_algorithm
    from clbench_jax.algos.train import make_optimizer
    from clbench_jax.lifelong.checkpoints import StageCheckpoints

    rng = np.random.default_rng(0)
    params = {"dense": {"kernel": rng.normal(size=(6, 4)).astype(np.float32), "bias": np.zeros(4, np.float32)},
              "ln": {"scale": np.ones(4, np.float32)}}
    a = make_algorithm(algo)
    state = a.init(params, 3)
    params, state = a.start_task(params, state, 1)
    opt = make_optimizer()
    arrays = {"params": params, "algo_state": state, "opt_state": opt.init(params)}
    ck = StageCheckpoints(tmp_path / "ck")
    ck.save(1, arrays, {"rows": [[0.5, None]]})
    assert ck.latest() == 1
    like = {"params": params, "algo_state": a.init(params, 3), "opt_state": opt.init(params)}
    back, record = ck.restore(1, like)
    ck.close()
    assert record == {"rows": [[0.5, None]]}
    assert jax.tree.structure(back) == jax.tree.structure(arrays)
    jax.tree.map(np.testing.assert_array_equal, back, arrays)


def test_restore_stage_written_on_another_device_topology(tmp_path):
    """A stage saved by a process whose arrays lived on another device (here: CPU device 1 of 2, as a GPU run's
    stages are on a CUDA device) restores here from a shape-only template; orbax alone fell back to the saved
    sharding and failed ("Topology mismatch" for a GPU-written stage resumed on a CPU)."""
    import subprocess
    import sys

    from clbench_jax.lifelong.checkpoints import StageCheckpoints

    code = ("import jax, jax.numpy as jnp\n"
            "from clbench_jax.lifelong.checkpoints import StageCheckpoints\n"
            "d = jax.devices()[1]\n"
            "arrays = {'params': {'w': jax.device_put(jnp.arange(6.0).reshape(2, 3), d)}}\n"
            f"StageCheckpoints({str(tmp_path / 'ck')!r}).save(0, arrays, {{'rows': [[1.0]]}})\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    like = {"params": {"w": jax.ShapeDtypeStruct((2, 3), np.float32)}}
    arrays, record = StageCheckpoints(tmp_path / "ck").restore(0, like)
    np.testing.assert_array_equal(np.asarray(arrays["params"]["w"]), np.arange(6.0).reshape(2, 3))
    assert record == {"rows": [[1.0]]}


def test_diverging_loss_stops_training_naming_stage_and_epoch(tmp_path):
    """Finite but absurd demo actions (1e30) make the loss overflow: training stops at once with a TrainingError
    naming the stage, task and epoch (it used to train on to `losses [[nan]]` and mark the run complete)."""
    from clbench_jax.errors import TrainingError

    tasks = ordered_tasks(SUITE, 0)[:K]
    spec = obs_spec(scene_for(tasks[0].scene), "state")
    for i, t in enumerate(tasks):
        _write_synthetic(str(tmp_path), t, spec, seed=i, action_scale=1e30)
    out = tmp_path / "out"
    with pytest.raises(TrainingError, match=r"at stage 0 \(main\), epoch 1") as e:
        run_lifelong(make_config(dict(BASE, demos_dir=str(tmp_path))), str(out), progress=False)
    assert e.value.task == tasks[0].name and e.value.field == "lr"
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())
    assert not (out / "metrics.json").exists()  # no stage finished: nothing claims to be complete
