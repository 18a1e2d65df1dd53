"""The columnar episode file: one row per evaluated episode, one HDF5 dataset per column.

Columns are numpy arrays sharing their first axis (rows); 2-D columns hold one value per goal column
(`success`, `first_success`, `held_at_reset`). Strings are stored as UTF-8. File attributes carry JSON metadata
(the grid's fingerprint, the goal columns' meaning). Writes are atomic (jsonio.atomic_path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np

from clbench_jax.errors import DataFileError
from clbench_jax.jsonio import atomic_path, finite_json

FORMAT = "clbench-episodes"
VERSION = 1


def write_columns(path: str | os.PathLike, cols: dict[str, np.ndarray], meta: dict | None = None) -> None:
    """Write columns (equal first axis) and JSON metadata atomically."""
    path = Path(path)
    n = {len(v) for v in cols.values()}
    if len(n) > 1:
        raise ValueError(f"columns of different lengths {sorted(n)} for {path}")
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["format"], f.attrs["version"] = FORMAT, VERSION
        f.attrs["meta"] = json.dumps(finite_json(meta or {}), allow_nan=False)
        for k, v in cols.items():
            v = np.asarray(v)
            if v.dtype.kind in "UO":
                f.create_dataset(k, data=v.astype(object), dtype=h5py.string_dtype())
            else:
                f.create_dataset(k, data=v)


def read_columns(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """-> (columns, metadata). A missing, foreign or truncated file raises DataFileError naming it."""
    path = Path(path)
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise DataFileError(f"not a {FORMAT} file", file=str(path), field="format")
            if f.attrs.get("version") != VERSION:
                raise DataFileError(f"unsupported version (this code reads {VERSION})", file=str(path),
                                    field="version", token=str(f.attrs.get("version")))
            cols = {}
            for k, d in f.items():
                cols[k] = d.asstr()[()].astype(str) if h5py.check_string_dtype(d.dtype) else d[()]
            meta = json.loads(f.attrs.get("meta", "{}"))
    except (OSError, KeyError) as e:
        raise DataFileError(f"cannot read episode file: {e}", file=str(path)) from None
    return cols, meta


def concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Row-wise concatenation of column dicts with the same keys."""
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def select(cols: dict[str, np.ndarray], mask) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in cols.items()}
