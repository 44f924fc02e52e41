"""Unit tables for trainop.inventory: quantities, GPU accounting, topology, health, snapshots."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.builders import A100, H100, NodeBuilder, busy, gpu_pod, grid, node, snap
from trainop.api.constants import (
    DEFAULT_RDMA_RESOURCE,
    LABEL_BLOCK,
    LABEL_GPU_CLIQUE,
    LABEL_HOSTNAME,
    LABEL_RACK,
    RESOURCE_GPU,
)
from trainop.inventory import (
    UNLABELLED,
    FrozenMap,
    TopologyPath,
    build_snapshot,
    parse_count,
    parse_quantity,
    pod_binding,
    pod_request,
)

# --- quantities ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("8", Decimal(8), id="plain"),
        pytest.param(8, Decimal(8), id="yaml-int"),
        pytest.param(2.0, Decimal(2), id="yaml-float"),
        pytest.param("1k", Decimal(1000), id="kilo"),
        pytest.param("1Ki", Decimal(1024), id="kibi"),
        pytest.param("2M", Decimal(2_000_000), id="mega"),
        pytest.param("1Gi", Decimal(2**30), id="gibi"),
        pytest.param("500m", Decimal("0.5"), id="milli"),
        pytest.param("1e3", Decimal(1000), id="exponent"),
        pytest.param("1.5", Decimal("1.5"), id="decimal"),
        pytest.param(" 4 ", Decimal(4), id="whitespace"),
        pytest.param(".5k", Decimal(500), id="leading-dot"),
    ],
)
def test_parse_quantity(text: object, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text", ["", "abc", "8 GPUs", "1KB", "1ki", None, True, [8], float("inf")], ids=repr
)
def test_parse_quantity_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "round_up", "expected"),
    [
        pytest.param("500m", False, 0, id="capacity-floors"),
        pytest.param("500m", True, 1, id="request-ceils"),
        pytest.param("1.5", False, 1, id="floor"),
        pytest.param("-2", False, 0, id="negative-clamps"),
        pytest.param("1k", False, 1000, id="kilo"),
    ],
)
def test_parse_count(text: str, round_up: bool, expected: int) -> None:
    assert parse_count(text, round_up=round_up) == expected


def test_parse_count_default_on_malformed() -> None:
    assert parse_count("lots", default=0) == 0
    with pytest.raises(ValueError):
        parse_count("lots")


# --- pod requests and bindings ------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(gpu_pod("p").build(), 0, id="no-gpus"),
        pytest.param(gpu_pod("p").gpus(8).build(), 8, id="limits"),
        pytest.param(gpu_pod("p").gpus("4", part="requests").build(), 4, id="requests"),
        pytest.param(gpu_pod("p").gpus(2).gpus(3, container=1).build(), 5, id="containers-sum"),
        pytest.param(gpu_pod("p").gpus(2).init(4).build(), 4, id="init-larger-wins"),
        pytest.param(gpu_pod("p").gpus(8).init(4).build(), 8, id="app-larger-wins"),
        pytest.param(gpu_pod("p").gpus(2).init(1, sidecar=True).build(), 3, id="sidecar-adds"),
        pytest.param(
            gpu_pod("p").gpus(1).init(1, sidecar=True).init(4).build(), 5, id="init-after-sidecar"
        ),
        pytest.param(gpu_pod("p").gpus(2).overhead(1).build(), 3, id="overhead"),
        pytest.param(gpu_pod("p").gpus("bad").build(), 0, id="malformed-is-zero"),
    ],
)
def test_pod_request(pod: dict, expected: int) -> None:
    assert pod_request(pod) == expected


def test_requests_win_over_limits() -> None:
    pod = gpu_pod("p").gpus(2, part="limits").gpus(1, part="requests").build()
    assert pod_request(pod) == 1


def _affinity(*terms: list[dict]) -> dict:
    return gpu_pod("p").gpus(8).build() | {
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {RESOURCE_GPU: 8}}}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
                    }
                }
            },
        }
    }


def _in(key: str, *values: str) -> dict:
    return {"key": key, "operator": "In", "values": list(values)}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(gpu_pod("p").bound("n1").build(), ("name", "n1"), id="bound"),
        pytest.param(gpu_pod("p").pinned("h1").build(), ("hostname", "h1"), id="pinned"),
        pytest.param(
            gpu_pod("p").pinned("h1", terms=2).build(), ("hostname", "h1"), id="same-terms"
        ),
        pytest.param(gpu_pod("p").pinned("h1", "h2").build(), None, id="two-values"),
        pytest.param(
            gpu_pod("p").node_selector("h1").build(), ("hostname", "h1"), id="node-selector"
        ),
        pytest.param(gpu_pod("p").build() | {"spec": {}}, None, id="unbound"),
        pytest.param(
            _affinity([_in(LABEL_HOSTNAME, "h1")], [_in(LABEL_HOSTNAME, "h2")]),
            None,
            id="terms-disagree",
        ),
        pytest.param(
            _affinity([_in(LABEL_HOSTNAME, "h1"), _in(LABEL_RACK, "r1")]),
            ("hostname", "h1"),
            id="narrowed-term",
        ),
        pytest.param(_affinity([_in(LABEL_RACK, "r1")]), None, id="rack-only"),
        pytest.param(
            _affinity([{"key": LABEL_HOSTNAME, "operator": "NotIn", "values": ["h1"]}]),
            None,
            id="not-in",
        ),
    ],
)
def test_pod_binding(pod: dict, expected: tuple[str, str] | None) -> None:
    assert pod_binding(pod) == expected


def test_match_fields_pin_by_node_name() -> None:
    pod = gpu_pod("p").build()
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [_in("metadata.name", "n1")]}]
            }
        }
    }
    assert pod_binding(pod) == ("name", "n1")


# --- GPU accounting ------------------------------------------------------------------------

NODES = [node("n1").build(), node("n2").build()]


@pytest.mark.parametrize(
    ("pods", "used_n1"),
    [
        pytest.param([busy("n1", 4)], 4, id="running"),
        pytest.param(
            [gpu_pod("p").gpus(8).bound("n1").phase("Succeeded").build()], 0, id="succeeded"
        ),
        pytest.param([gpu_pod("p").gpus(8).bound("n1").phase("Failed").build()], 0, id="failed"),
        pytest.param(
            [gpu_pod("p").gpus(8).bound("n1").phase("Pending").build()], 8, id="pending-bound"
        ),
        pytest.param(
            [gpu_pod("p").gpus(2).bound("n1").deleting().build()], 2, id="deleting-counts"
        ),
        pytest.param([gpu_pod("p").gpus(8).pinned("n1").build()], 8, id="pinned-gated"),
        pytest.param([gpu_pod("p").gpus(8).pinned("n1", "n2").build()], 0, id="not-pinned"),
        pytest.param([gpu_pod("p").gpus(8).build()], 0, id="unbound-unpinned"),
        pytest.param([gpu_pod("p").gpus(1).init(4).bound("n1").build()], 4, id="init-peak"),
        pytest.param([busy("n1", 2, "a"), busy("n1", 3, "b")], 5, id="sums"),
        pytest.param([busy("n1", 12)], 12, id="overcommitted"),
        pytest.param([busy("gone", 8)], 0, id="unknown-node"),
    ],
)
def test_gpu_accounting(pods: list[dict], used_n1: int) -> None:
    node = build_snapshot(NODES, pods).node("n1")
    assert node.gpus_used == used_n1
    assert node.gpus_free == max(0, 8 - used_n1)
    assert node.gpus_allocatable == 8


def test_pinned_pod_resolves_hostname_label() -> None:
    nodes = [node("ip-10-0-0-1.ec2.internal").label(LABEL_HOSTNAME, "ip-10-0-0-1").build()]
    s = build_snapshot(nodes, [gpu_pod("p").gpus(8).pinned("ip-10-0-0-1").build()])
    assert s.node("ip-10-0-0-1.ec2.internal").gpus_used == 8


def test_ignore_pods_drops_the_replanned_job() -> None:
    pods = [
        gpu_pod("mine").gpus(8).bound("n1").label("trainop.dev/job-name", "bert").build(),
        busy("n2", 8),
    ]
    s = build_snapshot(
        NODES,
        pods,
        ignore_pods=lambda p: p["metadata"]["labels"].get("trainop.dev/job-name") == "bert",
    )
    assert (s.node("n1").gpus_free, s.node("n2").gpus_free) == (8, 0)


# --- node facts ----------------------------------------------------------------------------


def test_gpu_and_extended_resources() -> None:
    obj = (
        node("n1")
        .gpus("8")
        .allocatable(DEFAULT_RDMA_RESOURCE, "1k")
        .allocatable("nvidia.com/hostdev", 8)
        .allocatable("hugepages-1Gi", "0")
        .allocatable("example.kubernetes.io/thing", "3")
        .build()
    )
    info = build_snapshot([obj]).node("n1")
    assert info.gpus_allocatable == 8
    assert dict(info.extended) == {DEFAULT_RDMA_RESOURCE: 1000, "nvidia.com/hostdev": 8}
    assert info.gpu.product == H100


def test_node_without_gpus() -> None:
    info = build_snapshot([node("cpu").gpus(None).build()]).node("cpu")
    assert (info.gpus_allocatable, info.gpus_free, info.gpu.product) == (0, 0, None)


def test_malformed_gpu_quantity_counts_zero() -> None:
    assert build_snapshot([node("n1").gpus("eight").build()]).node("n1").gpus_allocatable == 0


@pytest.mark.parametrize(
    ("builder", "path"),
    [
        pytest.param(
            node("n1").block("b1").rack("r1"),
            ((LABEL_BLOCK, "b1"), (LABEL_RACK, "r1"), (LABEL_HOSTNAME, "n1")),
            id="full",
        ),
        pytest.param(
            node("n1").block("b1").rack("r1").clique("uuid.3"),
            (
                (LABEL_BLOCK, "b1"),
                (LABEL_RACK, "r1"),
                (LABEL_GPU_CLIQUE, "uuid.3"),
                (LABEL_HOSTNAME, "n1"),
            ),
            id="clique-above-node",
        ),
        pytest.param(
            node("n1").rack("r1"),
            ((LABEL_BLOCK, UNLABELLED), (LABEL_RACK, "r1"), (LABEL_HOSTNAME, "n1")),
            id="missing-block",
        ),
        pytest.param(
            node("n1"),
            ((LABEL_BLOCK, UNLABELLED), (LABEL_RACK, UNLABELLED), (LABEL_HOSTNAME, "n1")),
            id="no-labels",
        ),
        pytest.param(
            node("n1").label(LABEL_HOSTNAME, None).block("b").rack("r"),
            ((LABEL_BLOCK, "b"), (LABEL_RACK, "r"), (LABEL_HOSTNAME, "n1")),
            id="hostname-falls-back-to-name",
        ),
    ],
)
def test_topology_path(builder: NodeBuilder, path: TopologyPath) -> None:
    assert build_snapshot([builder.build()]).node("n1").topology == path


def test_custom_levels() -> None:
    zone = "topology.kubernetes.io/zone"
    obj = node("n1").label(zone, "z1").rack("r1").build()
    info = build_snapshot([obj], levels=(zone, LABEL_HOSTNAME)).node("n1")
    assert info.topology == ((zone, "z1"), (LABEL_HOSTNAME, "n1"))


@pytest.mark.parametrize(
    ("builder", "schedulable", "reason"),
    [
        pytest.param(node("n1"), True, None, id="ready"),
        pytest.param(node("n1").not_ready(), False, "not Ready (KubeletNotReady)", id="not-ready"),
        pytest.param(node("n1").ready("Unknown", ""), False, "not Ready (Ready=Unknown)", id="unk"),
        pytest.param(
            node("n1").no_conditions(),
            False,
            "not Ready (no Ready condition reported)",
            id="no-conditions",
        ),
        pytest.param(node("n1").cordoned(), False, "cordoned (spec.unschedulable)", id="cordon"),
        pytest.param(
            node("n1").taint("maintenance", "NoSchedule", "true"),
            False,
            "taint maintenance=true:NoSchedule",
            id="noschedule",
        ),
        pytest.param(
            node("n1").taint("dead", "NoExecute"), False, "taint dead:NoExecute", id="noexecute"
        ),
        pytest.param(node("n1").taint(RESOURCE_GPU), True, None, id="gpu-taint-tolerated"),
        pytest.param(node("n1").taint("soft", "PreferNoSchedule"), True, None, id="prefer"),
    ],
)
def test_schedulable(builder: NodeBuilder, schedulable: bool, reason: str | None) -> None:
    info = build_snapshot([builder.build()]).node("n1")
    assert (info.schedulable, info.unschedulable_reason) == (schedulable, reason)


def test_tolerated_taint_keys_configurable() -> None:
    obj = node("n1").taint(RESOURCE_GPU).taint("team", value="nlp").build()
    assert not build_snapshot([obj]).node("n1").schedulable
    assert build_snapshot([obj], tolerated_taint_keys=(RESOURCE_GPU, "team")).node("n1").schedulable


def test_images_and_aliases() -> None:
    obj = (
        node("n1")
        .image("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch@sha256:abc")
        .image("docker.io/library/busybox:1.36")
        .build()
    )
    obj["status"]["images"].append({"names": None, "sizeBytes": 1})
    info = build_snapshot([obj]).node("n1")
    assert "nvcr.io/nvidia/pytorch:24.05-py3" in info.images
    assert info.has_image("nvcr.io/nvidia/pytorch:24.05-py3")
    assert info.has_image("busybox:1.36")
    assert not info.has_image("nvcr.io/nvidia/pytorch:24.06-py3")
    assert not info.has_image(None)


# --- snapshot ------------------------------------------------------------------------------


def test_nodes_sorted_and_lookup() -> None:
    s = build_snapshot([node("b").build(), node("a").build()])
    assert [n.name for n in s.nodes] == ["a", "b"]
    assert s.node("b").name == "b" and "a" in s and s.get("zz") is None
    with pytest.raises(KeyError):
        s.node("zz")


def test_duplicate_and_nameless_nodes_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        build_snapshot([node("a").build(), node("a").build()])
    with pytest.raises(ValueError, match=r"metadata\.name"):
        build_snapshot([{"metadata": {}}])


def test_domains_keyed_by_path() -> None:
    nodes = [
        node("n1").block("b1").rack("1").build(),
        node("n2").block("b2").rack("1").build(),
        node("n3").block("b2").rack("1").clique("c.1").build(),
    ]
    s = build_snapshot(nodes)
    racks = s.domains(LABEL_RACK)
    assert list(racks) == [
        ((LABEL_BLOCK, "b1"), (LABEL_RACK, "1")),
        ((LABEL_BLOCK, "b2"), (LABEL_RACK, "1")),
    ]
    assert [n.name for n in racks[((LABEL_BLOCK, "b2"), (LABEL_RACK, "1"))]] == ["n2", "n3"]
    assert [n.name for nodes in s.domains(LABEL_GPU_CLIQUE).values() for n in nodes] == ["n3"]
    assert len(s.domains(LABEL_HOSTNAME)) == 3


def test_free_gpus_by_product() -> None:
    nodes = [
        node("h1").build(),
        node("h2").not_ready().build(),
        node("a1").product(A100).gpus(4).build(),
        node("x").product(None).build(),
        node("cpu").gpus(None).build(),
    ]
    s = snap(nodes, used={"h1": 3})
    assert dict(s.free_gpus_by_product()) == {A100: 4, H100: 5, "unknown": 8}


def test_with_reserved_and_released() -> None:
    s = snap(grid(1, 1, 2), used={"n-b0-r0-0": 2})
    reserved = s.with_reserved({"n-b0-r0-0": 6, "n-b0-r0-1": 1})
    assert reserved.node("n-b0-r0-0").gpus_free == 0
    assert reserved.node("n-b0-r0-1").gpus_used == 1
    assert s.node("n-b0-r0-0").gpus_free == 6  # the original is the undo
    released = reserved.with_released({"n-b0-r0-0": 100})
    assert released.node("n-b0-r0-0").gpus_used == 0
    with pytest.raises(ValueError, match="only 6 free"):
        s.with_reserved({"n-b0-r0-0": 7})
    with pytest.raises(ValueError, match="unknown node"):
        s.with_reserved({"nope": 1})


def test_snapshot_is_hashable_and_comparable() -> None:
    a, b = snap(grid(1, 2, 2)), snap(list(reversed(grid(1, 2, 2))))
    assert a == b and hash(a) == hash(b)
    assert a.node("n-b0-r0-0").labels == FrozenMap(a.node("n-b0-r0-0").labels.to_dict())
    assert a.with_reserved({"n-b0-r0-0": 1}) != a
