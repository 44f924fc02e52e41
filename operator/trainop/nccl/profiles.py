"""Built-in FabricProfiles (DGX-1, DGX A100, DGX H100, plain TCP) and choosing a node's profile.

Neighbours: `trainop.api.fabricprofile` defines the model; `trainop.nccl.tuning` turns the
chosen profile into pod env/resources. Machine facts are from the DGX A100/H100 user guides (https://docs.nvidia.com/dgx/dgxa100-user-guide/, https://docs.nvidia.com/dgx/dgxh100-user-guide/).

Built-ins match the `nvidia.com/gpu.product` value GPU Feature Discovery writes and assume
NVIDIA's own DGX NIC layout; HGX boards from other vendors order (and name) their HCAs
differently, so clusters of those should add a FabricProfile. Built-in priorities are negative
so that a user profile at the default priority 0 always overrides them. Products with the
time-slicing ("-SHARED") or MIG ("-MIG-...") suffix fall through to the TCP fallback on purpose:
such slices are not what multi-node RDMA training runs on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from trainop.api import constants as c
from trainop.api.fabricprofile import FabricProfile, FabricProfileSpec
from trainop.nccl.names import POD_PRIMARY_IFNAME

ForcedFabric = Literal["Auto", "InfiniBand", "RoCE", "TCP"]

BUILTIN_PREFIX = "builtin-"
PRIORITY_BUILTIN_MACHINE = -100
PRIORITY_BUILTIN_FALLBACK = -1000

# DGX-1: 4x EDR IB, each shared by a GPU pair through a PCIe switch (fabrics.md, "Machines"),
# so with 8 GPUs GPU i uses hcas[i * 4 // 8]: GPU0/1 -> mlx5_0 ... GPU6/7 -> mlx5_3.
DGX1_PRODUCTS = ("Tesla-V100-SXM2-16GB", "Tesla-V100-SXM2-32GB")
DGX1_HCAS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")

# DGX A100: 8x HDR compute HCAs; GPU pairs share a PCIe switch with two NICs (GPU0/1 ->
# mlx5_0/1, GPU2/3 -> mlx5_2/3, GPU4/5 -> mlx5_6/7, GPU6/7 -> mlx5_8/9). mlx5_4/5 and
# mlx5_10/11 are storage NICs and stay out of NCCL's way (fabrics.md; from a user's
# `nvidia-smi topo -m`, not an NVIDIA table). Older drivers omit the "NVIDIA-" prefix of the
# product name (https://developer.nvidia.com/cuda-gpus), hence the two extra values.
DGX_A100_PRODUCTS = (
    "NVIDIA-A100-SXM4-40GB",
    "NVIDIA-A100-SXM4-80GB",
    "A100-SXM4-40GB",
    "A100-SXM4-80GB",
)
DGX_A100_HCAS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9")

# DGX H100: 8x NDR ConnectX-7, GPU0..3 -> mlx5_0,3,4,5 (CPU 0), GPU4..7 -> mlx5_6,9,10,11
# (CPU 1) per the DGX H100 user guide (fabrics.md). NVSwitch gen 3 supports NVLink SHARP,
# ~480 vs ~370 GB/s single-node busbw (fabrics.md), and NCCL enables it by default.
DGX_H100_PRODUCTS = ("NVIDIA-H100-80GB-HBM3",)
DGX_H100_HCAS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")

BUILTIN_TCP_NAME = f"{BUILTIN_PREFIX}tcp"


def _product_slug(product: str) -> str:
    # The whole label value, lower-cased: with and without the "NVIDIA-" prefix must not collide.
    return product.lower()


def _machine_profiles(
    machine: str, products: Sequence[str], spec: Mapping[str, object]
) -> list[FabricProfile]:
    # nodeSelector matches exact values, so one profile per product label value.
    return [
        FabricProfile(
            name=f"{BUILTIN_PREFIX}{machine}-{_product_slug(product)}",
            spec=FabricProfileSpec.model_validate(
                {
                    "node_selector": {c.GFD_PRODUCT: product},
                    "priority": PRIORITY_BUILTIN_MACHINE,
                    **spec,
                }
            ),
        )
        for product in products
    ]


BUILTIN_PROFILES: tuple[FabricProfile, ...] = (
    *_machine_profiles(
        "dgx1",
        DGX1_PRODUCTS,
        {
            "fabric": "InfiniBand",
            "rdma_resource": c.DEFAULT_RDMA_RESOURCE,
            "hcas": list(DGX1_HCAS),
        },
    ),
    *_machine_profiles(
        "dgx-a100",
        DGX_A100_PRODUCTS,
        {
            "fabric": "InfiniBand",
            "rdma_resource": c.DEFAULT_RDMA_RESOURCE,
            "hcas": list(DGX_A100_HCAS),
        },
    ),
    *_machine_profiles(
        "dgx-h100",
        DGX_H100_PRODUCTS,
        {
            "fabric": "InfiniBand",
            "rdma_resource": c.DEFAULT_RDMA_RESOURCE,
            "hcas": list(DGX_H100_HCAS),
            "nvls": True,
        },
    ),
    # Anything else (PCIe servers, T4/L4, unlabelled nodes): sockets over the pod network.
    # The empty selector matches every node; the lowest priority makes it the last resort.
    FabricProfile(
        name=BUILTIN_TCP_NAME,
        spec=FabricProfileSpec(
            priority=PRIORITY_BUILTIN_FALLBACK,
            fabric="TCP",
            socket_ifname=POD_PRIMARY_IFNAME,
        ),
    ),
)

# An example RoCE profile for an HGX H100 cluster with 8x 400G RoCE NICs on a Multus secondary
# network (fabrics.md measures ~330 GB/s on such a setup). Not a built-in: no standard node label
# says "this node's NICs run RoCE", so clusters copy it into a FabricProfile with their own
# selector (here an example label), HCA order, GID index and traffic class.
EXAMPLE_ROCE_PROFILE = FabricProfile(
    name="example-roce-hgx-h100",
    spec=FabricProfileSpec(
        node_selector={c.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3", "example.com/fabric": "roce"},
        priority=10,
        fabric="RoCE",
        rdma_resource=c.DEFAULT_RDMA_RESOURCE,
        hcas=[f"mlx5_{i}" for i in range(8)],
        gid_index=3,  # RoCE v2 GID (fabrics.md: 3 is typical)
        traffic_class=106,  # example: whatever lossless class the switches are configured for
        multus_networks="roce-net",
    ),
)


class FabricMismatch(ValueError):
    """A job forces a fabric (spec.network.fabric) that the node it would land on does not have."""

    def __init__(self, forced: str, node: str, profile: FabricProfile) -> None:
        self.forced = forced
        self.node = node
        self.profile = profile
        have = profile.spec.fabric
        super().__init__(
            f"spec.network.fabric is {forced} but {node} has a {have} fabric "
            f"(FabricProfile {profile.name}); set spec.network.fabric to Auto or {have}, "
            f"or keep the job off nodes without {forced}"
        )


def selector_matches(selector: Mapping[str, str], node_labels: Mapping[str, str]) -> bool:
    """True when the node carries every selector label with the same value (empty: any node)."""
    return all(node_labels.get(k) == v for k, v in selector.items())


def _node_phrase(node_labels: Mapping[str, str]) -> str:
    host = node_labels.get(c.LABEL_HOSTNAME)
    return f"node {host}" if host else "the node"


def tcp_variant(profile: FabricProfile) -> FabricProfile:
    """The TCP counterpart of an RDMA profile, for jobs that force spec.network.fabric=TCP.

    RDMA facts go (no RDMA resource, HCAs, GID/TC, SHARP, GDR level, Multus network: the
    secondary network exists for RDMA) and sockets use the pod's primary interface. NVLS,
    /dev/shm size and priority stay: they concern the node's GPUs, not its NICs. Env entries
    aimed at the IB transport (NCCL_IB_*, NCCL_NET_GDR_*, NCCL_COLLNET_*) are dropped too.
    """
    if profile.spec.fabric == "TCP":
        return profile
    spec = profile.spec

    def keep(env: Mapping[str, str]) -> dict[str, str]:
        rdma_only = ("NCCL_IB_", "NCCL_NET_GDR_", "NCCL_COLLNET_")
        return {k: v for k, v in env.items() if not k.startswith(rdma_only)}

    return FabricProfile(
        name=f"{profile.name}-forced-tcp",
        spec=FabricProfileSpec(
            node_selector=dict(spec.node_selector),
            priority=spec.priority,
            fabric="TCP",
            socket_ifname=POD_PRIMARY_IFNAME,
            nvls=spec.nvls,
            extra_env=keep(spec.extra_env),
            debug_env=keep(spec.debug_env),
            shm_size=spec.shm_size,
        ),
    )


def select_profile(
    node_labels: Mapping[str, str],
    profiles: Sequence[FabricProfile],
    fabric: ForcedFabric = "Auto",
    *,
    builtins: Sequence[FabricProfile] = BUILTIN_PROFILES,
) -> FabricProfile:
    """The profile for a node: the highest-priority match among `profiles` and the built-ins.

    `profiles` are the cluster's FabricProfiles. Ties go to user profiles over built-ins, then
    to the more specific selector (more labels), then to the name, so the choice never depends
    on list order. A user profile named like a built-in replaces it. `fabric` is the job's
    spec.network.fabric: forcing TCP on an RDMA node yields `tcp_variant(profile)`; forcing an
    RDMA fabric the node does not have raises FabricMismatch.
    """
    user_names = {p.name for p in profiles}
    candidates = [(p, 0) for p in profiles] + [(p, 1) for p in builtins if p.name not in user_names]
    matching = [
        (p, rank) for p, rank in candidates if selector_matches(p.spec.node_selector, node_labels)
    ]
    if not matching:
        raise LookupError(f"no FabricProfile matches {_node_phrase(node_labels)}")
    best, _ = min(
        matching,
        key=lambda pr: (-pr[0].spec.priority, pr[1], -len(pr[0].spec.node_selector), pr[0].name),
    )
    if fabric == "Auto" or fabric == best.spec.fabric:
        return best
    if fabric == "TCP":
        return tcp_variant(best)
    raise FabricMismatch(fabric, _node_phrase(node_labels), best)
