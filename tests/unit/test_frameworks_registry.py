"""Every registered framework is complete: a CRD enum value, an example, a docs row, and
the docs row's "runs on the real tier" column says what tests/real/ really runs.

The expectations are derived from the registry (trainop.frameworks.FRAMEWORKS), so adding a
framework is one module plus a registry row, and this test says what else is missing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from trainop.frameworks import FRAMEWORKS

ROOT = Path(__file__).resolve().parents[2]


def _crd_enum() -> list[str]:
    crd = yaml.safe_load((ROOT / "crds" / "trainop.dev_trainingjobs.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return list(
        schema["properties"]["spec"]["properties"]["framework"]["properties"]["name"]["enum"]
    )


def _example_frameworks() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "TrainingJob":
                out.setdefault(doc["spec"]["framework"]["name"], path.name)
    return out


def _docs_table() -> list[list[str]]:
    """The frameworks table of docs/architecture.md: its rows' cells, first is `name`."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| `([a-z]+)` \|(.*)\|$", text, flags=re.M)
    return [[name, *(cell.strip() for cell in rest.split("|"))] for name, rest in rows]


def _docs_rows() -> dict[str, list[str]]:
    return {row[0]: [r.strip() for r in row[1].split(",")] for row in _docs_table()}


def _real_tier_jobs() -> dict[str, str]:
    """framework -> the first examples/real/ file (by name) that a test in tests/real/
    applies; the tests name the files they run in tests/real/*.py."""
    sources = "".join(p.read_text() for p in sorted((ROOT / "tests" / "real").glob("*.py")))
    out: dict[str, str] = {}
    for path in sorted((ROOT / "examples" / "real").glob("*.yaml")):
        if f'"{path.name}"' not in sources:
            continue
        doc = yaml.safe_load(path.read_text())
        out.setdefault(doc["spec"]["framework"]["name"], f"examples/real/{path.name}")
    return out


def test_the_crd_enum_is_the_registry() -> None:
    assert sorted(_crd_enum()) == sorted(FRAMEWORKS)


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_each_framework_has_an_example(name: str) -> None:
    assert name in _example_frameworks(), f"add examples/<{name}>.yaml with framework {name}"


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_each_framework_has_a_docs_row_with_its_roles(name: str) -> None:
    rows = _docs_rows()
    assert name in rows, f"add a row for {name} to docs/architecture.md"
    assert rows[name] == list(FRAMEWORKS[name].roles)


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_the_real_tier_column_is_what_tests_real_runs(name: str) -> None:
    row = next(r for r in _docs_table() if r[0] == name)
    job = _real_tier_jobs().get(name)
    want = f"`{job}`" if job else "no"
    assert row[-1] == want, (
        f"docs/architecture.md, row {name}: the last column must be {want!r} "
        "(the examples/real/ file tests/real/ applies, or no)"
    )
