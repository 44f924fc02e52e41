"""Reads the CLI's input files (`kubectl get ... -o yaml` output, job files) into checked objects.

Shared by `trainop render` and `trainop catalog`; every problem is an InputError whose message
names the file (or flag) and the document, so commands print one line and exit 2, never a
traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NoReturn

import click

from trainop.yamlio import DEFAULT_LIMITS, YamlInputError, load_yaml_documents

STDIN = "-"
EXIT_INVALID = 2  # DESIGN.md: invalid input, as click itself exits on a usage error


class InputError(ValueError):
    """An input file is unreadable or holds the wrong objects; the message says which."""


def exit_invalid(message: str) -> NoReturn:
    """Print `error: message` to stderr and exit 2."""
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_INVALID)


def read_text(path: str, max_bytes: int = DEFAULT_LIMITS.max_bytes) -> str:
    """The file's text; '-' reads standard input. More than `max_bytes` is an InputError, found
    without reading past the limit (a /dev/zero or a runaway pipe does not fill memory)."""
    name = "<stdin>" if path == STDIN else path
    try:
        if path == STDIN:
            stream = getattr(sys.stdin, "buffer", None)  # None when stdin is a text-only stand-in
            data = (
                stream.read(max_bytes + 1)
                if stream is not None
                else sys.stdin.read(max_bytes + 1).encode("utf-8")
            )
        else:
            with open(path, "rb") as f:
                data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise InputError(
                f"{name}: more than {max_bytes:,} bytes, over the limit for YAML input"
            )
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{name}: not a text file (expected YAML)") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None


def read_documents(path: str) -> list[dict[str, Any]]:
    """Every object in the YAML stream at `path`, v1 Lists flattened, empty documents skipped."""
    try:
        return load_yaml_documents(read_text(path), source="<stdin>" if path == STDIN else path)
    except YamlInputError as exc:
        raise InputError(str(exc)) from None


def object_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def read_objects(path: str, kind: str, flag: str) -> list[dict[str, Any]]:
    """The `kind` objects (e.g. Node from `kubectl get nodes -o yaml`) of the file given to
    `flag`; another kind, or an object without metadata.name, is an InputError."""
    out = []
    for i, obj in enumerate(read_documents(path)):
        got = obj.get("kind")
        if got != kind:
            what = f"a {got}" if isinstance(got, str) and got else "an object without kind"
            raise InputError(
                f"{flag} {path}: object {i + 1} is {what}, expected {kind} objects "
                f"(`kubectl get {kind.lower()}s -o yaml` output)"
            )
        name = object_name(obj)
        if not name:
            raise InputError(f"{flag} {path}: {kind} {i + 1} has no metadata.name")
        labels = obj["metadata"].get("labels") or {}
        # The API server stores label values as strings; an unquoted `count: 8` in a
        # hand-written file would otherwise reach the GFD parser as an int.
        bad = (
            [k for k, v in labels.items() if not isinstance(v, str)]
            if isinstance(labels, dict)
            else ["*"]
        )
        if bad:
            raise InputError(
                f"{flag} {path}: {kind} {name}: metadata.labels.{bad[0]}: label "
                "values must be strings (quote them)"
            )
        out.append(obj)
    return out
