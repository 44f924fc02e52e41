"""Fluent builders of Node and Pod dicts, as the API returns them, for inventory/placement tests."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainop.api.constants import (
    GFD_DRIVER_FULL,
    GFD_PRODUCT,
    LABEL_BLOCK,
    LABEL_GPU_CLIQUE,
    LABEL_HOSTNAME,
    LABEL_RACK,
    RESOURCE_GPU,
)
from trainop.inventory import Snapshot, build_snapshot

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
V100 = "Tesla-V100-SXM2-32GB"
T4 = "Tesla-T4"


class NodeBuilder:
    """Node("n1").gpus(8).rack("r1").block("b1").obj() -> a Ready GPU node dict."""

    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {LABEL_HOSTNAME: name, GFD_PRODUCT: H100}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "96", "memory": "1Ti", RESOURCE_GPU: "8"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "images": [],
            },
        }

    def label(self, key: str, value: str | None) -> NodeBuilder:
        labels = self._obj["metadata"]["labels"]
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        return self

    def gpus(self, count: int | str | None) -> NodeBuilder:
        alloc = self._obj["status"]["allocatable"]
        if count is None:
            alloc.pop(RESOURCE_GPU, None)
            self._obj["metadata"]["labels"].pop(GFD_PRODUCT, None)
        else:
            alloc[RESOURCE_GPU] = count
        return self

    def product(self, product: str | None) -> NodeBuilder:
        return self.label(GFD_PRODUCT, product)

    def driver(self, version: str) -> NodeBuilder:
        return self.label(GFD_DRIVER_FULL, version)

    def rack(self, rack: str | None) -> NodeBuilder:
        return self.label(LABEL_RACK, rack)

    def block(self, block: str | None) -> NodeBuilder:
        return self.label(LABEL_BLOCK, block)

    def clique(self, clique: str | None) -> NodeBuilder:
        return self.label(LABEL_GPU_CLIQUE, clique)

    def allocatable(self, resource: str, amount: Any) -> NodeBuilder:
        self._obj["status"]["allocatable"][resource] = amount
        return self

    def ready(self, status: str = "True", reason: str = "KubeletReady") -> NodeBuilder:
        self._obj["status"]["conditions"] = [{"type": "Ready", "status": status, "reason": reason}]
        return self

    def not_ready(self) -> NodeBuilder:
        return self.ready("False", "KubeletNotReady")

    def no_conditions(self) -> NodeBuilder:
        self._obj["status"].pop("conditions", None)
        return self

    def cordoned(self) -> NodeBuilder:
        self._obj["spec"]["unschedulable"] = True
        return self

    def taint(self, key: str, effect: str = "NoSchedule", value: str = "") -> NodeBuilder:
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        self._obj["spec"].setdefault("taints", []).append(taint)
        return self

    def image(self, *names: str) -> NodeBuilder:
        self._obj["status"]["images"].append({"names": list(names), "sizeBytes": 1 << 30})
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def Node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


class PodBuilder:
    """Pod("p").gpus(8).on("n1").obj() -> a Running pod dict holding 8 GPUs on n1."""

    def __init__(self, name: str, namespace: str = "default") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": "Running"},
        }

    def gpus(self, count: Any, *, part: str = "limits", container: int = 0) -> PodBuilder:
        containers = self._obj["spec"]["containers"]
        while len(containers) <= container:
            containers.append({"name": f"c{len(containers)}", "image": "busybox"})
        resources = containers[container].setdefault("resources", {})
        resources.setdefault(part, {})[RESOURCE_GPU] = count
        return self

    def init(self, gpus: Any, *, sidecar: bool = False) -> PodBuilder:
        init: dict[str, Any] = {
            "name": f"init{len(self._obj['spec'].get('initContainers', []))}",
            "image": "busybox",
            "resources": {"limits": {RESOURCE_GPU: gpus}},
        }
        if sidecar:
            init["restartPolicy"] = "Always"
        self._obj["spec"].setdefault("initContainers", []).append(init)
        return self

    def on(self, node: str) -> PodBuilder:
        self._obj["spec"]["nodeName"] = node
        return self

    def pinned(self, *hostnames: str, terms: int = 1) -> PodBuilder:
        """Required node affinity on kubernetes.io/hostname In hostnames (repeated in `terms`)."""
        term = {
            "matchExpressions": [
                {"key": LABEL_HOSTNAME, "operator": "In", "values": list(hostnames)}
            ]
        }
        self._obj["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [copy.deepcopy(term) for _ in range(terms)]
                }
            }
        }
        self._obj["spec"]["schedulingGates"] = [{"name": "trainop.dev/admission"}]
        self._obj["status"] = {"phase": "Pending"}
        return self

    def node_selector(self, hostname: str) -> PodBuilder:
        self._obj["spec"]["nodeSelector"] = {LABEL_HOSTNAME: hostname}
        self._obj["status"] = {"phase": "Pending"}
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._obj["status"]["phase"] = phase
        return self

    def deleting(self) -> PodBuilder:
        self._obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._obj["metadata"]["labels"][key] = value
        return self

    def overhead(self, gpus: Any) -> PodBuilder:
        self._obj["spec"]["overhead"] = {RESOURCE_GPU: gpus}
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def Pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


def busy(node: str, gpus: int, name: str | None = None) -> dict[str, Any]:
    """A Running pod holding `gpus` GPUs on `node`."""
    return Pod(name or f"busy-{node}-{gpus}").gpus(gpus).on(node).obj()


def grid(
    blocks: int = 1,
    racks: int = 1,
    nodes: int = 4,
    *,
    gpus: int = 8,
    product: str = H100,
    prefix: str = "n",
    cliques: bool = False,
) -> list[dict[str, Any]]:
    """blocks x racks x nodes identical nodes named n-b{i}-r{j}-{k}; racks r{i}-{j}, blocks b{i}."""
    out = []
    for b in range(blocks):
        for r in range(racks):
            for n in range(nodes):
                builder = (
                    Node(f"{prefix}-b{b}-r{r}-{n}")
                    .gpus(str(gpus))
                    .product(product)
                    .block(f"b{b}")
                    .rack(f"r{b}-{r}")
                )
                if cliques:
                    builder.clique(f"uuid-b{b}-r{r}.{n // 2}")
                out.append(builder.obj())
    return out


def snap(
    nodes: Sequence[Mapping[str, Any]],
    used: Mapping[str, int] | None = None,
    pods: Iterable[Mapping[str, Any]] = (),
) -> Snapshot:
    """Snapshot of `nodes` with `used` GPUs taken by Running pods (node -> GPUs)."""
    all_pods = list(pods) + [busy(n, g) for n, g in (used or {}).items() if g]
    return build_snapshot(nodes, all_pods)
