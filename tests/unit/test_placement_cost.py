"""The fabric cost model: per-level bandwidths, ring vs hierarchical allreduce, profile overrides."""

from __future__ import annotations

import pytest

from tests.builders import A100, H100, T4, V100, fabric_profile, grid, snap
from trainop.api.fabricprofile import FabricProfile
from trainop.inventory import NodeInfo
from trainop.placement import GangRequest, GroupRequest, Placement, level_names, place
from trainop.placement.cost import (
    GIB,
    FabricCost,
    LinkSpeeds,
    allreduce_time,
    class_defaults,
    common_level,
    speeds_for,
)

S = GIB / 1e9  # the reference message in GB
H = LinkSpeeds(nvlink=370, network=50, spine_oversubscription=2, block_oversubscription=4)
FLEET = snap(grid(blocks=2, racks=2, nodes=4))
NAMES = level_names(FLEET.levels)


def node(name: str) -> NodeInfo:
    return FLEET.node(name)


@pytest.mark.parametrize(
    "product, expected",
    [
        pytest.param(H100, (370.0, 50.0), id="h100"),
        pytest.param("H800", (160.0, 50.0), id="h800-before-h100-rule"),
        pytest.param(A100, (230.0, 25.0), id="a100"),
        pytest.param("A800-SXM4-80GB", (150.0, 25.0), id="a800"),
        pytest.param(V100, (130.0, 6.25), id="v100-sxm2"),
        pytest.param(T4, (12.0, 3.125), id="pcie-default"),
        pytest.param(None, (12.0, 3.125), id="no-product-label"),
    ],
)
def test_class_defaults(product: str | None, expected: tuple[float, float]) -> None:
    assert class_defaults(product) == expected


@pytest.mark.parametrize(
    "names, level",
    [
        pytest.param(["n-b0-r0-0"], "node", id="one-node"),
        pytest.param(["n-b0-r0-0", "n-b0-r0-3"], "rack", id="same-rack"),
        pytest.param(["n-b0-r0-0", "n-b0-r1-0"], "block", id="two-racks-one-block"),
        pytest.param(["n-b0-r0-0", "n-b1-r0-0"], "cluster", id="two-blocks"),
    ],
)
def test_common_level(names: list[str], level: str) -> None:
    assert common_level([node(n) for n in names], NAMES) == level


def test_common_level_nvlink_clique() -> None:
    fleet = snap(grid(racks=1, nodes=4, cliques=True))
    nodes = [fleet.node("n-b0-r0-0"), fleet.node("n-b0-r0-1")]
    assert common_level(nodes, level_names(fleet.levels)) == "clique"


def _ring(n: int, bw: float) -> float:
    return 2 * (n - 1) / n * S / bw


@pytest.mark.parametrize(
    "gpus_per_node, level, seconds, algorithm",
    [
        pytest.param([1], "node", 0.0, "ring", id="one-gpu-no-traffic"),
        pytest.param([8], "node", _ring(8, 370), "ring", id="one-node-nvlink"),
        # 8 GPUs x 50 GB/s of NICs beat NVLink's 370: NVLink is the ring's bottleneck.
        pytest.param([8, 8], "rack", _ring(16, 370), "ring", id="two-nodes-one-rack"),
        pytest.param([8, 8], "block", _ring(16, 200), "ring", id="spine-oversubscribed-2x"),
        # Across blocks the network is the bottleneck: hierarchical (2 nodes) wins.
        pytest.param(
            [8, 8], "cluster", 2 * 7 / 8 * S / 370 + S / 100, "hierarchical", id="across-blocks-4x"
        ),
        pytest.param([8, 8], "clique", _ring(16, 370), "ring", id="nvlink-clique"),
        # One GPU per node: every hop is a NIC rail.
        pytest.param([1, 1, 1, 1], "rack", _ring(4, 50), "ring", id="one-gpu-per-node"),
        # The emptiest node (2 GPUs) bounds the network part (2 x 50), the fullest the
        # part inside nodes.
        pytest.param(
            [8, 2], "rack", 2 * 7 / 8 * S / 370 + S / 100, "hierarchical", id="uneven-nodes"
        ),
    ],
)
def test_allreduce_time(
    gpus_per_node: list[int], level: str, seconds: float, algorithm: str
) -> None:
    members = [(node(f"n-b0-r0-{i}"), g, H) for i, g in enumerate(gpus_per_node)]
    est = allreduce_time(members, level)
    assert est.seconds == pytest.approx(seconds)
    assert est.algorithm == algorithm
    assert est.gpus == sum(gpus_per_node)


def test_hierarchical_wins_on_slow_networks() -> None:
    """TCP-class links: reduce inside the node first, then a ring of N nodes on shards."""
    slow = LinkSpeeds(nvlink=370, network=1.0)
    members = [(node("n-b0-r0-0"), 8, slow), (node("n-b0-r0-1"), 8, slow)]
    est = allreduce_time(members, "rack")
    hier = 2 * 7 / 8 * S / 370 + 2 * 1 / 2 * S / 8
    assert est.hierarchical_seconds == pytest.approx(hier)
    assert est.ring_seconds == pytest.approx(_ring(16, 8))
    assert est.algorithm == "hierarchical" and est.seconds == pytest.approx(hier)


def _profile(fabric: str, **bandwidth: float) -> FabricProfile:
    builder = fabric_profile("p").fabric(fabric)
    return (builder.bandwidth(**bandwidth) if bandwidth else builder).model()


@pytest.mark.parametrize(
    "profile, expected",
    [
        pytest.param(None, LinkSpeeds(370, 50), id="no-profile-class-defaults"),
        pytest.param(_profile("InfiniBand"), LinkSpeeds(370, 50), id="rdma-profile"),
        pytest.param(_profile("TCP"), LinkSpeeds(370, 12.5 * 0.6 / 8), id="tcp-shares-one-port"),
        pytest.param(
            _profile(
                "RoCE",
                nvlinkGbps=300,
                networkGbpsPerGpu=25,
                spineOversubscription=1,
                blockOversubscription=1.5,
            ),
            LinkSpeeds(300, 25, 1, 1.5),
            id="profile-overrides",
        ),
    ],
)
def test_speeds_for(profile: FabricProfile | None, expected: LinkSpeeds) -> None:
    assert speeds_for(node("n-b0-r0-0"), profile) == expected


def test_bandwidth_fields_are_validated() -> None:
    with pytest.raises(ValueError, match="spineOversubscription"):
        _profile("RoCE", spineOversubscription=0.5)


def test_fabric_cost_uses_matching_profile() -> None:
    cost = FabricCost([_profile("RoCE", networkGbpsPerGpu=10)])
    est = cost.estimate([(node("n-b0-r0-0"), 8), (node("n-b1-r0-0"), 8)], NAMES)
    assert est.level == "cluster"
    assert est.seconds == pytest.approx(min(_ring(16, 8 * 10 / 4), 2 * 7 / 8 * S / 370 + S / 20))


def _gang(replicas: int, **kw: object) -> GangRequest:
    return GangRequest("j", (GroupRequest("Worker", replicas, 8),), "rack", "Preferred", **kw)  # type: ignore[arg-type]


def test_placements_carry_the_estimate() -> None:
    one_rack = place(FLEET, _gang(2))
    assert isinstance(one_rack, Placement) and one_rack.allreduce is not None
    assert one_rack.allreduce.level == "rack"
    used = {f"n-b{b}-r{r}-0": 8 for b in range(2) for r in range(2)}
    busy = snap(grid(blocks=2, racks=2, nodes=4), used=used)
    spread = place(busy, _gang(4))  # no rack has 4 free nodes: two racks of one block
    assert isinstance(spread, Placement) and spread.allreduce is not None
    assert spread.allreduce.level == "block"
    assert spread.allreduce.seconds > one_rack.allreduce.seconds


@pytest.mark.parametrize(
    "topology, prefix",
    [
        # Within the requested rack, best fit decides: the A100 rack r0-0 sorts before rz.
        pytest.param("rack", "a-", id="within-topology-best-fit"),
        # Spread beyond a node (Preferred): the candidates are priced, H100's fabric wins.
        pytest.param("node", "h-", id="spread-priced"),
    ],
)
def test_cost_prices_spread_candidates_only(topology: str, prefix: str) -> None:
    nodes = grid(racks=1, nodes=2, product=A100, prefix="a") + grid(racks=1, nodes=2, prefix="h")
    for n in nodes[2:]:
        n["metadata"]["labels"]["trainop.dev/rack"] = "rz"
    request = GangRequest("j", (GroupRequest("Worker", 2, 8),), topology, "Preferred")  # type: ignore[arg-type]
    result = place(snap(nodes), request)
    assert isinstance(result, Placement)
    assert all(n.startswith(prefix) for n in result.nodes)
