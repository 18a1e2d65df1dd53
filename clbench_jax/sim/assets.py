"""Primitive stand-ins for LIBERO's fixtures and objects (LIBERO's meshes are not redistributable offline).

Every stand-in is built from boxes, capsules and spheres only: MJX's `impl="jax"` has no cylinder-box and no
box/mesh-ellipsoid collision, and convex meshes are slow there. Concave things (bowls, baskets, trays, drawers,
shelves, caddies, the microwave) are made of several boxes.

Conventions (see docs/STANDINS.md for the full catalogue):

* Body frame: origin at the BOTTOM CENTRE of the stand-in (LIBERO's predicates use body origins, so an object
  resting on a surface has its origin on that surface). `StandIn.size` is the full bounding box; it is centred
  on the origin in x/y except where `bbox_offset` says otherwise (pans and mugs, whose handle sticks out).
* Geoms are named f"{name}_g{i}", child bodies f"{name}_{suffix}", joints f"{name}_{suffix}", sites
  f"{name}_{suffix}" (box sites, `size` = half sizes, group 3 so default rendering hides them).
* A joint sits at the origin of its child body. `JointDef.body` names that child body's suffix.
* Region sites: the top face of an `On` region (top_side, cook_region, top_region of the wine rack) is flush with
  the supporting surface, so a resting object has d_z = half_z (LIBERO's rule accepts half_z - 0.005 < d_z <
  half_z + 0.10). An `In` region's bottom face is flush with the container floor (LIBERO lowers the lower z
  bound by 0.01 more), and it rises to about the rim.
* Front direction (`StandIn.front`, a unit vector in the body frame) of articulated / directional fixtures.
  The robot stands at world -x looking +x. LIBERO places fixtures with a BDDL yaw; the fronts are chosen so that
  in every LIBERO placement the openings are reachable:
    - wooden_cabinet, wine_rack, desk_caddy (always yaw pi, at y < 0): front +x -> faces the robot after yaw pi
      (the libero_spatial yaw of ~2.69 then turns the drawers straight at the robot);
    - white_cabinet, flat_stove (yaw 0): front -x -> faces the robot;
    - microwave, wooden_two_layer_shelf (yaw 0 at y > 0 AND yaw pi at y < 0 in different scenes): front -y ->
      faces the table's centre line in both placements.
  Drawers open along `front` for NEGATIVE slide q (LIBERO: open iff q < -0.14, closed iff q > 0): the slide
  axis is -front, range [-0.22, 0.01]; q = 0 is flush, the upper stop at +0.01 (a drawer pushed home rests
  there, which LIBERO counts as closed). The microwave door opens toward `front` for negative q (range
  [-2.094, 0]); the stove knob turns about +z (on iff q >= 0.5, off iff q < 0; range [-0.05, 2.2]).
  Left/right of the desk caddy are as seen by the robot looking at the caddy's front: left = -y, right = +y
  in the caddy frame.
* Arenas (table, kitchen_table, living_room_table, study_table, floor): the body frame is at floor level below
  the table centre, which is the world origin and the origin of the BDDL :ranges (LIBERO's workspace offset is
  folded in: its study table sits at x = -0.2, so the robot's -0.75 becomes -0.55 here); the table top is one collision box whose top
  is at `Arena.surface_z`; legs are visual only (contype 0). The floor arena is a visual-only rug: the scene's
  world ground plane is the collision surface.
* Contacts: every colliding geom has contype = conaffinity = 1, condim 3 (the gripper's pads may raise a pair
  to condim 4: MuJoCo uses the larger condim of a pair), friction (1.0, 0.005, 0.0001).
* Mass: `StandIn.mass` is the total (child bodies included), spread over the geoms in proportion to volume.

Shape classes (`StandIn.shape_class`, used as a one-hot in object tokens; keep < 16):
  0 box, 1 bowl, 2 plate, 3 bottle, 4 mug, 5 can, 6 basket / tray, 7 book, 8 pan, 9 pot, 10 ramekin,
  11 carton, 12 cabinet with drawers, 13 stove, 14 rack / shelf / caddy, 15 microwave / arena surface.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import mujoco
import numpy as np

from clbench_jax.errors import UnknownCategoryError

__all__ = [
    "SiteDef", "JointDef", "Articulation", "GeomDef", "StandIn", "Arena", "standin", "arena", "build",
    "eval_test", "joint_for_site", "standins_markdown", "CATEGORIES", "FIXTURE_CATEGORIES", "OBJECT_CATEGORIES",
    "ARENA_CATEGORIES", "SHAPE_CLASSES", "FRICTION",
]

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]

FRICTION = (1.0, 0.005, 0.0001)
SITE_RGBA = (0.1, 0.9, 0.2, 0.25)
SITE_GROUP = 3

SHAPE_CLASSES = {
    0: "box", 1: "bowl", 2: "plate", 3: "bottle", 4: "mug", 5: "can", 6: "basket/tray", 7: "book", 8: "pan",
    9: "pot", 10: "ramekin", 11: "carton", 12: "cabinet", 13: "stove", 14: "rack/shelf/caddy",
    15: "microwave/arena",
}


# ----------------------------------------------------------------------------------------------- data types
@dataclass(frozen=True)
class SiteDef:
    suffix: str
    body: str  # '' = root body, else a child-body suffix (e.g. 'top_drawer')
    pos: Vec3
    size: Vec3  # half sizes of the box site
    quat: Quat = (1.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class JointDef:
    suffix: str
    body: str  # child-body suffix; the joint sits at that body's origin
    kind: str  # 'slide' | 'hinge'
    axis: Vec3
    range: tuple[float, float]  # metres or radians (converted to degrees if the spec uses degrees)
    damping: float
    frictionloss: float
    armature: float = 0.01


@dataclass(frozen=True)
class Articulation:
    """LIBERO's joint semantics, applied per joint q. A test is (op, threshold), op in lt/le/gt/ge."""

    open_test: tuple[str, float] | None = None
    close_test: tuple[str, float] | None = None
    turnon_test: tuple[str, float] | None = None
    turnoff_test: tuple[str, float] | None = None
    open_range: tuple[float, float] | None = None  # LIBERO's default_open_ranges (initial-state sampling)
    close_range: tuple[float, float] | None = None
    on_range: tuple[float, float] | None = None
    off_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class GeomDef:
    kind: str  # 'box' | 'capsule' | 'sphere'
    size: Vec3  # MuJoCo size: box half sizes; capsule (radius, half length, 0); sphere (radius, 0, 0)
    pos: Vec3
    quat: Quat = (1.0, 0.0, 0.0, 0.0)
    rgba: tuple[float, float, float, float] | None = None  # None: the stand-in's rgba
    body: str = ""
    collide: bool = True


@dataclass(frozen=True)
class StandIn:
    category: str
    kind: str  # 'arena' | 'fixture' | 'object'
    size: Vec3  # full bounding box (x, y, z) in the body frame (child bodies at q = 0), origin at bottom centre
    mass: float
    rgba: tuple[float, float, float, float]
    shape_class: int
    sites: tuple[SiteDef, ...]
    joints: tuple[JointDef, ...]
    articulation: Articulation | None
    child_bodies: tuple[str, ...]
    # additions beyond the agreed API (all defaulted):
    child_body_pos: tuple[Vec3, ...] = ()  # position of each child body in the root frame (same order)
    geoms: tuple[GeomDef, ...] = field(default=(), repr=False)
    front: Vec3 = (0.0, 0.0, 0.0)  # unit vector: the side with the opening / drawers / knob (0 = none)
    bbox_offset: tuple[float, float] = (0.0, 0.0)  # x/y of the bounding box centre relative to the origin
    description: str = ""


@dataclass(frozen=True)
class Arena:
    category: str
    surface_z: float  # world z of the top surface
    size: tuple[float, float]  # (x, y) extent of the surface
    robot_base: Vec3  # world position of the arm base (robot0_link0)
    thickness: float = 0.05  # table-top slab thickness


# ----------------------------------------------------------------------------------------------- geometry
def _qz(a: float) -> Quat:
    return (math.cos(a / 2), 0.0, 0.0, math.sin(a / 2))


def _qx(a: float) -> Quat:
    return (math.cos(a / 2), math.sin(a / 2), 0.0, 0.0)


def _qmul(p: Quat, q: Quat) -> Quat:
    w1, x1, y1, z1 = p
    w2, x2, y2, z2 = q
    return (w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2)


def _qy(a: float) -> Quat:
    return (math.cos(a / 2), 0.0, math.sin(a / 2), 0.0)


def _mat(q: Quat) -> np.ndarray:
    m = np.zeros(9)
    mujoco.mju_quat2Mat(m, np.asarray(q, float))
    return m.reshape(3, 3)


def _box(c, h, rgba=None, body="", quat=(1.0, 0.0, 0.0, 0.0), collide=True) -> GeomDef:
    return GeomDef("box", tuple(map(float, h)), tuple(map(float, c)), tuple(map(float, quat)), rgba, body, collide)


def _capsule(p0, p1, r, rgba=None, body="") -> GeomDef:
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    d = p1 - p0
    L = float(np.linalg.norm(d))
    z = np.array([0.0, 0.0, 1.0])
    u = d / L
    axis = np.cross(z, u)
    s = float(np.linalg.norm(axis))
    if s < 1e-9:
        quat = (1.0, 0.0, 0.0, 0.0) if u[2] > 0 else (0.0, 1.0, 0.0, 0.0)
    else:
        ang = math.atan2(s, float(u[2]))
        axis = axis / s
        quat = (math.cos(ang / 2), *(math.sin(ang / 2) * axis).tolist())
    return GeomDef("capsule", (float(r), L / 2, 0.0), tuple(((p0 + p1) / 2).tolist()), quat, rgba, body)


def _sphere(c, r, rgba=None, body="") -> GeomDef:
    return GeomDef("sphere", (float(r), 0.0, 0.0), tuple(map(float, c)), (1.0, 0.0, 0.0, 0.0), rgba, body)


def _volume(g: GeomDef) -> float:
    if g.kind == "box":
        return 8.0 * g.size[0] * g.size[1] * g.size[2]
    if g.kind == "capsule":
        r, h = g.size[0], g.size[1]
        return math.pi * r * r * 2 * h + 4.0 / 3.0 * math.pi * r ** 3
    if g.kind == "sphere":
        return 4.0 / 3.0 * math.pi * g.size[0] ** 3
    return 0.0


def _aabb(g: GeomDef, offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    R = _mat(g.quat)
    c = np.asarray(g.pos) + offset
    if g.kind == "box":
        half = np.abs(R) @ np.asarray(g.size)
    elif g.kind == "capsule":
        half = np.abs(R[:, 2]) * g.size[1] + g.size[0]
    else:
        half = np.full(3, g.size[0])
    return c - half, c + half


# ----------------------------------------------------------------------------------------------- builders
def _round_solid(r: float, h: float, rgba=None, z0: float = 0.0) -> list[GeomDef]:
    """A flat-bottomed cylinder-like solid: a square core box (flat top and bottom) inside a vertical capsule
    (round sides). Needs h > 2 r."""
    assert h > 2 * r + 0.004, (r, h)
    core = 0.7 * r
    return [_box((0, 0, z0 + h / 2), (core, core, h / 2), rgba),
            _capsule((0, 0, z0 + r + 0.002), (0, 0, z0 + h - r - 0.002), r, rgba)]


def _octo_solid(r: float, h: float, rgba=None, z0: float = 0.0) -> list[GeomDef]:
    """A short round solid: two square boxes, one turned by 45 degrees (an eight-pointed prism).
    Radius varies between 0.90 r and 1.18 r."""
    s = r / 1.2
    return [_box((0, 0, z0 + h / 2), (s, s, h / 2), rgba),
            _box((0, 0, z0 + h / 2 - 0.0003), (s, s, h / 2 - 0.0003), rgba, quat=_qz(math.pi / 4))]  # no z-fight


def _bowl_geoms(a0: float, a1: float, h: float, t: float, n: int, floor_t: float) -> list[GeomDef]:
    """Floor box (half side a0 + t/2) + n slanted wall boxes; bottom apothem a0, rim apothem a1 (inner)."""
    g = [_box((0, 0, floor_t / 2), (a0 + 0.5 * t, a0 + 0.5 * t, floor_t / 2))]
    zb = 0.5 * floor_t  # walls start inside the floor so their tilted corners stay above z = 0
    height = h - zb
    beta = math.atan2(a1 - a0, height)
    slant = math.hypot(height, a1 - a0)
    a_mid = 0.5 * (a0 + a1) + 0.5 * t / math.cos(beta)
    half_len = (a_mid + 0.5 * t) * math.tan(math.pi / n) + 0.002
    for i in range(n):
        phi = 2 * math.pi * i / n
        q = _qmul(_qz(phi), _qy(beta))
        c = (a_mid * math.cos(phi), a_mid * math.sin(phi), zb + height / 2)
        g.append(_box(c, (t / 2, half_len, slant / 2), quat=q))
    return g


def _open_box(lx: float, ly: float, h: float, t: float, floor_t: float, rgba=None, body="",
              z0: float = 0.0, cx: float = 0.0) -> list[GeomDef]:
    """Floor + 4 walls of an open box with outer size lx x ly x h (x centred at cx)."""
    hx, hy = lx / 2, ly / 2
    wz = z0 + floor_t + (h - floor_t) / 2
    wh = (h - floor_t) / 2
    return [_box((cx, 0, z0 + floor_t / 2), (hx, hy, floor_t / 2), rgba, body),
            _box((cx + hx - t / 2, 0, wz), (t / 2, hy, wh), rgba, body),
            _box((cx - hx + t / 2, 0, wz), (t / 2, hy, wh), rgba, body),
            _box((cx, hy - t / 2, wz), (hx - t, t / 2, wh), rgba, body),
            _box((cx, -hy + t / 2, wz), (hx - t, t / 2, wh), rgba, body)]


def _finish(category: str, kind: str, geoms: list[GeomDef], mass: float, rgba, shape_class: int,
            sites=(), joints=(), articulation=None, children: tuple[tuple[str, Vec3], ...] = (),
            front: Vec3 = (0.0, 0.0, 0.0), description: str = "") -> StandIn:
    child_pos = {s: np.asarray(p, float) for s, p in children}
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in geoms:
        a, b = _aabb(g, child_pos.get(g.body, np.zeros(3)))
        lo, hi = np.minimum(lo, a), np.maximum(hi, b)
    size = tuple(round(float(v), 4) for v in hi - lo)
    off = (round(float(hi[0] + lo[0]) / 2, 4), round(float(hi[1] + lo[1]) / 2, 4))
    return StandIn(category=category, kind=kind, size=size, mass=float(mass), rgba=tuple(map(float, rgba)),
                   shape_class=shape_class, sites=tuple(sites), joints=tuple(joints), articulation=articulation,
                   child_bodies=tuple(s for s, _ in children),
                   child_body_pos=tuple(tuple(map(float, p)) for _, p in children), geoms=tuple(geoms),
                   front=tuple(map(float, front)), bbox_offset=off, description=description)


def _rot180(s: StandIn) -> StandIn:
    """The same stand-in turned by pi about z (x -> -x, y -> -y)."""
    def p(v):
        return (-v[0] + 0.0, -v[1] + 0.0, v[2])

    qz = _qz(math.pi)
    geoms = tuple(replace(g, pos=p(g.pos), quat=_qmul(qz, g.quat)) for g in s.geoms)
    sites = tuple(replace(x, pos=p(x.pos), quat=_qmul(qz, x.quat)) for x in s.sites)
    joints = tuple(replace(j, axis=p(j.axis)) for j in s.joints)
    return replace(s, geoms=geoms, sites=sites, joints=joints, child_body_pos=tuple(p(c) for c in s.child_body_pos),
                   front=p(s.front), bbox_offset=(-s.bbox_offset[0], -s.bbox_offset[1]))


# ---------------------------------------------------------------------------------------------- catalogue
def _objects() -> dict[str, StandIn]:
    out: dict[str, StandIn] = {}

    def box_obj(cat, lx, ly, lz, mass, rgba, desc, sc=0):
        out[cat] = _finish(cat, "object", [_box((0, 0, lz / 2), (lx / 2, ly / 2, lz / 2))], mass, rgba, sc,
                           description=desc)

    box_obj("cream_cheese", 0.08, 0.05, 0.035, 0.15, (0.78, 0.84, 0.95, 1), "silver-blue box")
    # 8 cm: KITCHEN_SCENE10 puts two butters in regions whose centres are 10 cm apart.
    box_obj("butter", 0.08, 0.045, 0.03, 0.12, (0.97, 0.88, 0.45, 1), "pale yellow stick box")
    box_obj("chocolate_pudding", 0.07, 0.048, 0.035, 0.12, (0.42, 0.24, 0.12, 1), "brown box")
    box_obj("cookies", 0.10, 0.065, 0.03, 0.15, (0.85, 0.52, 0.18, 1), "orange flat box")
    for cat, rgba, desc in (("black_book", (0.08, 0.08, 0.09, 1), "black book standing upright"),
                            ("yellow_book", (0.95, 0.80, 0.12, 1), "yellow book standing upright")):
        box_obj(cat, 0.03, 0.11, 0.15, 0.25, rgba, desc, sc=7)

    def can(cat, r, h, mass, rgba, desc):
        out[cat] = _finish(cat, "object", _round_solid(r, h), mass, rgba, 5, description=desc)

    can("alphabet_soup", 0.033, 0.10, 0.35, (0.85, 0.30, 0.15, 1), "orange-red soup can")
    can("tomato_sauce", 0.033, 0.085, 0.30, (0.65, 0.05, 0.05, 1), "dark red can")

    def carton(cat, rgba, desc):
        s, h = 0.0325, 0.15
        roof = 0.023  # box turned 45 deg about x: a gable ridge along x
        g = [_box((0, 0, h / 2), (s, s, h / 2)),
             _box((0, 0, h), (s - 0.002, roof, roof), quat=_qx(math.pi / 4), rgba=(0.95, 0.95, 0.95, 1))]
        out[cat] = _finish(cat, "object", g, 0.3, rgba, 11, description=desc)

    carton("milk", (0.93, 0.94, 0.97, 1), "white gable-top carton")
    carton("orange_juice", (1.0, 0.58, 0.08, 1), "orange gable-top carton")

    def squeeze_bottle(cat, rgba, cap_rgba, desc):
        h = 0.15
        g = [_box((0, 0, h / 2), (0.03, 0.022, h / 2)),
             _box((0, 0, h + 0.012), (0.014, 0.014, 0.012), rgba=cap_rgba)]
        out[cat] = _finish(cat, "object", g, 0.35, rgba, 3, description=desc)

    squeeze_bottle("ketchup", (0.85, 0.08, 0.05, 1), (0.95, 0.95, 0.95, 1), "red squeeze bottle, white cap")
    squeeze_bottle("bbq_sauce", (0.33, 0.12, 0.05, 1), (0.1, 0.1, 0.1, 1), "dark brown squeeze bottle")

    def round_bottle(cat, r, h_body, h_total, neck_r, mass, rgba, cap_rgba, desc):
        g = [_box((0, 0, h_body / 2), (0.7 * r, 0.7 * r, h_body / 2)),
             _capsule((0, 0, r + 0.002), (0, 0, h_body - 0.3 * r), r),
             _capsule((0, 0, h_body - 0.5 * r), (0, 0, h_total - neck_r), neck_r, rgba=cap_rgba)]
        out[cat] = _finish(cat, "object", g, mass, rgba, 3, description=desc)

    # 0.21 m tall (LIBERO's scaled bottle): its top stays below the gripper's start pose (EE at z 1.154).
    round_bottle("wine_bottle", 0.032, 0.15, 0.21, 0.013, 0.6, (0.08, 0.28, 0.12, 1), (0.08, 0.22, 0.1, 1),
                 "dark green bottle: flat base, capsule body, capsule neck")
    round_bottle("salad_dressing", 0.03, 0.14, 0.19, 0.013, 0.3, (0.88, 0.72, 0.35, 1), (0.2, 0.45, 0.15, 1),
                 "ochre dressing bottle, green cap")
    round_bottle("new_salad_dressing", 0.03, 0.14, 0.19, 0.013, 0.3, (0.93, 0.92, 0.82, 1),
                 (0.75, 0.1, 0.1, 1), "cream dressing bottle, red cap")

    def mug(cat, rgba, desc):
        r, h = 0.034, 0.095
        g = _round_solid(r, h) + [_box((r + 0.008, 0, 0.05), (0.014, 0.006, 0.028))]
        out[cat] = _finish(cat, "object", g, 0.3, rgba, 4, description=desc + "; handle on +x")

    mug("porcelain_mug", (0.95, 0.95, 0.92, 1), "white mug")
    mug("red_coffee_mug", (0.75, 0.1, 0.1, 1), "red mug")
    mug("white_yellow_mug", (0.96, 0.84, 0.30, 1), "yellow-and-white mug")

    def bowl(cat, a0, a1, h, mass, rgba, desc):
        g = _bowl_geoms(a0, a1, h, t=0.006, n=6, floor_t=0.008)
        region = SiteDef("contain_region", "", (0.0, 0.0, 0.008 + 0.5 * (h - 0.008)),
                         (0.8 * a1, 0.8 * a1, 0.5 * (h - 0.008)))
        out[cat] = _finish(cat, "object", g, mass, rgba, 1, sites=(region,), description=desc)

    bowl("akita_black_bowl", 0.032, 0.056, 0.05, 0.3, (0.07, 0.07, 0.07, 1),
         "black bowl: square floor + 6 slanted walls, 0.125 across the rim's flats")
    bowl("white_bowl", 0.034, 0.058, 0.055, 0.3, (0.96, 0.96, 0.96, 1),
         "white bowl: square floor + 6 slanted walls, 0.13 across the rim's flats")

    out["glazed_rim_porcelain_ramekin"] = _finish(
        "glazed_rim_porcelain_ramekin", "object", _octo_solid(0.043, 0.04), 0.2, (0.95, 0.93, 0.85, 1), 10,
        description="cream ramekin, solid (two crossed boxes, 0.078-0.10 across)")
    out["plate"] = _finish("plate", "object", _octo_solid(0.051, 0.012), 0.25, (0.97, 0.97, 0.97, 1), 2,
                           description="white plate: two crossed thin boxes, 0.085-0.12 across (small: LIBERO "
                                       "puts bowls 0.11 from its centre)")

    basket = _open_box(0.18, 0.18, 0.085, 0.008, 0.008)
    out["basket"] = _finish("basket", "object", basket, 0.4, (0.72, 0.55, 0.33, 1), 6,
                            sites=(SiteDef("contain_region", "", (0, 0, 0.008 + 0.069), (0.061, 0.061, 0.069)),),
                            description="wicker basket: floor + 4 walls, 0.18 x 0.18 x 0.085")
    tray = _open_box(0.30, 0.22, 0.045, 0.008, 0.01)
    out["wooden_tray"] = _finish("wooden_tray", "object", tray, 0.5, (0.62, 0.43, 0.25, 1), 6,
                                 sites=(SiteDef("contain_region", "", (0, 0, 0.01 + 0.04), (0.13, 0.09, 0.04)),),
                                 description="wooden tray: floor + 4 low walls, 0.30 x 0.22 x 0.045")

    pan = _octo_solid(0.10, 0.04) + [_capsule((0.10, 0, 0.035), (0.25, 0, 0.05), 0.011)]
    out["chefmate_8_frypan"] = _finish("chefmate_8_frypan", "object", pan, 0.6, (0.13, 0.13, 0.14, 1), 8,
                                       description="black 8-inch pan (solid, ~0.2 across), handle along +x; "
                                                   "origin at the pan centre")
    moka = _round_solid(0.034, 0.16) + [_box((-0.052, 0, 0.11), (0.018, 0.007, 0.03), rgba=(0.1, 0.1, 0.1, 1))]
    out["moka_pot"] = _finish("moka_pot", "object", moka, 0.45, (0.62, 0.62, 0.65, 1), 9,
                              description="aluminium moka pot, black handle on -x")
    return out


def _cabinet(cat: str, rgba, mass: float, front_sign: int) -> StandIn:
    """Three-drawer chest. Designed with its front at +x, then turned by pi if front_sign < 0."""
    W, D, H, t, top_t = 0.28, 0.24, 0.30, 0.015, 0.02
    hx, hy = D / 2, W / 2
    carcass_h = H - top_t
    g = [_box((0, 0, H - top_t / 2), (hx, hy, top_t / 2)),
         _box((0, -hy + t / 2, carcass_h / 2), (hx, t / 2, carcass_h / 2)),
         _box((0, hy - t / 2, carcass_h / 2), (hx, t / 2, carcass_h / 2)),
         _box((-hx + t / 2, 0, carcass_h / 2), (t / 2, hy - t, carcass_h / 2))]
    slot = carcass_h / 3
    handle_rgba = (0.75, 0.75, 0.78, 1)
    sites = [SiteDef("top_side", "", (0, 0, H - 0.0015), (hx - 0.01, hy - 0.01, 0.0015))]
    joints, children = [], []
    x_back, x_front = -hx + t + 0.01, hx - t  # drawer box from x_back to x_front, front panel beyond
    dw = hy - t - 0.005  # drawer outer half width
    wall_h, wt, ft = 0.06, 0.006, 0.008
    for k, level in enumerate(("bottom", "middle", "top")):
        body = f"{level}_drawer"
        children.append((body, (0.0, 0.0, k * slot)))
        cxd, hxd = (x_back + x_front) / 2, (x_front - x_back) / 2
        g += [_box((hx - t / 2, 0, slot / 2), (t / 2, hy - t - 0.002, slot / 2 - 0.003), body=body),
              _box((cxd, 0, 0.002 + ft / 2), (hxd, dw, ft / 2), body=body),
              _box((x_back + wt / 2, 0, 0.002 + wall_h / 2), (wt / 2, dw, wall_h / 2), body=body),
              _box((cxd, -dw + wt / 2, 0.002 + wall_h / 2), (hxd, wt / 2, wall_h / 2), body=body),
              _box((cxd, dw - wt / 2, 0.002 + wall_h / 2), (hxd, wt / 2, wall_h / 2), body=body),
              # pull bar 0.025 in front of the panel (a finger fits in the gap), 0.012 thick
              _box((hx + 0.025 + 0.006, 0, slot / 2), (0.006, 0.05, 0.007), rgba=handle_rgba, body=body)]
        inner_lo, inner_hi = x_back + wt, x_front
        floor_top = 0.002 + ft
        rh = 0.5 * (wall_h + 0.002 - ft)
        # the region is LIBERO's size (0.151 deep along the slide, 0.204 wide; its wooden_cabinet.xml) at the
        # drawer's front: an object put in at the region's centre then sits where LIBERO's does, ~6 cm in front of
        # the cabinet's face when the drawer is open at -0.15 (at the inner box's centre, libero_spatial's bowl in
        # the top drawer had its back rim under the cabinet's top panel, which the hand box hit: 2%)
        reg_d = min(0.151, inner_hi - inner_lo)
        sites.append(SiteDef(f"{level}_region", body, (inner_hi - reg_d / 2, 0.0, floor_top + rh),
                             (reg_d / 2, min(dw - wt, 0.102), rh)))
        joints.append(JointDef(f"{level}_drawer_joint", body, "slide", (-1.0, 0.0, 0.0), (-0.22, 0.01),
                               damping=5.0, frictionloss=1.0, armature=0.02))
    art = Articulation(open_test=("lt", -0.14), close_test=("gt", 0.0), open_range=(-0.16, -0.14),
                       close_range=(0.0, 0.005))
    s = _finish(cat, "fixture", g, mass, rgba, 12, sites=sites, joints=joints, articulation=art,
                children=tuple(children), front=(1.0, 0.0, 0.0),
                description="3-drawer chest 0.24 deep x 0.28 wide x 0.30 tall; drawers slide out along front")
    return s if front_sign > 0 else _rot180(s)


def _fixtures() -> dict[str, StandIn]:
    out: dict[str, StandIn] = {}
    out["wooden_cabinet"] = _cabinet("wooden_cabinet", (0.55, 0.36, 0.2, 1), 6.0, +1)
    out["white_cabinet"] = _cabinet("white_cabinet", (0.92, 0.92, 0.9, 1), 6.0, -1)

    # flat stove, front (knob) at -x
    plate_top = 0.036
    g = [_box((0, 0, 0.015), (0.15, 0.13, 0.015)),
         _box((0.03, 0, 0.033), (0.08, 0.08, 0.003), rgba=(0.04, 0.04, 0.04, 1)),
         _box((0, 0, 0.0125), (0.025, 0.009, 0.0125), rgba=(0.8, 0.8, 0.82, 1), body="knob")]
    out["flat_stove"] = _finish(
        "flat_stove", "fixture", g, 3.0, (0.2, 0.2, 0.22, 1), 13,
        sites=(SiteDef("cook_region", "", (0.03, 0.0, plate_top - 0.0025), (0.075, 0.075, 0.0025)),),
        joints=(JointDef("knob_joint", "knob", "hinge", (0.0, 0.0, 1.0), (-0.05, 2.2), damping=0.02,
                         frictionloss=0.05, armature=0.002),),
        articulation=Articulation(turnon_test=("ge", 0.5), turnoff_test=("lt", 0.0), on_range=(0.5, 2.1),
                                  off_range=(-0.005, 0.0)),
        children=(("knob", (-0.115, 0.08, 0.03)),), front=(-1.0, 0.0, 0.0),
        description="flat stove 0.30 x 0.26 x 0.03, black cook plate 0.16 square, pointer knob (vertical axis) "
                    "at the front")

    # wine rack: a low cradle (crate with two rails along x); a bottle stands or lies between the rails. front +x.
    # Kept low: in libero_goal and KITCHEN_SCENE4 the rack stands 1.5-4 cm in front of the wooden cabinet, and the
    # middle drawer (lowest edge 0.095 m above the table) must slide out over it, as in LIBERO; so must the hand
    # pinching that drawer's bar, whose box (0.19 m across the vertical pinch) reaches down to ~0.045 m. The old
    # 0.10 m crate with 0.115 m rails stopped the drawer at q = -0.03 (tests/test_oracle.py checks the pull).
    crate_top, rail_h = 0.020, 0.015
    g = [_box((0, 0, crate_top / 2), (0.15, 0.07, crate_top / 2)),
         _box((0, -0.045, crate_top + rail_h / 2), (0.15, 0.006, rail_h / 2)),
         _box((0, 0.045, crate_top + rail_h / 2), (0.15, 0.006, rail_h / 2))]
    out["wine_rack"] = _finish(
        "wine_rack", "fixture", g, 2.0, (0.45, 0.28, 0.15, 1), 14,
        sites=(SiteDef("top_region", "", (0, 0, crate_top - 0.005), (0.16, 0.04, 0.005)),),
        front=(1.0, 0.0, 0.0),
        description="low wooden cradle: base 0.30 x 0.14 x 0.02, two rails on it (tops at 0.035); a bottle stands "
                    "or lies along x between the rails")

    # desk caddy: front +x; compartments back / front (middle column), left (-y) / right (+y) columns
    t, h = 0.008, 0.08
    dx, dy = 0.12, 0.20
    g = [_box((0, 0, t / 2), (dx, dy, t / 2)),
         _box((dx - t / 2, 0, h / 2), (t / 2, dy, h / 2)), _box((-dx + t / 2, 0, h / 2), (t / 2, dy, h / 2)),
         _box((0, -dy + t / 2, h / 2), (dx - t, t / 2, h / 2)), _box((0, dy - t / 2, h / 2), (dx - t, t / 2, h / 2)),
         _box((0, -0.10, 0.035), (dx - t, t / 2, 0.035)), _box((0, 0.10, 0.035), (dx - t, t / 2, 0.035)),
         _box((0, 0, 0.035), (t / 2, 0.10 - t / 2, 0.035))]
    rz, rh = t + 0.036, 0.036
    mid_hx = (dx - t - t / 2) / 2
    side_hy = (dy - t - 0.10 - t / 2) / 2
    side_cy = 0.10 + t / 2 + side_hy
    out["desk_caddy"] = _finish(
        "desk_caddy", "fixture", g, 0.8, (0.22, 0.22, 0.25, 1), 14,
        sites=(SiteDef("front_contain_region", "", (t / 2 + mid_hx, 0, rz), (mid_hx, 0.10 - t / 2, rh)),
               SiteDef("back_contain_region", "", (-t / 2 - mid_hx, 0, rz), (mid_hx, 0.10 - t / 2, rh)),
               SiteDef("left_contain_region", "", (0, -side_cy, rz), (dx - t, side_hy, rh)),
               SiteDef("right_contain_region", "", (0, side_cy, rz), (dx - t, side_hy, rh))),
        front=(1.0, 0.0, 0.0),
        description="open caddy 0.24 x 0.40 x 0.08: middle column split into front/back, left/right columns")

    # microwave: front -y, control panel on +x, door hinged on the -x edge with its pull bar at the +x end, next to
    # the panel, as LIBERO's (its microwave.xml: hinge at x = -0.1725, handle at +0.065). Opens toward -y for
    # negative q. (Hinged at the panel edge, as before, the bar of KITCHEN_SCENE7's microwave -- yaw pi -- sat
    # 0.83 m from the arm's base, out of reach.)
    Wm, Dm, Hm, tm = 0.40, 0.28, 0.26, 0.015
    hxm, hym = Wm / 2, Dm / 2
    panel_x0 = 0.09
    wall_hz = Hm / 2 - tm
    g = [_box((0, 0, tm / 2), (hxm, hym, tm / 2)), _box((0, 0, Hm - tm / 2), (hxm, hym, tm / 2)),
         _box((0, hym - tm / 2, Hm / 2), (hxm, tm / 2, wall_hz)),
         _box((-hxm + tm / 2, -tm / 2, Hm / 2), (tm / 2, hym - tm / 2, wall_hz)),
         _box(((panel_x0 + hxm) / 2, -tm / 2, Hm / 2), ((hxm - panel_x0) / 2, hym - tm / 2, wall_hz),
              rgba=(0.15, 0.15, 0.17, 1))]
    door_w, door_t = panel_x0 + hxm, 0.012
    door_h = Hm - 2 * tm
    g += [_box((door_w / 2, door_t / 2, door_h / 2), (door_w / 2, door_t / 2, door_h / 2),
               rgba=(0.12, 0.12, 0.14, 1), body="door"),
          _box((door_w - 0.035, -0.025 - 0.006, door_h / 2), (0.006, 0.006, 0.06), rgba=(0.75, 0.75, 0.78, 1),
               body="door")]
    cav_x0, cav_x1 = -hxm + tm, panel_x0
    cav_y0, cav_y1 = -hym, hym - tm
    out["microwave"] = _finish(
        "microwave", "fixture", g, 8.0, (0.85, 0.85, 0.87, 1), 15,
        sites=(SiteDef("heating_region", "", ((cav_x0 + cav_x1) / 2, (cav_y0 + cav_y1) / 2, tm + 0.08),
                       (0.12, 0.0835, 0.08)),
               SiteDef("top_side", "", (0, 0, Hm - 0.0015), (hxm - 0.01, hym - 0.01, 0.0015))),
        joints=(JointDef("door_joint", "door", "hinge", (0.0, 0.0, 1.0), (-2.094, 0.0), damping=0.3,
                         frictionloss=0.15, armature=0.01),),
        articulation=Articulation(open_test=("lt", -1.3), close_test=("gt", -0.005), open_range=(-2.094, -1.3),
                                  close_range=(-0.005, 0.0)),
        children=(("door", (-hxm, -hym - door_t, tm)),), front=(0.0, -1.0, 0.0),
        description="microwave 0.40 x 0.28 x 0.26, cavity 0.275 x 0.265 x 0.23, control panel on +x, door "
                    "hinged at the far edge from the panel, vertical pull bar next to the panel")

    # two-layer shelf: front -y (open), boards at the bottom, middle and top
    Ws, Ds, bt = 0.44, 0.26, 0.02
    hxs, hys = Ws / 2, Ds / 2
    comp = 0.17
    z_mid, z_top = bt + comp, 2 * bt + 2 * comp
    Hs = z_top + bt
    side_hz = (Hs - 2 * bt) / 2
    g = [_box((0, 0, bt / 2), (hxs, hys, bt / 2)), _box((0, 0, z_mid + bt / 2), (hxs - bt, hys - 0.01, bt / 2)),
         _box((0, 0, z_top + bt / 2), (hxs, hys, bt / 2)),
         _box((-hxs + bt / 2, 0, bt + side_hz), (bt / 2, hys, side_hz)),
         _box((hxs - bt / 2, 0, bt + side_hz), (bt / 2, hys, side_hz)),
         _box((0, hys - 0.005, bt + side_hz), (hxs - bt, 0.005, side_hz))]
    rh = 0.08
    out["wooden_two_layer_shelf"] = _finish(
        "wooden_two_layer_shelf", "fixture", g, 5.0, (0.58, 0.4, 0.23, 1), 14,
        sites=(SiteDef("bottom_region", "", (0, -0.005, bt + rh), (hxs - bt - 0.01, hys - 0.02, rh)),
               SiteDef("top_region", "", (0, -0.005, z_mid + bt + rh), (hxs - bt - 0.01, hys - 0.02, rh)),
               SiteDef("top_side", "", (0, 0, Hs - 0.0015), (hxs - 0.01, hys - 0.01, 0.0015))),
        front=(0.0, -1.0, 0.0),
        description="open shelf 0.44 x 0.26 x 0.40, two compartments 0.17 high, back panel at +y")
    return out


_ARENAS: dict[str, Arena] = {
    "table": Arena("table", 0.90, (1.0, 1.2), (-0.66, 0.0, 0.90)),
    "kitchen_table": Arena("kitchen_table", 0.90, (1.0, 1.2), (-0.66, 0.0, 0.90)),
    # LIBERO: table centred at x = -0.2 (its workspace offset) and robot at x = -0.75; in the BDDL frame
    # (origin at the table centre, as every arena here) the robot stands at -0.55.
    "study_table": Arena("study_table", 0.867, (1.0, 1.2), (-0.55, 0.0, 0.867)),
    "living_room_table": Arena("living_room_table", 0.41, (0.70, 1.6), (-0.51, 0.0, 0.41), thickness=0.024),
    "floor": Arena("floor", 0.0, (3.0, 3.0), (-0.6, 0.0, 0.0), thickness=0.0),
}

_ARENA_RGBA = {"table": (0.62, 0.5, 0.38, 1), "kitchen_table": (0.75, 0.72, 0.66, 1),
               "study_table": (0.45, 0.32, 0.22, 1), "living_room_table": (0.5, 0.36, 0.26, 1),
               "floor": (0.6, 0.6, 0.6, 1)}


def _arenas() -> dict[str, StandIn]:
    out = {}
    for cat, a in _ARENAS.items():
        lx, ly = a.size
        if cat == "floor":
            g = [_box((0, 0, 0.0005), (lx / 2, ly / 2, 0.0005), collide=False)]
        else:
            z, th = a.surface_z, a.thickness
            g = [_box((0, 0, z - th / 2), (lx / 2, ly / 2, th / 2))]
            leg_h = (z - th) / 2
            for sx in (-1, 1):
                for sy in (-1, 1):
                    g.append(_box((sx * (lx / 2 - 0.05), sy * (ly / 2 - 0.05), leg_h), (0.025, 0.025, leg_h),
                                  rgba=(0.3, 0.25, 0.2, 1), collide=False))
        s = _finish(cat, "arena", g, 30.0, _ARENA_RGBA[cat], 15,
                    description=f"surface {lx} x {ly} at z = {a.surface_z}")
        out[cat] = replace(s, size=(lx, ly, max(a.surface_z, 0.001)))
    return out


def _catalog() -> dict[str, StandIn]:
    c = {}
    c.update(_arenas())
    c.update(_fixtures())
    c.update(_objects())
    return c


_CATALOG = _catalog()
ARENA_CATEGORIES = tuple(_ARENAS)
FIXTURE_CATEGORIES = ("wooden_cabinet", "white_cabinet", "flat_stove", "wine_rack", "desk_caddy", "microwave",
                      "wooden_two_layer_shelf")
OBJECT_CATEGORIES = tuple(sorted(k for k, v in _CATALOG.items() if v.kind == "object"))
CATEGORIES = ARENA_CATEGORIES + FIXTURE_CATEGORIES + OBJECT_CATEGORIES


# ---------------------------------------------------------------------------------------------- public API
def standin(category: str) -> StandIn:
    try:
        return _CATALOG[category]
    except KeyError:
        raise UnknownCategoryError("no primitive stand-in for this category", field="category",
                                   token=category) from None


def arena(category: str) -> Arena:
    if category not in _ARENAS:
        raise UnknownCategoryError("not an arena category (table / floor)", field="category", token=category)
    return _ARENAS[category]


_OPS = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}


def eval_test(test: tuple[str, float] | None, q):
    """Apply an Articulation test to joint position(s) q (numpy). None -> False."""
    if test is None:
        return np.zeros(np.shape(q), bool)
    return _OPS[test[0]](q, test[1])


def joint_for_site(category: str, site_suffix: str) -> str | None:
    """The joint suffix that moves `site_suffix` (e.g. wooden_cabinet top_region -> top_drawer_joint)."""
    s = standin(category)
    site = next((x for x in s.sites if x.suffix == site_suffix), None)
    if site is None:
        raise UnknownCategoryError(f"{category} has no site {site_suffix!r}", field="site", token=site_suffix)
    return next((j.suffix for j in s.joints if site.body and j.body == site.body), None)


_GEOM_TYPES = {"box": mujoco.mjtGeom.mjGEOM_BOX, "capsule": mujoco.mjtGeom.mjGEOM_CAPSULE,
               "sphere": mujoco.mjtGeom.mjGEOM_SPHERE}


def build(body: "mujoco.MjsBody", name: str, category: str) -> None:
    """Add the stand-in of `category` to `body` (an MjSpec body whose frame is the stand-in's bottom centre).

    Adds geoms f"{name}_g{i}", child bodies f"{name}_{suffix}" with their joints f"{name}_{suffix}", and box
    sites f"{name}_{suffix}". Adds no free joint and leaves `body.pos` alone.
    """
    s = standin(category)
    degree = bool(body.compiler.degree)
    bodies = {"": body}
    for suffix, pos in zip(s.child_bodies, s.child_body_pos):
        bodies[suffix] = body.add_body(name=f"{name}_{suffix}", pos=list(pos))
    total_v = sum(_volume(g) for g in s.geoms)
    for i, g in enumerate(s.geoms):
        geom = bodies[g.body].add_geom(name=f"{name}_g{i}", type=_GEOM_TYPES[g.kind], size=list(g.size),
                                       pos=list(g.pos), quat=list(g.quat))
        geom.rgba = list(g.rgba if g.rgba is not None else s.rgba)
        geom.mass = s.mass * _volume(g) / total_v
        geom.friction = list(FRICTION)
        geom.condim = 3
        if g.collide:
            geom.contype, geom.conaffinity = 1, 1
        else:
            geom.contype, geom.conaffinity, geom.group = 0, 0, 1
    for j in s.joints:
        jt = mujoco.mjtJoint.mjJNT_SLIDE if j.kind == "slide" else mujoco.mjtJoint.mjJNT_HINGE
        unit = 180.0 / math.pi if (degree and j.kind == "hinge") else 1.0
        bodies[j.body].add_joint(name=f"{name}_{j.suffix}", type=jt, axis=list(j.axis),
                                 range=[j.range[0] * unit, j.range[1] * unit],
                                 limited=mujoco.mjtLimited.mjLIMITED_TRUE, damping=j.damping,
                                 frictionloss=j.frictionloss, armature=j.armature)
    for st in s.sites:
        bodies[st.body].add_site(name=f"{name}_{st.suffix}", type=mujoco.mjtGeom.mjGEOM_BOX, pos=list(st.pos),
                                 size=list(st.size), quat=list(st.quat), rgba=list(SITE_RGBA), group=SITE_GROUP)


def standins_markdown() -> str:
    """The catalogue as a markdown table (docs/STANDINS.md)."""
    rows = ["| category | kind | shapes (geoms) | size x,y,z (m) | mass (kg) | colour (rgba) | class | "
            "joints (range) | sites (half sizes) | notes |", "|" + "---|" * 10]
    for cat in CATEGORIES:
        s = standin(cat)
        kinds: dict[str, int] = {}
        for g in s.geoms:
            k = g.kind + ("" if g.collide else " (visual)")
            kinds[k] = kinds.get(k, 0) + 1
        shapes = ", ".join(f"{n} {k}" for k, n in kinds.items()) + f" ({len(s.geoms)})"
        size = " x ".join(f"{v:.3f}" for v in s.size)
        if s.bbox_offset != (0.0, 0.0):
            size += f" (bbox centre at {s.bbox_offset[0]:+.3f}, {s.bbox_offset[1]:+.3f})"
        rgba = ", ".join(f"{v:.2f}" for v in s.rgba)
        joints = "; ".join(f"{j.suffix}: {j.kind} axis {tuple(round(a, 2) for a in j.axis)} "
                           f"[{j.range[0]:g}, {j.range[1]:g}] on {j.body}" for j in s.joints) or "-"
        sites = "; ".join(f"{x.suffix}{'@' + x.body if x.body else ''} "
                          f"({x.size[0]:.4g}, {x.size[1]:.4g}, {x.size[2]:.4g})" for x in s.sites) or "-"
        notes = s.description
        if any(s.front):
            notes += f"; front {tuple(round(v) for v in s.front)}"
        if s.articulation is not None:
            a = s.articulation
            tests = [f"{k} q {t[0]} {t[1]:g}" for k, t in (("open", a.open_test), ("close", a.close_test),
                                                          ("on", a.turnon_test), ("off", a.turnoff_test)) if t]
            notes += "; " + ", ".join(tests)
        rows.append(f"| {cat} | {s.kind} | {shapes} | {size} | {s.mass:g} | {rgba} | {s.shape_class} | {joints} | "
                    f"{sites} | {notes} |")
    arenas = ["| arena | surface z | surface x,y | top thickness | robot base |", "|---|---|---|---|---|"]
    for cat in ARENA_CATEGORIES:
        a = arena(cat)
        arenas.append(f"| {cat} | {a.surface_z:g} | {a.size[0]:g} x {a.size[1]:g} | {a.thickness:g} | "
                      f"{a.robot_base} |")
    return "\n".join(rows) + "\n\n" + "\n".join(arenas) + "\n"
