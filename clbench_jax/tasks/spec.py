"""Immutable task description parsed from one LIBERO BDDL file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

# LIBERO registers these predicate names (envs/predicates/__init__.py); BDDL spells them in any case.
REGISTERED_PREDICATES = frozenset(
    {"true", "false", "in", "on", "up", "printjointstate", "open", "close", "turnon", "turnoff"})
# Number of arguments each predicate takes (None: any; LIBERO's true/false ignore their arguments).
PREDICATE_ARITY: dict[str, int | None] = {
    "true": None, "false": None, "in": 2, "on": 2, "up": 1, "printjointstate": 1,
    "open": 1, "close": 1, "turnon": 1, "turnoff": 1,
}

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_90", "libero_10")
# Suites whose files all share one scene (no SCENE prefix in their file names).
SINGLE_SCENE_SUITES = ("libero_spatial", "libero_object", "libero_goal")

_SCENE_PREFIX = re.compile(r"^([A-Z][A-Z_]*_SCENE\d+)_")


@dataclass(frozen=True)
class Region:
    name: str          # full name used by init/goal: target + "_" + local_name
    local_name: str    # name as written under :regions
    target: str        # fixture or object the region is attached to
    ranges: tuple[tuple[float, float, float, float], ...] = ()  # (x0, y0, x1, y1) boxes on the target
    yaw_ranges: tuple[tuple[float, float], ...] = ()             # (lo, hi) placement yaw
    rgba: tuple[float, float, float, float] | None = None


@dataclass(frozen=True)
class Atom:
    pred: str               # lower-case registered predicate name
    args: tuple[str, ...]
    line: int = 0           # line in the source file (0: built in code)

    def __str__(self) -> str:
        return "(" + " ".join((self.pred,) + self.args) + ")"


def _frozen(d: Mapping) -> Mapping:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class TaskSpec:
    name: str                       # file stem
    suite: str
    scene: str                      # key shared by tasks that share one scene
    language: str                   # (:language ...) text as written
    problem: str                    # e.g. LIBERO_Kitchen_Tabletop_Manipulation
    file: str
    fixtures: Mapping[str, str]     # name -> category
    objects: Mapping[str, str]      # name -> category
    regions: Mapping[str, Region]   # full name -> Region
    obj_of_interest: tuple[str, ...]
    init: tuple[Atom, ...]
    goal: tuple[Atom, ...]
    dangling_regions: tuple[str, ...] = ()  # declared regions whose :target is absent (unusable)

    def __hash__(self) -> int:  # mappings are unhashable; the file identifies the task
        return hash((self.suite, self.name, self.file))

    def __post_init__(self) -> None:
        # Read-only views so a cached spec cannot be mutated by a caller.
        for f in ("fixtures", "objects", "regions"):
            object.__setattr__(self, f, _frozen(getattr(self, f)))

    @property
    def instruction(self) -> str:
        """The instruction LIBERO's benchmark feeds to policies (derived from the file name)."""
        return grab_language_from_filename(self.name)

    def entities(self) -> set[str]:
        """Every name an init/goal atom may refer to."""
        return set(self.objects) | set(self.fixtures) | set(self.regions)

    def category(self, name: str) -> str | None:
        return self.objects.get(name) or self.fixtures.get(name)


def grab_language_from_filename(name: str) -> str:
    """LIBERO's rule (benchmark/__init__.py): drop the `..._SCENEn_` prefix, underscores to spaces."""
    stem = name[:-5] if name.endswith(".bddl") else name
    m = _SCENE_PREFIX.match(stem)
    if m:
        stem = stem[m.end():]
    return stem.replace("_", " ")


def scene_of(name: str, suite: str) -> str:
    """Scene key: the SCENE prefix for libero_90/libero_10 files, the suite name for single-scene suites.

    A file from elsewhere with no SCENE prefix is its own scene.
    """
    if suite in SINGLE_SCENE_SUITES:
        return suite
    m = _SCENE_PREFIX.match(name)
    return m.group(1) if m else name
