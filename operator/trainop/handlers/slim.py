"""Slim copies of watched objects: only the fields the operator reads, strings interned.

Neighbours: `handlers.state.ShellState` stores what these functions return for every pod,
node and TrainingJob the watches show; the readers are `inventory.pods` (GPU accounting,
pod_binding), `trainop.failures` (why a pod failed), `trainop.reconcile` (gang generation,
lost pinned nodes), `handlers.progress` (whose report this is) and the placement parsers.

At 8,000 pods the cache is most of the operator's memory (`make bench-memory`), so a pod
keeps the same dict shape its readers know, with less in it:
  - containers: name, image, resources, restartPolicy (no env, ports, mounts, commands);
  - required node affinity: only the expressions that pin a node (`kubernetes.io/hostname
    In [one]`, `metadata.name In [one]`), identical terms once: what pod_binding and
    reconcile's lost-node check read, with the same answers;
  - status: phase, reason, message, conditions without their timestamps, container
    statuses with name, image and state;
  - owner references: uid, kind, name.
Every string is interned (sys.intern): the label keys and values, node names, images and
field names a watch sends anew in every body are held once. Copies share nothing with the
body they came from (a kopf body is not kept alive by the cache).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from trainop.api import constants as c

_POD_META = ("name", "namespace", "labels", "annotations", "deletionTimestamp", "uid")
_POD_SPEC = ("nodeName", "overhead", "schedulingGates", "nodeSelector", "resourceClaims")
_CONTAINER = ("name", "image", "resources", "restartPolicy")
_STATUS = ("phase", "reason", "message")
_CONDITION = ("type", "status", "reason", "message")
_CONTAINER_STATUS = ("name", "image", "state")
_OWNER = ("uid", "kind", "name")
# The node a pod is pinned to, as pod_binding reads it: kubernetes.io/hostname In [one] in
# matchExpressions, metadata.name In [one] in matchFields (Kubernetes docs, "Assigning Pods
# to Nodes": https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/).
_PIN_KEYS = {"matchExpressions": c.LABEL_HOSTNAME, "matchFields": "metadata.name"}
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def interned(value: Any) -> Any:
    """A copy of a JSON value (dicts, lists, scalars) with every string interned."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, Mapping):
        return {sys.intern(str(k)): interned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [interned(v) for v in value]
    return value


def _pick(obj: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        return {}
    return {sys.intern(k): interned(obj[k]) for k in keys if obj.get(k) is not None}


def _pin_term(term: Any) -> dict[str, Any]:
    """A nodeSelectorTerm reduced to the expressions that pin a node (in their order)."""
    out: dict[str, Any] = {}
    for kind, key in _PIN_KEYS.items():
        pins = [
            _pick(e, ("key", "operator", "values"))
            for e in (term.get(kind) or () if isinstance(term, Mapping) else ())
            if isinstance(e, Mapping) and e.get("key") == key and e.get("operator") == "In"
        ]
        if pins:
            out[sys.intern(kind)] = pins
    return out


def _slim_affinity(affinity: Any) -> dict[str, Any] | None:
    terms = (
        ((affinity or {}).get("nodeAffinity") or {}).get(_REQUIRED, {}).get("nodeSelectorTerms")
        if isinstance(affinity, Mapping)
        else None
    )
    if not isinstance(terms, list) or not terms:
        return None
    kept: list[dict[str, Any]] = []
    for term in terms:
        pinned = _pin_term(term)
        if pinned not in kept:
            kept.append(pinned)
    return {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": kept}}}


def slim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Pod the operator reads (see the module docstring), copied."""
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    out_meta = {sys.intern(k): interned(meta.get(k)) for k in _POD_META}
    out_meta["ownerReferences"] = [_pick(o, _OWNER) for o in meta.get("ownerReferences") or ()]
    out_spec = _pick(spec, _POD_SPEC)
    for kind in ("containers", "initContainers"):
        if spec.get(kind) is not None:
            out_spec[kind] = [_pick(ctr, _CONTAINER) for ctr in spec[kind]]
    affinity = _slim_affinity(spec.get("affinity"))
    if affinity is not None:
        out_spec["affinity"] = affinity
    out_status = _pick(status, _STATUS)
    if status.get("conditions") is not None:
        out_status["conditions"] = [_pick(cd, _CONDITION) for cd in status["conditions"]]
    for kind in ("containerStatuses", "initContainerStatuses"):
        if status.get(kind) is not None:
            out_status[kind] = [_pick(cs, _CONTAINER_STATUS) for cs in status[kind]]
    return {"metadata": out_meta, "spec": out_spec, "status": out_status}


def slim_node(body: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Node placement reads: labels, taints, allocatable, conditions (without
    the heartbeat a kubelet moves every few seconds), images."""
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    return {
        "metadata": {
            "name": interned(meta.get("name")),
            "labels": interned(meta.get("labels") or {}),
        },
        "spec": {
            "taints": interned(spec.get("taints") or []),
            "unschedulable": spec.get("unschedulable", False),
        },
        "status": _pick(status, ("allocatable", "capacity", "images"))
        | {"conditions": [_no_heartbeat(cd) for cd in status.get("conditions") or []]},
    }


def _no_heartbeat(condition: Mapping[str, Any]) -> dict[str, Any]:
    """A node condition without lastHeartbeatTime: a kubelet's periodic status update
    changes only that, and must not count as a change of the node (a new cycle, every
    memo of the fleet thrown away)."""
    return {sys.intern(k): interned(v) for k, v in condition.items() if k != "lastHeartbeatTime"}


def slim_job(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a TrainingJob without managedFields (a large part of every body that
    nothing in trainop reads; at thousands of jobs it is most of the cache)."""
    out = {k: interned(v) for k, v in body.items() if k != "metadata"}
    out["metadata"] = {
        k: interned(v) for k, v in (body.get("metadata") or {}).items() if k != "managedFields"
    }
    return out
