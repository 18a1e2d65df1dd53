"""Seed 004's instruction faces, proposed for every task whatever the generator (variants.build_task turns them into
candidates and validates them):

- swap: the instruction names another object of the scene in the object slot, nothing else changes; its goal is
  the edited frame's goal (`frames.frame_atom`-style), validated like a contrast (entities, predicates, registers,
  not held at reset, trivially-reachable flag). Every valid rename is kept, not only the first.
- nonsense: the instruction replaced by a string with no name in it (no word of an object or place name the
  benchmark knows); judged against the original goal.

The third face, occ (blanked perception, instruction kept), changes observations, not the instruction: the grid
builds it (eval/grid.py `occ_variant`, eval/faces.py).
"""

from __future__ import annotations

from typing import NamedTuple

from clbench_jax.language import frames as F
from clbench_jax.tasks.spec import Atom, TaskSpec

# "xxx" is seed 004's; the others are instruction-shaped pseudo-words and noise.
NONSENSE = ("xxx", "blick the dax onto the wug", "zq vv kk rr")


class Swap(NamedTuple):
    text: str
    frame: int
    goal: tuple[Atom, ...]
    entity: str  # the object now named


def swaps(task: TaskSpec, tf: F.TaskFrames) -> list[Swap]:
    """Every rename of a said frame's object to another object of the scene, with its goal, in a fixed
    order (frames in goal order, objects by name). Skipped: frames whose attribute names the object (changing the
    noun would change two slots), objects the goal already moves or that are the frame's landmark, names equal to
    the one said, and names two objects of the task share (the rename would be ambiguous)."""
    text, out = tf.instruction, []
    first_names = [F.noun(task, e).phrases[0] for e in task.objects]
    moved = {a.args[0] for a in task.goal}
    for i, f in enumerate(tf.frames):
        o = f.object
        if f.implicit or o is None or o.span is None or o.text in (None, "it") or f.attribute_of == "object":
            continue
        if any(g is not f and g.object is not None and g.object.span == o.span for g in tf.frames):
            continue  # "both moka pots": one span names two objects
        a = f.atom
        state = a.pred in F.STATE_PREDICATES
        if state:
            pool = [e for e in sorted(set(task.objects) | set(task.fixtures))
                    if e != a.args[0] and F.predicate_supported_by(task, a.pred, e)]
        else:
            landmark = F.resolve_place(task, a.pred, a.args[1]).landmark
            pool = [e for e in sorted(task.objects) if e not in moved and e != landmark]
        for e in pool:
            name = F.noun(task, e).phrases[0]
            if name == o.text or first_names.count(name) > 1:
                continue
            atom = Atom(a.pred, (e,) if state else (e, a.args[1]))
            goal = tuple(atom if (b.pred, b.args) == (a.pred, a.args) else b for b in task.goal)
            out.append(Swap(F.edit_text(text, o.span, name), i, goal, e))
    return out
