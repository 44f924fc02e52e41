"""Every function in operator/trainop reads in one screen: at most 80 lines, `def` to last line.

Counted with `ast` (end_lineno - lineno + 1, decorators not included), so docstrings and
comments count too. A function that grows past the limit is split by the decisions it makes
into named helpers, not exempted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import trainop

MAX_LINES = 80
ROOT = Path(trainop.__file__).parent

# (path under operator/trainop, function name): why it may be longer for now.
ALLOWED: dict[tuple[str, str], str] = {}


def _long_functions() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_LINES and (rel, node.name) not in ALLOWED:
                found.append(f"{rel}:{node.lineno} {node.name} has {lines} lines")
    return found


def test_no_function_is_longer_than_one_screen() -> None:
    assert ROOT.name == "trainop" and any(ROOT.rglob("*.py"))
    assert _long_functions() == [], f"split these into helpers (<= {MAX_LINES} lines each)"


def test_the_allow_list_names_only_functions_that_exist() -> None:
    names = {
        (path.relative_to(ROOT).as_posix(), node.name)
        for path in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert set(ALLOWED) <= names
