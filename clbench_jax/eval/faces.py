"""Seed 004's counterfactual faces on the grid side: what `occ` blanks, which objects a goal names, and how an
episode's first grasp (and first reach) is read against them.

- swap: the instruction names another object of the scene (a variant-file condition, language/faces.py); scored
  by which object the end-effector reaches first and which the gripper first closes on.
- occ: the original instruction with the policy's perception blanked: both cameras black for RGB policies; for
  state policies the identity fields (size, colour, shape class) of every object token, so poses remain but what
  each object is does not. A policy that observes neither has nothing to blank: an error says so.
- nonsense: the instruction replaced by a string that names nothing (a variant-file condition).

Every episode records the entities its variant's goal moves (`named_object`), those the original goal moves
(`original_object`) and the entity both fingers first closed on (`first_grasp_object`); `grasp_category` puts
the first grasp in one of named / original / other / none, so a failure that grasped the named object is a motor
failure, not a grounding one.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from clbench_jax.errors import ClbenchError
from clbench_jax.sim.scene import TOKEN_DIM, TOKEN_SHAPES

FACES = ("swap", "occ", "nonsense")
IMAGE_KEYS = ("agentview_rgb", "eye_in_hand_rgb")
# env.object_tokens' layout: position (3), quaternion (4), then the static identity of the object -- size (3),
# colour (3), shape class one-hot (TOKEN_SHAPES) -- then its joint values. occ zeroes the identity part.
TOKEN_IDENTITY = slice(3 + 4, 3 + 4 + 3 + 3 + TOKEN_SHAPES)
assert TOKEN_IDENTITY.stop < TOKEN_DIM
GRASP = ("named", "original", "other", "none")


# ------------------------------------------------------------------------------------------- occ
def occlusion_keys(obs_keys) -> tuple[str, ...]:
    """The observation keys occ blanks for a policy that reads `obs_keys`; an error when there are none."""
    keys = tuple(k for k in obs_keys if k in IMAGE_KEYS) + (("tokens",) if "tokens" in obs_keys else ())
    if not keys:
        raise ClbenchError("occ blanks the policy's cameras (agentview_rgb, eye_in_hand_rgb) or, for a state policy, "
                           "the identity fields of its object tokens; this policy observes neither (it reads "
                           f"{', '.join(obs_keys) or 'nothing'}), so occ would be the original condition again",
                           field="grid.conditions", token="occ")
    return keys


def occlude(obs: dict, occ, keys: tuple[str, ...]) -> dict:
    """obs with the `keys` of episodes where occ (N,) is true blanked (images black, token identity zero)."""
    import jax.numpy as jnp

    out = dict(obs)
    for k in keys:
        x = obs[k]
        blank = x.at[..., TOKEN_IDENTITY].set(0) if k == "tokens" else jnp.zeros_like(x)
        out[k] = jnp.where(occ.reshape((-1,) + (1,) * (x.ndim - 1)), blank, x)
    return out


@lru_cache(maxsize=None)
def occluding_policy_fn(fn, keys: tuple[str, ...]):
    """A rollout policy_fn that blanks `keys` for the episodes flagged in pstate["occ"] (N,) and then acts with
    `fn` (memoised, so the rollout's compile cache sees one function per (fn, keys))."""

    def policy_fn(obs, pstate, rng):
        occ = pstate["occ"]
        a, ps = fn(occlude(obs, occ, keys), {k: v for k, v in pstate.items() if k != "occ"}, rng)
        return a, dict(ps, occ=occ)

    return policy_fn


# ------------------------------------------------------------------------------------------- objects
def manipulated(task, goal) -> tuple[str, ...]:
    """Entities a goal acts on, in atom order: the object On/In moves, the fixture owning a region that Open /
    Close / TurnOn / TurnOff test (the drawer's cabinet)."""
    out: list[str] = []
    for atom in goal or ():
        x = atom[1] if len(atom) > 1 else None
        if x is None:
            continue
        owner = task.regions[x].target if x in task.regions else x
        if owner not in out:
            out.append(owner)
    return tuple(out)


def named_objects(task, goal, original) -> tuple[str, ...]:
    """What a variant names as the thing to act on: the entities its goal moves that the original goal does not
    (a swap's new object), else all its goal moves (same objects: paraphrase, relation / target contrasts)."""
    mine, orig = manipulated(task, goal), manipulated(task, original)
    return tuple(e for e in mine if e not in orig) or mine


def grasp_category(first, named, original) -> np.ndarray:
    """Per episode: "named" (first grasp on an entity the variant names), "original" (on one the original goal
    moves, not named), "other" (anything else) or "none" (no grasp). Arguments are string columns; named /
    original hold comma-separated entity names."""
    first = np.asarray(first).astype(str)
    split = lambda col: [set(s.split(",")) - {""} for s in np.asarray(col).astype(str)]  # noqa: E731
    n, o = split(named), split(original)
    return np.array(["none" if f == "" else "named" if f in a else "original" if f in b else "other"
                     for f, a, b in zip(first, n, o)], dtype=object).astype(str)


# ------------------------------------------------------------------------------------------- records
REACH_FIELD = "first_reach"


def reach_recorded() -> bool:
    """Does the simulator record which object the end-effector reached first (`Records.first_reach`: (N,) int32,
    the scene entity index of the first task object the end-effector came within reach of after warm-up, -1 if
    none)? Until it does, the reach columns are absent and reports say so; the first grasp is always recorded."""
    from clbench_jax.sim.rollout import Records

    return REACH_FIELD in Records.__dataclass_fields__


def entity_names(scene, index) -> np.ndarray:
    """Scene entity indices (N,) (-1: none) -> their names ("" for none)."""
    names = np.asarray(list(scene.entities) + [""], dtype=object)
    return names[np.asarray(index, int)].astype(str)
