"""`externalQueue: kueue`: one Kueue Workload per TrainingJob, read and written as plain dicts.

Kueue admits the gang; trainop still chooses the image, the nodes (within the admitted
ResourceFlavor's nodeLabels) and the wiring. See docs/kueue.md for the route and why.
Neighbours: `handlers.kueue` watches Workloads, ResourceFlavors and WorkloadPriorityClasses
and calls these functions; `kube.kueue` writes what they return; `reconcile` carries out
the verdict like any other queue's.

What trainop does as Kueue's external framework (`integrations.externalFrameworks:
["TrainingJob.v1alpha1.trainop.dev"]`), as Kueue's own job reconciler does for its
built-in jobs (pkg/controller/jobframework/reconciler.go, v0.17.0):
- creates the Workload, owned by the job (garbage collected with it), one PodSet per role;
- starts the gang only once the Workload is admitted (QuotaReserved and Admitted True);
- on eviction (condition Evicted True) stops the whole gang, then clears the reservation:
  status.admission removed, QuotaReserved False (reason Pending), Admitted False and, for a
  preemption, Requeued True, so Kueue queues the Workload again;
- marks the Workload Finished when the job ends, which releases its quota;
- keeps spec.active false while the job is suspended (spec.runPolicy.suspend).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainop.api import constants as c
from trainop.api.conditions import MAX_MESSAGE, find_condition, set_condition
from trainop.api.trainingjob import TrainingJobSpec

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
# Kueue's label for a job's WorkloadPriorityClass (pkg/controller/constants, v0.17.0).
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU = "nvidia.com/gpu"

# TrainingJob status reasons while Kueue decides.
WAITING = "WaitingForKueue"
EVICTED = "EvictedByKueue"


@dataclass(frozen=True)
class KueueVerdict:
    """What the Workload says about the gang.

    state: absent (no Workload yet) | pending (no quota reserved: `reason`/`message` are
    Kueue's) | admitted (`flavors`: role -> ResourceFlavor names) | evicted (the gang must
    go; `reason`/`message` are Kueue's) | finished."""

    state: str
    reason: str = ""
    message: str = ""
    flavors: Mapping[str, tuple[str, ...]] | None = None
    reserved: bool = False  # status.admission is still set (cleared after an eviction)


def workload_name(job: str, uid: str) -> str:
    """Kueue names its job Workloads `<kind>-<name>-<hash>`; the uid part keeps a job
    re-created under the same name from meeting its predecessor's Workload."""
    return f"trainingjob-{job[:230]}-{uid.replace('-', '')[:5]}"


def _condition(wl: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    cond = find_condition((wl.get("status") or {}).get("conditions"), ctype)
    return dict(cond) if cond is not None else None


def _true(wl: Mapping[str, Any], ctype: str) -> bool:
    cond = _condition(wl, ctype)
    return bool(cond and cond.get("status") == "True")


def verdict(wl: Mapping[str, Any] | None) -> KueueVerdict:
    """The Workload's state, as Kueue's conditions say it."""
    if wl is None:
        return KueueVerdict("absent")
    reserved = bool((wl.get("status") or {}).get("admission"))
    if _true(wl, "Finished"):
        return KueueVerdict("finished", reserved=reserved)
    if _true(wl, "Evicted"):
        cond = _condition(wl, "Evicted") or {}
        return KueueVerdict(
            "evicted", str(cond.get("reason") or ""), str(cond.get("message") or ""), None, reserved
        )
    if _true(wl, "QuotaReserved") and _true(wl, "Admitted") and reserved:
        return KueueVerdict("admitted", flavors=_flavors(wl), reserved=True)
    return waiting(wl)


def waiting(wl: Mapping[str, Any]) -> KueueVerdict:
    """A Workload without quota: Kueue's reason and message (QuotaReserved, else Admitted)."""
    cond = _condition(wl, "QuotaReserved") or _condition(wl, "Admitted") or {}
    message = str(cond.get("message") or "the Workload is waiting for Kueue's scheduler")
    reserved = bool((wl.get("status") or {}).get("admission"))
    return KueueVerdict("pending", str(cond.get("reason") or "Pending"), message, None, reserved)


def _flavors(wl: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """PodSet name -> the ResourceFlavors Kueue assigned to it (any resource)."""
    out: dict[str, tuple[str, ...]] = {}
    admission = (wl.get("status") or {}).get("admission") or {}
    for psa in admission.get("podSetAssignments") or []:
        out[str(psa.get("name"))] = tuple(sorted(set((psa.get("flavors") or {}).values())))
    return out


def _containers(template: Mapping[str, Any], gpus: int) -> list[dict[str, Any]]:
    """The role's containers as Kueue counts them (it sums their requests; a limit stands
    for a missing request, as in Kubernetes), the role's GPUs on the first one."""
    out = []
    for i, ctr in enumerate(((template.get("spec") or {}).get("containers")) or [{}]):
        res = ctr.get("resources") or {}
        requests = {
            k: str(v)
            for k, v in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items()
            if k != GPU
        }
        if i == 0 and gpus:
            requests[GPU] = str(gpus)
        out.append({"name": str(ctr.get("name") or f"c{i}"), "resources": {"requests": requests}})
    return out


def build_workload(
    body: Mapping[str, Any], spec: TrainingJobSpec, priority: int | None
) -> dict[str, Any]:
    """The job's Workload: one PodSet per role (count = replicas, the role's requests,
    nodeSelector, affinity and tolerations, which Kueue matches against flavors), queueName
    = spec.queue (a Kueue LocalQueue), the priority class from the job's
    kueue.x-k8s.io/priority-class label (a WorkloadPriorityClass) or spec.priorityClassName."""
    meta = body.get("metadata") or {}
    name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
    pod_sets = []
    for role, rs in spec.replica_specs.items():
        tspec = dict((rs.template or {}).get("spec") or {})
        pod_spec: dict[str, Any] = {"containers": _containers(rs.template or {}, rs.gpus)}
        for key in ("nodeSelector", "affinity", "tolerations"):
            if tspec.get(key):
                pod_spec[key] = copy.deepcopy(tspec[key])
        pod_sets.append(
            {"name": role.lower(), "count": rs.replicas, "template": {"spec": pod_spec}}
        )
    wl_spec: dict[str, Any] = {"podSets": pod_sets}
    if spec.queue:
        wl_spec["queueName"] = spec.queue
    wpc = (meta.get("labels") or {}).get(PRIORITY_LABEL)
    if wpc:
        wl_spec["priorityClassRef"] = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": wpc}
    elif spec.priority_class_name:
        wl_spec["priorityClassRef"] = {
            "group": "scheduling.k8s.io",
            "kind": "PriorityClass",
            "name": spec.priority_class_name,
        }
    if priority is not None:
        wl_spec["priority"] = priority
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(name, uid),
            "namespace": meta.get("namespace") or "default",
            "labels": {c.LABEL_JOB_NAME: name},
            "ownerReferences": [
                {
                    "apiVersion": f"{c.GROUP}/{c.VERSION}",
                    "kind": "TrainingJob",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": wl_spec,
    }


def active(wl: Mapping[str, Any]) -> bool:
    """spec.active (default true): false takes the Workload's quota back (Kueue evicts it
    with reason Deactivated); trainop sets it false while the job is suspended, as Kueue's
    job reconciler does for its own jobs."""
    return (wl.get("spec") or {}).get("active") is not False


def owned_by(wl: Mapping[str, Any], uid: str | None) -> bool:
    refs = (wl.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("kind") == "TrainingJob" for r in refs)


def flavored(
    body: Mapping[str, Any],
    flavors: Mapping[str, tuple[str, ...]],
    node_labels: Mapping[str, Mapping[str, str]],
) -> dict[str, Any]:
    """The job with each role's template nodeSelector narrowed to its admitted flavors'
    nodeLabels, so placement chooses nodes only there and the pods carry it (as Kueue
    injects a flavor's nodeLabels into the pods of the jobs it admits)."""
    out = dict(body)
    spec = copy.deepcopy(dict(body.get("spec") or {}))
    for role, rs in (spec.get("replicaSpecs") or {}).items():
        labels: dict[str, str] = {}
        for flavor in flavors.get(role.lower(), ()):
            labels.update(node_labels.get(flavor) or {})
        if not labels:
            continue
        template = rs.setdefault("template", {})
        pod_spec = template.setdefault("spec", {})
        pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **labels}
    out["spec"] = spec
    return out


def requeued_status(wl: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """Merge patch of the Workload's status after its evicted gang is gone: the reservation
    cleared and the Workload requeued (UnsetQuotaReservationWithCondition and
    SetRequeuedCondition in Kueue's pkg/workload, v0.17.0). The resourceVersion makes a
    concurrent change by Kueue a conflict instead of a lost update."""
    meta = wl.get("metadata") or {}
    gen = meta.get("generation")
    conds = [dict(x) for x in (wl.get("status") or {}).get("conditions") or []]
    evicted = _condition(wl, "Evicted") or {}
    reason, message = str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "")
    requeue = reason in ("Preempted", "NodeFailures")
    for ctype, state, why, text in (
        ("Requeued", "True" if requeue else "False", reason, message),
        ("QuotaReserved", "False", "Pending", message),
        ("Admitted", "False", "NoReservation", "The workload has no reservation"),
    ):
        set_condition(conds, ctype, state, why, text, now, gen or 0, max_message=MAX_MESSAGE)
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": {"admission": None, "conditions": conds},
    }


def finished_status(wl: Mapping[str, Any], job: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """Merge patch marking the Workload Finished (reason Succeeded or Failed, Kueue's
    job-framework reasons, with the job's own message): Kueue then releases its quota."""
    meta = wl.get("metadata") or {}
    status = job.get("status") or {}
    phase = str(status.get("phase") or "")
    message = next(
        (
            str(c.get("message") or "")
            for c in status.get("conditions") or []
            if c.get("type") == phase
        ),
        "",
    )
    conds = [dict(x) for x in (wl.get("status") or {}).get("conditions") or []]
    reason = "Succeeded" if phase == "Succeeded" else "Failed"
    set_condition(
        conds,
        "Finished",
        "True",
        reason,
        message or f"TrainingJob {phase}",
        now,
        meta.get("generation") or 0,
        max_message=MAX_MESSAGE,
    )
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": {"conditions": conds},
    }
