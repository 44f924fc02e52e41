"""Tests of nccl_settings: env per built-in profile and gang shape, precedence, knobs, HCAs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from trainop.api import constants as c
from trainop.api.fabricprofile import DEBUG_ONLY_KNOBS, FabricProfile, FabricProfileSpec
from trainop.nccl import (
    BUILTIN_PROFILES,
    EXAMPLE_ROCE_PROFILE,
    NcclSettings,
    hca_for_gpu,
    hcas_for_gpus,
    ib_hca_value,
    nccl_settings,
    select_profile,
)
from trainop.nccl.profiles import DGX1_HCAS, DGX_A100_HCAS, DGX_H100_HCAS

RDMA = {c.DEFAULT_RDMA_RESOURCE: 1}
IPC = ("IPC_LOCK",)
MULTUS = "k8s.v1.cni.cncf.io/networks"

DGX1 = select_profile({c.GFD_PRODUCT: "Tesla-V100-SXM2-32GB"}, [])
A100 = select_profile({c.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB"}, [])
H100 = select_profile({c.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3"}, [])
TCP = select_profile({c.GFD_PRODUCT: "Tesla-T4"}, [])
ROCE = EXAMPLE_ROCE_PROFILE

DGX1_IB = {"NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_2,mlx5_3"}
A100_IB = {"NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9"}
H100_IB = {"NCCL_IB_HCA": "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"}
ROCE_ENV = {
    "NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_TC": "106",
}
TCP_ENV = {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}

# Gang shapes: (gpus_per_pod, pods_in_gang, nodes_in_gang, whole_node, gpus_on_node)
SINGLE = {"gpus_per_pod": 8, "pods_in_gang": 1, "nodes_in_gang": 1, "whole_node": True}
MULTI = {"gpus_per_pod": 8, "pods_in_gang": 4, "nodes_in_gang": 4, "whole_node": True}
PARTIAL = {"gpus_per_pod": 2, "pods_in_gang": 4, "nodes_in_gang": 2, "whole_node": False}
ONE_NODE_PODS = {"gpus_per_pod": 2, "pods_in_gang": 4, "nodes_in_gang": 1, "whole_node": False}
ONE_GPU_PODS = {"gpus_per_pod": 1, "pods_in_gang": 16, "nodes_in_gang": 2, "whole_node": False}


@dataclass
class Case:
    name: str
    profile: FabricProfile
    shape: dict[str, Any]
    env: dict[str, str]
    rdma: dict[str, int] = field(default_factory=dict)
    caps: tuple[str, ...] = ()
    shm: str | None = "16Gi"
    annotations: dict[str, str] = field(default_factory=dict)


def rdma_case(
    name: str, profile: FabricProfile, shape: dict[str, Any], env: dict[str, str]
) -> Case:
    return Case(name, profile, shape, env, rdma=RDMA, caps=IPC)


CASES = [
    # DGX-1 (V100, 4x EDR shared by GPU pairs)
    Case("dgx1-single-node", DGX1, SINGLE, {}),
    rdma_case("dgx1-multi-node", DGX1, MULTI, DGX1_IB),
    rdma_case("dgx1-partial-node", DGX1, PARTIAL, DGX1_IB),
    rdma_case("dgx1-pods-on-one-node", DGX1, ONE_NODE_PODS, DGX1_IB),
    # DGX A100 (8 compute HCAs, storage NICs excluded)
    Case("a100-single-node", A100, SINGLE, {}),
    rdma_case("a100-multi-node", A100, MULTI, A100_IB),
    rdma_case("a100-partial-node", A100, PARTIAL, A100_IB),
    rdma_case("a100-one-gpu-pods", A100, ONE_GPU_PODS, A100_IB),
    # DGX H100 (user-guide HCA order, NVLS left to NCCL's default)
    Case("h100-single-node", H100, SINGLE, {}),
    rdma_case("h100-multi-node", H100, MULTI, H100_IB),
    rdma_case("h100-partial-node", H100, PARTIAL, H100_IB),
    # RoCE example (GID index, traffic class, Multus network)
    Case("roce-single-node", ROCE, SINGLE, {}),
    Case("roce-multi-node", ROCE, MULTI, ROCE_ENV, RDMA, IPC, "16Gi", {MULTUS: "roce-net"}),
    Case("roce-partial-node", ROCE, PARTIAL, ROCE_ENV, RDMA, IPC, "16Gi", {MULTUS: "roce-net"}),
    # TCP fallback (PCIe nodes)
    Case("tcp-single-node", TCP, SINGLE, {}),
    Case("tcp-multi-node", TCP, MULTI, TCP_ENV),
    Case("tcp-partial-node", TCP, PARTIAL, TCP_ENV),
    Case("tcp-one-gpu-pods", TCP, ONE_GPU_PODS, TCP_ENV, shm=None),
    Case("tcp-single-gpu-single-pod", TCP, {**SINGLE, "gpus_per_pod": 1}, {}, shm=None),
    # A pod without GPUs (parameter server, MPI launcher) runs no NCCL rank.
    Case("h100-cpu-only-pod", H100, {**MULTI, "gpus_per_pod": 0}, {}, shm=None),
]


def settings(profile: FabricProfile, shape: dict[str, Any], **kw: Any) -> NcclSettings:
    return nccl_settings(profile, **{"gpus_on_node": 8, **shape, **kw})


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_builtin_profiles_by_gang_shape(case: Case) -> None:
    s = settings(case.profile, case.shape)
    assert s.env == case.env
    assert s.rdma_resources == case.rdma
    assert s.capabilities == case.caps
    assert s.shm_size == case.shm
    assert s.annotations == case.annotations
    assert s.profile_name == case.profile.name
    assert set(s.sources) == set(s.env)
    assert set(s.sources.values()) <= {"profile", "derived"}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_debug_knobs_are_never_derived(case: Case) -> None:
    s = settings(case.profile, case.shape)
    debug = set(s.env) & DEBUG_ONLY_KNOBS
    # The single exception: a TCP fabric needs IB disabled (fabrics.md).
    allowed = {"NCCL_IB_DISABLE"} if case.profile.spec.fabric == "TCP" else set()
    assert debug <= allowed


def test_shipped_profiles_set_no_debug_knobs() -> None:
    for p in (*BUILTIN_PROFILES, EXAMPLE_ROCE_PROFILE):
        assert p.spec.debug_env == {} and p.spec.gdr_level is None and p.spec.nvls is not False


def _spec(base: FabricProfile, **update: Any) -> FabricProfile:
    body = base.spec.model_dump()
    body.update(update)
    return FabricProfile(name=base.name, spec=FabricProfileSpec.model_validate(body))


# --- debug knobs come only from the profile ---


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        pytest.param({"debug_env": {"NCCL_ALGO": "Ring"}}, {"NCCL_ALGO": "Ring"}, id="algo"),
        pytest.param(
            {"debug_env": {"NCCL_P2P_LEVEL": "NVL"}}, {"NCCL_P2P_LEVEL": "NVL"}, id="p2p-level"
        ),
        pytest.param(
            {"debug_env": {"NCCL_IB_DISABLE": "1"}}, {"NCCL_IB_DISABLE": "1"}, id="ib-disable"
        ),
        pytest.param({"gdr_level": "PHB"}, {"NCCL_NET_GDR_LEVEL": "PHB"}, id="gdr-level-field"),
        pytest.param({"nvls": False}, {"NCCL_NVLS_ENABLE": "0"}, id="nvls-false"),
        pytest.param({"nvls": True}, {}, id="nvls-true-is-nccl-default"),
        pytest.param({"nvls": None}, {}, id="nvls-unset"),
    ],
)
def test_debug_knobs_from_profile(update: dict[str, Any], expected: dict[str, str]) -> None:
    s = settings(_spec(H100, **update), MULTI)
    extra = {k: v for k, v in s.env.items() if k != "NCCL_IB_HCA"}
    assert extra == expected
    assert all(s.sources[k] == "profile" for k in expected)


def test_nvls_off_applies_to_single_pod_gangs_too() -> None:
    # NVLS is an intra-node (NVSwitch) feature, so it matters without any network.
    s = settings(_spec(H100, nvls=False), SINGLE)
    assert s.env == {"NCCL_NVLS_ENABLE": "0"}


# --- precedence and sources ---


def test_user_env_wins_over_everything() -> None:
    profile = _spec(
        ROCE,
        extra_env={"NCCL_IB_TIMEOUT": "22", "NCCL_DEBUG": "WARN"},
        debug_env={"NCCL_ALGO": "Tree"},
    )
    user = {
        "NCCL_IB_HCA": "=mlx5_0",
        "NCCL_IB_GID_INDEX": "5",
        "NCCL_IB_TIMEOUT": "23",
        "NCCL_ALGO": "Ring",
        "NCCL_DEBUG": "INFO",
    }
    s = settings(profile, MULTI, user_env=user)
    for name, value in user.items():
        assert s.env[name] == value
        assert s.sources[name] == "user"
    assert s.sources["NCCL_IB_TC"] == "profile"


def test_user_env_applies_on_every_shape() -> None:
    for case in CASES:
        s = settings(case.profile, case.shape, user_env={"NCCL_DEBUG": "INFO"})
        assert s.env["NCCL_DEBUG"] == "INFO" and s.sources["NCCL_DEBUG"] == "user"


def test_debug_env_beats_extra_env_beats_derived() -> None:
    profile = _spec(
        A100,
        extra_env={"NCCL_IB_HCA": "=mlx5_0", "NCCL_DEBUG": "WARN"},
        debug_env={"NCCL_DEBUG": "TRACE"},
    )
    s = settings(profile, MULTI)
    assert s.env == {"NCCL_IB_HCA": "=mlx5_0", "NCCL_DEBUG": "TRACE"}
    assert s.sources == {"NCCL_IB_HCA": "profile", "NCCL_DEBUG": "profile"}


def test_sources_distinguish_derived_and_profile() -> None:
    s = settings(ROCE, MULTI)
    assert s.sources == {
        "NCCL_IB_HCA": "derived",
        "NCCL_IB_GID_INDEX": "profile",
        "NCCL_IB_TC": "profile",
    }
    t = settings(TCP, MULTI)
    assert t.sources == {"NCCL_IB_DISABLE": "derived", "NCCL_SOCKET_IFNAME": "profile"}


def test_deterministic_env_order() -> None:
    extra = {"NCCL_IB_TIMEOUT": "22", "NCCL_BUFFSIZE": "8388608", "NCCL_IB_RETRY_CNT": "10"}
    user = {"NCCL_DEBUG": "INFO", "NCCL_CROSS_NIC": "1", "NCCL_ALGO": "Ring"}
    a = settings(_spec(ROCE, extra_env=extra), MULTI, user_env=user)
    b = settings(
        _spec(ROCE, extra_env=dict(reversed(extra.items()))),
        MULTI,
        user_env=dict(reversed(user.items())),
    )
    assert list(a.env.items()) == list(b.env.items())
    assert list(a.env) == [
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_TC",
        "NCCL_BUFFSIZE",
        "NCCL_IB_RETRY_CNT",
        "NCCL_IB_TIMEOUT",
        "NCCL_ALGO",
        "NCCL_CROSS_NIC",
        "NCCL_DEBUG",
    ]
    assert a.env_list()[0] == {"name": "NCCL_IB_HCA", "value": ROCE_ENV["NCCL_IB_HCA"]}


def test_explain_lines() -> None:
    s = settings(H100, PARTIAL, user_env={"NCCL_DEBUG": "INFO"})
    lines = s.explain()
    assert lines[0] == f"NCCL_IB_HCA={H100_IB['NCCL_IB_HCA']} (derived)"
    assert lines[1] == "NCCL_DEBUG=INFO (user)"
    assert any("2 of 8 GPUs" in line for line in lines[2:])


# --- HCAs ---


@pytest.mark.parametrize(
    ("hcas", "value"),
    [
        pytest.param(DGX1_HCAS, "=mlx5_0,mlx5_1,mlx5_2,mlx5_3", id="dgx1"),
        pytest.param(("mlx5_1",), "=mlx5_1", id="mlx5_1-not-a-prefix-of-mlx5_10"),
        pytest.param(("mlx5_0:1", "mlx5_1:1"), "=mlx5_0:1,mlx5_1:1", id="ports"),
    ],
)
def test_ib_hca_value_is_exact(hcas: tuple[str, ...], value: str) -> None:
    assert ib_hca_value(hcas) == value


@pytest.mark.parametrize(
    ("hcas", "gpus", "expected"),
    [
        pytest.param(
            DGX1_HCAS,
            8,
            ["mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1", "mlx5_2", "mlx5_2", "mlx5_3", "mlx5_3"],
            id="dgx1-pairs",
        ),
        pytest.param(DGX_A100_HCAS, 8, list(DGX_A100_HCAS), id="dgx-a100-one-each"),
        pytest.param(DGX_H100_HCAS, 8, list(DGX_H100_HCAS), id="dgx-h100-user-guide"),
        pytest.param(DGX_H100_HCAS, 4, ["mlx5_0", "mlx5_4", "mlx5_6", "mlx5_10"], id="fewer-gpus"),
    ],
)
def test_hca_for_gpu(hcas: tuple[str, ...], gpus: int, expected: list[str]) -> None:
    assert [hca_for_gpu(hcas, i, gpus) for i in range(gpus)] == expected


@pytest.mark.parametrize(
    ("hcas", "gpu_indices", "expected"),
    [
        pytest.param(DGX1_HCAS, [1, 0], ("mlx5_0",), id="dgx1-pair-shares-one"),
        pytest.param(DGX1_HCAS, [2, 5], ("mlx5_1", "mlx5_2"), id="dgx1-two-pairs"),
        pytest.param(DGX_A100_HCAS, [5, 4], ("mlx5_6", "mlx5_7"), id="a100-gpu4-5"),
        pytest.param(DGX_H100_HCAS, [7, 1], ("mlx5_3", "mlx5_11"), id="h100-gpu-order"),
    ],
)
def test_hcas_for_gpus(
    hcas: tuple[str, ...], gpu_indices: list[int], expected: tuple[str, ...]
) -> None:
    assert hcas_for_gpus(hcas, gpu_indices, 8) == expected


@pytest.mark.parametrize(
    ("hcas", "gpu", "gpus"),
    [((), 0, 8), (DGX1_HCAS, 8, 8), (DGX1_HCAS, -1, 8), (DGX1_HCAS, 0, 0)],
)
def test_hca_for_gpu_rejects_out_of_range(hcas: tuple[str, ...], gpu: int, gpus: int) -> None:
    with pytest.raises(ValueError):
        hca_for_gpu(hcas, gpu, gpus)


def test_partial_node_lists_all_hcas_and_says_why() -> None:
    s = settings(A100, PARTIAL)
    assert s.env["NCCL_IB_HCA"] == A100_IB["NCCL_IB_HCA"]
    assert any("kubelet" in n for n in s.notes)
    whole = settings(A100, MULTI)
    assert not any("kubelet" in n for n in whole.notes)


def test_no_hcas_means_no_ib_hca() -> None:
    s = settings(_spec(A100, hcas=[]), MULTI)
    assert "NCCL_IB_HCA" not in s.env
    assert s.rdma_resources == RDMA


# --- RoCE, SHARP, resources ---


@pytest.mark.parametrize(
    ("gid", "tc", "expected"),
    [
        pytest.param(3, None, {"NCCL_IB_GID_INDEX": "3"}, id="gid-3"),
        pytest.param(0, 41, {"NCCL_IB_GID_INDEX": "0", "NCCL_IB_TC": "41"}, id="gid-0-tc"),
        pytest.param(None, None, {}, id="auto-gid"),
    ],
)
def test_roce_gid_index(gid: int | None, tc: int | None, expected: dict[str, str]) -> None:
    s = settings(_spec(ROCE, gid_index=gid, traffic_class=tc), MULTI)
    assert {k: v for k, v in s.env.items() if k != "NCCL_IB_HCA"} == expected


@pytest.mark.parametrize(
    ("shape", "collnet"),
    [
        pytest.param(MULTI, True, id="multi-node"),
        pytest.param(PARTIAL, True, id="partial-multi-node"),
        pytest.param(ONE_NODE_PODS, False, id="pods-on-one-node"),
        pytest.param(SINGLE, False, id="single-pod"),
    ],
)
def test_sharp(shape: dict[str, Any], collnet: bool) -> None:
    s = settings(_spec(H100, sharp=True), shape)
    assert ("NCCL_COLLNET_ENABLE" in s.env) is collnet
    if collnet:
        assert s.env["NCCL_COLLNET_ENABLE"] == "1"
        assert s.sources["NCCL_COLLNET_ENABLE"] == "derived"
    assert "NCCL_COLLNET_ENABLE" not in settings(H100, MULTI).env


def test_rdma_resource_per_pod_and_no_resource() -> None:
    s = settings(_spec(A100, rdma_resource="nvidia.com/hostdev", rdma_resource_per_pod=8), MULTI)
    assert s.rdma_resources == {"nvidia.com/hostdev": 8}
    t = settings(_spec(A100, rdma_resource=None), MULTI)
    # Devices reach the pod some other way; verbs still need IPC_LOCK to pin memory.
    assert t.rdma_resources == {} and t.capabilities == IPC


def test_socket_ifname_and_multus_on_rdma_and_tcp() -> None:
    s = settings(_spec(A100, socket_ifname="ib0", multus_networks="ipoib"), MULTI)
    assert s.env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert s.annotations == {MULTUS: "ipoib"}
    t = settings(_spec(TCP, socket_ifname="net1", multus_networks="fast-eth"), MULTI)
    assert t.env == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "net1"}
    assert t.annotations == {MULTUS: "fast-eth"}
    assert settings(_spec(TCP, multus_networks="fast-eth"), SINGLE).annotations == {}


def test_shm_size_follows_profile() -> None:
    assert settings(_spec(TCP, shm_size="64Gi"), MULTI).shm_size == "64Gi"
    assert settings(_spec(A100, shm_size="1Gi"), ONE_GPU_PODS).shm_size == "1Gi"


def test_single_pod_notes_explain_missing_network() -> None:
    s = settings(H100, SINGLE)
    assert any("single-pod gang" in n for n in s.notes)


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param({**MULTI, "gpus_per_pod": -1}, id="negative-gpus"),
        pytest.param({**MULTI, "pods_in_gang": 0, "nodes_in_gang": 0}, id="no-pods"),
        pytest.param({**MULTI, "nodes_in_gang": 5}, id="more-nodes-than-pods"),
        pytest.param({**MULTI, "nodes_in_gang": 0}, id="no-nodes"),
        pytest.param({**MULTI, "gpus_on_node": 4}, id="more-gpus-than-node"),
    ],
)
def test_invalid_shapes(shape: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        settings(H100, shape)


def test_unknown_gpus_on_node_is_fine() -> None:
    s = nccl_settings(
        H100, gpus_per_pod=4, pods_in_gang=2, nodes_in_gang=2, whole_node=False, gpus_on_node=None
    )
    assert s.env == H100_IB
    assert any("pod gets 4 GPUs" in n for n in s.notes)
