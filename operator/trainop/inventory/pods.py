"""Reads a Pod dict for GPU accounting: is it live, how many GPUs it holds, and on which node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainop.api.constants import (
    ANNOTATION_DRA_GPUS,
    LABEL_HOSTNAME,
    RESOURCE_GPU,
    SCHEDULING_GATE,
)
from trainop.inventory.quantity import parse_count

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

# How a pod is tied to a node: by name (spec.nodeName, matchFields metadata.name) or by the
# value of its kubernetes.io/hostname label (nodeSelector, node affinity), which usually but
# not always equals the node name.
BY_NAME = "name"
BY_HOSTNAME = "hostname"


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        # (A dict first: the ABC test alone took a third of a pod's reading in the
        # admission cycle's intake.)
        if type(obj) is not dict and not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def is_terminated(pod: Mapping[str, Any]) -> bool:
    """Succeeded/Failed pods released their devices; deleting pods did not yet (they still run)."""
    return _get(pod, "status", "phase") in TERMINAL_PHASES


def is_gated(pod: Mapping[str, Any]) -> bool:
    """Held behind trainop's scheduling gate: created, not released yet."""
    gates = _get(pod, "spec", "schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == SCHEDULING_GATE for g in gates)


def container_request(container: Mapping[str, Any], resource: str = RESOURCE_GPU) -> int:
    """requests[resource], else limits[resource] (extended resources default requests to limits)."""
    resources = container.get("resources") or {}
    for part in ("requests", "limits"):
        amounts = resources.get(part) or {}
        if resource in amounts:
            # The API server only stores valid quantities; a hand-written fleet file that does not
            # parse counts as 0 rather than aborting the whole snapshot.
            return parse_count(amounts[resource], round_up=True, default=0)
    return 0


def pod_request(pod: Mapping[str, Any], resource: str = RESOURCE_GPU) -> int:
    """The pod's effective request for `resource` by the Kubernetes rules.

    max(sum of app containers + sum of sidecars, the largest init-time peak), where a
    non-restartable init container's peak is its own request plus the sidecars
    (restartPolicy: Always init containers) started before it; pod overhead is added.
    """
    spec = pod.get("spec") or {}
    app = sum(container_request(c, resource) for c in spec.get("containers") or ())
    sidecars = 0
    init_peak = 0
    for init in spec.get("initContainers") or ():
        amount = container_request(init, resource)
        if init.get("restartPolicy") == "Always":
            sidecars += amount
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + amount)
    overhead = spec.get("overhead") or {}
    extra = parse_count(overhead[resource], round_up=True, default=0) if resource in overhead else 0
    total = max(app + sidecars, init_peak) + extra
    if total == 0 and resource == RESOURCE_GPU and spec.get("resourceClaims"):
        # DRA mode: GPUs come from ResourceClaims, not the extended resource; trainop's pods
        # state how many they hold so the inventory still counts them.
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        total = parse_count(annotations.get(ANNOTATION_DRA_GPUS, "0"), default=0)
    return total


def _single(values: Any) -> str | None:
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return None


def _term_pin(term: Mapping[str, Any]) -> tuple[str, str] | None:
    """The one node a nodeSelectorTerm admits, if an `In` with a single value pins it."""
    for expr in term.get("matchFields") or ():
        if expr.get("key") == "metadata.name" and expr.get("operator") == "In":
            value = _single(expr.get("values"))
            if value is not None:
                return (BY_NAME, value)
    for expr in term.get("matchExpressions") or ():
        if expr.get("key") == LABEL_HOSTNAME and expr.get("operator") == "In":
            value = _single(expr.get("values"))
            if value is not None:
                return (BY_HOSTNAME, value)
    return None


def pod_binding(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(BY_NAME | BY_HOSTNAME, value) of the node whose GPUs the pod holds or reserves, else None.

    A bound pod (spec.nodeName) holds its node. An unbound pod reserves a node when it can only
    ever land there: a nodeSelector on kubernetes.io/hostname, or required node affinity whose
    every term (terms are ORed) pins the same single node. That is how trainop's gang pods,
    created pinned and scheduling-gated, keep their GPUs reserved before the scheduler binds them.
    """
    spec = pod.get("spec") or {}
    node_name = spec.get("nodeName")
    if node_name:
        return (BY_NAME, str(node_name))
    selector = spec.get("nodeSelector") or {}
    if isinstance(selector.get(LABEL_HOSTNAME), str) and selector[LABEL_HOSTNAME]:
        return (BY_HOSTNAME, selector[LABEL_HOSTNAME])
    terms = _get(
        spec,
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )
    if not isinstance(terms, list) or not terms:
        return None
    pins = {_term_pin(t) if isinstance(t, Mapping) else None for t in terms}
    if len(pins) == 1:
        return pins.pop()
    return None
