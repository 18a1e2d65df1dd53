"""BDDL reader: a line-tracking S-expression parser and `parse_bddl(path) -> TaskSpec`.

Follows LIBERO's reading (envs/bddl_utils.py): names and predicates are case-insensitive (LIBERO lower-cases
the whole file), a region is addressed as `<target>_<region>`, and the goal is `(And atom ...)`.
Unlike LIBERO it fails early, with typed errors that name file, line and token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Union

from clbench_jax.errors import BDDLError, MissingEntityError, UnknownCategoryError, UnknownPredicateError
from clbench_jax.tasks.spec import (PREDICATE_ARITY, REGISTERED_PREDICATES, SUITES, Atom, Region, TaskSpec,
                                    scene_of)


@dataclass(frozen=True)
class Sym:
    text: str
    line: int


@dataclass(frozen=True)
class SList:
    items: tuple["Node", ...]
    line: int  # line of the opening parenthesis


Node = Union[Sym, SList]


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """Split into '(' / ')' / atoms as (token, 1-based line, column); `;` starts a comment."""
    toks: list[tuple[str, int, int]] = []
    line, line_start, i, n = 1, 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
            line_start = i
        elif c.isspace():
            i += 1
        elif c == ";":
            while i < n and text[i] != "\n":
                i += 1
        elif c in "()":
            toks.append((c, line, i - line_start))
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in "();":
                j += 1
            toks.append((text[i:j], line, i - line_start))
            i = j
    return toks


def parse_sexprs(text: str, file: str) -> list[Node]:
    """All top-level forms of `text`; unbalanced parentheses raise BDDLError at the offending line."""
    stack: list[tuple[int, int, bool, list[Node]]] = []  # (line, column, starts its line, items so far)
    top: list[Node] = []
    suspect: int | None = None  # line of the first '(' that indentation says should have been closed
    prev_line = 0
    for tok, line, col in tokenize(text):
        leading, prev_line = line != prev_line, line
        if tok == "(":
            # A line-leading '(' at or left of a still-open line-leading '(' from an earlier line is a
            # sibling of it, so that one lacks its ')'. Only used to point at the culprit once the
            # parentheses are known to be unbalanced.
            if leading and suspect is None:
                suspect = next((ln for ln, c, lead, _ in stack if lead and ln < line and c >= col), None)
            stack.append((line, col, leading, []))
        elif tok == ")":
            if not stack:
                raise BDDLError("unbalanced parentheses: ')' with no matching '('", file=file, line=line, token=tok)
            open_line, _, _, items = stack.pop()
            (stack[-1][3] if stack else top).append(SList(tuple(items), open_line))
        else:
            (stack[-1][3] if stack else top).append(Sym(tok, line))
    if stack:
        line = suspect if suspect is not None else stack[-1][0]
        raise BDDLError("unbalanced parentheses: '(' is never closed", file=file, line=line, token="(")
    return top


# ---------------------------------------------------------------- small helpers

def _head(node: Node, file: str, what: str) -> str:
    if not isinstance(node, SList) or not node.items or not isinstance(node.items[0], Sym):
        tok = node.text if isinstance(node, Sym) else "("
        raise BDDLError(f"expected a ({what} ...) list", file=file, line=node.line, token=tok)
    return node.items[0].text.lower()


def _syms(nodes: Iterable[Node], file: str, what: str) -> list[Sym]:
    out = []
    for n in nodes:
        if not isinstance(n, Sym):
            raise BDDLError(f"{what}: expected a name, found a nested list", file=file, line=n.line, token="(")
        out.append(n)
    return out


def _number(sym: Node, file: str, what: str) -> float:
    if not isinstance(sym, Sym):
        raise BDDLError(f"{what}: expected a number, found a list", file=file, line=sym.line, token="(")
    try:
        v = float(sym.text)
    except ValueError:
        raise BDDLError(f"{what}: not a number", file=file, line=sym.line, token=sym.text) from None
    if not math.isfinite(v):
        raise BDDLError(f"{what}: number is not finite", file=file, line=sym.line, token=sym.text)
    return v


def _tuples(attr: SList, width: int, file: str, what: str) -> tuple[tuple[float, ...], ...]:
    """`(:key ((a b ..) (c d ..)))` -> tuples of `width` numbers."""
    if len(attr.items) != 2 or not isinstance(attr.items[1], SList):
        raise BDDLError(f"{what}: expected ({attr.items[0].text} ((...) ...))", file=file, line=attr.line,
                        token=attr.items[0].text)
    out = []
    for row in attr.items[1].items:
        if not isinstance(row, SList) or len(row.items) != width:
            tok = row.text if isinstance(row, Sym) else "("
            raise BDDLError(f"{what}: each entry needs {width} numbers", file=file, line=row.line, token=tok)
        out.append(tuple(_number(x, file, what) for x in row.items))
    return tuple(out)


# ---------------------------------------------------------------- atoms (shared with adapter.parse_goal_text)

def parse_atom(node: Node, file: str) -> Atom:
    """`(On a b)` -> Atom('on', ('a', 'b')). Unknown predicate -> UnknownPredicateError."""
    if not isinstance(node, SList) or not node.items or not isinstance(node.items[0], Sym):
        tok = node.text if isinstance(node, Sym) else "("
        raise BDDLError("expected a predicate like (On a b)", file=file, line=node.line, token=tok)
    head = node.items[0]
    pred = head.text.lower()
    if pred not in REGISTERED_PREDICATES:
        raise UnknownPredicateError(f"unknown predicate; LIBERO registers {sorted(REGISTERED_PREDICATES)}",
                                    file=file, line=head.line, token=head.text)
    args = tuple(s.text.lower() for s in _syms(node.items[1:], file, f"arguments of {head.text}"))
    arity = PREDICATE_ARITY[pred]
    if arity is not None and len(args) != arity:
        raise BDDLError(f"{head.text} takes {arity} argument(s), got {len(args)}", file=file, line=head.line,
                        token=head.text)
    if arity == 2 and args[0] == args[1]:
        raise BDDLError(f"({head.text} {args[0]} {args[1]}) relates an entity to itself", file=file, line=head.line,
                        token=node.items[1].text)
    return Atom(pred, args, head.line)


def parse_goal_node(node: Node, file: str) -> tuple[Atom, ...]:
    """`(And a1 a2 ...)` or a single atom -> atoms (the goal is their conjunction)."""
    if isinstance(node, SList) and node.items and isinstance(node.items[0], Sym) \
            and node.items[0].text.lower() == "and":
        atoms = tuple(parse_atom(n, file) for n in node.items[1:])
        if not atoms:
            raise BDDLError("empty (And) goal", file=file, line=node.line, token=node.items[0].text)
        return atoms
    return (parse_atom(node, file),)


def check_entities(atoms: Iterable[Atom], entities: set[str], file: str, what: str,
                   dangling: dict[str, tuple[str, int]] | None = None) -> None:
    """Every argument names an entity. A region declared on an absent :target (`dangling`: name -> (target, line
    of its :target)) is named at its declaration, where the mistake is."""
    for a in atoms:
        for arg in a.args:
            if arg in (dangling or {}):
                target, line = dangling[arg]
                raise MissingEntityError(f"region {arg} (used by {what} at line {a.line}) targets {target}, which is "
                                         "not an object or fixture", file=file, line=line, token=target)
            if arg not in entities:
                raise MissingEntityError(f"{what} names an entity that is not an object, fixture or region",
                                         file=file, line=a.line, token=arg)


# ---------------------------------------------------------------- sections

def _typed_list(node: SList, file: str, what: str, known: set[str] | None) -> dict[str, str]:
    """`a b - cat c - cat2` -> {a: cat, b: cat, c: cat2}."""
    out: dict[str, str] = {}
    pending: list[Sym] = []
    syms = _syms(node.items[1:], file, what)
    i = 0
    while i < len(syms):
        s = syms[i]
        if s.text == "-":
            if i + 1 >= len(syms) or syms[i + 1].text == "-":
                raise BDDLError(f"{what}: '-' must be followed by a category", file=file, line=s.line, token="-")
            if not pending:
                raise BDDLError(f"{what}: category with no names before it", file=file, line=s.line, token="-")
            cat = syms[i + 1]
            if known is not None and cat.text.lower() not in known:
                raise UnknownCategoryError(f"{what}: unknown category", file=file, line=cat.line, token=cat.text)
            for p in pending:
                out[p.text.lower()] = cat.text.lower()
            pending = []
            i += 2
        else:
            if s.text.lower() in out or any(p.text.lower() == s.text.lower() for p in pending):
                raise BDDLError(f"{what}: name declared twice", file=file, line=s.line, token=s.text)
            pending.append(s)
            i += 1
    if pending:
        raise BDDLError(f"{what}: name has no '- category'", file=file, line=pending[0].line,
                        token=pending[0].text)
    return out


def _region(node: Node, file: str) -> tuple[Region, int, str]:
    """One region definition -> (Region, line of its :target, target token as written)."""
    local = _head(node, file, "region_name")
    target: Sym | None = None
    ranges: tuple = ()
    yaws: tuple = ()
    rgba = None
    for attr in node.items[1:]:
        key = _head(attr, file, ":attribute")
        if key == ":target":
            if len(attr.items) != 2 or not isinstance(attr.items[1], Sym):
                raise BDDLError("(:target name) takes one name", file=file, line=attr.line, token=local)
            target = attr.items[1]
        elif key == ":ranges":
            ranges = _tuples(attr, 4, file, f"region {local} :ranges")
            for r, row in zip(ranges, attr.items[1].items):
                if r[0] > r[2] or r[1] > r[3]:
                    raise BDDLError(f"region {local}: range needs x0 <= x1 and y0 <= y1", file=file,
                                    line=row.line, token=" ".join(s.text for s in row.items))
        elif key == ":yaw_rotation":
            yaws = _tuples(attr, 2, file, f"region {local} :yaw_rotation")
        elif key == ":rgba":
            if len(attr.items) != 2 or not isinstance(attr.items[1], SList) or len(attr.items[1].items) != 4:
                raise BDDLError(f"region {local}: (:rgba (r g b a)) needs 4 numbers", file=file,
                                line=attr.line, token=":rgba")
            rgba = tuple(_number(x, file, f"region {local} :rgba") for x in attr.items[1].items)
        else:
            raise BDDLError(f"region {local}: unknown attribute", file=file, line=attr.line,
                            token=attr.items[0].text)
    if target is None:
        raise BDDLError(f"region {local} has no (:target ...)", file=file, line=node.line, token=local)
    tname = target.text.lower()
    region = Region(name=f"{tname}_{local}", local_name=local, target=tname, ranges=ranges, yaw_ranges=yaws,
                    rgba=rgba)
    return region, target.line, target.text


def parse_bddl(path: str | Path, *, suite: str | None = None,
               known_categories: set[str] | None = None) -> TaskSpec:
    """Read one LIBERO BDDL file. `suite` defaults to the parent folder name when it is a LIBERO suite."""
    path = Path(path)
    file = str(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise BDDLError(f"cannot read BDDL file: {e.strerror}", file=file) from None
    return parse_bddl_text(text, file=file, name=path.stem,
                           suite=suite or (path.parent.name if path.parent.name in SUITES else "custom"),
                           known_categories=known_categories)


def parse_bddl_text(text: str, *, file: str, name: str, suite: str,
                    known_categories: set[str] | None = None) -> TaskSpec:
    known = {c.lower() for c in known_categories} if known_categories is not None else None
    forms = parse_sexprs(text, file)
    if len(forms) != 1 or _head(forms[0], file, "define") != "define":
        bad = forms[1] if len(forms) > 1 else (forms[0] if forms else None)
        raise BDDLError("a BDDL file is exactly one (define ...) form", file=file,
                        line=bad.line if bad else 1, token=bad.text if isinstance(bad, Sym) else "(")
    sections: dict[str, SList] = {}
    for sec in forms[0].items[1:]:
        key = _head(sec, file, "section")
        if key in sections:
            raise BDDLError("section appears twice", file=file, line=sec.line, token=sec.items[0].text)
        sections[key] = sec
    for required in ("problem", ":objects", ":goal"):
        if required not in sections:
            raise BDDLError(f"missing ({required} ...) section", file=file, line=forms[0].line, token=required)
    unknown = set(sections) - {"problem", ":domain", ":requirements", ":language", ":regions", ":fixtures",
                               ":objects", ":obj_of_interest", ":init", ":goal"}
    if unknown:
        sec = sections[sorted(unknown)[0]]
        raise BDDLError("unknown section", file=file, line=sec.line, token=sec.items[0].text)

    prob = _syms(sections["problem"].items[1:], file, "problem")
    if len(prob) != 1:
        raise BDDLError("(problem NAME) takes one name", file=file, line=sections["problem"].line, token="problem")
    language = " ".join(s.text for s in _syms(sections[":language"].items[1:], file, ":language")) \
        if ":language" in sections else ""

    fixtures = _typed_list(sections[":fixtures"], file, ":fixtures", known) if ":fixtures" in sections else {}
    objects = _typed_list(sections[":objects"], file, ":objects", known)
    for n in objects:
        if n in fixtures:
            raise BDDLError("name is both a fixture and an object", file=file, line=sections[":objects"].line,
                            token=n)
    things = set(fixtures) | set(objects)

    regions: dict[str, Region] = {}
    dangling: dict[str, tuple[str, int]] = {}  # region name -> (absent target, line of its :target)
    for node in sections[":regions"].items[1:] if ":regions" in sections else ():
        reg, target_line, _ = _region(node, file)
        if reg.name in regions or reg.name in dangling or reg.name in things:
            raise BDDLError("region full name declared twice", file=file, line=node.line, token=reg.local_name)
        if reg.target not in things:
            # LIBERO ignores such regions (libero_goal declares regions on an absent bowl_drainer_1);
            # keep them out of the entity set so a reference to one fails with MissingEntityError at its :target.
            dangling[reg.name] = (reg.target, target_line)
            continue
        regions[reg.name] = reg
    entities = things | set(regions)

    ooi = _syms(sections[":obj_of_interest"].items[1:], file, ":obj_of_interest") \
        if ":obj_of_interest" in sections else []
    for s in ooi:
        if s.text.lower() in dangling:
            check_entities([Atom("up", (s.text.lower(),), s.line)], entities, file, ":obj_of_interest", dangling)
        if s.text.lower() not in entities:
            raise MissingEntityError(":obj_of_interest names an unknown entity", file=file, line=s.line,
                                     token=s.text)

    init = tuple(parse_atom(n, file) for n in sections[":init"].items[1:]) if ":init" in sections else ()
    goal_sec = sections[":goal"]
    if len(goal_sec.items) != 2:
        raise BDDLError("(:goal ...) takes exactly one (And ...) form", file=file, line=goal_sec.line,
                        token=":goal")
    goal = parse_goal_node(goal_sec.items[1], file)
    check_entities(init, entities, file, ":init", dangling)
    check_entities(goal, entities, file, ":goal", dangling)

    return TaskSpec(name=name, suite=suite, scene=scene_of(name, suite), language=language,
                    problem=prob[0].text, file=file, fixtures=fixtures, objects=objects, regions=regions,
                    obj_of_interest=tuple(s.text.lower() for s in ooi), init=init, goal=goal,
                    dangling_regions=tuple(dangling))  # declaration order
