"""What the predicates and the object tokens need to know about LIBERO's objects and fixtures.

Articulation (envs/objects/articulated_objects.py): each articulated class compares one joint position with a bound
of its `object_properties["articulation"]` ranges (captured per task from LIBERO's objects):

    class                                          open            close            turnon          turnoff
    Microwave, WoodenCabinet, WhiteCabinet,       q < max(open)   q > min(close)
    YellowCabinet
    ShortCabinet, ShortFridge                      q > min(open)   q < max(close)
    FlatStove, YellowStove                                                          q >= min(on)    q < max(off)

The other articulated classes (SlideCabinet, Window, Faucet, BasinFaucet) define no test (LIBERO raises), so no
goal may use them. tests/test_libero_scene.py checks this table against LIBERO's class methods.
"""

from __future__ import annotations

import mujoco
import numpy as np

# class -> predicate -> (op, which bound, range key)
CLASS_TESTS: dict[str, dict[str, tuple[str, str, str]]] = {
    **{c: {"open": ("lt", "max", "default_open_ranges"), "close": ("gt", "min", "default_close_ranges")}
       for c in ("Microwave", "WoodenCabinet", "WhiteCabinet", "YellowCabinet")},
    **{c: {"open": ("gt", "min", "default_open_ranges"), "close": ("lt", "max", "default_close_ranges")}
       for c in ("ShortCabinet", "ShortFridge")},
    **{c: {"turnon": ("ge", "min", "default_turnon_ranges"), "turnoff": ("lt", "max", "default_turnoff_ranges")}
       for c in ("FlatStove", "YellowStove")},
}
# LIBERO's registry names of those classes (envs/objects OBJECTS_DICT), for code that sees only a BDDL category.
CATEGORY_CLASS = {"microwave": "Microwave", "wooden_cabinet": "WoodenCabinet", "white_cabinet": "WhiteCabinet",
                  "yellow_cabinet": "YellowCabinet", "short_cabinet": "ShortCabinet",
                  "short_fridge": "ShortFridge", "flat_stove": "FlatStove", "yellow_stove": "YellowStove"}
PREDICATES = ("open", "close", "turnon", "turnoff")


def joint_tests(cls: str, articulation: dict) -> dict[str, tuple[str, float]]:
    """predicate -> (op, threshold) for one entity of LIBERO class `cls` with its articulation ranges."""
    out = {}
    for pred, (op, bound, key) in CLASS_TESTS.get(cls, {}).items():
        vals = articulation.get(key) or []
        if vals:
            out[pred] = (op, float(max(vals) if bound == "max" else min(vals)))
    return out


def supports(category: str, pred: str) -> bool:
    """Can an entity of this BDDL category be tested for Open / Close / TurnOn / TurnOff?"""
    return pred in CLASS_TESTS.get(CATEGORY_CLASS.get(category, ""), {})


# Coarse shape classes of the object tokens (one-hot, < 16): by keyword of the BDDL category, first match wins.
SHAPE_CLASSES = ("box", "bowl", "plate", "bottle", "mug", "can", "basket/tray", "book", "pan", "pot", "ramekin",
                 "carton", "cabinet", "stove", "rack/shelf/caddy", "microwave")
_SHAPE_KEYWORDS = (("ramekin", 10), ("bowl", 1), ("plate", 2), ("mug", 4), ("cup", 4), ("bottle", 3),
                   ("ketchup", 3), ("dressing", 3), ("sauce", 3), ("soup", 5), ("can", 5), ("basket", 6),
                   ("tray", 6), ("book", 7), ("pan", 8), ("pot", 9), ("milk", 11), ("juice", 11),
                   ("cabinet", 12), ("fridge", 12), ("stove", 13), ("rack", 14), ("shelf", 14), ("caddy", 14),
                   ("microwave", 15))


def shape_class(category: str) -> int:
    for word, k in _SHAPE_KEYWORDS:
        if word in category:
            return k
    return 0


def subtree_geoms(m: mujoco.MjModel, root_body: int) -> np.ndarray:
    """Geom ids of a body's whole subtree."""
    bodies = [b for b in range(m.nbody) if _is_descendant(m, b, root_body)]
    return np.array([g for g in range(m.ngeom) if m.geom_bodyid[g] in bodies], int)


def _is_descendant(m: mujoco.MjModel, b: int, root: int) -> bool:
    while b != root and b != 0:
        b = int(m.body_parentid[b])
    return b == root


def extents(m: mujoco.MjModel, d: mujoco.MjData, root_body: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) corners of the axis-aligned box around the subtree's colliding geoms, in the root body's frame
    (geom AABBs from MuJoCo, corners rotated into the root frame). `d` must hold the kinematics."""
    R0, p0 = d.xmat[root_body].reshape(3, 3), d.xpos[root_body]
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in subtree_geoms(m, root_body):
        if m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0:
            continue
        c, h = m.geom_aabb[g, :3], m.geom_aabb[g, 3:]
        R, p = d.geom_xmat[g].reshape(3, 3), d.geom_xpos[g]
        corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * h + c
        local = (corners @ R.T + p - p0) @ R0
        lo, hi = np.minimum(lo, local.min(0)), np.maximum(hi, local.max(0))
    if not np.isfinite(lo).all():
        lo = hi = np.zeros(3)
    return lo, hi


def mean_colour(m: mujoco.MjModel, root_body: int) -> np.ndarray:
    """Mean RGB of the subtree's visual geoms (material colour where a material is set)."""
    cols = []
    for g in subtree_geoms(m, root_body):
        if m.geom_contype[g] != 0 or m.geom_conaffinity[g] != 0:
            continue
        mat = m.geom_matid[g]
        cols.append(m.mat_rgba[mat, :3] if mat >= 0 else m.geom_rgba[g, :3])
    return np.mean(cols, 0) if cols else np.zeros(3)
