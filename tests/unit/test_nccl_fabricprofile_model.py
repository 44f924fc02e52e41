"""Tests of the FabricProfile pydantic models: aliases, strictness, descriptions, validators."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from trainop.api.fabricprofile import DEBUG_ONLY_KNOBS, FabricProfile, FabricProfileSpec
from trainop.nccl import BUILTIN_PROFILES, EXAMPLE_ROCE_PROFILE

CAMEL_BODY: dict[str, Any] = {
    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "priority": 5,
    "fabric": "RoCE",
    "rdmaResource": "rdma/rdma_shared_device_a",
    "rdmaResourcePerPod": 2,
    "hcas": ["mlx5_0", "mlx5_1:1"],
    "socketIfname": "eth0",
    "gidIndex": 3,
    "trafficClass": 106,
    "sharp": False,
    "nvls": True,
    "gdrLevel": "PHB",
    "extraEnv": {"NCCL_IB_TIMEOUT": "22"},
    "debugEnv": {"NCCL_ALGO": "Ring"},
    "shmSize": "32Gi",
    "bandwidth": {
        "nvlinkGbps": 370.0,
        "networkGbpsPerGpu": 50.0,
        "spineOversubscription": 1.0,
        "blockOversubscription": 2.0,
    },
    "multusNetworks": "roce-net",
}


def test_camel_case_aliases_round_trip() -> None:
    spec = FabricProfileSpec.model_validate(CAMEL_BODY)
    assert spec.rdma_resource_per_pod == 2
    assert spec.gid_index == 3
    assert spec.shm_size == "32Gi"
    assert spec.model_dump(by_alias=True) == CAMEL_BODY


def test_field_names_are_accepted_too() -> None:
    spec = FabricProfileSpec(fabric="InfiniBand", rdma_resource_per_pod=3, socket_ifname="ib0")
    assert spec.rdma_resource_per_pod == 3
    assert spec.model_dump(by_alias=True)["socketIfname"] == "ib0"


def test_defaults() -> None:
    spec = FabricProfileSpec.model_validate({"fabric": "InfiniBand"})
    assert spec.node_selector == {}
    assert spec.priority == 0
    assert spec.rdma_resource is None
    assert spec.rdma_resource_per_pod == 1
    assert spec.hcas == []
    assert spec.sharp is False
    assert spec.nvls is None
    assert spec.shm_size == "16Gi"
    assert spec.extra_env == {} and spec.debug_env == {}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"fabric": "TCP", "bogus": 1}, id="unknown-field"),
        pytest.param({"fabric": "TCP", "shm_size_gi": 16}, id="unknown-snake-field"),
    ],
)
def test_extra_fields_are_forbidden(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        FabricProfileSpec.model_validate(body)


def test_extra_fields_forbidden_on_wrapper() -> None:
    with pytest.raises(ValidationError):
        FabricProfile.model_validate({"name": "x", "spec": {"fabric": "TCP"}, "kind": "Foo"})


@pytest.mark.parametrize("model", [FabricProfileSpec, FabricProfile])
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    for name, field in model.model_fields.items():
        assert field.description and len(field.description) > 10, name


def test_json_schema_carries_descriptions_under_camel_names() -> None:
    props = FabricProfileSpec.model_json_schema(by_alias=True)["properties"]
    assert set(props) == set(CAMEL_BODY)
    assert all(p.get("description") for p in props.values())
    assert props["fabric"]["enum"] == ["InfiniBand", "RoCE", "TCP"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({"fabric": "Ethernet"}, "InfiniBand", id="unknown-fabric"),
        pytest.param({"fabric": "InfiniBand", "hcas": ["=mlx5_0"]}, "not an HCA", id="hca-prefix"),
        pytest.param(
            {"fabric": "InfiniBand", "hcas": ["mlx5_0", "mlx5_0"]}, "once", id="hca-duplicate"
        ),
        pytest.param({"fabric": "TCP", "shmSize": "16 GB"}, "quantity", id="shm-not-quantity"),
        pytest.param({"fabric": "TCP", "shmSize": "lots"}, "quantity", id="shm-word"),
        pytest.param(
            {"fabric": "InfiniBand", "extraEnv": {"NCCL_ALGO": "Ring"}},
            "debugEnv",
            id="debug-knob-in-extraEnv",
        ),
        pytest.param(
            {"fabric": "InfiniBand", "extraEnv": {"NCCL_P2P_LEVEL": "NVL"}},
            "debug-only",
            id="p2p-level-in-extraEnv",
        ),
        pytest.param(
            {"fabric": "TCP", "extraEnv": {"BAD-NAME": "1"}}, "environment", id="bad-env-name"
        ),
        pytest.param(
            {"fabric": "TCP", "debugEnv": {"1X": "1"}}, "environment", id="bad-debug-env-name"
        ),
        pytest.param({"fabric": "TCP", "hcas": ["mlx5_0"]}, "hcas", id="tcp-with-hcas"),
        pytest.param(
            {"fabric": "TCP", "rdmaResource": "rdma/x"}, "rdmaResource", id="tcp-with-rdma"
        ),
        pytest.param({"fabric": "TCP", "gdrLevel": "PIX"}, "gdrLevel", id="tcp-with-gdr"),
        pytest.param({"fabric": "InfiniBand", "gidIndex": 3}, "gidIndex", id="ib-with-gid"),
        pytest.param({"fabric": "TCP", "trafficClass": 3}, "trafficClass", id="tcp-with-tc"),
        pytest.param({"fabric": "RoCE", "sharp": True}, "sharp", id="roce-with-sharp"),
        pytest.param({"fabric": "RoCE", "trafficClass": 256}, "255", id="tc-range"),
        pytest.param({"fabric": "RoCE", "gidIndex": -1}, "0", id="gid-negative"),
        pytest.param({"fabric": "RoCE", "rdmaResourcePerPod": 0}, "1", id="per-pod-zero"),
        pytest.param({"fabric": "RoCE", "gdrLevel": "NVL"}, "LOC", id="gdr-level-enum"),
    ],
)
def test_invalid_specs(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        FabricProfileSpec.model_validate(body)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"fabric": "InfiniBand", "hcas": ["mlx5_0:1", "mlx5_10"]}, id="hca-ports"),
        pytest.param({"fabric": "TCP", "shmSize": "512Mi"}, id="shm-mi"),
        pytest.param({"fabric": "TCP", "shmSize": "1.5G"}, id="shm-decimal"),
        pytest.param(
            {"fabric": "TCP", "multusNetworks": "fast-eth", "socketIfname": "net1"},
            id="tcp-on-secondary-net",
        ),
        pytest.param(
            {"fabric": "InfiniBand", "debugEnv": {k: "0" for k in DEBUG_ONLY_KNOBS}},
            id="all-debug-knobs-in-debugEnv",
        ),
        pytest.param({"fabric": "InfiniBand", "sharp": True}, id="ib-sharp"),
    ],
)
def test_valid_specs(body: dict[str, Any]) -> None:
    FabricProfileSpec.model_validate(body)


def test_wrapper_requires_a_name() -> None:
    with pytest.raises(ValidationError):
        FabricProfile.model_validate({"name": "", "spec": {"fabric": "TCP"}})


@pytest.mark.parametrize("profile", [*BUILTIN_PROFILES, EXAMPLE_ROCE_PROFILE], ids=lambda p: p.name)
def test_shipped_profiles_round_trip_through_camel_json(profile: FabricProfile) -> None:
    body = profile.model_dump(by_alias=True, mode="json")
    assert FabricProfile.model_validate(body) == profile
