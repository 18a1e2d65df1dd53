"""The grid folder: grid.json (the grid's fingerprint, settings and chunk plan), one file per finished chunk, and
episodes.h5 once every chunk is in. Each chunk is written to `chunks/NNNNN.h5` atomically, so an interrupted grid
resumes with the chunks it lacks and ends with identical results; a damaged chunk file is recomputed, a folder of
another grid refused. The grid itself (axes, plan) is eval/grid.py; what fills the folder, eval/grid_runner.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np

from clbench_jax.errors import ClbenchError
from clbench_jax.eval import episodes
from clbench_jax.eval.grid import GridSpec, chunk_plan, goal_columns, renderer
from clbench_jax.jsonio import write_json


def chunk_path(out: Path, i: int) -> Path:
    return out / "chunks" / f"{i:05d}.h5"


def chunk_problem(path: Path, fp: str, i: int) -> str | None:
    """Why the chunk file at `path` cannot stand as chunk i of grid `fp` (None: it can)."""
    if not path.exists():
        return "missing"
    try:
        cols, meta = episodes.read_columns(path)
    except ClbenchError as e:
        return str(e)
    if meta.get("fingerprint") != fp or meta.get("chunk") != i:
        return f"written for chunk {meta.get('chunk')} of grid {meta.get('fingerprint')}"
    if len({len(v) for v in cols.values()}) != 1 or "status" not in cols:
        return "columns of different lengths or no status column"
    return None


def pending_chunks(out_dir, n_chunks: int, fp: str | None = None, log=None) -> list[int]:
    """Chunks of a grid folder still to run: not written, or (with the grid's fingerprint `fp`) written but
    unreadable, truncated or from another grid -- those are reported through `log` and recomputed."""
    out = []
    for i in range(n_chunks):
        path = chunk_path(Path(out_dir), i)
        why = ("missing" if not path.exists() else None) if fp is None else chunk_problem(path, fp, i)
        if why is not None:
            out.append(i)
            if why != "missing" and log is not None:
                log(f"grid: chunk file {path} is damaged ({why}); recomputing it")
    return out


def open_folder(out: Path, spec: GridSpec, checkpoints, policy, n_devices: int) -> tuple[GridSpec, str]:
    """-> (spec with its chunk size as a number, fingerprint). A grid folder belongs to one grid: a new one records
    its chunk plan in grid.json; a resumed one keeps the chunk size it started with (its chunk files are cut by
    it), and one of another grid is refused. The fingerprint hashes the chunk size itself, so an "auto" grid resumes
    a folder begun with the same number of episodes per chunk (and older folders, which recorded only that)."""
    path = out / "grid.json"
    doc = None
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:  # a damaged manifest: planned anew; chunk files of this grid are kept
            from tqdm.auto import tqdm

            tqdm.write(f"grid: {path} is damaged ({e}); writing it again (chunk files of this grid are kept)")
            doc = None
    if doc is not None:
        started = (doc.get("chunk") or {}).get("episodes", doc.get("spec", {}).get("chunk"))
        if spec.chunk == "auto" and started is not None:
            spec = replace(spec, chunk=int(started))
        fp = spec.fingerprint(checkpoints, policy)
        if doc.get("fingerprint") != fp:
            raise ClbenchError(f"folder holds another grid (fingerprint {doc.get('fingerprint')}, this grid {fp}); "
                               "use another folder", file=str(path), field="fingerprint")
        return spec, fp
    chunk = chunk_plan(spec, checkpoints, policy, n_devices=n_devices)
    spec = replace(spec, chunk=chunk["episodes"])
    fp = spec.fingerprint(checkpoints, policy)
    if jax.process_index() == 0:  # hosts sharing the folder would race on grid.json's temporary file
        _write_manifest(out, fp, spec, checkpoints, chunk)
    return spec, fp


def _write_manifest(out: Path, fp: str, spec: GridSpec, checkpoints, chunk: dict) -> None:
    path = out / "grid.json"
    doc = {"fingerprint": fp, "tasks": [t.name for t in spec.tasks],
           "checkpoints": [[c.method, c.seed, c.stage] for c in checkpoints],
           "goal_columns": [[list(map(list, g)) for g in goal_columns(vs)] for vs in spec.variants],
           "spec": spec.settings(), "renderer": renderer(spec), "chunk": chunk}
    write_json(path, doc)


def merge(out: Path, n_chunks: int, fp: str) -> dict[str, np.ndarray] | None:
    """All chunk files, in plan order -> episodes.h5 (None while chunks are missing, e.g. other hosts')."""
    paths = [chunk_path(out, i) for i in range(n_chunks)]
    if not all(p.exists() for p in paths):
        return None
    parts = []
    for p in paths:
        cols, meta = episodes.read_columns(p)
        if meta.get("fingerprint") != fp:
            raise ClbenchError("chunk file from another grid", file=str(p), field="fingerprint")
        parts.append(cols)
    cols = episodes.concat(parts)
    meta = json.loads((out / "grid.json").read_text())
    if jax.process_index() == 0:
        episodes.write_columns(out / "episodes.h5", cols, meta)
    return cols
