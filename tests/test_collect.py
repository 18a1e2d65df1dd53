"""The demonstration collector: real oracle episodes on the native backend -> LIBERO-layout HDF5 files.

One small collection (libero_goal's `turn_on_the_stove`, short episodes, 4-episode batches, 32 px images) is shared
by the tests; every further collection uses the same batch and horizon, so the oracle compiles once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import h5py
import jax
import numpy as np
import pytest

from clbench_jax.cli import main
from clbench_jax.data import commands, hdf5, oracle
from clbench_jax.data.collect import CollectConfig, collect_tasks, is_finished, scene_of, task_file
from clbench_jax.errors import ClbenchError, DataFileError
from clbench_jax.sim import control, predicates, rollout
from clbench_jax.sim.native import state_to_qpos
from clbench_jax.tasks.suites import get_task

TASK = "libero_goal:7"  # turn_on_the_stove: the oracle's shortest episodes (~40 steps)
# n > batch: the last demos come from worlds that were refilled with a new attempt mid-stream
CFG = CollectConfig(n=6, generator="deconfounded", seed=0, horizon=120, batch=4, images=True, image_size=32)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos")
    rows = collect_tasks([get_task(TASK)], out, CFG, progress=False, log=lambda s: None)
    return out, rows[0]


@pytest.fixture(scope="module")
def scene():
    return scene_of(get_task(TASK))


def test_file_layout_and_counts(collected):
    out, row = collected
    task = get_task(TASK)
    path = task_file(out, task)
    assert path == out / "libero_goal" / "turn_on_the_stove_demo.hdf5" and str(path) == row["path"]
    meta = hdf5.read_meta(path)
    ex = meta["extras_attrs"]
    assert meta["num_demos"] == CFG.n and ex["kept"] == CFG.n and ex["complete"]
    assert ex["attempts"] == ex["successes"] + ex["failures"] and ex["successes"] == CFG.n
    assert 0 <= ex["surplus"] <= CFG.batch - 1
    # the demos are the first n successes in start order
    numbers = [d["attrs"]["attempt"] for d in hdf5.read_demos(path, keys=[])]
    assert numbers == sorted(numbers) and numbers[-1] == ex["attempts"] - 1
    assert ex["successes"] >= CFG.n and ex["generator"] == "deconfounded" and ex["seed"] == 0
    assert meta["problem_info"]["language_instruction"] == task.language
    assert meta["bddl_file_content"] == open(task.file).read()
    with h5py.File(path, "r") as f:
        assert set(hdf5.DATA_ATTRS) <= set(f["data"].attrs)
        assert f["data"].attrs["macros_image_convention"] == "opencv"  # upright images
        assert all(k in hdf5.DATA_ATTRS + ("macros_image_convention",) or k.startswith("clbench_")
                   for k in f["data"].attrs)
        g = f["data/demo_0"]
        T = g["actions"].shape[0]
        libero_obs = {"agentview_rgb", "eye_in_hand_rgb", "joint_states", "gripper_states", "ee_states", "ee_pos",
                      "ee_ori"}
        assert set(g["obs"]) == libero_obs | {"object_tokens", "object_token_mask"}
        assert g["obs/agentview_rgb"].shape == (T, 32, 32, 3) and g["obs/agentview_rgb"].dtype == np.uint8
        for k in ("joint_states", "gripper_states", "ee_states", "ee_pos", "ee_ori"):
            assert g["obs"][k].dtype == np.float64
        assert g["states"].shape == (T, 79) and g["robot_states"].shape == (T, 9)
        assert g["dones"].dtype == np.uint8 and list(g["dones"][-2:]) == [0, 1]
        assert g["rewards"].dtype == np.uint8 and g["rewards"][-1] == 1 and g["rewards"][:-1].sum() == 0
        assert {"num_samples", "model_file", "init_state"} <= set(g.attrs) and g.attrs["num_samples"] == T
        assert g.attrs["model_file"].startswith("<mujoco")


def test_demos_replay_to_success_bit_exactly(collected, scene):
    """The stored actions, replayed from the stored initial state, reproduce the stored states and the success."""
    out, _ = collected
    task = get_task(TASK)
    demos = hdf5.read_demos(task_file(out, task), keys=["ee_pos"])
    T = max(len(d["actions"]) for d in demos)
    acts = np.stack([np.pad(d["actions"], ((0, T - len(d["actions"])), (0, 0)), mode="edge") for d in demos])
    ids = np.full(len(demos), scene.task_index(task.name))
    goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
    batch = rollout.EpisodeBatch(task_ids=ids, goals=goals, state=np.stack([d["attrs"]["init_state"] for d in demos]),
                                 mocap=np.stack([d["attrs"]["mocap"] for d in demos]),
                                 q0=np.stack([d["attrs"]["controller_q0"] for d in demos]),
                                 keys=np.zeros((len(demos), 2), np.uint32))
    pol, p0 = rollout.replay_policy(acts.astype(np.float32))
    rec, tr = rollout.rollout(scene, pol, p0, batch, T + 5, trace=True)
    for i, d in enumerate(demos):
        n = len(d["actions"])
        assert rec.success[i, 0] and rec.length[i] == n  # succeeds exactly at the demo's last action
        np.testing.assert_array_equal(tr["physics_state"][i, :n], d["states"])
        np.testing.assert_allclose(tr["ee_pos"][i, :n], d["obs"]["ee_pos"], atol=1e-6)
    # A plain batched oracle rollout from the same initial states and policy keys chooses the same actions: a world
    # refilled mid-stream behaves exactly like a fresh episode.
    policy, p0 = oracle._oracle_for(scene, True)
    batch = dataclasses.replace(batch, keys=np.stack([d["attrs"]["policy_key"] for d in demos]).astype(np.uint32))
    rec, tr = rollout.rollout(scene, policy, p0(len(demos)), batch, T + 5, trace=True)
    for i, d in enumerate(demos):
        n = len(d["actions"])
        assert rec.success[i, 0] and rec.length[i] == n, (i, rec.length[i], n)
        np.testing.assert_array_equal(tr["action"][i, :n], d["actions"].astype(np.float32))


def test_observations_are_consistent(collected, scene):
    out, _ = collected
    d = hdf5.read_demos(task_file(out, get_task(TASK)))[1]
    o = d["obs"]
    np.testing.assert_allclose(o["ee_states"], np.concatenate([o["ee_pos"], o["ee_ori"]], 1))
    np.testing.assert_allclose(d["robot_states"][:, :2], o["gripper_states"])
    np.testing.assert_allclose(d["robot_states"][:, 2:5], o["ee_pos"])
    # robot_states' quaternion (x, y, z, w) is the rotation whose axis-angle is ee_ori (compared as matrices:
    # the hand points down, so the angle is near pi where +-axis name one rotation)
    for t in (0, len(o["ee_ori"]) // 2, -1):
        xyzw = d["robot_states"][t, 5:]
        r_quat = np.asarray(predicates.quat_to_mat(np.r_[xyzw[3], xyzw[:3]]))
        np.testing.assert_allclose(r_quat, np.asarray(control.axisangle_to_mat(o["ee_ori"][t])), atol=1e-5)
    # the first row matches the initial state's arm joints exactly (no lag at reset)
    m = scene.model
    adr = [m.jnt_qposadr[m.joint(f"robot0_joint{i}").id] for i in range(1, 8)]
    np.testing.assert_allclose(o["joint_states"][0], state_to_qpos(m, d["states"][0])[adr], atol=1e-6)
    np.testing.assert_array_equal(d["attrs"]["init_state"], d["states"][0])
    # the arm moves, the stove knob turns, the pictures change
    assert np.linalg.norm(o["ee_pos"][-1] - o["ee_pos"][0]) > 0.05
    assert np.abs(o["agentview_rgb"][-1].astype(int) - o["agentview_rgb"][0]).mean() > 0.5
    assert o["object_token_mask"].sum(1).min() == len(get_task(TASK).objects) + len(get_task(TASK).fixtures) - 1
    assert (o["object_token_mask"] == o["object_token_mask"][0]).all()  # one token order per demo


def test_sequence_dataset_reads_generated_file(collected):
    out, _ = collected
    path = task_file(out, get_task(TASK))
    lengths = [len(d["actions"]) for d in hdf5.read_demos(path, keys=[])]
    ds = hdf5.SequenceDataset([path], seq_len=10, obs_keys=hdf5.DEFAULT_OBS_KEYS + ("object_tokens",))
    assert len(ds) == sum(lengths)
    b = next(ds.sample_batches(5, 0))
    assert b["agentview_rgb"].shape == (5, 10, 32, 32, 3) and b["actions"].shape == (5, 10, 7)
    assert b["object_tokens"].shape[:2] == (5, 10)


def test_resume_skips_finished_and_refuses_other_settings(collected, tmp_path):
    out, _ = collected
    task = get_task(TASK)
    dst = tmp_path / "libero_goal"
    dst.mkdir()
    shutil.copy(task_file(out, task), dst)
    path = task_file(tmp_path, task)
    mtime = os.stat(path).st_mtime_ns
    assert is_finished(path, CFG)
    rows = collect_tasks([task], tmp_path, CFG, progress=False, log=lambda s: None)
    assert rows[0]["skipped"] and os.stat(path).st_mtime_ns == mtime
    with pytest.raises(DataFileError, match="other settings") as e:
        is_finished(path, CollectConfig(**{**CFG.__dict__, "generator": "confounded"}))
    assert e.value.file == str(path)
    # a truncated file (an interrupted copy, say) is collected again
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 3)
    assert not is_finished(path, CFG)


def test_concurrent_collections_wait_for_the_task_lock(collected, tmp_path):
    """A second process collecting into the same folder waits for the task's lock, then finds the file the first
    one finished (the check is made under the lock: checking before it would start a second collection)."""
    import fcntl
    import threading

    out, _ = collected
    task = get_task(TASK)
    path = task_file(tmp_path, task)
    path.parent.mkdir()
    logs, rows = [], []
    with open(path.with_suffix(".lock"), "a") as f:  # the first process, mid-collection
        fcntl.flock(f, fcntl.LOCK_EX)
        waiter = threading.Thread(target=lambda: rows.extend(
            collect_tasks([task], tmp_path, CFG, progress=False, log=logs.append)))
        waiter.start()
        waiter.join(timeout=2.0)
        assert waiter.is_alive() and not path.exists()
        shutil.copy(task_file(out, task), path)  # the first process finishes
        fcntl.flock(f, fcntl.LOCK_UN)
    waiter.join(timeout=60)
    assert not waiter.is_alive()
    assert "waiting" in logs[0] and rows[0]["skipped"] and rows[0]["kept"] == CFG.n
    assert not path.with_suffix(".partial").exists()


def test_attempt_cap_and_state_only(tmp_path):
    """n above what the cap allows: the file records the shortfall and counts as finished; no images."""
    cfg = CollectConfig(**{**CFG.__dict__, "n": 9, "max_attempts": 4, "images": False})
    rows = collect_tasks([get_task(TASK)], tmp_path, cfg, progress=False, log=lambda s: None)
    meta = hdf5.read_meta(rows[0]["path"])
    ex = meta["extras_attrs"]
    assert ex["attempts"] == 4 and ex["surplus"] == 0 and meta["num_demos"] == ex["successes"] <= 4
    assert not ex["complete"]
    assert is_finished(rows[0]["path"], cfg)
    assert meta["num_demos"] >= 1  # the stove task succeeds in most attempts (docs/ORACLE.md): 4 give at least one
    d = hdf5.read_demos(rows[0]["path"])[0]
    assert not set(hdf5.RGB_KEYS) & set(d["obs"])


def test_cli_inspect_and_video(collected, tmp_path, capsys):
    out, _ = collected
    path = str(task_file(out, get_task(TASK)))
    assert main(["demos", "inspect", path]) == 0
    text = capsys.readouterr().out
    assert "turn_on_the_stove" in text and "deconfounded" in text and "obs/agentview_rgb" in text
    assert "attempts:" in text
    # a folder: one line per task file and the totals, the same numbers in --json as the collection's own row
    _, row = collected
    assert main(["demos", "inspect", str(out), "--json", str(tmp_path / "demos.json")]) == 0
    assert f"total: {row['kept']} demos" in capsys.readouterr().out
    doc = json.loads((tmp_path / "demos.json").read_text())
    assert [(f["task"], f["demos"], f["attempts"], f["successes"]) for f in doc["files"]] == [
        ("turn_on_the_stove", row["kept"], row["attempts"], row["successes"])]
    assert doc["total"]["steps"] == sum(len(d["actions"]) for d in hdf5.read_demos(path, keys=[]))
    # the actions' digest: SHA-256 over the demos' float32 actions in order; one changed action changes it
    import hashlib

    demos = hdf5.read_demos(path, keys=[])
    want = hashlib.sha256(b"".join(np.asarray(d["actions"], np.float32).tobytes() for d in demos)).hexdigest()
    assert doc["files"][0]["actions_sha256"] == want
    other = tmp_path / "other" / "x_demo.hdf5"
    other.parent.mkdir()
    shutil.copy(path, other)
    with h5py.File(other, "r+") as f:
        f["data/demo_3/actions"][5, 0] += 1e-6
    assert commands.actions_digest(other) != want
    gif = tmp_path / "demo.gif"
    assert main(["demos", "video", path, "--demo", "1", "--out", str(gif)]) == 0
    from PIL import Image

    im = Image.open(gif)
    T = len(hdf5.read_demos(path, keys=[])[1]["actions"])
    assert im.size == (64, 32) and T // 2 <= im.n_frames <= T  # GIF merges identical frames
    assert main(["demos", "video", path, "--demo", "7", "--out", str(gif)]) == 2  # no such demo: clear error
    assert "data/demo_7" in capsys.readouterr().err


def test_refused_task_is_skipped(tmp_path):
    """deconfounded refuses a task whose target is named by position; a suite run logs it and goes on."""
    logs = []
    cfg = CollectConfig(n=1, generator="deconfounded", horizon=10, batch=1, images=False)
    rows = collect_tasks([get_task("libero_spatial:0")], tmp_path, cfg, progress=False, log=logs.append)
    assert rows[0]["refused"] and "twin" in rows[0]["refused"] and rows[0]["kept"] == 0
    assert "skipped" in logs[0] and not list(tmp_path.rglob("*.hdf5"))
    with pytest.raises(ClbenchError, match="field n"):
        CollectConfig(n=0)


# the first moving actions (after the oracle's idle warm-up steps): the hand moves in free space towards the knob
# (contact comes ~30 steps later)
FREE = slice(oracle.SETTLE, oracle.SETTLE + 5)


@pytest.mark.slow
def test_batch_size_changes_speed_and_rounding_only(tmp_path):
    """One world at a time (another compile: slow) runs the same attempts as the 4-world stream: attempt k starts
    from the same initial state with the same policy key, bit for bit. The actions are not bit-identical: XLA rounds
    the vmapped oracle differently per batch size (~1e-7 in the first action), the arm carries it on, and once the
    hand touches the knob contact can grow it without bound, so late actions, and even an attempt's outcome, may
    differ on another batch size or CPU. What holds on any machine: the first actions agree to 1e-4 (this machine
    shows < 5e-7; two different attempts differ by > 1e-2, so the bound still tells attempts apart), and the oracle
    collects its n demos at either batch size. (Both without images: rendering does not touch the actions, and the
    slow tests run in their own process, where the shared collection would render its images again.)"""
    ref = CollectConfig(**{**CFG.__dict__, "images": False})
    collect_tasks([get_task(TASK)], tmp_path / "batch4", ref, progress=False, log=lambda s: None)
    cfg = CollectConfig(**{**CFG.__dict__, "batch": 1, "images": False})
    rows = collect_tasks([get_task(TASK)], tmp_path, cfg, progress=False, log=lambda s: None)
    a = {d["attrs"]["attempt"]: d for d in hdf5.read_demos(task_file(tmp_path / "batch4", get_task(TASK)), keys=[])}
    b = {d["attrs"]["attempt"]: d for d in hdf5.read_demos(rows[0]["path"], keys=[])}
    assert len(a) == len(b) == CFG.n
    common = sorted(set(a) & set(b))
    assert len(common) >= 2  # attempts that succeeded at both batch sizes
    for k in common:
        x, y = a[k], b[k]
        np.testing.assert_array_equal(x["states"][0], y["states"][0])
        np.testing.assert_array_equal(x["attrs"]["policy_key"], y["attrs"]["policy_key"])
        np.testing.assert_allclose(x["actions"][FREE], y["actions"][FREE], rtol=0, atol=1e-4)
    first, second = a[common[0]]["actions"][FREE], a[common[1]]["actions"][FREE]
    assert np.abs(first - second).max() > 1e-2
    ex = hdf5.read_meta(rows[0]["path"])["extras_attrs"]
    assert ex["attempts"] == ex["successes"] + ex["failures"] and ex["successes"] == CFG.n
