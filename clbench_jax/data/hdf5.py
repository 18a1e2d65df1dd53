"""LIBERO demonstration files (robomimic HDF5 layout): write, read, validate, and windowed sampling.

Layout (LIBERO `scripts/create_dataset.py`)::

    data                      attrs: env_name, problem_info (JSON), bddl_file_name,
                                     bddl_file_content, env_args (JSON), num_demos, total
                                     [, macros_image_convention]
    data/demo_{i}/obs/<key>   agentview_rgb, eye_in_hand_rgb (T,H,W,3) uint8; joint_states (T,7);
                              gripper_states (T,2); ee_states (T,6); ee_pos (T,3); ee_ori (T,3)
    data/demo_{i}/actions (T,7), states (T,D), robot_states (T,9), rewards (T,) uint8, dones (T,) uint8
    data/demo_{i}             attrs: num_samples, model_file, init_state

Project extras live under keys LIBERO does not use: obs/object_tokens (T,E,D),
obs/object_token_mask (T,E), and attributes prefixed ``clbench_`` (on `data` and on each demo).
The prefix is added on write and removed on read, so a round trip returns what was written.

Pure numpy + h5py: no simulator is needed.  Every problem with a file raises
:class:`~clbench_jax.errors.DataFileError` naming the file and the HDF5 key at fault.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import h5py
import numpy as np

from clbench_jax.errors import DataFileError
from clbench_jax.jsonio import atomic_path

EXTRA_PREFIX = "clbench_"
DATA_ATTRS = ("env_name", "problem_info", "bddl_file_name", "bddl_file_content", "env_args",
              "num_demos", "total")
DEMO_ATTRS = ("num_samples", "model_file", "init_state")
DEMO_ARRAYS = ("actions", "states", "robot_states", "rewards", "dones")
RGB_KEYS = ("agentview_rgb", "eye_in_hand_rgb")
# Fixed trailing shape of each known low-dim obs key and array (None: any size).
OBS_TRAILING: dict[str, tuple] = {
    "joint_states": (7,), "gripper_states": (2,), "ee_states": (6,),
    "ee_pos": (3,), "ee_ori": (3,),
    "object_tokens": (None, None), "object_token_mask": (None,),
}
ARRAY_TRAILING: dict[str, tuple] = {
    "actions": (7,), "states": (None,), "robot_states": (9,), "rewards": (), "dones": (),
}
DEFAULT_OBS_KEYS = ("agentview_rgb", "eye_in_hand_rgb", "joint_states", "gripper_states")
# Obs keys with one row per scene entity (T, E, ...): scenes differ in E, so files of several scenes (LIBERO-90,
# libero_10) are zero-padded to the largest E when read together; a zero mask row is an absent entity, as in the env.
ENTITY_KEYS = ("object_tokens", "object_token_mask")
_DEMO_RE = re.compile(r"^demo_(\d+)$")


# ----------------------------------------------------------------------------- validation

def _check_shape(arr_shape: tuple, dtype: np.dtype, key: str, trailing: tuple | None, T: int | None,
                 file: str) -> int:
    """Check leading length T and trailing dims; return the length. `trailing` None: unchecked."""
    if len(arr_shape) == 0:
        raise DataFileError("expected an array with a time axis, got a scalar", file=file, field=key)
    if T is not None and arr_shape[0] != T:
        raise DataFileError(f"length {arr_shape[0]} does not match actions length {T}",
                            file=file, field=key)
    if trailing is not None:
        ok = len(arr_shape) == 1 + len(trailing) and all(
            want is None or want == got for want, got in zip(trailing, arr_shape[1:]))
        if not ok:
            want = "(T" + "".join(f",{'*' if w is None else w}" for w in trailing) + ")"
            raise DataFileError(f"wrong shape {tuple(arr_shape)}, expected {want}", file=file, field=key)
    if np.dtype(dtype).kind not in "biuf":
        raise DataFileError(f"wrong dtype {dtype}, expected a numeric array", file=file, field=key)
    return int(arr_shape[0])


def _check_obs(name: str, shape: tuple, dtype: np.dtype, key: str, T: int, file: str) -> None:
    if name.endswith("_rgb"):
        if len(shape) != 4 or shape[-1] != 3:
            raise DataFileError(f"wrong shape {tuple(shape)}, expected (T,H,W,3)", file=file, field=key)
        if np.dtype(dtype) != np.uint8:
            raise DataFileError(f"wrong dtype {dtype}, expected uint8", file=file, field=key)
        _check_shape(shape, dtype, key, None, T, file)
    else:
        _check_shape(shape, dtype, key, OBS_TRAILING.get(name), T, file)


def check_demo(demo: Mapping[str, Any], prefix: str, file: str,
                obs_keys: Sequence[str] | None = None) -> None:
    """Validate one demo (in-memory dict or h5py group: both expose shape and dtype)."""
    for name in ("actions", "obs") + DEMO_ARRAYS[1:]:
        if name not in demo:
            raise DataFileError("missing key", file=file, field=f"{prefix}/{name}")
    T = _check_shape(demo["actions"].shape, demo["actions"].dtype, f"{prefix}/actions",
                     ARRAY_TRAILING["actions"], None, file)
    if T < 1:
        raise DataFileError("demo has no steps", file=file, field=f"{prefix}/actions")
    for name in DEMO_ARRAYS[1:]:
        _check_shape(demo[name].shape, demo[name].dtype, f"{prefix}/{name}", ARRAY_TRAILING[name], T, file)
    obs = demo["obs"]
    names = list(obs.keys()) if obs_keys is None else list(obs_keys)
    for name in names:
        key = f"{prefix}/obs/{name}"
        if name not in obs:
            raise DataFileError("missing key", file=file, field=key)
        _check_obs(name, obs[name].shape, obs[name].dtype, key, T, file)


# ----------------------------------------------------------------------------- attrs helpers

def _attr_out(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)) and not isinstance(value, np.ndarray):
        return json.dumps(value)
    return value


def _attr_in(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.bytes_):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _split_attrs(attrs: Mapping[str, Any]) -> tuple[dict, dict]:
    """(LIBERO attrs, extras with the clbench_ prefix removed)."""
    base, extras = {}, {}
    for k, v in attrs.items():
        v = _attr_in(v)
        if k.startswith(EXTRA_PREFIX):
            extras[k[len(EXTRA_PREFIX):]] = v
        else:
            base[k] = v
    return base, extras


def _prefixed(name: str) -> str:
    return name if name.startswith(EXTRA_PREFIX) else EXTRA_PREFIX + name


# ----------------------------------------------------------------------------- write

def _write_demo(grp: h5py.Group, demo: Mapping[str, Any]) -> None:
    obs_grp = grp.create_group("obs")
    for name, arr in demo["obs"].items():
        obs_grp.create_dataset(name, data=np.asarray(arr))
    for name in DEMO_ARRAYS:
        arr = np.asarray(demo[name])
        if name == "dones":
            arr = arr.astype(np.uint8)
        grp.create_dataset(name, data=arr)
    attrs = dict(demo.get("attrs", {}))
    attrs.setdefault("num_samples", int(np.asarray(demo["actions"]).shape[0]))
    for k, v in attrs.items():
        grp.attrs[k if k in DEMO_ATTRS else _prefixed(k)] = _attr_out(v)


def write_demos(path: str | os.PathLike, demos: Sequence[Mapping[str, Any]], *, env_name: str,
                problem_info: dict, bddl_file_name: str, bddl_file_content: str, env_args: dict,
                extras_attrs: Mapping[str, Any] | None = None, image_convention: str | None = None) -> None:
    """Write `demos` to `path` in LIBERO's layout, atomically (jsonio.atomic_path).

    Each demo is a dict: ``obs`` (dict of (T,...) arrays), ``actions`` (T,7), ``states`` (T,D),
    ``robot_states`` (T,9), ``rewards`` (T,), ``dones`` (T,) and optional ``attrs`` (dict:
    num_samples [defaults to T], model_file, init_state, and extras, stored as ``clbench_<name>``).
    ``extras_attrs`` go on ``data`` as ``clbench_<name>``.  Dict/list values are stored as JSON.
    ``image_convention`` is LIBERO's optional ``macros_image_convention`` attribute (robosuite's "opengl":
    images upside down, as LIBERO's datasets; "opencv": upright, as this project renders them).
    """
    path = os.fspath(path)
    demos = list(demos)
    for i, demo in enumerate(demos):  # validate everything before touching the disk
        arrays = {k: np.asarray(v) for k, v in demo.items() if k not in ("obs", "attrs")}
        if "obs" in demo:
            arrays["obs"] = {k: np.asarray(v) for k, v in demo["obs"].items()}
        check_demo(arrays, f"data/demo_{i}", path)
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w") as f:
            data = f.create_group("data")
            data.attrs["env_name"] = env_name
            data.attrs["problem_info"] = json.dumps(problem_info)
            data.attrs["bddl_file_name"] = bddl_file_name
            data.attrs["bddl_file_content"] = bddl_file_content
            data.attrs["env_args"] = json.dumps(env_args)
            if image_convention is not None:
                data.attrs["macros_image_convention"] = image_convention
            data.attrs["num_demos"] = len(demos)
            data.attrs["total"] = int(sum(np.asarray(d["actions"]).shape[0] for d in demos))
            for k, v in (extras_attrs or {}).items():
                data.attrs[_prefixed(k)] = _attr_out(v)
            for i, demo in enumerate(demos):
                _write_demo(data.create_group(f"demo_{i}"), demo)


# ----------------------------------------------------------------------------- read

def open_file(path: str) -> h5py.File:
    """Open for reading; a missing or unreadable file raises DataFileError naming it."""
    if not os.path.exists(path):
        raise DataFileError("file not found", file=path)
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise DataFileError(f"cannot open HDF5 file (truncated or corrupt?): {e}", file=path) from e


def demo_names(f: h5py.File, path: str) -> list[str]:
    """`demo_<i>` group names of an open file, in index order."""
    if "data" not in f or not isinstance(f["data"], h5py.Group):
        raise DataFileError("missing key", file=path, field="data")
    names = [n for n in f["data"].keys() if _DEMO_RE.match(n)]
    if not names:
        raise DataFileError("no demo_<i> groups", file=path, field="data")
    return sorted(names, key=lambda n: int(_DEMO_RE.match(n).group(1)))


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """File-level attributes of `data`: LIBERO's (problem_info, env_args parsed from JSON) plus
    ``extras_attrs`` (the ``clbench_`` ones, prefix removed)."""
    path = os.fspath(path)
    with open_file(path) as f:
        try:
            if "data" not in f:
                raise DataFileError("missing key", file=path, field="data")
            base, extras = _split_attrs(f["data"].attrs)
        except OSError as e:
            raise DataFileError(f"cannot read (truncated or corrupt?): {e}", file=path, field="data") from e
    for k in DATA_ATTRS:
        if k not in base:
            raise DataFileError("missing attribute", file=path, field=f"data.attrs[{k}]")
    for k in ("problem_info", "env_args"):
        try:
            base[k] = json.loads(base[k])
        except (TypeError, ValueError) as e:
            raise DataFileError(f"not valid JSON: {e}", file=path, field=f"data.attrs[{k}]") from e
    base["extras_attrs"] = extras
    return base


def read_demos(path: str | os.PathLike, keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Read and validate every demo (ordered by index) into the dict structure `write_demos` takes.

    `keys`: obs keys to load (None: all present).  A listed key absent from a demo is an error.
    """
    path = os.fspath(path)
    out = []
    with open_file(path) as f:
        try:
            for name in demo_names(f, path):
                grp = f["data"][name]
                prefix = f"data/{name}"
                check_demo(grp, prefix, path, keys)
                obs_names = list(grp["obs"].keys()) if keys is None else list(keys)
                demo: dict[str, Any] = {"obs": {}}
                for k in obs_names:
                    demo["obs"][k] = _read(grp["obs"][k], path, f"{prefix}/obs/{k}")
                for k in DEMO_ARRAYS:
                    demo[k] = _read(grp[k], path, f"{prefix}/{k}")
                base, extras = _split_attrs(grp.attrs)
                base.update(extras)
                demo["attrs"] = base
                out.append(demo)
        except OSError as e:
            raise DataFileError(f"cannot read (truncated or corrupt?): {e}", file=path) from e
    return out


def _read(ds: h5py.Dataset, path: str, key: str) -> np.ndarray:
    try:
        return ds[()]
    except OSError as e:
        raise DataFileError(f"cannot read (truncated or corrupt?): {e}", file=path, field=key) from e


def _finite(arr: np.ndarray, path: str, key: str) -> np.ndarray:
    """Training data must be finite: one NaN in a demo makes every loss NaN."""
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise DataFileError(f"non-finite value {arr[tuple(bad)]} at step {bad[0]}", file=path, field=key)
    return arr


# ----------------------------------------------------------------------------- windowed dataset

def pad_entities(arrays: list[np.ndarray], axis: int = 1) -> list[np.ndarray]:
    """Arrays whose `axis` counts scene entities -> the same, zero-padded along it to the largest count."""
    e = max(a.shape[axis] for a in arrays)
    return [a if a.shape[axis] == e else np.pad(a, [(0, e - a.shape[axis]) if d == axis else (0, 0)
                                                    for d in range(a.ndim)]) for a in arrays]


class _LazyConcat:
    """Concatenation of h5py datasets along axis 0, gathered by global index without loading all."""

    def __init__(self, datasets: list[h5py.Dataset]):
        self.datasets = datasets
        self.offsets = np.cumsum([0] + [d.shape[0] for d in datasets])
        self.shape = (int(self.offsets[-1]),) + tuple(datasets[0].shape[1:])
        self.dtype = datasets[0].dtype

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx)
        flat = idx.reshape(-1)
        out = np.empty((flat.size,) + self.shape[1:], self.dtype)
        uniq, inverse = np.unique(flat, return_inverse=True)
        gathered = np.empty((uniq.size,) + self.shape[1:], self.dtype)
        which = np.searchsorted(self.offsets, uniq, side="right") - 1
        for d in np.unique(which):  # one sorted read per demo dataset touched, not per sample
            sel = which == d
            gathered[sel] = self.datasets[d][uniq[sel] - self.offsets[d]]
        out[:] = gathered[inverse.reshape(-1)]
        return out.reshape(idx.shape + self.shape[1:])


class SequenceDataset:
    """Windows of `seq_len` consecutive steps over every demo of every file (robomimic-style).

    With ``pad_end=True`` a window starts at every step of every demo; steps past the demo's end
    repeat its last frame (obs and actions) and get ``pad_mask`` False.  With ``pad_end=False``
    only windows that fit inside a demo are used.  Low-dim arrays are float32 in memory; images
    stay uint8, in memory (``cache_images=True``) or read from the open HDF5 files per batch.

    Batches (``sample_batches``) are flat dicts: each obs key -> (B, L, ...), ``actions`` (B, L, 7),
    ``pad_mask`` (B, L) bool, ``window_index`` (B,) int (index into ``window_start``), ``file_index``
    (B,) int (which path the window came from).
    """

    def __init__(self, paths: Sequence[str | os.PathLike] | str | os.PathLike, seq_len: int = 10,
                 obs_keys: Sequence[str] = DEFAULT_OBS_KEYS, pad_end: bool = True,
                 cache_images: bool = True):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.paths = [os.fspath(p) for p in paths]
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        self.seq_len, self.obs_keys, self.pad_end = int(seq_len), tuple(obs_keys), pad_end
        self.cache_images = cache_images
        self._files: list[h5py.File] = []
        parts: dict[str, list] = {k: [] for k in self.obs_keys + ("actions",)}
        demo_lengths, demo_file = [], []
        for fi, path in enumerate(self.paths):
            f = open_file(path)
            try:
                for name in demo_names(f, path):
                    grp = f["data"][name]
                    prefix = f"data/{name}"
                    check_demo(grp, prefix, path, self.obs_keys)
                    for k in self.obs_keys:
                        ds = grp["obs"][k]
                        if self._is_image(k) and not cache_images:
                            parts[k].append(ds)
                        else:
                            parts[k].append(_finite(_read(ds, path, f"{prefix}/obs/{k}"), path, f"{prefix}/obs/{k}"))
                    parts["actions"].append(_finite(_read(grp["actions"], path, f"{prefix}/actions"), path,
                                                    f"{prefix}/actions"))
                    demo_lengths.append(int(grp["actions"].shape[0]))
                    demo_file.append(fi)
            except OSError as e:
                f.close()
                raise DataFileError(f"cannot read (truncated or corrupt?): {e}", file=path) from e
            except BaseException:
                f.close()
                raise
            if cache_images or not any(self._is_image(k) for k in self.obs_keys):
                f.close()
            else:
                self._files.append(f)
        self.arrays: dict[str, Any] = {}
        for k, lst in parts.items():
            if lst and isinstance(lst[0], h5py.Dataset):
                self.arrays[k] = _LazyConcat(lst)
            else:
                arr = np.concatenate(pad_entities(lst) if k in ENTITY_KEYS else lst, axis=0)
                if arr.dtype.kind == "f" or (k == "actions"):
                    arr = arr.astype(np.float32)
                self.arrays[k] = arr
        self.demo_lengths = np.asarray(demo_lengths, np.int64)
        self.demo_start = np.concatenate([[0], np.cumsum(self.demo_lengths)[:-1]]).astype(np.int64)
        self.demo_end = self.demo_start + self.demo_lengths           # exclusive
        self.demo_file = np.asarray(demo_file, np.int64)
        # Window table: global start step, and the exclusive end of its demo.
        starts, ends, files = [], [], []
        for s, T, fi in zip(self.demo_start, self.demo_lengths, self.demo_file):
            n = T if pad_end else max(0, T - self.seq_len + 1)
            starts.append(s + np.arange(n))
            ends.append(np.full(n, s + T))
            files.append(np.full(n, fi))
        self.window_start = np.concatenate(starts).astype(np.int64)
        self.window_end = np.concatenate(ends).astype(np.int64)
        self.window_file = np.concatenate(files).astype(np.int64)

    @staticmethod
    def _is_image(key: str) -> bool:
        return key.endswith("_rgb") or key.endswith("_depth")

    def __len__(self) -> int:
        return int(self.window_start.size)

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def gather(self, window_index: np.ndarray) -> dict[str, np.ndarray]:
        """Windows by index, vectorised: dict of (B, L, ...) arrays plus pad_mask and indices."""
        w = np.asarray(window_index, np.int64)
        steps = self.window_start[w, None] + np.arange(self.seq_len)[None, :]       # (B, L)
        end = self.window_end[w, None]
        pad_mask = steps < end
        idx = np.minimum(steps, end - 1)
        batch = {k: arr[idx] for k, arr in self.arrays.items()}
        batch["pad_mask"] = pad_mask
        batch["window_index"] = w
        batch["file_index"] = self.window_file[w]
        return batch

    def sample_batches(self, batch_size: int, rng: np.random.Generator | int | None = None,
                       drop_last: bool = False) -> Iterator[dict[str, np.ndarray]]:
        """One shuffled pass over all windows, in batches of `batch_size`."""
        rng = np.random.default_rng(rng)
        order = rng.permutation(len(self))
        stop = len(order) - (len(order) % batch_size if drop_last else 0)
        for i in range(0, stop, batch_size):
            yield self.gather(order[i:i + batch_size])
