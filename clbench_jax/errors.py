"""Typed errors. Every error names where the bad input came from (file, task, line, field, token)."""

from __future__ import annotations


class ClbenchError(Exception):
    """Base class: a clear message that names the file / task / field at fault."""

    def __init__(self, message: str, *, file: str | None = None, task: str | None = None,
                 line: int | None = None, field: str | None = None, token: str | None = None):
        self.message = message  # without the location (to re-raise it with more of the location)
        self.file, self.task, self.line, self.field, self.token = file, task, line, field, token
        where = []
        if file:
            where.append(f"{file}:{line}" if line is not None else str(file))
        if task:
            where.append(f"task {task}")
        if field:
            where.append(f"field {field}")
        if token is not None:
            where.append(f"token {token!r}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)


class BDDLError(ClbenchError):
    """A BDDL file is malformed (unbalanced parentheses, missing section, bad number)."""


class UnknownPredicateError(ClbenchError):
    """A predicate name that LIBERO does not register (or this project cannot evaluate)."""


class UnknownCategoryError(ClbenchError):
    """An object or fixture category with no stand-in model."""


class MissingEntityError(ClbenchError):
    """A goal or init predicate names an entity (object, fixture, region) absent from the scene."""


class UnknownTaskError(ClbenchError):
    """A task name or suite that does not exist."""


class DataFileError(ClbenchError):
    """A data file (HDF5, JSON) is missing a key, or has the wrong shape or dtype, or is truncated."""


class ConfigError(ClbenchError):
    """A config file, flag or argument has a value of the wrong type or out of range, or names something unknown."""


class OutputError(ClbenchError):
    """An output path cannot be written (no permission, a file where a folder should be, a shipped file)."""


class TrainingError(ClbenchError):
    """Training went numerically bad (a non-finite loss): names the stage, task and epoch."""


class PhysicsError(ClbenchError):
    """Physics went numerically bad (NaN, huge velocities)."""


class ObservationError(ClbenchError, ValueError):
    """An observation batch handed to a policy or augmentation lacks a key or has the wrong shape or dtype."""


class AdapterError(ClbenchError, ValueError):
    """An adapter spec that cannot be built on a policy (a LoRA rank larger than the layer, an unknown layer)."""


class PretrainedError(ClbenchError):
    """A pretrained checkpoint that is missing, unfinished, or made for another policy."""
