"""A gang as the upstream gang API sees it (`gangScheduling: kubernetes`): one `Workload` per
TrainingJob and one `PodGroup` per gang, in `scheduling.k8s.io/v1beta1` (Kubernetes 1.37,
behind the `GenericWorkload` feature gate).

In this mode kube-scheduler holds, places and binds the gang (its GangScheduling plugin waits
for `minCount` pods, then places them all or none); trainop still chooses the image, keeps the
pods on eligible nodes with required node affinity, orders the ranks and wires NCCL and the
framework. Each pod names its group in `spec.schedulingGroup.podGroupName`; none carries
trainop's scheduling gate. With KEP-5732 (`TopologyAwareWorkloadScheduling`, alpha) the
PodGroup's `schedulingConstraints.topology` keeps a Required gang in one domain of
spec.placement.topology. Sources: the v1.37.2 types,
https://github.com/kubernetes/kubernetes/blob/v1.37.2/staging/src/k8s.io/api/scheduling/v1beta1/types.go
and `PodSchedulingGroup` in
https://github.com/kubernetes/kubernetes/blob/v1.37.2/staging/src/k8s.io/api/core/v1/types.go;
https://kep.k8s.io/4671 (gang scheduling), https://kep.k8s.io/5732 (topology).

Pure: the planner (`planner.build_plan`) calls `gang_objects` and `join_group`; the reconcile
calls `name_gang` to give each new gang its own PodGroup (a PodGroup's
`PodGroupInitiallyScheduled` condition never reverts, so a restarted gang needs a new one).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from trainop.api import constants as c
from trainop.manifests import JobRef, job_labels, spec_hash

TRAINOP = "trainop"
KUBERNETES = "kubernetes"
GANG_SCHEDULING_MODES = (TRAINOP, KUBERNETES)

SCHEDULING_API = "scheduling.k8s.io/v1beta1"
TEMPLATE = "gang"  # the Workload's one PodGroupTemplate


def topology_key(topology: str, mode: str, levels: Sequence[str]) -> str | None:
    """The node label key of spec.placement.topology (levels: topologyLevels, widest first:
    the last is the node, the one above the rack, above that the block), for a Required
    gang only: KEP-5732's constraint is a hard one (all pods in one domain), so a Preferred
    gang gets none (the upstream API has no preference to express it)."""
    if mode != "Required" or topology == "none" or not levels:
        return None
    if topology == "clique":  # nvidia.com/gpu.clique, written by GPU feature discovery
        return c.LABEL_GPU_CLIQUE
    position = {"node": 1, "rack": 2, "block": 3}[topology]
    return levels[-position] if position <= len(levels) else None


def _policy(min_count: int, key: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if key is not None:
        out["schedulingConstraints"] = {"topology": [{"key": key}]}
    return out


def _meta(ref: JobRef, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": job_labels(ref.name),
        "ownerReferences": [ref.owner_reference()],
    }


def gang_objects(
    ref: JobRef, min_count: int, key: str | None, priority_class_name: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's Workload and its gang's PodGroup (named after the job until `name_gang`)."""
    group = c.API_VERSION.split("/")[0]
    workload = {
        "apiVersion": SCHEDULING_API,
        "kind": "Workload",
        "metadata": _meta(ref, ref.name),
        "spec": {
            "controllerRef": {"apiGroup": group, "kind": ref.kind, "name": ref.name},
            "podGroupTemplates": [{"name": TEMPLATE, **_policy(min_count, key)}],
        },
    }
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": ref.name, "templateName": TEMPLATE},
        **_policy(min_count, key),
    }
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
    pod_group = {
        "apiVersion": SCHEDULING_API,
        "kind": "PodGroup",
        "metadata": _meta(ref, ref.name),
        "spec": spec,
    }
    return workload, pod_group


def eligibility_terms(
    compat: Sequence[Mapping[str, Any]], selector: Mapping[str, str]
) -> tuple[dict[str, Any], ...]:
    """Required nodeSelectorTerms that stand in for trainop's node pin: the image's
    compatibility terms (driver branch, compute capability, products), each AND-ed with the
    node selector of the fabric the pod's NCCL settings were tuned for."""
    sel = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(selector.items())]
    if not compat:
        return ({"matchExpressions": sel},) if sel else ()
    return tuple(
        {"matchExpressions": [*copy.deepcopy(sel), *copy.deepcopy(t.get("matchExpressions", []))]}
        for t in compat
    )


def join_group(pod: dict[str, Any], group: str) -> dict[str, Any]:
    """The pod as a member of PodGroup `group` (spec.schedulingGroup), without trainop's gate."""
    spec = pod["spec"]
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != c.SCHEDULING_GATE]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    spec["schedulingGroup"] = {"podGroupName": group}
    pod["metadata"]["annotations"][c.ANNOTATION_SPEC_HASH] = spec_hash(pod)
    return pod


def name_gang(objects: Sequence[Mapping[str, Any]], group: str) -> list[dict[str, Any]]:
    """The gang's objects with its PodGroup named `group` and every pod pointing at it."""
    out: list[dict[str, Any]] = []
    for obj in objects:
        if obj.get("kind") == "PodGroup":
            obj = {**obj, "metadata": {**obj["metadata"], "name": group}}
        elif obj.get("kind") == "Pod" and (obj.get("spec") or {}).get("schedulingGroup"):
            obj = join_group(copy.deepcopy(dict(obj)), group)
        out.append(dict(obj))
    return out


def gang_name(job: str, started: float) -> str:
    """A new gang's PodGroup name: the job's name and the second the gang was created."""
    return f"{job}-{int(started)}"
