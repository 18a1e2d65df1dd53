"""Config values checked against their dataclass's declared field types, before anything is written or trained.

One pass for every config (train, run, demos, LLM, policy keyword arguments): unknown keys, wrong types and
(with `check_ranges`) out-of-range values raise ConfigError naming the file and the field (`grid.horizon`,
`train.epochs`). YAML 1.1 reads `1e-3` as a string; a float field takes any string Python reads as a finite float.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Callable

from clbench_jax.errors import ConfigError

_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping"}


def _describe(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _describe(a) for a in args)
    if tp is tuple or origin in (tuple, list):
        inner = [a for a in args if a is not Ellipsis]
        return f"a list of {_describe(inner[0]).split(' ', 1)[1]}s" if inner else "a list"
    return _NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def coerce(value, tp, *, file: str | None = None, field: str | None = None):
    """`value` as type `tp` (int, float, bool, str, dict, tuple[X, ...], X | None, Any) or ConfigError."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(value, a, file=file, field=field)
            except ConfigError:
                pass
    elif tp is tuple or origin in (tuple, list):
        if isinstance(value, (list, tuple)):
            inner = [a for a in args if a is not Ellipsis]
            if not inner:
                return tuple(value)
            return tuple(coerce(v, inner[0], file=file, field=f"{field}[{i}]") for i, v in enumerate(value))
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        v = value
        if isinstance(value, str):  # YAML 1.1: `1e-3` (no dot) is a string
            try:
                v = float(value)
            except ValueError:
                v = None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not math.isfinite(v):
                raise ConfigError(f"must be a finite number, not {value!r}", file=file, field=field)
            return float(v)
    elif isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"must be {_describe(tp)}, not {value!r}", file=file, field=field)


def typed_values(cls, values: dict, *, file: str | None = None, prefix: str = "") -> dict:
    """`values` (a config mapping) checked against dataclass `cls`: known keys only, each of its field's type."""
    if not isinstance(values, dict):
        raise ConfigError(f"must be a mapping of {cls.__name__} keys, not {values!r}", file=file,
                          field=prefix.rstrip(".") or None)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(names), key=str)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}; known: {', '.join(names)}", file=file,
                          field=f"{prefix}{unknown[0]}")
    return {k: coerce(v, hints[k], file=file, field=f"{prefix}{k}") for k, v in values.items()}


# A range rule: (field, test, what the value must be). Tests see the whole config (for rules across fields).
Rule = tuple[str, Callable[[Any], bool], str]


def check_ranges(cfg, rules: list[Rule], *, file: str | None = None, prefix: str = "") -> None:
    """The first broken rule -> ConfigError naming the field and what it must be."""
    for name, ok, must in rules:
        if not ok(cfg):
            raise ConfigError(f"must be {must}, not {getattr(cfg, name, None)!r}", file=file,
                              field=f"{prefix}{name}")


def at_least(name: str, low, optional: bool = False) -> Rule:
    """`name` >= low (or None when `optional`)."""
    return (name, lambda c: (optional and getattr(c, name) is None) or
            (getattr(c, name) is not None and getattr(c, name) >= low),
            f">= {low}" + (" or null" if optional else ""))


def one_of(name: str, choices) -> Rule:
    return (name, lambda c: getattr(c, name) in choices, "one of " + ", ".join(map(str, choices)))
