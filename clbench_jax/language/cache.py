"""Persistent sentence-embedding cache, so an evaluation grid never re-encodes a string.

Entries are keyed by the exact text and belong to one encoder id (weights digest +
max length); a file written by a different encoder is ignored, never mixed in. The
raw mean-pooled vectors are stored; normalisation is applied on the way out.

File format (.npz, no pickles): ``encoder_id`` (0-d unicode), ``text_bytes`` (uint8,
all texts UTF-8 encoded back to back), ``text_offsets`` (int64, N+1) and ``embeddings``
(float32, N x D). Storing bytes + offsets keeps every string exact (numpy unicode
arrays would drop trailing NULs). Writes go to a temp file in the same directory that
is then ``os.replace``-d over the target, so a crash never leaves a torn cache.
"""

from __future__ import annotations

import os
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from clbench_jax.errors import DataFileError
from clbench_jax.jsonio import atomic_path

_FORMAT_KEYS = ("encoder_id", "text_bytes", "text_offsets", "embeddings")


def _l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(n, eps)).astype(np.float32)


class EmbeddingCache:
    """``get(texts) -> (N, D)`` float32, running the encoder only on cache misses.

    ``encoder`` is an object with ``encode(list[str]) -> (N, D)`` and ``encoder_id``, or
    a zero-argument callable returning one (loaded lazily, only when a miss occurs: a
    fully cached grid never loads the model). Pass ``encoder_id`` explicitly when the
    encoder is lazy, so a persisted file can be validated without loading it.
    """

    def __init__(self, path: str | os.PathLike | None = None, encoder=None, *,
                 encoder_id: str | None = None, autosave: bool = True):
        self.path = Path(path) if path is not None else None
        self._encoder = None
        self._factory: Callable | None = None
        if callable(encoder) and not hasattr(encoder, "encode"):
            self._factory = encoder
        else:
            self._encoder = encoder
        if encoder_id is None and self._encoder is not None:
            encoder_id = getattr(self._encoder, "encoder_id", None)
        if encoder_id is None:
            raise ValueError("EmbeddingCache needs an encoder_id (or an encoder with .encoder_id)")
        self.encoder_id = str(encoder_id)
        self.autosave = autosave
        self._index: dict[str, int] = {}
        self._rows: list[np.ndarray] = []
        self.hits = 0
        self.misses = 0
        self._dirty = False
        if self.path is not None and self.path.exists():
            self._load(self.path)

    # -- encoder
    @property
    def encoder(self):
        if self._encoder is None:
            if self._factory is None:
                raise ValueError("EmbeddingCache has cache misses but no encoder to compute them")
            self._encoder = self._factory()
            eid = getattr(self._encoder, "encoder_id", None)
            if eid is not None and str(eid) != self.encoder_id:
                raise ValueError(f"lazy encoder id {eid!r} != cache encoder id {self.encoder_id!r}")
        return self._encoder

    # -- lookup
    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, text: str) -> bool:
        return text in self._index

    def get(self, texts: Sequence[str], normalize: bool = False) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("get() takes a list of strings, not a single string")
        texts = list(texts)
        missing: list[str] = []
        seen: set[str] = set()
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"cache keys must be str, got {type(t).__name__}")
            if t in self._index or t in seen:
                continue
            seen.add(t)
            missing.append(t)
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        if missing:
            emb = np.asarray(self.encoder.encode(missing), dtype=np.float32)
            if emb.shape[0] != len(missing) or emb.ndim != 2:
                raise ValueError(f"encoder returned shape {emb.shape} for {len(missing)} texts")
            if self._rows and emb.shape[1] != self._rows[0].shape[0]:
                raise ValueError(f"encoder dim {emb.shape[1]} != cached dim {self._rows[0].shape[0]}")
            for t, v in zip(missing, emb):
                self._index[t] = len(self._rows)
                self._rows.append(v.copy())
            self._dirty = True
            if self.autosave and self.path is not None:
                self.save()
        if not texts:
            dim = self._rows[0].shape[0] if self._rows else getattr(self._encoder, "dim", 384)
            return np.zeros((0, dim), dtype=np.float32)
        out = np.stack([self._rows[self._index[t]] for t in texts]).astype(np.float32)
        return _l2_normalize(out) if normalize else out

    __call__ = get

    def warm(self, texts: Iterable[str]) -> None:
        """Encode (and persist) every not-yet-cached text in one pass."""
        self.get(list(texts))

    # -- persistence
    def save(self, path: str | os.PathLike | None = None) -> Path:
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("EmbeddingCache.save: no path given")
        target.parent.mkdir(parents=True, exist_ok=True)
        texts = list(self._index)  # insertion order == row order
        enc = [t.encode("utf-8") for t in texts]
        offsets = np.zeros(len(enc) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(b) for b in enc]) if enc else []
        blob = np.frombuffer(b"".join(enc), dtype=np.uint8)
        emb = (np.stack(self._rows).astype(np.float32) if self._rows
               else np.zeros((0, 0), dtype=np.float32))
        with atomic_path(target) as tmp, open(tmp, "wb") as f:
            np.savez(f, encoder_id=np.array(self.encoder_id), text_bytes=blob, text_offsets=offsets, embeddings=emb)
            f.flush()
            os.fsync(f.fileno())
        if path is None or target == self.path:
            self._dirty = False
        return target

    def _load(self, path: Path) -> None:
        try:
            with np.load(path, allow_pickle=False) as z:
                missing = [k for k in _FORMAT_KEYS if k not in z.files]
                if missing:
                    raise DataFileError("embedding cache is missing arrays", file=str(path),
                                        field=",".join(missing))
                file_id = str(z["encoder_id"])
                blob = z["text_bytes"].tobytes()
                offsets = z["text_offsets"]
                emb = z["embeddings"].astype(np.float32)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise DataFileError(f"unreadable embedding cache: {e}", file=str(path)) from e
        if file_id != self.encoder_id:
            warnings.warn(f"embedding cache {path} was written by encoder {file_id!r}, not "
                          f"{self.encoder_id!r}; ignoring its entries (they will be overwritten)")
            return
        n = len(offsets) - 1
        if n < 0 or emb.shape[0] != n:
            raise DataFileError(f"embedding cache has {emb.shape[0]} rows but {max(n, 0)} texts",
                                file=str(path), field="embeddings")
        for i in range(n):
            t = blob[offsets[i]:offsets[i + 1]].decode("utf-8")
            self._index[t] = len(self._rows)
            self._rows.append(emb[i])


def one_hot_task_embedding(task_index, n_tasks: int, dim: int | None = None) -> np.ndarray:
    """One-hot task id instead of a language embedding (ablation).

    ``task_index`` an int -> shape (dim,); a sequence of ints -> (N, dim). ``dim``
    defaults to ``n_tasks``; a larger ``dim`` (e.g. 384) zero-pads so the vector can
    stand in for a MiniLM embedding without changing the policy's input size.
    """
    n_tasks = int(n_tasks)
    if n_tasks <= 0:
        raise ValueError(f"n_tasks must be positive, got {n_tasks}")
    dim = n_tasks if dim is None else int(dim)
    if dim < n_tasks:
        raise ValueError(f"dim {dim} < n_tasks {n_tasks}")
    idx = np.asarray(task_index)
    if not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"task_index must be integer, got {idx.dtype}")
    if np.any(idx < 0) or np.any(idx >= n_tasks):
        raise ValueError(f"task_index {task_index!r} out of range [0, {n_tasks})")
    out = np.zeros(idx.shape + (dim,), dtype=np.float32)
    np.put_along_axis(out, idx[..., None], 1.0, axis=-1)
    return out
