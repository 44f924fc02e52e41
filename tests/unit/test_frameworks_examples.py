"""The framework example TrainingJobs: DESIGN.md shape, valid roles, and wirable as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainop import frameworks as fw
from trainop.api import constants as c
from trainop.frameworks import Member, WiringInput, member_host

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASES = [
    pytest.param("tensorflow-multiworker.yaml", "tensorflow", id="tensorflow"),
    pytest.param("jax.yaml", "jax", id="jax"),
    pytest.param("mpi-horovod.yaml", "mpi", id="mpi"),
    pytest.param("paddle.yaml", "paddle", id="paddle"),
    pytest.param("mxnet.yaml", "mxnet", id="mxnet"),
]


def load(name: str) -> dict[str, Any]:
    docs = list(yaml.safe_load_all((EXAMPLES / name).read_text()))
    assert len(docs) == 1, "one TrainingJob per example"
    doc = docs[0]
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize(("name", "framework"), CASES)
def test_example_has_design_shape(name: str, framework: str) -> None:
    doc = load(name)
    assert doc["apiVersion"] == c.API_VERSION
    assert doc["kind"] == "TrainingJob"
    assert doc["metadata"]["name"] and doc["metadata"]["namespace"]
    spec = doc["spec"]
    assert spec["framework"]["name"] == framework
    # Images come from the catalog through framework/cuda, never spelled out.
    assert not spec.get("image")
    assert isinstance(spec["cuda"], str)
    assert spec["placement"]["topology"] in {"none", "node", "rack", "block"}
    assert spec["placement"]["mode"] in {"Required", "Preferred"}
    for role, rs in spec["replicaSpecs"].items():
        assert isinstance(rs["replicas"], int) and 1 <= rs["replicas"] <= 4, role
        assert isinstance(rs["gpus"], int) and 0 <= rs["gpus"] <= 8, role
        containers = rs["template"]["spec"]["containers"]
        assert containers, role
        for ctr in containers:
            assert ctr["name"]
            assert "image" not in ctr, role
            assert ctr["command"] and all(isinstance(a, str) for a in ctr["command"])


@pytest.mark.parametrize(("name", "framework"), CASES)
def test_example_roles_are_valid(name: str, framework: str) -> None:
    spec = load(name)["spec"]
    roles = {role: rs["replicas"] for role, rs in spec["replicaSpecs"].items()}
    assert fw.validate(spec["framework"]["name"], roles) == []


@pytest.mark.parametrize(("name", "framework"), CASES)
def test_example_wires(name: str, framework: str) -> None:
    doc = load(name)
    job, ns = doc["metadata"]["name"], doc["metadata"]["namespace"]
    spec = fw.get(framework)
    members = tuple(
        Member(role, i, None, rs["gpus"], member_host(job, ns, role, i, served=True))
        for role, rs in doc["spec"]["replicaSpecs"].items()
        for i in range(rs["replicas"])
    )
    w = fw.wire(framework, WiringInput(job, ns, members, spec.default_port))
    assert set(w.env) == {m.key for m in members}
