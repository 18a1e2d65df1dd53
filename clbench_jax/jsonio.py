"""Files written atomically (text, JSON) and versioned JSON documents read with typed errors (one place for both)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from clbench_jax.errors import DataFileError


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text`: a temporary file beside `path`, then os.replace (never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: str | os.PathLike, obj, indent: int = 1) -> None:
    """Write `obj` as JSON, atomically (write_text)."""
    write_text(path, json.dumps(obj, indent=indent) + "\n")


def read_versioned(path: str | os.PathLike, what: str, fmt: str, version: int | tuple[int, ...],
                   required: Iterable[str] = ()) -> dict:
    """A JSON document whose `format` is `fmt` and `version` is `version` (or one of them), holding the `required`
    top-level fields; DataFileError names the file (and field) otherwise. `what` names the document in the
    message."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataFileError(f"{what} not found", file=str(path)) from None
    except json.JSONDecodeError as e:
        raise DataFileError(f"not valid JSON: {e.msg}", file=str(path), line=e.lineno) from None
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
