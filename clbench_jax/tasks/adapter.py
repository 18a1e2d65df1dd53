"""Dataset-adapter view of a task: what a language-perturbation study needs to rewrite instructions and goals
without touching the scene (canonical instruction, entity inventory, supported predicates, original goal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from clbench_jax.errors import BDDLError, MissingEntityError, UnknownPredicateError
from clbench_jax.tasks.bddl import check_entities, parse_goal_node, parse_sexprs
from clbench_jax.tasks.spec import PREDICATE_ARITY, Atom, TaskSpec

# Goal predicates this project evaluates (clbench_jax/sim/predicates.py); LIBERO's true/false/printjointstate
# are registered but never used in a goal.
SUPPORTED_GOAL_PREDICATES = frozenset({"on", "in", "open", "close", "turnon", "turnoff", "up"})


@dataclass(frozen=True)
class AdapterView:
    task: str
    suite: str
    scene: str
    instruction: str                 # what LIBERO feeds the policy (from the file name)
    bddl_language: str               # the file's (:language ...), sometimes worded differently
    objects: Mapping[str, str]       # name -> category
    fixtures: Mapping[str, str]
    regions: tuple[str, ...]         # full region names
    supported_predicates: frozenset[str]
    goal: tuple[Atom, ...]


def adapter_view(spec: TaskSpec) -> AdapterView:
    return AdapterView(task=spec.name, suite=spec.suite, scene=spec.scene, instruction=spec.instruction,
                       bddl_language=spec.language, objects=spec.objects, fixtures=spec.fixtures,
                       regions=tuple(spec.regions), supported_predicates=SUPPORTED_GOAL_PREDICATES,
                       goal=spec.goal)


def check_goal(spec: TaskSpec, atoms: Iterable[Atom], *, source: str | None = None) -> tuple[Atom, ...]:
    """Validate a (possibly rewritten) goal against `spec`'s scene; returns it as a tuple.

    Errors name `source` (default: the task's BDDL file) and the atom's line.
    """
    src = source or spec.file
    atoms = tuple(atoms)
    if not atoms:
        raise BDDLError("empty goal", file=src, task=spec.name, field="goal")
    for a in atoms:
        pred = a.pred.lower()
        if pred not in SUPPORTED_GOAL_PREDICATES:
            raise UnknownPredicateError(f"goal predicate not supported; use one of {sorted(SUPPORTED_GOAL_PREDICATES)}",
                                        file=src, line=a.line, task=spec.name, token=a.pred)
        if len(a.args) != PREDICATE_ARITY[pred]:
            raise BDDLError(f"{a.pred} takes {PREDICATE_ARITY[pred]} argument(s), got {len(a.args)}", file=src,
                            line=a.line, task=spec.name, token=a.pred)
    check_entities(atoms, spec.entities(), src, "goal")
    for a in atoms:
        # LIBERO's In tests containment in a region site, so its second argument must be a region.
        if a.pred.lower() == "in" and a.args[1] not in spec.regions:
            raise MissingEntityError("In needs a region as its second argument", file=src, line=a.line,
                                     task=spec.name, token=a.args[1])
    return tuple(Atom(a.pred.lower(), a.args, a.line) for a in atoms)


def parse_goal_text(spec: TaskSpec, text: str, *, source: str = "<goal text>") -> tuple[Atom, ...]:
    """Parse a goal written as BDDL, e.g. "(And (On a b) (Open c))", and validate it against `spec`."""
    forms = parse_sexprs(text, source)
    if len(forms) != 1:
        bad = forms[1] if len(forms) > 1 else None
        raise BDDLError("goal text must be exactly one (And ...) or predicate form", file=source,
                        line=bad.line if bad else 1, task=spec.name, token=getattr(bad, "text", "("))
    return check_goal(spec, parse_goal_node(forms[0], source), source=source)
