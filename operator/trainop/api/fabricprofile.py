"""Pydantic models of the cluster-scoped FabricProfile resource: how NCCL reaches a kind of node.

A FabricProfile (group trainop.dev, v1alpha1) says which nodes it covers (a label selector),
which fabric they have and the facts NCCL needs to use it: RDMA device-plugin resource,
HCA names in GPU order, RoCE GID index, SHARP/NVLS availability, /dev/shm size, Multus network.
`trainop.nccl` turns a profile plus a gang's shape into pod env, resources and capabilities;
`trainop.nccl.profiles` ships built-ins for DGX-1/A100/H100 and plain TCP nodes.
Field descriptions here become `kubectl explain` text through the generated CRD.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

Fabric = Literal["InfiniBand", "RoCE", "TCP"]
RDMA_FABRICS: frozenset[str] = frozenset({"InfiniBand", "RoCE"})

# NVIDIA lists these as debugging knobs not to force in production (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html,
# "NCCL environment variables"). They may come only from a profile's debugEnv or its explicit
# fields (gdrLevel, nvls), never from extraEnv, so that a reader of a profile sees at once that a
# debug override is in force. NCCL_IB_DISABLE is also emitted by trainop itself on TCP fabrics,
# where the fabric requires it.
DEBUG_ONLY_KNOBS: frozenset[str] = frozenset(
    {"NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL", "NCCL_IB_DISABLE", "NCCL_ALGO", "NCCL_NVLS_ENABLE"}
)

GdrLevel = Literal["LOC", "PIX", "PXB", "PHB", "SYS"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# An HCA as NCCL_IB_HCA takes it: a device name with an optional ":port"; no "=" / "^" prefixes,
# trainop adds "=" itself (fabrics.md: mlx5_1 would otherwise also match mlx5_10..19).
_HCA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(:[0-9]+)?$")
# A Kubernetes resource.Quantity (decimal or binary suffix, or exponent form).
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE]|[eE][+-]?[0-9]+)?$")


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", alias_generator=to_camel)


def _check_env_names(env: dict[str, str], field: str) -> None:
    for name in env:
        if not _ENV_NAME.match(name):
            raise ValueError(f"{field}: {name!r} is not a valid environment variable name")


class FabricBandwidth(_Model):
    """Bandwidth facts for the placement cost model (`trainop.placement.cost`); unset fields
    take the defaults of the node's GPU class documented there."""

    nvlink_gbps: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Allreduce bus bandwidth per GPU inside one node (NVLink/NVSwitch, or PCIe on "
            "boards without NVLink), in GB/s, e.g. 370 for 8x H100 SXM."
        ),
    )
    network_gbps_per_gpu: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Network bandwidth per GPU between nodes of one rack (leaf switch), in GB/s: the "
            "node's compute NIC bandwidth divided by its GPUs, e.g. 50 for 8x 400 Gb/s NDR."
        ),
    )
    spine_oversubscription: float | None = Field(
        default=None,
        ge=1,
        description=(
            "How much slower a path between racks of one block is than within a rack "
            "(spine oversubscription, 1 for a non-blocking fat tree). Default 2."
        ),
    )
    block_oversubscription: float | None = Field(
        default=None,
        ge=1,
        description=(
            "How much slower a path between blocks is than within a rack (oversubscribed "
            "links between blocks). Default 4."
        ),
    )


class FabricProfileSpec(_Model):
    """How pods on the selected nodes reach each other with NCCL."""

    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Node labels a node must carry (all of them, exact values) for this profile to apply; "
            "empty matches every node. Built-in profiles match nvidia.com/gpu.product."
        ),
    )
    priority: int = Field(
        default=0,
        description=(
            "Higher wins when several profiles match a node. Built-in profiles use negative "
            "priorities, so any user profile at the default 0 overrides them; on equal priority "
            "a user profile wins over a built-in."
        ),
    )
    fabric: Fabric = Field(
        description=(
            "The network NCCL uses between nodes: InfiniBand, RoCE (both through IB verbs and "
            "GPUDirect RDMA) or TCP (sockets; NCCL_IB_DISABLE=1 is set)."
        ),
    )
    rdma_resource: str | None = Field(
        default=None,
        description=(
            "Extended resource the RDMA device plugin advertises, requested by each pod of a "
            "multi-pod gang, e.g. rdma/rdma_shared_device_a, nvidia.com/hostdev. Unset: none is "
            "requested (devices reach the pod some other way). Only for InfiniBand and RoCE."
        ),
    )
    rdma_resource_per_pod: int = Field(
        default=1,
        ge=1,
        description="How many units of rdmaResource each pod requests (1 for a shared device).",
    )
    hcas: list[str] = Field(
        default_factory=list,
        description=(
            "Compute HCA names in GPU order, e.g. [mlx5_0, mlx5_1]: with G GPUs on the node, "
            "GPU i uses hcas[i * len(hcas) // G]. Storage NICs are left out. Becomes "
            "NCCL_IB_HCA with exact-name matching. Empty: NCCL uses every HCA it finds."
        ),
    )
    socket_ifname: str | None = Field(
        default=None,
        description=(
            "NCCL_SOCKET_IFNAME: interface(s) for NCCL bootstrap and the socket transport, "
            "e.g. eth0. Unset: NCCL's automatic choice (skips lo and docker*)."
        ),
    )
    gid_index: int | None = Field(
        default=None,
        ge=0,
        description=(
            "NCCL_IB_GID_INDEX for RoCE (3 is typical for RoCE v2). Unset: NCCL picks one "
            "automatically (NCCL >= 2.21). Only for RoCE."
        ),
    )
    traffic_class: int | None = Field(
        default=None,
        ge=0,
        le=255,
        description=(
            "NCCL_IB_TC: traffic class of RoCE packets (e.g. the switches' lossless class). "
            "Only for RoCE."
        ),
    )
    sharp: bool = Field(
        default=False,
        description=(
            "The NCCL CollNet/SHARP plugin and SHARP-capable switches are present: multi-node "
            "gangs get NCCL_COLLNET_ENABLE=1 for in-network reduction. Only for InfiniBand."
        ),
    )
    nvls: bool | None = Field(
        default=None,
        description=(
            "NVLink SHARP (NVSwitch multicast, H100 and later). true or unset: NCCL's default "
            "(on where supported); false: NCCL_NVLS_ENABLE=0 (a debugging knob)."
        ),
    )
    gdr_level: GdrLevel | None = Field(
        default=None,
        description=(
            "NCCL_NET_GDR_LEVEL: the farthest GPU-NIC distance at which GPUDirect RDMA is used "
            "(LOC, PIX, PXB, PHB, SYS). A debugging knob: leave unset unless the fabric needs it. "
            "Only for InfiniBand and RoCE."
        ),
    )
    extra_env: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Further environment for NCCL on these nodes, e.g. NCCL_IB_TIMEOUT. Debug-only knobs "
            "(NCCL_P2P_LEVEL, NCCL_NET_GDR_LEVEL, NCCL_IB_DISABLE, NCCL_ALGO, NCCL_NVLS_ENABLE) "
            "are refused here: put them in debugEnv. A job's ncclEnv wins over these."
        ),
    )
    debug_env: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Debug-only NCCL knobs (e.g. NCCL_P2P_LEVEL, NCCL_ALGO, NCCL_IB_DISABLE) to force on "
            "these nodes. trainop never sets them on its own; they apply only when listed here. "
            "A job's ncclEnv wins over these."
        ),
    )
    shm_size: str = Field(
        default="16Gi",
        description=(
            "Size of the memory-backed emptyDir mounted at /dev/shm (a Kubernetes quantity). "
            "Mounted in pods with more than one GPU (NCCL's intra-node SHM transport) and in "
            "RDMA pods of multi-pod gangs; the container runtime's 64Mi default is too small."
        ),
    )
    multus_networks: str | None = Field(
        default=None,
        description=(
            "Value of the k8s.v1.cni.cncf.io/networks annotation put on pods of multi-pod gangs, "
            "attaching a secondary network, e.g. 'roce-net' or 'ns/net1,ns/net2'. RoCE needs an "
            "interface with an IP address in the pod for its GIDs; a TCP profile may use one "
            "for a faster data network (then name it in socketIfname)."
        ),
    )

    bandwidth: FabricBandwidth | None = Field(
        default=None,
        description=(
            "Bandwidths the placement cost model uses for these nodes (estimated allreduce "
            "time in status.placement); unset: defaults of the GPU class."
        ),
    )

    @field_validator("hcas")
    @classmethod
    def _hcas_are_names(cls, hcas: list[str]) -> list[str]:
        for hca in hcas:
            if not _HCA.match(hca):
                raise ValueError(
                    f"hcas: {hca!r} is not an HCA name (e.g. mlx5_0 or mlx5_0:1; no '=' or '^', "
                    "trainop adds exact matching itself)"
                )
        if len(set(hcas)) != len(hcas):
            raise ValueError("hcas: each HCA may appear once (list them in GPU order)")
        return hcas

    @field_validator("shm_size")
    @classmethod
    def _shm_size_is_quantity(cls, value: str) -> str:
        if not _QUANTITY.match(value):
            raise ValueError(f"shmSize: {value!r} is not a Kubernetes quantity such as 16Gi")
        return value

    @field_validator("extra_env")
    @classmethod
    def _extra_env_has_no_debug_knobs(cls, env: dict[str, str]) -> dict[str, str]:
        _check_env_names(env, "extraEnv")
        debug = sorted(k for k in env if k in DEBUG_ONLY_KNOBS)
        if debug:
            raise ValueError(
                f"extraEnv: {', '.join(debug)} are debug-only NCCL knobs; put them in debugEnv"
            )
        return env

    @field_validator("debug_env")
    @classmethod
    def _debug_env_names(cls, env: dict[str, str]) -> dict[str, str]:
        _check_env_names(env, "debugEnv")
        return env

    @model_validator(mode="after")
    def _fields_fit_fabric(self) -> Self:
        # Refuse contradictions early (at admission of the profile) rather than silently
        # ignoring a field: a TCP profile with HCAs almost always means a wrong fabric.
        rdma, roce, ib = self.is_rdma, self.fabric == "RoCE", self.fabric == "InfiniBand"
        misplaced = {
            "rdmaResource": self.rdma_resource is not None and not rdma,
            "hcas": bool(self.hcas) and not rdma,
            "gdrLevel": self.gdr_level is not None and not rdma,
            "gidIndex": self.gid_index is not None and not roce,
            "trafficClass": self.traffic_class is not None and not roce,
            "sharp": self.sharp and not ib,
        }
        wrong = [alias for alias, bad in misplaced.items() if bad]
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: not applicable to fabric {self.fabric}")
        return self

    @property
    def is_rdma(self) -> bool:
        """True for InfiniBand and RoCE (IB verbs, GPUDirect RDMA)."""
        return self.fabric in RDMA_FABRICS


class FabricProfile(_Model):
    """A named FabricProfile: metadata.name plus its spec."""

    name: str = Field(
        min_length=1,
        description="The profile's name (metadata.name of the cluster-scoped resource).",
    )
    spec: FabricProfileSpec = Field(description="Which nodes the profile covers and their fabric.")
