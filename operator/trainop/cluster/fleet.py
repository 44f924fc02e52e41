"""Turns a fleet file (node classes x count x rack/block) into fake Node manifests with GFD labels."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainop.api import constants as c
from trainop.yamlio import YamlInputError, load_yaml

# KWOK manages Nodes that carry this annotation (and the kwok.x-k8s.io/node taint is not
# needed because no real kubelet exists in this cluster).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


class FleetError(ValueError):
    """The fleet file is malformed; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class GpuSpec(_Strict):
    product: str = Field(description="nvidia.com/gpu.product value, e.g. NVIDIA-H100-80GB-HBM3")
    count: int = Field(ge=1, description="GPUs per node")
    memory_mib: int = Field(alias="memoryMiB", ge=1, description="MiB per GPU")
    family: str = Field(description="GFD family label, e.g. hopper")
    compute_capability: str = Field(
        alias="computeCapability", pattern=r"^\d+\.\d+$", description="e.g. 9.0"
    )


class RdmaSpec(_Strict):
    resource: str = Field(description="extended resource name, e.g. rdma/rdma_shared_device_a")
    count: int = Field(ge=1)


class NodeClass(_Strict):
    gpu: GpuSpec | None = None
    driver: str | None = Field(default=None, pattern=r"^\d+(\.\d+){0,2}$")
    cuda_runtime: str | None = Field(default=None, alias="cudaRuntime", pattern=r"^\d+\.\d+$")
    rdma: RdmaSpec | None = None
    cpu: str = "64"
    memory: str = "256Gi"
    pods: int = 110
    gfd_labels: Literal["new", "deprecated", "both"] = Field(default="both", alias="gfdLabels")
    clique_size: int | None = Field(
        default=None, alias="cliqueSize", description="nodes per NVLink clique (gpu.clique)"
    )
    labels: dict[str, str] = Field(default_factory=dict)
    images: list[str] = Field(default_factory=list, description="status.images names")
    arch: Literal["amd64", "arm64"] = Field(
        default="amd64",
        description="kubernetes.io/arch: arm64 for Grace nodes (GH200, GB200/GB300 trays)",
    )


class Group(_Strict):
    node_class: str = Field(alias="class")
    count: int = Field(ge=1)
    block: str
    rack: str
    prefix: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Fleet(_Strict):
    classes: dict[str, NodeClass]
    groups: list[Group]


@dataclass(frozen=True)
class FleetSummary:
    """One row per group, for `cluster status`."""

    group: str
    node_class: str
    count: int
    product: str


def default_fleet_path() -> Path:
    return Path(str(resources.files("trainop.cluster") / "data" / "fleet.yaml"))


def load_fleet(path: str | Path | None = None) -> Fleet:
    p = Path(path) if path else default_fleet_path()
    try:
        text = p.read_text()
    except OSError as exc:
        raise FleetError(f"cannot read fleet file {p}: {exc}") from exc
    try:
        raw = load_yaml(text, source=f"fleet file {p}")  # bounded: size, depth, alias expansion
    except YamlInputError as exc:
        raise FleetError(str(exc)) from exc
    try:
        fleet = Fleet.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise FleetError(f"fleet file {p}: {loc}: {first['msg']}") from exc
    for i, g in enumerate(fleet.groups):
        if g.node_class not in fleet.classes:
            known = ", ".join(sorted(fleet.classes))
            raise FleetError(
                f"fleet file {p}: groups.{i}.class: unknown class {g.node_class!r}; "
                f"known classes: {known}"
            )
    return fleet


def gfd_labels(cls: NodeClass) -> dict[str, str]:
    """The labels GPU Feature Discovery writes (https://github.com/NVIDIA/k8s-device-plugin/blob/main/docs/gpu-feature-discovery/README.md)."""
    gpu = cls.gpu
    if gpu is None:
        return {}
    major, minor = gpu.compute_capability.split(".")
    labels = {
        "nvidia.com/gpu.present": "true",
        c.GFD_PRODUCT: gpu.product,
        c.GFD_COUNT: str(gpu.count),
        c.GFD_MEMORY: str(gpu.memory_mib),
        c.GFD_FAMILY: gpu.family,
        c.GFD_COMPUTE_MAJOR: major,
        c.GFD_COMPUTE_MINOR: minor,
        c.GFD_MIG_CAPABLE: "true" if gpu.family in ("ampere", "hopper", "blackwell") else "false",
    }
    if cls.driver:
        parts = [*cls.driver.split("."), "", ""][:3]
        if cls.gfd_labels in ("new", "both"):
            labels[c.GFD_DRIVER_MAJOR] = parts[0]
            if parts[1]:
                labels[c.GFD_DRIVER_MINOR] = parts[1]
            if parts[2]:
                labels[c.GFD_DRIVER_REVISION] = parts[2]
            labels[c.GFD_DRIVER_FULL] = cls.driver
        if cls.gfd_labels in ("deprecated", "both"):
            labels[c.GFD_DRIVER_MAJOR_OLD] = parts[0]
            if parts[1]:
                labels[c.GFD_DRIVER_MINOR_OLD] = parts[1]
            if parts[2]:
                labels[c.GFD_DRIVER_REV_OLD] = parts[2]
    if cls.cuda_runtime:
        rmaj, rmin = cls.cuda_runtime.split(".")
        if cls.gfd_labels in ("new", "both"):
            labels[c.GFD_RUNTIME_MAJOR] = rmaj
            labels[c.GFD_RUNTIME_MINOR] = rmin
        if cls.gfd_labels in ("deprecated", "both"):
            labels[c.GFD_RUNTIME_MAJOR_OLD] = rmaj
            labels[c.GFD_RUNTIME_MINOR_OLD] = rmin
    return labels


def node_manifests(fleet: Fleet) -> list[dict[str, Any]]:
    """Node objects for every group, in a stable order, ready for `kubectl apply`."""
    nodes: list[dict[str, Any]] = []
    for g in fleet.groups:
        cls = fleet.classes[g.node_class]
        for i in range(1, g.count + 1):
            name = f"{g.prefix}-{i:02d}"
            labels = {
                "type": "kwok",
                "kubernetes.io/arch": cls.arch,
                "kubernetes.io/os": "linux",
                c.LABEL_HOSTNAME: name,
                c.LABEL_BLOCK: g.block,
                c.LABEL_RACK: g.rack,
                "trainop.dev/node-class": g.node_class,
                **gfd_labels(cls),
                **cls.labels,
            }
            if cls.clique_size:
                labels[c.LABEL_GPU_CLIQUE] = f"{g.rack}.{(i - 1) // cls.clique_size}"
            resources_: dict[str, str] = {
                "cpu": cls.cpu,
                "memory": cls.memory,
                "pods": str(cls.pods),
            }
            if cls.gpu:
                resources_[c.RESOURCE_GPU] = str(cls.gpu.count)
            if cls.rdma:
                resources_[cls.rdma.resource] = str(cls.rdma.count)
            # Ready in the manifest too, so `trainop cluster fleet -o json` serves as the
            # NODES file of `trainop render` without a cluster (KWOK rewrites it live).
            status: dict[str, Any] = {
                "allocatable": resources_,
                "capacity": dict(resources_),
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            }
            if cls.images:
                status["images"] = [
                    {"names": [img], "sizeBytes": 20_000_000_000} for img in cls.images
                ]
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {
                            KWOK_NODE_ANNOTATION: "fake",
                            "node.alpha.kubernetes.io/ttl": "0",
                        },
                    },
                    "spec": {},
                    "status": status,
                }
            )
    return nodes


def summarize(fleet: Fleet) -> list[FleetSummary]:
    out = []
    for g in fleet.groups:
        cls = fleet.classes[g.node_class]
        product = cls.gpu.product if cls.gpu else "-"
        out.append(FleetSummary(f"{g.block}/{g.rack}", g.node_class, g.count, product))
    return out
