"""LIBERO-format HDF5 demonstrations: round trip, LIBERO layout, validation, atomic write, windows."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

from clbench_jax.data import hdf5
from clbench_jax.data.hdf5 import SequenceDataset, read_demos, read_meta, write_demos
from clbench_jax.errors import DataFileError

META = dict(env_name="Libero_Tabletop_Manipulation",
            problem_info={"problem_name": "libero_tabletop_manipulation", "domain_name": "robosuite",
                          "language_instruction": "put the bowl on the plate"},
            bddl_file_name="put_the_bowl_on_the_plate.bddl",
            bddl_file_content="(define (problem LIBERO_Tabletop_Manipulation))",
            env_args={"type": 1, "env_name": "Libero_Tabletop_Manipulation", "env_kwargs": {"camera_heights": 8}})


def make_demo(rng, T, D=12, E=3, tok=4, seed=0):
    return {
        "obs": {
            "agentview_rgb": rng.integers(0, 256, (T, 8, 8, 3), dtype=np.uint8),
            "eye_in_hand_rgb": rng.integers(0, 256, (T, 8, 8, 3), dtype=np.uint8),
            "joint_states": rng.normal(size=(T, 7)),
            "gripper_states": rng.normal(size=(T, 2)),
            "ee_states": rng.normal(size=(T, 6)),
            "ee_pos": rng.normal(size=(T, 3)),
            "ee_ori": rng.normal(size=(T, 3)),
            "object_tokens": rng.normal(size=(T, E, tok)).astype(np.float32),
            "object_token_mask": rng.integers(0, 2, (T, E)).astype(bool),
        },
        "actions": rng.uniform(-1, 1, (T, 7)),
        "states": rng.normal(size=(T, D)),
        "robot_states": rng.normal(size=(T, 9)),
        "rewards": np.r_[np.zeros(T - 1), 1.0],
        "dones": np.r_[np.zeros(T - 1, np.uint8), np.uint8(1)],
        "attrs": {"model_file": "<mujoco model='x'/>", "init_state": rng.normal(size=D), "seed": seed},
    }


@pytest.fixture
def good_file(tmp_path):
    rng = np.random.default_rng(0)
    demos = [make_demo(rng, 5, seed=1), make_demo(rng, 7, seed=2)]
    path = tmp_path / "good_demo.hdf5"
    write_demos(path, demos, **META, extras_attrs={"oracle_version": "v1"})
    return path, demos


def test_round_trip(good_file):
    path, demos = good_file
    back = read_demos(path)
    assert len(back) == 2
    for d, b in zip(demos, back):
        assert set(b["obs"]) == set(d["obs"])
        for k in d["obs"]:
            np.testing.assert_array_equal(b["obs"][k], d["obs"][k])
            assert b["obs"][k].dtype == np.asarray(d["obs"][k]).dtype
        for k in ("actions", "states", "robot_states", "rewards", "dones"):
            np.testing.assert_array_equal(b[k], d[k])
        assert b["dones"].dtype == np.uint8 and b["dones"][-1] == 1
        assert b["attrs"]["num_samples"] == len(d["actions"])
        assert b["attrs"]["model_file"] == d["attrs"]["model_file"]
        assert b["attrs"]["seed"] == d["attrs"]["seed"]
        np.testing.assert_array_equal(b["attrs"]["init_state"], d["attrs"]["init_state"])
    meta = read_meta(path)
    assert meta["problem_info"] == META["problem_info"] and meta["env_args"] == META["env_args"]
    assert meta["num_demos"] == 2 and meta["total"] == 12
    assert meta["extras_attrs"] == {"oracle_version": "v1"}
    # raw layout: exactly LIBERO's keys plus clearly prefixed extras
    with h5py.File(path, "r") as f:
        assert set(f["data"].attrs) == set(hdf5.DATA_ATTRS) | {"clbench_oracle_version"}
        assert isinstance(f["data"].attrs["problem_info"], str)
        assert set(f["data"]) == {"demo_0", "demo_1"}
        g = f["data/demo_1"]
        assert set(g) == {"obs", "actions", "states", "robot_states", "rewards", "dones"}
        assert set(g.attrs) == {"num_samples", "model_file", "init_state", "clbench_seed"}
    # subset of obs keys
    sub = read_demos(path, keys=["joint_states"])
    assert list(sub[0]["obs"]) == ["joint_states"]


def test_libero_layout_written_by_hand_loads(tmp_path):
    """Keys, dtypes and attributes exactly as LIBERO's scripts/create_dataset.py writes them (float64 low-dim and
    states, uint8 images, uint8 rewards and dones, macros_image_convention), no clbench extras."""
    rng = np.random.default_rng(1)
    path = tmp_path / "libero_task_demo.hdf5"
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_name"] = META["env_name"]
        data.attrs["problem_info"] = json.dumps(META["problem_info"])
        data.attrs["macros_image_convention"] = "opengl"
        data.attrs["bddl_file_name"] = META["bddl_file_name"]
        data.attrs["bddl_file_content"] = META["bddl_file_content"]
        data.attrs["env_args"] = json.dumps(META["env_args"])
        data.attrs["num_demos"] = 2
        data.attrs["total"] = 9
        for i, T in enumerate((4, 5)):
            g = data.create_group(f"demo_{i}")
            o = g.create_group("obs")
            o.create_dataset("agentview_rgb", data=rng.integers(0, 256, (T, 8, 8, 3), dtype=np.uint8))
            o.create_dataset("eye_in_hand_rgb", data=rng.integers(0, 256, (T, 8, 8, 3), dtype=np.uint8))
            o.create_dataset("joint_states", data=rng.normal(size=(T, 7)))
            o.create_dataset("gripper_states", data=rng.normal(size=(T, 2)))
            o.create_dataset("ee_states", data=rng.normal(size=(T, 6)))
            o.create_dataset("ee_pos", data=rng.normal(size=(T, 3)))
            o.create_dataset("ee_ori", data=rng.normal(size=(T, 3)))
            g.create_dataset("actions", data=rng.normal(size=(T, 7)))
            g.create_dataset("states", data=rng.normal(size=(T, 40)))
            g.create_dataset("robot_states", data=rng.normal(size=(T, 9)))
            g.create_dataset("rewards", data=np.r_[np.zeros(T - 1), 1].astype(np.uint8))
            g.create_dataset("dones", data=np.r_[np.zeros(T - 1), 1].astype(np.uint8))
            g.attrs["num_samples"] = T
            g.attrs["model_file"] = "<mujoco/>"
            g.attrs["init_state"] = rng.normal(size=40)
    demos = read_demos(path)
    assert [len(d["actions"]) for d in demos] == [4, 5]
    assert demos[1]["attrs"]["num_samples"] == 5
    assert demos[0]["rewards"].dtype == np.uint8 and demos[0]["obs"]["ee_states"].dtype == np.float64
    meta = read_meta(path)
    assert meta["extras_attrs"] == {} and meta["macros_image_convention"] == "opengl"
    assert meta["problem_info"]["language_instruction"] == "put the bowl on the plate"
    ds = SequenceDataset([path], seq_len=3)
    assert len(ds) == 9
    batch = next(ds.sample_batches(4, 0))
    assert batch["agentview_rgb"].shape == (4, 3, 8, 8, 3)


def _mutate(path, fn):
    with h5py.File(path, "a") as f:
        fn(f)


@pytest.mark.parametrize("key, fn", [
    ("data/demo_1/actions", lambda f: f["data/demo_1"].__delitem__("actions")),
    ("data/demo_0/obs/joint_states", lambda f: f["data/demo_0/obs"].__delitem__("joint_states")),
    ("data/demo_1/actions", lambda f: (f["data/demo_1"].__delitem__("actions"),
                                       f["data/demo_1"].create_dataset("actions", data=np.zeros((7, 6))))),
    ("data/demo_0/obs/ee_pos", lambda f: (f["data/demo_0/obs"].__delitem__("ee_pos"),
                                          f["data/demo_0/obs"].create_dataset("ee_pos", data=np.zeros((4, 3))))),
    ("data/demo_0/obs/agentview_rgb", lambda f: (
        f["data/demo_0/obs"].__delitem__("agentview_rgb"),
        f["data/demo_0/obs"].create_dataset("agentview_rgb", data=np.zeros((5, 8, 8, 3), np.float32)))),
    ("data/demo_1/robot_states", lambda f: (f["data/demo_1"].__delitem__("robot_states"),
                                            f["data/demo_1"].create_dataset("robot_states", data=np.zeros((7, 8))))),
])
def test_bad_files_name_file_and_key(good_file, key, fn):
    path, _ = good_file
    _mutate(path, fn)
    keys = ("agentview_rgb", "joint_states", "ee_pos")
    with pytest.raises(DataFileError) as ei:
        read_demos(path, keys=keys)
    msg = str(ei.value)
    assert path.name in msg and key in msg, msg
    assert ei.value.field == key
    with pytest.raises(DataFileError, match=key):
        SequenceDataset([path], seq_len=3, obs_keys=keys)
    if "obs/joint_states" not in key:  # keys=None reads whatever obs keys exist, so this one is fine
        with pytest.raises(DataFileError, match=key):
            read_demos(path)


def test_bad_dtype_and_bad_attributes(good_file, tmp_path):
    path, _ = good_file
    _mutate(path, lambda f: (f["data/demo_0/obs"].__delitem__("ee_pos"),
                             f["data/demo_0/obs"].create_dataset("ee_pos", data=np.full((5, 3), b"abc"))))
    with pytest.raises(DataFileError, match="wrong dtype") as ei:
        read_demos(path)
    assert ei.value.field == "data/demo_0/obs/ee_pos" and ei.value.file == str(path)
    _mutate(path, lambda f: f["data"].attrs.__setitem__("env_args", "{not json"))
    with pytest.raises(DataFileError, match="not valid JSON") as ei:
        read_meta(path)
    assert ei.value.field == "data.attrs[env_args]"
    _mutate(path, lambda f: f["data"].attrs.__delitem__("bddl_file_name"))
    with pytest.raises(DataFileError, match="missing attribute") as ei:
        read_meta(path)
    assert ei.value.field == "data.attrs[bddl_file_name]"
    # a collection that kept nothing is a valid record of its attempts, but has no demos to read
    empty = tmp_path / "none_demo.hdf5"
    write_demos(empty, [], **META, extras_attrs={"attempts": 8})
    assert read_meta(empty)["num_demos"] == 0 and read_meta(empty)["extras_attrs"]["attempts"] == 8
    with pytest.raises(DataFileError, match="no demo_<i> groups"):
        read_demos(empty)


def test_missing_data_group_and_missing_obs_key(tmp_path, good_file):
    path, _ = good_file
    with pytest.raises(DataFileError, match="data/demo_0/obs/depth_image") as ei:
        read_demos(path, keys=["depth_image"])
    assert path.name in str(ei.value)
    empty = tmp_path / "empty.hdf5"
    h5py.File(empty, "w").close()
    with pytest.raises(DataFileError, match="empty.hdf5.*field data"):
        read_demos(empty)
    with pytest.raises(DataFileError, match="missing.hdf5"):
        read_demos(tmp_path / "missing.hdf5")


def test_truncated_file(good_file):
    path, _ = good_file
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)
    with pytest.raises(DataFileError, match=path.name):
        read_demos(path)
    with open(path, "wb") as fh:
        fh.write(b"not an hdf5 file at all" * 10)
    with pytest.raises(DataFileError, match=path.name):
        read_demos(path)


def test_write_rejects_bad_demo(tmp_path):
    rng = np.random.default_rng(2)
    bad = make_demo(rng, 4)
    bad["obs"]["joint_states"] = bad["obs"]["joint_states"][:3]
    path = tmp_path / "bad.hdf5"
    with pytest.raises(DataFileError, match="data/demo_0/obs/joint_states"):
        write_demos(path, [bad], **META)
    assert not os.listdir(tmp_path)


def test_atomic_write_interrupted(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    demos = [make_demo(rng, 4), make_demo(rng, 5)]
    path = tmp_path / "atomic.hdf5"
    real = hdf5._write_demo
    calls = []

    def failing(grp, demo):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("interrupted midway")
        real(grp, demo)

    monkeypatch.setattr(hdf5, "_write_demo", failing)
    with pytest.raises(KeyboardInterrupt):
        write_demos(path, demos, **META)
    assert os.listdir(tmp_path) == []  # no final file and no temp file
    # an existing file is left intact by a failed rewrite
    monkeypatch.setattr(hdf5, "_write_demo", real)
    write_demos(path, demos[:1], **META)
    assert os.stat(path).st_mode & 0o777 == 0o644  # readable by others, as any file (mkstemp's 0600 was kept once)
    calls.clear()
    monkeypatch.setattr(hdf5, "_write_demo", failing)
    with pytest.raises(KeyboardInterrupt):
        write_demos(path, demos, **META)
    assert os.listdir(tmp_path) == ["atomic.hdf5"]
    assert len(read_demos(path)) == 1


def _numbered_demo(T, base):
    """A demo whose values encode the step: easy to check padding by hand."""
    steps = np.arange(T, dtype=np.float64)[:, None]
    return {
        "obs": {"joint_states": base + steps + np.zeros((T, 7)),
                "gripper_states": base + steps + np.zeros((T, 2)),
                "agentview_rgb": np.broadcast_to((base + np.arange(T)).astype(np.uint8)[:, None, None, None],
                                                 (T, 8, 8, 3)).copy()},
        "actions": base + 0.5 + steps + np.zeros((T, 7)),
        "states": np.zeros((T, 5)), "robot_states": np.zeros((T, 9)),
        "rewards": np.zeros(T), "dones": np.r_[np.zeros(T - 1), 1].astype(np.uint8),
    }


@pytest.mark.parametrize("cache_images", [True, False])
def test_windows_by_hand(tmp_path, cache_images):
    path = tmp_path / "three.hdf5"
    write_demos(path, [_numbered_demo(3, 10)], **META)
    keys = ("agentview_rgb", "joint_states", "gripper_states")
    with SequenceDataset([path], seq_len=4, obs_keys=keys, cache_images=cache_images) as ds:
        assert len(ds) == 3  # a window starts at every step
        w = ds.gather(np.arange(3))
        expected_steps = [[0, 1, 2, 2], [1, 2, 2, 2], [2, 2, 2, 2]]
        np.testing.assert_array_equal(w["joint_states"][:, :, 0], 10 + np.array(expected_steps))
        np.testing.assert_array_equal(w["actions"][:, :, 3], 10.5 + np.array(expected_steps))
        np.testing.assert_array_equal(w["agentview_rgb"][:, :, 0, 0, 0], 10 + np.array(expected_steps))
        np.testing.assert_array_equal(w["pad_mask"], [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
        assert w["agentview_rgb"].dtype == np.uint8 and w["joint_states"].dtype == np.float32
    assert len(SequenceDataset([path], seq_len=4, obs_keys=keys, pad_end=False)) == 0
    assert len(SequenceDataset([path], seq_len=2, obs_keys=keys, pad_end=False)) == 2


@pytest.mark.parametrize("cache_images", [True, False])
def test_batches_match_slices(tmp_path, cache_images):
    rng = np.random.default_rng(4)
    p1, p2 = tmp_path / "a.hdf5", tmp_path / "b.hdf5"
    d1 = [make_demo(rng, 5), make_demo(rng, 7)]
    d2 = [make_demo(rng, 3)]
    write_demos(p1, d1, **META)
    write_demos(p2, d2, **META)
    keys = ("agentview_rgb", "eye_in_hand_rgb", "joint_states", "gripper_states", "object_tokens")
    L = 4
    ds = SequenceDataset([p1, p2], seq_len=L, obs_keys=keys, cache_images=cache_images)
    assert len(ds) == 15
    # (file, demo, start) for every window, in dataset order
    table = [(0, 0, t) for t in range(5)] + [(0, 1, t) for t in range(7)] + [(1, 0, t) for t in range(3)]
    demos = [d1, d2]
    seen = []
    for batch in ds.sample_batches(4, np.random.default_rng(0)):
        B = len(batch["window_index"])
        assert batch["actions"].shape == (B, L, 7)
        assert batch["agentview_rgb"].shape == (B, L, 8, 8, 3)
        assert batch["object_tokens"].shape == (B, L, 3, 4)
        assert batch["pad_mask"].shape == (B, L)
        for b, wi in enumerate(batch["window_index"]):
            fi, di, t = table[wi]
            assert batch["file_index"][b] == fi
            demo = demos[fi][di]
            T = len(demo["actions"])
            idx = np.minimum(np.arange(t, t + L), T - 1)
            for k in keys:
                np.testing.assert_allclose(batch[k][b], np.asarray(demo["obs"][k])[idx], rtol=1e-6)
            np.testing.assert_allclose(batch["actions"][b], demo["actions"][idx], rtol=1e-6)
            np.testing.assert_array_equal(batch["pad_mask"][b], np.arange(t, t + L) < T)
        seen.extend(batch["window_index"].tolist())
    assert sorted(seen) == list(range(15))  # one shuffled epoch covers every window once
    assert seen != list(range(15))
    sizes = [len(b["actions"]) for b in ds.sample_batches(4, 1, drop_last=True)]
    assert sizes == [4, 4, 4]
    ds.close()


def test_files_of_scenes_with_different_entity_counts_pad_to_the_largest(tmp_path):
    """LIBERO-90's scenes hold 3 to 11 objects: windows over files of several scenes (a multitask or pretraining
    dataset) carry every file's object tokens zero-padded to the largest count, the padding masked off."""
    rng = np.random.default_rng(7)
    small, large = make_demo(rng, 4, E=2), make_demo(rng, 3, E=5)
    p1, p2 = tmp_path / "small.hdf5", tmp_path / "large.hdf5"
    write_demos(p1, [small], **META)
    write_demos(p2, [large], **META)
    ds = SequenceDataset([p1, p2], seq_len=2, obs_keys=("joint_states", "object_tokens", "object_token_mask"))
    w = ds.gather(np.arange(len(ds)))
    assert w["object_tokens"].shape == (7, 2, 5, 4) and w["object_token_mask"].shape == (7, 2, 5)
    np.testing.assert_allclose(w["object_tokens"][0, 0, :2], small["obs"]["object_tokens"][0], rtol=1e-6)
    assert not w["object_tokens"][:4, :, 2:].any() and not w["object_token_mask"][:4, :, 2:].any()
    np.testing.assert_array_equal(w["object_token_mask"][4, 0], large["obs"]["object_token_mask"][0])
