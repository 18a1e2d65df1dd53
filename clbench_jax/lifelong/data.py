"""Demonstration data for the lifelong loop: one SequenceDataset per stage and policy-ready batches."""

from __future__ import annotations

import os

import numpy as np

from clbench_jax.data.hdf5 import ENTITY_KEYS, SequenceDataset, pad_entities
from clbench_jax.errors import DataFileError

# Dataset obs key -> policy obs key, per observation mode.
OBS_KEYS = {
    "state": {"joint_states": "joint_states", "gripper_states": "gripper_states", "ee_pos": "ee_pos",
              "object_tokens": "tokens", "object_token_mask": "token_mask"},
    "rgb": {"agentview_rgb": "agentview_rgb", "eye_in_hand_rgb": "eye_in_hand_rgb",
            "joint_states": "joint_states", "gripper_states": "gripper_states"},
}
ENTITY_OBS = tuple(OBS_KEYS["state"][k] for k in ENTITY_KEYS)  # policy obs keys with one row per scene entity


def demo_path(demos_dir: str, task) -> str:
    """`<demos>/<suite>/<task>_demo.hdf5` (what `clbench demos collect --out demos` writes), else
    `<demos>/<task>_demo.hdf5`."""
    nested = os.path.join(demos_dir, task.suite, f"{task.name}_demo.hdf5")
    return nested if os.path.exists(nested) else os.path.join(demos_dir, f"{task.name}_demo.hdf5")


def has_demos(demos_dir: str, task) -> bool:
    """Does the task's demo file hold at least one demo? A missing or unreadable file is an error (a wrong demos
    folder must not pass for tasks without demos); a collection that kept none (the oracle never succeeded) is not."""
    from clbench_jax.data.hdf5 import read_meta

    path = demo_path(demos_dir, task)
    if not os.path.exists(path):
        raise DataFileError("demo file not found (make it with `clbench demos collect`)", file=path, task=task.name)
    return int(read_meta(path)["num_demos"]) > 0


def open_dataset(demos_dir: str, tasks, mode: str, seq_len: int) -> SequenceDataset:
    """Windows over the demo files of `tasks` (file_index = position in `tasks`)."""
    paths = [demo_path(demos_dir, t) for t in tasks]
    for t, p in zip(tasks, paths):
        if not has_demos(demos_dir, t):  # also: a missing file is named
            raise DataFileError("the collection kept no demos (the oracle never solved this task): leave the task out "
                                "(n_tasks, order) or set train.missing_demos: skip", file=p, task=t.name, field="data")
    return SequenceDataset(paths, seq_len=seq_len, obs_keys=tuple(OBS_KEYS[mode]), pad_end=True)


def policy_batch(raw: dict, langs: np.ndarray, mode: str) -> dict:
    """SequenceDataset batch -> {"obs", "lang", "actions", "mask"}; langs: (n_files, D) per file of the dataset."""
    obs = {dst: raw[src] for src, dst in OBS_KEYS[mode].items()}
    return {"obs": obs, "lang": langs[raw["file_index"]], "actions": raw["actions"], "mask": raw["pad_mask"]}


def concat_batches(batches: list[dict]) -> dict:
    """Concatenate policy batches along the batch axis (object tokens padded to the largest count)."""
    if len(batches) == 1:
        return batches[0]
    out = {k: np.concatenate([b[k] for b in batches]) for k in ("lang", "actions", "mask")}
    out["obs"] = {k: np.concatenate(pad_entities([b["obs"][k] for b in batches], axis=2) if k in ENTITY_OBS
                                    else [b["obs"][k] for b in batches]) for k in batches[0]["obs"]}
    return out
