"""Builds the Kubernetes objects of a planned job (pods, headless Service, ConfigMap) as plain dicts."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainop.api import constants as c

TRAINER_CONTAINER = "trainer"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
CONFIG_VOLUME = "trainop-config"
SSH_VOLUME = "trainop-ssh"
# The job's SSH keypair (id_ed25519, id_ed25519.pub, authorized_keys); images copy it to
# ~/.ssh at start (trainop-launch does), since sshd refuses group-readable key files.
SSH_MOUNT_PATH = "/etc/trainop-ssh"


@dataclass(frozen=True)
class JobRef:
    """Identity of the owning TrainingJob (for names, labels and ownerReferences)."""

    name: str
    namespace: str
    uid: str
    api_version: str = c.API_VERSION
    kind: str = "TrainingJob"

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True)
class PodPlan:
    """Everything that differs between the pods of one job."""

    role: str
    index: int
    rank: int | None
    gpus: int
    node: str | None  # pinned node; None for CPU roles left to the scheduler
    image: str
    env: Mapping[str, str]
    ports: tuple[int, ...] = ()
    rdma_resources: Mapping[str, int] = field(default_factory=dict)
    capabilities: tuple[str, ...] = ()
    shm_size: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    command_prefix: tuple[str, ...] = ()
    compat_terms: tuple[Mapping[str, Any], ...] = ()  # nodeSelectorTerms the node must meet
    # The pinned node's object name, when it differs from nothing we know: every term then
    # also carries matchFields metadata.name, which lets kube-scheduler's NodeAffinity
    # PreFilter evaluate that one node instead of all of them (kubernetes PR #108648,
    # https://github.com/kubernetes/kubernetes/pull/108648).
    node_object: str | None = None
    mount_config: bool = False
    ssh_secret: str | None = None  # MPI: Secret with the job's SSH keypair
    gpu_resource: str = c.RESOURCE_GPU  # nvidia.com/mig-<profile> on a MIG-mixed node


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role.lower()}-{index}"


def job_labels(job: str) -> dict[str, str]:
    return {c.LABEL_JOB_NAME: job, c.LABEL_MANAGED_BY: c.MANAGED_BY}


def replica_labels(job: str, role: str, index: int) -> dict[str, str]:
    return {
        **job_labels(job),
        c.LABEL_REPLICA_TYPE: role.lower(),
        c.LABEL_REPLICA_INDEX: str(index),
    }


def _merge_env(
    generated: Mapping[str, str], user: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Generated env first, then the user's; a user entry with the same name wins in place."""
    user_by_name = {e.get("name"): e for e in user if isinstance(e, Mapping)}
    out: list[dict[str, Any]] = []
    for name, value in generated.items():
        out.append(
            dict(user_by_name.pop(name)) if name in user_by_name else {"name": name, "value": value}
        )
    out.extend(dict(e) for e in user if isinstance(e, Mapping) and e.get("name") in user_by_name)
    return out


def _own_shm(mounts: Sequence[Mapping[str, Any]], volumes: Sequence[Mapping[str, Any]]) -> bool:
    """The user brings their own /dev/shm (a volume named dshm, or a trainer mount there, as
    many PyTorch examples do): theirs wins, and trainop adds none (two would be a duplicate
    volume name or mount path, which the API server refuses with 422)."""
    return any(isinstance(m, Mapping) and m.get("mountPath") == SHM_PATH for m in mounts) or any(
        isinstance(v, Mapping) and v.get("name") == SHM_VOLUME for v in volumes
    )


def _merge_resources(container: dict[str, Any], extra: Mapping[str, int]) -> None:
    """Add extended resources to limits and requests without dropping the user's cpu/memory."""
    if not extra:
        return
    res = container.setdefault("resources", {})
    for section in ("limits", "requests"):
        bucket = res.setdefault(section, {})
        for name, count in extra.items():
            bucket[name] = str(count)


def _copy_expr(expr: Mapping[str, Any]) -> dict[str, Any]:
    """A node-selector requirement copied (key, operator, values): cheaper than deepcopy."""
    out = dict(expr)
    if "values" in out:
        out["values"] = list(out["values"])
    return out


def _pin_terms(
    node: str | None, compat: Sequence[Mapping[str, Any]], node_object: str | None = None
) -> list[dict[str, Any]]:
    """nodeSelectorTerms: the pin AND-ed into every compatibility term (terms are OR-ed)."""
    pin = [{"key": c.LABEL_HOSTNAME, "operator": "In", "values": [node]}] if node else []
    fields = (
        [{"key": "metadata.name", "operator": "In", "values": [node_object]}]
        if node and node_object
        else []
    )
    if not compat:
        return [_term(pin, fields)] if pin else []
    # A fresh pin per term: a shared dict would alias across terms (YAML anchors, and
    # editing one term's pin would silently edit them all).
    return [_term([*pin, *term.get("matchExpressions", [])], fields) for term in compat]


def _term(
    exprs: Sequence[Mapping[str, Any]], fields: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": [_copy_expr(e) for e in exprs]}
    if fields:
        term["matchFields"] = [_copy_expr(f) for f in fields]
    return term


def build_pod(
    job: JobRef,
    plan: PodPlan,
    template: Mapping[str, Any],
    *,
    gang_generation: int,
    priority_class_name: str | None = None,
    gated: bool = True,
    config_map: str | None = None,
) -> dict[str, Any]:
    """One pod: the user's PodTemplateSpec with trainop's fields merged in."""
    tmpl = copy.deepcopy(dict(template or {}))
    meta_t = tmpl.get("metadata") or {}
    spec: dict[str, Any] = copy.deepcopy(tmpl.get("spec") or {})
    name = pod_name(job.name, plan.role, plan.index)
    labels, annotations = _pod_labels_and_annotations(job, plan, meta_t, gang_generation)

    containers = [dict(x) for x in spec.get("containers") or []]
    if not containers:
        containers = [{"name": TRAINER_CONTAINER}]
    main = containers[0]  # the first container is the trainer; sidecars are left alone
    _merge_trainer(main, plan)
    _add_volumes(main, spec, plan, config_map)
    containers[0] = main
    spec["containers"] = containers
    _merge_scheduling(spec, plan, name, job.name, priority_class_name, gated)

    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [job.owner_reference()],
        },
        "spec": spec,
    }
    annotations[c.ANNOTATION_SPEC_HASH] = spec_hash(pod)
    return pod


def _pod_labels_and_annotations(
    job: JobRef, plan: PodPlan, meta_t: Mapping[str, Any], gang_generation: int
) -> tuple[dict[str, str], dict[str, str]]:
    """The template's labels and annotations with trainop's replica, rank and restart ones."""
    labels = {**(meta_t.get("labels") or {}), **replica_labels(job.name, plan.role, plan.index)}
    annotations = {
        **(meta_t.get("annotations") or {}),
        **plan.annotations,
        c.ANNOTATION_RESTART_COUNT: str(gang_generation),
    }
    if plan.rank is not None:
        annotations[c.ANNOTATION_RANK] = str(plan.rank)
        labels[c.ANNOTATION_RANK] = str(
            plan.rank
        )  # also a label: `kubectl get pods -L trainop.dev/rank`
    return labels, annotations


def _merge_trainer(main: dict[str, Any], plan: PodPlan) -> None:
    """Merge image, env, command prefix, GPU/RDMA resources, ports and capabilities into the
    trainer container, keeping what the user set."""
    main.setdefault("name", TRAINER_CONTAINER)
    main["image"] = main.get("image") or plan.image
    main["env"] = _merge_env(plan.env, main.get("env") or [])
    if plan.command_prefix and main.get("command"):
        main["command"] = [*plan.command_prefix, *main["command"]]
    gpu_and_rdma = {plan.gpu_resource: plan.gpus, **plan.rdma_resources} if plan.gpus else {}
    _merge_resources(main, gpu_and_rdma)
    if plan.ports:
        existing = {p.get("containerPort") for p in main.get("ports") or []}
        main["ports"] = [
            *(main.get("ports") or []),
            *(
                {"containerPort": p, "name": f"trainop-{i}"}
                for i, p in enumerate(plan.ports)
                if p not in existing
            ),
        ]
    if plan.capabilities:
        sc = main.setdefault("securityContext", {})
        caps = sc.setdefault("capabilities", {})
        caps["add"] = sorted({*caps.get("add", []), *plan.capabilities})


def _add_volumes(
    main: dict[str, Any], spec: dict[str, Any], plan: PodPlan, config_map: str | None
) -> None:
    """Add the /dev/shm, SSH-key and config volumes the plan asks for, mounted in the trainer."""
    mounts = list(main.get("volumeMounts") or [])
    volumes = list(spec.get("volumes") or [])
    if plan.shm_size and not _own_shm(mounts, volumes):
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_PATH})
        volumes.append(
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": plan.shm_size}}
        )
    if plan.ssh_secret:
        mounts.append({"name": SSH_VOLUME, "mountPath": SSH_MOUNT_PATH, "readOnly": True})
        volumes.append(
            {"name": SSH_VOLUME, "secret": {"secretName": plan.ssh_secret, "defaultMode": 0o400}}
        )
    if plan.mount_config and config_map:
        mounts.append({"name": CONFIG_VOLUME, "mountPath": c.CONFIG_MOUNT_PATH, "readOnly": True})
        volumes.append({"name": CONFIG_VOLUME, "configMap": {"name": config_map}})
    if mounts:
        main["volumeMounts"] = mounts
    if volumes:
        spec["volumes"] = volumes


def _merge_scheduling(
    spec: dict[str, Any],
    plan: PodPlan,
    name: str,
    subdomain: str,
    priority_class_name: str | None,
    gated: bool,
) -> None:
    """Set restart policy, DNS name, priority, GPU toleration, node pin and scheduling gate."""
    # Restarts are decided per gang by the operator, never per pod by the kubelet.
    spec["restartPolicy"] = "Never"
    spec["hostname"] = name
    spec["subdomain"] = subdomain
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
    if plan.gpus:
        tolerations = list(spec.get("tolerations") or [])
        if not any(t.get("key") == c.RESOURCE_GPU for t in tolerations):
            tolerations.append(
                {"key": c.RESOURCE_GPU, "operator": "Exists", "effect": "NoSchedule"}
            )
        spec["tolerations"] = tolerations
    terms = _pin_terms(plan.node, plan.compat_terms, plan.node_object)
    if terms:
        affinity = spec.setdefault("affinity", {})
        node_aff = affinity.setdefault("nodeAffinity", {})
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if gated:
        gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != c.SCHEDULING_GATE]
        spec["schedulingGates"] = [*gates, {"name": c.SCHEDULING_GATE}]


def spec_hash(obj: Mapping[str, Any]) -> str:
    """A short digest of what trainop generated, so drift can be seen without a deep diff."""
    body = {"spec": obj.get("spec"), "labels": obj.get("metadata", {}).get("labels")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def build_service(job: JobRef, ports: Sequence[int]) -> dict[str, Any]:
    """The headless Service `<job>` that gives every pod a stable DNS name."""
    svc_ports = [
        {"name": f"p{p}", "port": p, "targetPort": p, "protocol": "TCP"} for p in sorted(set(ports))
    ] or [{"name": "none", "port": 1, "targetPort": 1}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": job_labels(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {c.LABEL_JOB_NAME: job.name},
            # Peers must resolve each other before they are Ready (rendezvous happens first).
            "publishNotReadyAddresses": True,
            "ports": svc_ports,
        },
    }


def disruption_budget_name(job: str) -> str:
    return f"{job}-checkpoint"


def build_disruption_budget(job: JobRef, pods: int) -> dict[str, Any]:
    """The PodDisruptionBudget (policy/v1) that holds a checkpointing job's gang of `pods`
    pods against voluntary eviction (kubectl drain, cluster-autoscaler, Karpenter) until its
    checkpoint is in (trainop.reconcile decides when it stands; docs/progress.md).
    minAvailable = the whole gang, an integer: the only form the disruption controller
    takes for pods whose controller (a TrainingJob) has no scale subresource
    (https://kubernetes.io/docs/tasks/run-application/configure-pdb/#arbitrary-controllers-and-selectors);
    with it the Eviction API refuses every eviction of a Ready gang pod with 429
    (https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/). An unready pod
    (a hung or crashed trainer, which writes no checkpoint) may still go
    (unhealthyPodEvictionPolicy AlwaysAllow,
    https://kubernetes.io/docs/tasks/run-application/configure-pdb/#unhealthy-pod-eviction-policy).
    Owned by the job, so it goes with it."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": disruption_budget_name(job.name),
            "namespace": job.namespace,
            "labels": job_labels(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "minAvailable": pods,
            "selector": {"matchLabels": job_labels(job.name)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def build_config_map(job: JobRef, name: str, files: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": job_labels(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "data": dict(sorted(files.items())),
    }
