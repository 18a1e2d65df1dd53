"""LIBERO's goal predicates as one jnp function.

A goal (a conjunction of atoms over the scene's entities) compiles to a fixed-size table of
(predicate, arg, arg, joint-mask) rows, so any goal over a scene -- not only a task's own -- is data,
evaluated per step under jit and vmap. The geometry and thresholds are LIBERO's
(envs/object_states/base_object_states.py, envs/objects/site_object.py, envs/predicates/):

- On(a, b), b an object:   z_b <= z_a  and  contact(a, b)  and  |xy_a - xy_b| < 0.03      (body origins)
- On(a, s), s a site:      d = R_s (p_a - p_s)  (R not transposed, as LIBERO);
                           size_z - 0.005 < d_z < size_z + 0.10  and  |d_xy| < size_xy;
                           and contact(parent(s), a) when s has a parent object
- In(a, s):                half = |R_s size|;  p_s - half - (0, 0, 0.01) < p_a < p_s + half (strict)
- Up(a):                   z_a >= 1.0
- Open / TurnOn:           ANY of the joints passes;   Close / TurnOff: ALL pass
  (an object's joints are all its joints; a site's joints are those of the body the site sits on).

Argument indices address a single "thing" axis: entities [0, E) then sites [E, E + S).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import jax.numpy as jnp
import numpy as np
from flax import struct

from clbench_jax.errors import MissingEntityError, UnknownPredicateError

PREDICATES = ("true", "false", "on", "in", "up", "open", "close", "turnon", "turnoff")
PRED = {name: i for i, name in enumerate(PREDICATES)}
NEVER = (("false",),)  # a goal that never holds
ARITY = {"true": 0, "false": 0, "on": 2, "in": 2, "up": 1, "open": 1, "close": 1, "turnon": 1, "turnoff": 1}
# Joint-test operators: q OP threshold.  0 = no test (never passes).
OPS = {"none": 0, "lt": 1, "gt": 2, "ge": 3, "le": 4}

ON_XY_RADIUS = 0.03  # On(object, object): body origins within 3 cm in xy (strict)
SITE_ON_BELOW = 0.005  # On(object, site): d_z > size_z - 0.005
SITE_ON_ABOVE = 0.10  # On(object, site): d_z < size_z + 0.10 (LIBERO's other_height)
IN_Z_SLACK = 0.01  # In: the box's lower z bound is lowered by 1 cm
UP_HEIGHT = 1.0


@struct.dataclass
class GoalTable:
    """A compiled goal: G rows; padding rows are `true` so they never block success."""

    pred: jnp.ndarray  # (G,) int32
    a: jnp.ndarray  # (G,) int32 thing index (entity or site)
    b: jnp.ndarray  # (G,) int32 thing index (or 0)
    jmask: jnp.ndarray  # (G, J) bool: joints an Open/Close/TurnOn/TurnOff row looks at
    valid: jnp.ndarray  # (G,) bool: real rows (False for padding)


@struct.dataclass
class JointTests:
    """Per articulated joint: LIBERO's is_open / is_close / turn_on / turn_off as (op, threshold)."""

    op: jnp.ndarray  # (4, J) int32: rows open, close, turnon, turnoff
    thr: jnp.ndarray  # (4, J) float32


@struct.dataclass
class SimView:
    """What the predicates read, for one world. Every backend fills the same arrays."""

    body_pos: jnp.ndarray  # (E, 3) body origins (MuJoCo xpos)
    site_pos: jnp.ndarray  # (S, 3)
    site_mat: jnp.ndarray  # (S, 3, 3) site rotation (MuJoCo site_xmat)
    site_size: jnp.ndarray  # (S, 3) half sizes
    site_parent: jnp.ndarray  # (S,) int32 entity index, -1 for none (table regions)
    joint_q: jnp.ndarray  # (J,)
    contact: jnp.ndarray  # (E, E) bool, symmetric


@dataclass(frozen=True)
class PredicateLayout:
    """The static naming of a scene's things, used to compile goals."""

    entities: tuple[str, ...]
    sites: tuple[str, ...]
    joints: tuple[str, ...]
    entity_joints: np.ndarray  # (E, J) bool
    site_joints: np.ndarray  # (S, J) bool

    def index(self, name: str) -> int:
        if name in self._entity_index:
            return self._entity_index[name]
        if name in self._site_index:
            return len(self.entities) + self._site_index[name]
        raise KeyError(name)

    @property
    def _entity_index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.entities)}

    @property
    def _site_index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.sites)}


def compile_goal(layout: PredicateLayout, atoms: Sequence, rows: int, *, task: str | None = None,
                 file: str | None = None) -> GoalTable:
    """Atoms (objects with .pred, .args, optional .line; or (pred, *args) tuples) -> a GoalTable of `rows` rows."""
    J = len(layout.joints)
    ent, site = layout._entity_index, layout._site_index
    pred = np.zeros(rows, np.int32)
    a = np.zeros(rows, np.int32)
    b = np.zeros(rows, np.int32)
    jmask = np.zeros((rows, J), bool)
    valid = np.zeros(rows, bool)
    if len(atoms) > rows:
        raise ValueError(f"goal has {len(atoms)} atoms but the table holds {rows} rows (task {task})")
    for r, atom in enumerate(atoms):
        name, args = (atom.pred, tuple(atom.args)) if hasattr(atom, "pred") else (atom[0], tuple(atom[1:]))
        line = getattr(atom, "line", None)
        name = name.lower()
        if name not in PRED or name == "printjointstate":
            raise UnknownPredicateError("predicate cannot be evaluated", file=file, task=task, line=line, token=name)
        if len(args) != ARITY[name]:
            raise UnknownPredicateError(f"{name} takes {ARITY[name]} arguments, got {len(args)}", file=file,
                                        task=task, line=line, token=name)
        for arg in args:
            if arg not in ent and arg not in site:
                raise MissingEntityError("goal names an entity absent from the scene", file=file, task=task,
                                         line=line, token=arg)
        if name in ("on", "in", "up") and args[0] not in ent:
            raise UnknownPredicateError(f"{name} needs an object as first argument", file=file, task=task,
                                        line=line, token=args[0])
        if name == "in" and args[1] not in site:
            raise UnknownPredicateError("In needs a region (site) as second argument", file=file, task=task,
                                        line=line, token=args[1])
        pred[r] = PRED[name]
        valid[r] = True
        if args:
            a[r] = layout.index(args[0])
        if len(args) == 2:
            b[r] = layout.index(args[1])
        if name in ("open", "close", "turnon", "turnoff"):
            x = args[0]
            jmask[r] = layout.entity_joints[ent[x]] if x in ent else layout.site_joints[site[x]]
    return GoalTable(pred=pred, a=a, b=b, jmask=jmask, valid=valid)


def _joint_test(op, thr, q):
    return jnp.select([op == 1, op == 2, op == 3, op == 4], [q < thr, q > thr, q >= thr, q <= thr], False)


def site_contains(site_pos, site_mat, site_size, p) -> jnp.ndarray:
    """LIBERO's In test of a point p (a body origin) against box sites, broadcasting over leading axes: strictly
    inside the site's world box (half = |R size|), its lower z bound lowered by IN_Z_SLACK."""
    half = jnp.abs(jnp.einsum("...ij,...j->...i", site_mat, site_size))
    lb = (site_pos - half).at[..., 2].add(-IN_Z_SLACK)
    return jnp.all((p > lb) & (p < site_pos + half), axis=-1)


def eval_rows(view: SimView, table: GoalTable, tests: JointTests) -> jnp.ndarray:
    """(G,) bool: the truth of every row of `table` in the world `view`."""
    E = view.body_pos.shape[0]
    a_ent = jnp.clip(table.a, 0, E - 1)
    b_is_site = table.b >= E
    b_ent = jnp.clip(table.b, 0, E - 1)
    b_site = jnp.clip(table.b - E, 0, view.site_pos.shape[0] - 1)
    pa = view.body_pos[a_ent]  # (G, 3)

    # On(a, b) with b an object.
    pb = view.body_pos[b_ent]
    on_obj = (pb[:, 2] <= pa[:, 2]) & view.contact[a_ent, b_ent] & (
        jnp.linalg.norm(pa[:, :2] - pb[:, :2], axis=-1) < ON_XY_RADIUS)

    # Site-relative geometry.
    ps, R, size = view.site_pos[b_site], view.site_mat[b_site], view.site_size[b_site]
    d = jnp.einsum("gij,gj->gi", R, pa - ps)
    parent = view.site_parent[b_site]
    parent_contact = jnp.where(parent >= 0, view.contact[jnp.clip(parent, 0, E - 1), a_ent], True)
    on_site = ((size[:, 2] - SITE_ON_BELOW < d[:, 2]) & (d[:, 2] < size[:, 2] + SITE_ON_ABOVE)
               & jnp.all(jnp.abs(d[:, :2]) < size[:, :2], axis=-1) & parent_contact)
    on = jnp.where(b_is_site, on_site, on_obj)

    inside = b_is_site & site_contains(ps, R, size, pa)

    up = pa[:, 2] >= UP_HEIGHT

    q = view.joint_q[None, :]  # (1, J)
    passes = [_joint_test(tests.op[k][None], tests.thr[k][None], q) for k in range(4)]  # each (1, J)
    m = table.jmask
    open_ = jnp.any(passes[0] & m, axis=-1)
    close = jnp.all(passes[1] | ~m, axis=-1)
    turnon = jnp.any(passes[2] & m, axis=-1)
    turnoff = jnp.all(passes[3] | ~m, axis=-1)

    p = table.pred
    return jnp.select(
        [p == PRED["true"], p == PRED["false"], p == PRED["on"], p == PRED["in"], p == PRED["up"],
         p == PRED["open"], p == PRED["close"], p == PRED["turnon"], p == PRED["turnoff"]],
        [True, False, on, inside, up, open_, close, turnon, turnoff], False)


def goal_holds(view: SimView, table: GoalTable, tests: JointTests) -> jnp.ndarray:
    """True iff every real row holds (LIBERO: AND over the goal at one step)."""
    return jnp.all(eval_rows(view, table, tests) | ~table.valid)


def quat_to_mat(q: jnp.ndarray) -> jnp.ndarray:
    """MuJoCo quaternion (w, x, y, z), shape (..., 4) -> rotation matrix (..., 3, 3)."""
    q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack([
        jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        jnp.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        jnp.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], -2)
