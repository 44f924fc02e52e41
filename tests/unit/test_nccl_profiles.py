"""Tests of the built-in FabricProfiles and select_profile: matching, priority, forced fabrics."""

from __future__ import annotations

import pytest

from tests.builders import fabric_profile
from trainop.api import constants as c
from trainop.api.fabricprofile import FabricProfile
from trainop.nccl import (
    BUILTIN_PROFILES,
    EXAMPLE_ROCE_PROFILE,
    FabricMismatch,
    nccl_settings,
    select_profile,
    selector_matches,
    tcp_variant,
)
from trainop.nccl.profiles import (
    BUILTIN_TCP_NAME,
    DGX1_HCAS,
    DGX_A100_HCAS,
    DGX_H100_HCAS,
    PRIORITY_BUILTIN_MACHINE,
)


def node(product: str | None = None, host: str = "node-1", **labels: str) -> dict[str, str]:
    out = {c.LABEL_HOSTNAME: host, **labels}
    if product is not None:
        out[c.GFD_PRODUCT] = product
    return out


def user_profile(name: str, priority: int = 0, **selector: str) -> FabricProfile:
    labels = {k.replace("__", "/"): v for k, v in selector.items()}
    builder = fabric_profile(name).selector(**labels).priority(priority).fabric("RoCE")
    return builder.set("gidIndex", 3).model()


IB = "InfiniBand"


@pytest.mark.parametrize(
    ("product", "name", "fabric", "hcas", "nvls"),
    [
        (
            "Tesla-V100-SXM2-16GB",
            "builtin-dgx1-tesla-v100-sxm2-16gb",
            "InfiniBand",
            DGX1_HCAS,
            None,
        ),
        (
            "Tesla-V100-SXM2-32GB",
            "builtin-dgx1-tesla-v100-sxm2-32gb",
            "InfiniBand",
            DGX1_HCAS,
            None,
        ),
        (
            "NVIDIA-A100-SXM4-40GB",
            "builtin-dgx-a100-nvidia-a100-sxm4-40gb",
            "InfiniBand",
            DGX_A100_HCAS,
            None,
        ),
        (
            "NVIDIA-A100-SXM4-80GB",
            "builtin-dgx-a100-nvidia-a100-sxm4-80gb",
            "InfiniBand",
            DGX_A100_HCAS,
            None,
        ),
        ("A100-SXM4-40GB", "builtin-dgx-a100-a100-sxm4-40gb", "InfiniBand", DGX_A100_HCAS, None),
        (
            "NVIDIA-H100-80GB-HBM3",
            "builtin-dgx-h100-nvidia-h100-80gb-hbm3",
            "InfiniBand",
            DGX_H100_HCAS,
            True,
        ),
        ("Tesla-T4", BUILTIN_TCP_NAME, "TCP", (), None),
        ("NVIDIA-H100-PCIe", BUILTIN_TCP_NAME, "TCP", (), None),
        ("Tesla-V100-PCIE-16GB", BUILTIN_TCP_NAME, "TCP", (), None),
        ("NVIDIA-A100-SXM4-40GB-SHARED", BUILTIN_TCP_NAME, "TCP", (), None),
        (None, BUILTIN_TCP_NAME, "TCP", (), None),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_builtin_matching(
    product: str | None, name: str, fabric: str, hcas: tuple[str, ...], nvls: bool | None
) -> None:
    p = select_profile(node(product), [])
    assert p.name == name
    assert p.spec.fabric == fabric
    assert tuple(p.spec.hcas) == hcas
    assert p.spec.nvls is nvls


def test_builtin_hca_layouts_match_fabrics_md() -> None:
    # DGX A100 leaves the storage NICs mlx5_4/5 and mlx5_10/11 out.
    assert not {"mlx5_4", "mlx5_5", "mlx5_10", "mlx5_11"} & set(DGX_A100_HCAS)
    # DGX H100 per the user guide: GPU1 -> mlx5_3, GPU5 -> mlx5_9.
    assert DGX_H100_HCAS[1] == "mlx5_3" and DGX_H100_HCAS[5] == "mlx5_9"
    assert DGX1_HCAS == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")


def test_builtins_are_unique_low_priority_and_request_rdma() -> None:
    names = [p.name for p in BUILTIN_PROFILES]
    assert len(names) == len(set(names))
    assert all(p.spec.priority < 0 for p in BUILTIN_PROFILES)
    for p in BUILTIN_PROFILES:
        if p.spec.is_rdma:
            assert p.spec.rdma_resource == c.DEFAULT_RDMA_RESOURCE
            assert p.spec.priority == PRIORITY_BUILTIN_MACHINE
        else:
            assert p.spec.socket_ifname == "eth0"
    # Exactly one catch-all, and it is the TCP fallback.
    catch_all = [p for p in BUILTIN_PROFILES if not p.spec.node_selector]
    assert [p.name for p in catch_all] == [BUILTIN_TCP_NAME]


def test_example_roce_profile_is_not_a_builtin() -> None:
    assert EXAMPLE_ROCE_PROFILE not in BUILTIN_PROFILES
    h100 = node("NVIDIA-H100-80GB-HBM3")
    assert select_profile(h100, []).spec.fabric == "InfiniBand"
    roce_node = node("NVIDIA-H100-80GB-HBM3", **{"example.com/fabric": "roce"})
    assert select_profile(roce_node, [EXAMPLE_ROCE_PROFILE]) is EXAMPLE_ROCE_PROFILE


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        pytest.param({}, {}, True, id="empty-matches-all"),
        pytest.param({"a": "1"}, {"a": "1", "b": "2"}, True, id="subset"),
        pytest.param({"a": "1", "b": "2"}, {"a": "1"}, False, id="missing-label"),
        pytest.param({"a": "1"}, {"a": "10"}, False, id="exact-value"),
    ],
)
def test_selector_matches(selector: dict[str, str], labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(selector, labels) is expected


H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize(
    ("profiles", "expected"),
    [
        pytest.param([user_profile("mine")], "mine", id="user-default-priority-beats-builtin"),
        pytest.param(
            [user_profile("mine", priority=PRIORITY_BUILTIN_MACHINE)],
            "mine",
            id="user-wins-tie-with-builtin",
        ),
        pytest.param(
            [user_profile("low", priority=-5000)],
            "builtin-dgx-h100-nvidia-h100-80gb-hbm3",
            id="builtin-beats-lower-user",
        ),
        pytest.param(
            [user_profile("a", priority=1), user_profile("b", priority=2)], "b", id="higher-wins"
        ),
        pytest.param(
            [user_profile("broad"), user_profile("narrow", rack="r1")],
            "narrow",
            id="specific-selector-wins-tie",
        ),
        pytest.param(
            [user_profile("zeta"), user_profile("alpha")], "alpha", id="name-breaks-last-tie"
        ),
        pytest.param(
            [user_profile("other", rack="r2")],
            "builtin-dgx-h100-nvidia-h100-80gb-hbm3",
            id="non-matching-user-ignored",
        ),
    ],
)
def test_priority(profiles: list[FabricProfile], expected: str) -> None:
    labels = node(H100, rack="r1")
    assert select_profile(labels, profiles).name == expected
    # The choice never depends on list order.
    assert select_profile(labels, list(reversed(profiles))).name == expected


def test_user_profile_named_like_builtin_replaces_it() -> None:
    replacement = user_profile("builtin-dgx-h100-nvidia-h100-80gb-hbm3", priority=-9999, rack="x")
    # The replacement does not match this node, and the built-in it shadows is gone.
    assert select_profile(node(H100), [replacement]).name == BUILTIN_TCP_NAME


def test_no_match_without_builtins() -> None:
    with pytest.raises(LookupError, match="node node-1"):
        select_profile(node("Tesla-T4"), [], builtins=())


# --- forced fabrics (spec.network.fabric) ---


@pytest.mark.parametrize(
    ("product", "fabric"),
    [
        pytest.param(H100, "Auto", id="auto"),
        pytest.param(H100, "InfiniBand", id="ib-on-ib"),
        pytest.param("Tesla-T4", "TCP", id="tcp-on-tcp"),
    ],
)
def test_forcing_the_nodes_own_fabric_changes_nothing(product: str, fabric: str) -> None:
    labels = node(product)
    assert select_profile(labels, [], fabric) is select_profile(labels, [])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "product", ["Tesla-V100-SXM2-16GB", "NVIDIA-A100-SXM4-80GB", H100], ids=str
)
def test_forced_tcp_on_rdma_node_derives_tcp_variant(product: str) -> None:
    base = select_profile(node(product), [])
    p = select_profile(node(product), [], "TCP")
    assert p.name == f"{base.name}-forced-tcp"
    assert p.spec.fabric == "TCP"
    assert p.spec.rdma_resource is None and p.spec.hcas == []
    assert p.spec.socket_ifname == "eth0"
    assert p.spec.nvls == base.spec.nvls
    s = nccl_settings(
        p, gpus_per_pod=8, pods_in_gang=2, nodes_in_gang=2, whole_node=True, gpus_on_node=8
    )
    assert s.env == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    assert s.rdma_resources == {} and s.capabilities == ()


def test_tcp_variant_of_roce_drops_rdma_fields_and_env() -> None:
    roce = EXAMPLE_ROCE_PROFILE.model_copy(
        update={
            "spec": EXAMPLE_ROCE_PROFILE.spec.model_copy(
                update={
                    "extra_env": {"NCCL_IB_TIMEOUT": "22", "NCCL_DEBUG_SUBSYS": "INIT"},
                    "debug_env": {"NCCL_NET_GDR_LEVEL": "PHB", "NCCL_ALGO": "Ring"},
                    "nvls": False,
                }
            )
        }
    )
    v = tcp_variant(roce)
    assert v.spec.fabric == "TCP"
    assert v.spec.gid_index is None and v.spec.traffic_class is None
    assert v.spec.multus_networks is None
    assert v.spec.extra_env == {"NCCL_DEBUG_SUBSYS": "INIT"}
    assert v.spec.debug_env == {"NCCL_ALGO": "Ring"}
    assert v.spec.nvls is False
    assert v.spec.shm_size == roce.spec.shm_size
    assert tcp_variant(v) is v


@pytest.mark.parametrize(
    ("product", "forced", "have"),
    [
        pytest.param("Tesla-T4", "InfiniBand", "TCP", id="ib-on-tcp"),
        pytest.param("Tesla-T4", "RoCE", "TCP", id="roce-on-tcp"),
        pytest.param(None, "InfiniBand", "TCP", id="ib-on-unlabelled"),
        pytest.param(H100, "RoCE", "InfiniBand", id="roce-on-ib"),
    ],
)
def test_fabric_mismatch(product: str | None, forced: str, have: str) -> None:
    with pytest.raises(FabricMismatch) as info:
        select_profile(node(product, host="gpu-17"), [], forced)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"spec.network.fabric is {forced} but node gpu-17 has a {have}")
    assert "FabricProfile" in message and "Auto" in message
    assert info.value.forced == forced and info.value.node == "node gpu-17"
    assert isinstance(info.value, ValueError)


def test_fabric_mismatch_without_hostname_label() -> None:
    with pytest.raises(FabricMismatch, match="but the node has a TCP fabric"):
        select_profile({}, [], "InfiniBand")
