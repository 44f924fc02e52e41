"""A Python function made into what a TrainingJob carries: its source, its JSON arguments
and the trainer integrations it needs, as the TRAINOP_SDK_FUNC payload that
trainop.launcher.sdkrun runs in every training process. Pure: no I/O beyond reading the
function's own source file through `inspect`.

The function must be self-contained, as Kubeflow's CustomTrainer asks
(https://www.kubeflow.org/docs/components/trainer/getting-started/): imports inside it, no
closure over local variables (refused, naming them), arguments that JSON can carry
(refused, naming the argument). Module-level names it reads are not sent: they would be
missing in the pod, so the ones it reads that no builtin provides are named in the error.

Trainer detection (`detect_integrations`), from the source's syntax tree, never by running
it: a function that imports `transformers` (or `trl`, whose trainers subclass
transformers' Trainer) and names something ending in `Trainer` from it gets the Hugging
Face integration; one that imports `lightning`, `lightning.pytorch` or `pytorch_lightning`
and names `Trainer` gets the Lightning integration. sdkrun then installs the callback into
the trainer class before the function runs (trainop.integrations.*.install).

Neighbours: trainop.launcher.sdkrun (the payload format and the runner), trainop.sdk.jobs
(puts the payload in the pod template), trainop.sdk.local.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainop.launcher.sdkrun import MAX_PAYLOAD, encode_payload
from trainop.sdk.errors import FunctionError

TRANSFORMERS = "transformers"
LIGHTNING = "lightning"
_HF_MODULES = ("transformers", "trl")
_PL_MODULES = ("lightning", "lightning.pytorch", "pytorch_lightning")


@dataclass(frozen=True)
class Packed:
    """A function ready to travel: its name, source, arguments, integrations and payload."""

    name: str
    source: str
    kwargs: dict[str, Any]
    integrations: tuple[str, ...]
    payload: str


def function_source(func: Callable[..., Any]) -> tuple[str, str]:
    """(name, source from its `def` line, dedented; decorators dropped)."""
    name = getattr(func, "__name__", "")
    if not inspect.isfunction(func) or name == "<lambda>":
        raise FunctionError("func", f"must be a function defined with def, got {func!r}")
    try:
        raw = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError) as err:
        raise FunctionError(
            "func", f"the source of {name} cannot be read ({err}); define it in a file or cell"
        ) from err
    tree = ast.parse(raw)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        raise FunctionError("func", f"{name} is not a plain def function")
    if isinstance(node, ast.AsyncFunctionDef):
        raise FunctionError("func", f"{name} is async; train() runs a plain def function")
    lines = raw.splitlines(keepends=True)
    return name, "".join(lines[node.lineno - 1 :])


def _free_globals(source: str, func: Callable[..., Any]) -> list[str]:
    """Names the function reads from its module that are not builtins: absent in the pod."""
    code = func.__code__
    local = set(code.co_varnames) | set(code.co_cellvars)
    tree = ast.parse(source)
    assigned = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    imported = {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    defined = {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
    }
    defined |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    defined |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name}
    hints = [
        a
        for n in ast.walk(tree)
        for a in (
            [n.annotation]
            if isinstance(n, ast.arg | ast.AnnAssign)
            else [n.returns]
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            else []
        )
        if a is not None
    ]
    in_hints = {id(x) for h in hints for x in ast.walk(h)}  # never evaluated (sdkrun)
    read = {
        n.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in in_hints
    }
    known = local | assigned | imported | defined | set(dir(builtins)) | {func.__name__}
    return sorted(read - known)


def _json_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (kwargs or {}).items():
        try:
            out[str(key)] = json.loads(json.dumps(value))
        except (TypeError, ValueError) as err:
            raise FunctionError(
                f"args.{key}", f"must be JSON (numbers, strings, lists, dicts): {err}"
            ) from err
    return out


def _imports(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(modules imported, names taken from them by `from m import x`)."""
    modules: set[str] = set()
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            modules.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module:
            modules.add(n.module)
            names.update(f"{n.module}:{a.name}" for a in n.names)
    return modules, names


def detect_integrations(source: str) -> tuple[str, ...]:
    """Which trainop trainer integrations the function needs (see the module docstring)."""
    tree = ast.parse(source)
    modules, names = _imports(tree)
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found: list[str] = []

    def uses(roots: tuple[str, ...], trainer: Callable[[str], bool]) -> bool:
        rooted = [m for m in modules if m in roots or m.split(".")[0] in roots]
        if not rooted:
            return False
        taken = [x.split(":", 1)[1] for x in names if x.split(":", 1)[0] in rooted]
        return any(trainer(t) for t in taken) or any(trainer(a) for a in attrs)

    if uses(_HF_MODULES, lambda n: n.endswith("Trainer")):
        found.append(TRANSFORMERS)
    if uses(_PL_MODULES, lambda n: n == "Trainer"):
        found.append(LIGHTNING)
    return tuple(found)


def pack(func: Callable[..., Any], kwargs: Mapping[str, Any] | None = None) -> Packed:
    """Check `func` and its arguments and build the payload; FunctionError names the problem."""
    name, source = function_source(func)
    if func.__code__.co_freevars:
        raise FunctionError(
            "func",
            f"{name} uses variables of an enclosing function ({', '.join(func.__code__.co_freevars)}): "
            "pass them as args instead",
        )
    missing = _free_globals(source, func)
    if missing:
        raise FunctionError(
            "func",
            f"{name} reads names defined outside it ({', '.join(missing)}), which do not travel "
            "with the job: import or define them inside the function, or pass them as args",
        )
    params = inspect.signature(func).parameters
    kw = _json_kwargs(kwargs)
    unknown = [k for k in kw if k not in params] if not _takes_kwargs(params) else []
    if unknown:
        raise FunctionError(f"args.{unknown[0]}", f"{name}() takes no argument {unknown[0]!r}")
    integrations = detect_integrations(source)
    payload = encode_payload(name, source, kw, integrations)
    if len(payload) > MAX_PAYLOAD:
        raise FunctionError(
            "func",
            f"{name} and its args are {len(payload)} bytes encoded, over the {MAX_PAYLOAD} an "
            "environment variable may carry: move data into the image or a volume",
        )
    return Packed(name, source, kw, integrations, payload)


def _takes_kwargs(params: Mapping[str, inspect.Parameter]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
