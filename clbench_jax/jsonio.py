"""Files written atomically (text, JSON), outputs checked before work starts, and versioned JSON documents read
with typed errors (one place for all three)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from clbench_jax.errors import DataFileError, OutputError


def check_writable(path: str | os.PathLike, *, folder: bool = False, field: str | None = None) -> None:
    """Fail now (OutputError naming `path` and `field`) if `path` cannot be written later: a file where a folder
    must be (or a folder where the file goes), or a first existing ancestor where no file can be created (no
    permission, read-only file system). Creates nothing that stays."""
    p = Path(path).expanduser().absolute()
    if p.exists() and p.is_dir() != folder:
        raise OutputError(f"{'a file' if folder else 'a folder'} is in the way", file=str(p), field=field)
    probe = p if folder else p.parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"cannot create {p.name!r}: {probe} is a file, not a folder", file=str(p), field=field)
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".clbench-write-check-")
    except OSError as e:
        raise OutputError(f"cannot write in {probe}: {e.strerror}", file=str(p), field=field) from None
    os.close(fd)
    os.remove(tmp)


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[str]:
    """The one way this project writes a file: `with atomic_path(path) as tmp:` write `tmp`, a temporary file of
    this writer's own beside `path` (ending in `suffix`, for writers that read the format from it); when the block
    ends it becomes `path` (os.replace, mode 0644), or is removed if the block raised. A reader never sees a
    half-written file, and two processes filling the same cache entry cannot interleave."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make shared demos, caches and results private
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` atomically (atomic_path); an OS error becomes an OutputError naming the file."""
    try:
        with atomic_path(path) as tmp, open(tmp, "w") as f:
            f.write(text)
    except OSError as e:
        raise OutputError(f"cannot write: {e.strerror or e}", file=str(path)) from None


def save_figure(fig, path: str | os.PathLike, **savefig) -> None:
    """Save a matplotlib figure as PNG atomically (atomic_path); `savefig`: more savefig arguments (default dpi
    110, tight bounding box)."""
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, **{"format": "png", "dpi": 110, "bbox_inches": "tight", **savefig})


def finite_json(obj):
    """`obj` with every non-finite float (NaN, inf) replaced by None: JSON has no NaN, and a bare NaN makes the
    file unreadable to strict parsers. Missing values are null in every file this project writes."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def write_json(path: str | os.PathLike, obj, indent: int = 1) -> None:
    """Write `obj` as strict JSON (non-finite floats as null), atomically (write_text)."""
    write_text(path, json.dumps(finite_json(obj), indent=indent, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike, what: str = "JSON file"):
    """A JSON document; DataFileError names the file (and line) if it is missing, unreadable or not valid JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataFileError(f"{what} not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataFileError(f"cannot read the {what}: {e}", file=str(path)) from None
    except json.JSONDecodeError as e:
        raise DataFileError(f"{what} is not valid JSON ({e.msg}); rerun the step that writes it", file=str(path),
                            line=e.lineno) from None


def read_versioned(path: str | os.PathLike, what: str, fmt: str, version: int | tuple[int, ...],
                   required: Iterable[str] = ()) -> dict:
    """A JSON document whose `format` is `fmt` and `version` is `version` (or one of them), holding the `required`
    top-level fields; DataFileError names the file (and field) otherwise. `what` names the document in the
    message."""
    path = Path(path)
    doc = read_json(path, what)
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise DataFileError(f"not a {fmt} file", file=str(path), field="format")
    versions = version if isinstance(version, tuple) else (version,)
    if doc.get("version") not in versions:
        raise DataFileError(f"unsupported version (this code reads {' or '.join(map(str, versions))})",
                            file=str(path), field="version", token=str(doc.get("version")))
    for key in required:
        if key not in doc:
            raise DataFileError("missing field", file=str(path), field=key)
    return doc
