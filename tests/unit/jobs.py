"""Fluent TrainingJob builders and default-fleet helpers for planner, manifests and CLI tests."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from trainop.api import constants as c
from trainop.cluster.fleet import load_fleet, node_manifests
from trainop.inventory import Snapshot, build_snapshot

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FLEET_NODES = EXAMPLES / "fleet-nodes.yaml"


class Job:
    """Job("bert").framework("pytorch", "2.4").cuda("12.4").role("Worker", 2, 8).obj()"""

    def __init__(self, name: str = "job", namespace: str = "team-a") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": c.API_VERSION,
            "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"framework": {"name": "pytorch"}, "replicaSpecs": {}},
        }

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._obj["spec"]
        return spec

    def framework(self, name: str, version: str | None = None) -> Job:
        self.spec["framework"] = {"name": name, **({"version": version} if version else {})}
        return self

    def cuda(self, cuda: str) -> Job:
        self.spec["cuda"] = cuda
        return self

    def role(
        self, role: str, replicas: int, gpus: int, template: Mapping[str, Any] | None = None
    ) -> Job:
        rs: dict[str, Any] = {"replicas": replicas, "gpus": gpus}
        if template is not None:
            rs["template"] = copy.deepcopy(dict(template))
        self.spec["replicaSpecs"][role] = rs
        return self

    def workers(self, replicas: int, gpus: int, template: Mapping[str, Any] | None = None) -> Job:
        return self.role("Worker", replicas, gpus, template)

    def placement(self, topology: str, mode: str = "Required", products: Sequence[str] = ()) -> Job:
        self.spec["placement"] = {"topology": topology, "mode": mode}
        if products:
            self.spec["placement"]["gpuProducts"] = list(products)
        return self

    def set(self, key: str, value: Any) -> Job:
        self.spec[key] = value
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def example(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    assert isinstance(doc, dict)
    return doc


def job_examples() -> list[str]:
    """Example files holding TrainingJobs (fleet-nodes.yaml and other kinds left out)."""
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if docs and all(d.get("kind") == "TrainingJob" for d in docs):
            out.append(path.name)
    return out


@cache
def _fleet_nodes() -> tuple[dict[str, Any], ...]:
    return tuple(node_manifests(load_fleet()))


def fleet_nodes() -> list[dict[str, Any]]:
    """The default fleet's Node dicts (fresh copies)."""
    return copy.deepcopy(list(_fleet_nodes()))


def fleet_snapshot(pods: Sequence[Mapping[str, Any]] = ()) -> Snapshot:
    return build_snapshot(fleet_nodes(), pods)


def node_product(node_name: str) -> str:
    for n in _fleet_nodes():
        if n["metadata"]["name"] == node_name:
            product: str = n["metadata"]["labels"][c.GFD_PRODUCT]
            return product
    raise KeyError(node_name)


def gpu_pod(name: str, node: str, gpus: int = 8) -> dict[str, Any]:
    """A Running pod of another workload holding `gpus` GPUs on `node`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "other"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {c.RESOURCE_GPU: str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def pods_of(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [o for o in objects if o["kind"] == "Pod"]


def env_of(pod: Mapping[str, Any], container: int = 0) -> dict[str, str]:
    env = pod["spec"]["containers"][container].get("env") or []
    return {e["name"]: e.get("value") for e in env}


def pinned_node(pod: Mapping[str, Any]) -> str | None:
    """The node every nodeSelectorTerm pins the pod to (None when not pinned); asserts that
    all terms agree, since terms are OR-ed and an unpinned term would free the pod."""
    aff = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    req = aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not req:
        return None
    pins = set()
    for term in req["nodeSelectorTerms"]:
        hosts = [e for e in term["matchExpressions"] if e["key"] == c.LABEL_HOSTNAME]
        assert len(hosts) == 1, term
        assert hosts[0]["operator"] == "In" and len(hosts[0]["values"]) == 1
        pins.add(hosts[0]["values"][0])
    assert len(pins) == 1, pins
    return pins.pop()


def walk(obj: Any) -> Iterator[Any]:
    """Every container and scalar in a nested structure, depth first."""
    yield obj
    if isinstance(obj, Mapping):
        for v in obj.values():
            yield from walk(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from walk(v)
