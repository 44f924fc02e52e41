"""Every registered framework is complete: a CRD enum value, an example, a docs row.

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


def _docs_rows() -> dict[str, list[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| `([a-z]+)` \| ([^|]+) \| ([^|]+) \|", text, flags=re.M)
    return {name: [r.strip() for r in roles.split(",")] for name, roles, _ in rows}


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
