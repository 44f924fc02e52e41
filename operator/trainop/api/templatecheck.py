"""Checks a TrainingJob's pod template against the Kubernetes PodTemplateSpec schema.

The schema is `podtemplate.shared_schema()`, the very one the TrainingJob CRD embeds, so
`trainop render` and the operator refuse what the API server refuses: an unknown field (a
typo such as `contianers` or `comand`, which pod creation would otherwise drop silently), a
value of the wrong type, a quantity that does not parse, a missing required field. Each
problem names its path inside the template and, for an unknown field, the nearest known
name. Pure: no I/O beyond reading the vendored schema once.

Neighbours: `planner.check_semantics` calls `template_problems` for each role and raises
`InvalidJob` (phase Invalid, render exit code 2) with the first problem. Null values pass,
as on the API server, which prunes nulls of non-nullable fields.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from trainop.api.podtemplate import shared_schema


@dataclass(frozen=True)
class Problem:
    """One thing the API server would refuse: `path` is relative to the template."""

    path: str
    message: str


_TYPE_NAMES = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
}

_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def _what(value: Any) -> str:
    for name, check in _TYPE_CHECKS.items():
        if name != "number" and check(value):
            return _TYPE_NAMES[name]
    return "a number" if isinstance(value, float) else type(value).__name__


@cache
def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(text)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _unknown(key: str, known: Mapping[str, Any]) -> str:
    near = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if near:
        return f'unknown field; did you mean "{near[0]}"?'
    return "unknown field: not in the Kubernetes PodTemplateSpec here; remove it or fix its name"


def _int_or_string(schema: Mapping[str, Any], value: Any, path: str, out: list[Problem]) -> None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        quantity = "pattern" in schema
        example = ' (a quantity such as "500m" or "2Gi")' if quantity else ""
        out.append(Problem(path, f"must be an integer or a string{example}, got {_what(value)}"))
    elif (
        isinstance(value, str)
        and "pattern" in schema
        and not _pattern(schema["pattern"]).match(value)
    ):
        out.append(
            Problem(path, f'{value!r} is not a quantity: write e.g. "500m", "2Gi", "1.5" or 4')
        )


def _walk(schema: Mapping[str, Any], value: Any, path: str, out: list[Problem]) -> None:
    if value is None:
        return
    if schema.get("x-kubernetes-int-or-string"):
        _int_or_string(schema, value, path, out)
        return
    kind = schema.get("type")
    if kind and not _TYPE_CHECKS[kind](value):
        out.append(Problem(path, f"must be {_TYPE_NAMES[kind]}, got {_what(value)}"))
        return
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if kind == "array":
        for i, item in enumerate(value):
            _walk(schema.get("items", {}), item, f"{path}[{i}]", out)
    elif kind == "object":
        _walk_object(schema, value, path, out)


def _walk_object(
    schema: Mapping[str, Any], value: Mapping[str, Any], path: str, out: list[Problem]
) -> None:
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    for key, sub in value.items():
        where = _join(path, str(key))
        if properties is not None and key in properties:
            _walk(properties[key], sub, where, out)
        elif isinstance(extra, Mapping):
            _walk(extra, sub, where, out)
        else:
            out.append(Problem(where, _unknown(str(key), properties or {})))
    for key in schema.get("required", ()):
        if value.get(key) is None:
            out.append(Problem(_join(path, key), "required: this field must be set"))


def template_problems(template: Any) -> list[Problem]:
    """What the API server would refuse in a pod template, in document order."""
    out: list[Problem] = []
    _walk(shared_schema(), template, "", out)
    return out


__all__ = ["Problem", "template_problems"]
