"""The committed CRDs (crds/ and the chart's crds/) must equal what the models generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainop.cli.generate import crd_files

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("directory", ["crds", "charts/trainop/crds"])
def test_committed_crds_match_models(directory: str) -> None:
    want = crd_files()
    d = ROOT / directory
    have = {p.name: p.read_text() for p in d.glob("trainop.dev_*.yaml")}
    assert set(have) == set(want), f"{directory}: run `make generate`"
    for name, text in want.items():
        assert have[name] == text, (
            f"{directory}/{name} drifted from the models: run `make generate`"
        )


def test_every_schema_field_has_a_description() -> None:
    import yaml

    def walk(node: dict, path: str, missing: list[str]) -> None:
        for key, sub in node.get("properties", {}).items():
            p = f"{path}.{key}"
            if key not in ("apiVersion", "kind", "metadata") and not sub.get("description"):
                missing.append(p)
            walk(sub, p, missing)
        if isinstance(node.get("items"), dict):
            walk(node["items"], path + "[]", missing)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], path + "{}", missing)

    for name, text in crd_files().items():
        crd = yaml.safe_load(text)
        missing: list[str] = []
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "", missing)
        assert not missing, f"{name}: fields without description: {missing}"
