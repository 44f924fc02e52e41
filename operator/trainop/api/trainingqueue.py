"""Pydantic models of the cluster-scoped TrainingQueue: tenants, GPU quotas, cohorts, policy.

Queues nest by `spec.parent` (division > team > project, to any depth); the tree's rules
live in `queueing.hierarchy`, the quota arithmetic in `queueing.ledger`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, JsonValue

from trainop.api.base import ApiModel
from trainop.api.trainingjob import DNS_SUBDOMAIN, Condition


class NamespaceSelector(ApiModel):
    match_labels: dict[str, str] = Field(
        default_factory=dict, description="Namespaces carrying all these labels are served."
    )


class GpuQuota(ApiModel):
    products: list[Annotated[str, Field(min_length=1, max_length=63)]] = Field(
        default_factory=list,
        max_length=32,  # bounds keep the CEL cost of QUOTA_VALIDATIONS within the budget
        description="nvidia.com/gpu.product values this quota covers (a product group); "
        "empty covers any product.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description="Name of the product group in status and metrics, e.g. h100.",
    )
    gpus: int = Field(ge=0, description="Nominal GPUs of these products this queue may use.")
    borrowing_limit: int | None = Field(
        default=None,
        ge=0,
        description="At most this many GPUs borrowed from the cohort, or (for a queue in a "
        "tree) from outside this queue's quota, i.e. from its siblings and above; empty: no "
        "limit.",
    )


class CudaRange(ApiModel):
    min: str | None = Field(default=None, pattern=r"^\d+\.\d+$", description="Lowest CUDA allowed.")
    max: str | None = Field(
        default=None, pattern=r"^\d+\.\d+$", description="Highest CUDA allowed."
    )


class TenantPolicy(ApiModel):
    allowed_image_prefixes: list[str] = Field(
        default_factory=list,
        description="Images must start with one of these (e.g. nvcr.io/nvidia/); empty allows "
        "any. A prefix ends at a registry, path or tag boundary: nvcr.io matches "
        "nvcr.io/nvidia/x but not nvcr.io.evil.com/x; Docker Hub short names are matched in "
        "their full form too (ubuntu is docker.io/library/ubuntu).",
    )
    allowed_frameworks: list[str] = Field(
        default_factory=list, description="Frameworks allowed; empty allows all."
    )
    cuda: CudaRange | None = Field(default=None, description="CUDA versions allowed.")
    max_gpus_per_job: int | None = Field(default=None, ge=1, description="Largest job, in GPUs.")
    max_running_jobs: int | None = Field(default=None, ge=1, description="Admitted jobs at once.")
    allow_privileged: bool = Field(default=False, description="Pod templates may be privileged.")
    allow_host_network: bool = Field(
        default=False, description="Pod templates may use hostNetwork."
    )
    # Spelled like the pod fields (hostPID, hostIPC), as docs/queues.md always wrote them.
    allow_host_pid: bool = Field(
        default=False, alias="allowHostPID", description="Pod templates may use hostPID."
    )
    allow_host_ipc: bool = Field(
        default=False, alias="allowHostIPC", description="Pod templates may use hostIPC."
    )
    allow_run_as_root: bool = Field(
        default=False,
        description="Pod templates may set runAsUser: 0 (pod or container securityContext). "
        "Images that run as root by default are not affected: this refuses asking for root.",
    )
    allow_host_path: bool = Field(
        default=False, description="Pod templates may mount hostPath volumes."
    )
    allowed_capabilities: list[str] = Field(
        default_factory=list,
        description="Linux capabilities templates may add (IPC_LOCK, which trainop adds for "
        "RDMA itself, is always allowed).",
    )
    allowed_runtimes: list[Annotated[str, Field(min_length=1, max_length=300)]] = Field(
        default_factory=list,
        description="Runtimes this queue's jobs may name in spec.runtimeRef: "
        "ClusterTrainingRuntime/<name>, TrainingRuntime/<name> (in the job's namespace), or "
        "a bare <name> for a ClusterTrainingRuntime. Empty allows any runtime.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    require_runtime: bool = Field(
        default=False,
        description="true: every job of this queue must name a runtime in spec.runtimeRef "
        "(one of allowedRuntimes, when that is set).",
    )
    compatibility_modes: list[Literal["Native", "ForwardCompat", "MinorVersionCompat"]] = Field(
        default_factory=list,
        description="CUDA compatibility modes this queue's jobs may run their image by "
        "(Native, ForwardCompat, MinorVersionCompat), within those the operator allows; "
        "empty: the operator's.",
    )


class Preemption(ApiModel):
    reclaim_within_cohort: bool = Field(
        default=True,
        description="A queue under its nominal quota preempts jobs of cohort members that "
        "borrowed its GPUs.",
    )
    within_queue: Literal["Never", "LowerPriority"] = Field(
        default="LowerPriority",
        description="LowerPriority: a pending job preempts lower-priority jobs of the same queue.",
    )
    min_run_seconds: int = Field(
        default=0,
        ge=0,
        description="A job of this queue is no preemption victim (reclaim or priority, nor "
        "moved by migration) before its gang has run this long, so it always makes some "
        "progress (as KAI's min-runtime and Kueue's minAdmitDuration). 0 (default): no "
        "guarantee. A job's PriorityClass may ask for more with the annotation "
        "trainop.dev/min-run-seconds: the stricter of the two applies. A head that only "
        "such jobs could make room for waits, its message saying when the first becomes "
        "preemptible.",
    )


class FairSharing(ApiModel):
    usage_half_life_seconds: int = Field(
        default=0,
        ge=0,
        description="Order this queue among the others by the GPUs it used recently, not "
        "only by those it holds now: an exponentially decayed average with this half-life "
        "(as Kueue's admission fair sharing and KAI's time-aware fairness). A queue that used "
        "the cluster heavily yesterday then yields today. 0 (default): today's usage alone. "
        "The average is kept in status.fairSharing, so it survives operator restarts.",
    )


# Quota rules CEL can state (queueing.model.QueueState.from_spec checks the rest, e.g. a
# name that equals another quota's derived group key).
QUOTA_VALIDATIONS: list[JsonValue] = [
    {
        "rule": "self.all(q, !has(q.name) || self.exists_one(o, has(o.name) && o.name == q.name))",
        "message": "two quotas have the same name: name each product group once",
    },
    {
        "rule": "self.all(q, !has(q.products) || q.products.all(p, "
        "self.exists_one(o, has(o.products) && p in o.products)))",
        "message": "a GPU product appears in two quotas: each product belongs to one quota",
    },
    {
        "rule": "self.filter(q, !has(q.products) || size(q.products) == 0).size() <= 1",
        "message": "only one quota may leave products empty (it covers any other product)",
    },
]


# Tree rules CEL can state on the spec alone (queueing.hierarchy checks cycles, a parent that
# does not exist and children whose quotas exceed their parent's).
SPEC_VALIDATIONS: list[dict[str, str]] = [
    {
        "rule": "!has(self.parent) || !has(self.cohort)",
        "message": "spec.cohort and spec.parent exclude each other: a queue in a tree shares "
        "through its parent; set spec.cohort on the tree's root only",
    },
]
# Rules that need the object's name (CEL sees metadata.name at the root).
ROOT_VALIDATIONS: list[dict[str, str]] = [
    {
        "rule": "!has(self.spec) || !has(self.spec.parent) || self.spec.parent != self.metadata.name",
        "message": "spec.parent names the queue itself: name another TrainingQueue, or leave "
        "spec.parent empty for a root",
    },
]


class TrainingQueueSpec(ApiModel):
    """Desired state of a TrainingQueue."""

    namespaces: list[str] = Field(default_factory=list, description="Namespaces served, by name.")
    namespace_selector: NamespaceSelector | None = Field(
        default=None, description="Namespaces served, by label."
    )
    default: bool = Field(
        default=False,
        description="Jobs in served namespaces that name no queue go to this one.",
    )
    quotas: list[GpuQuota] = Field(
        default_factory=list,
        max_length=32,
        description="GPU quotas per product group; a product belongs to one quota only.",
        json_schema_extra={"x-kubernetes-validations": QUOTA_VALIDATIONS},
    )
    cohort: str | None = Field(
        default=None, description="Queues of one cohort lend each other idle quota."
    )
    parent: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="The TrainingQueue this one is part of (queues nest to any depth). Its "
        "quotas are guaranteed within the parent's, which must cover the quotas of all its "
        "children; it borrows first from its siblings, then from above, within each level's "
        "borrowingLimit. Jobs go to leaf queues (those no queue names as parent).",
    )
    weight: float = Field(default=1.0, gt=0, description="Fair-share weight across queues.")
    backfill_wait_seconds: int = Field(
        default=300,
        ge=0,
        description="After the head job waited this long, smaller jobs may no longer jump it: "
        "capacity is held for it.",
    )
    topology_wait_seconds: int | None = Field(
        default=None,
        ge=0,
        description="Longest time a Preferred gang that would now be spread well beyond its "
        "ideal domain waits for that domain to free up, scaled down by how much the spread "
        "placement would cost (estimated allreduce time); never while a good domain is free, "
        "and never past this bound. 0 disables; empty: the operator's topologyWaitSeconds "
        "(1800).",
    )
    preemption: Preemption = Field(
        default_factory=Preemption,
        description="Preemption policy.",
        json_schema_extra={"default": {}},
    )
    migratable: bool = Field(
        default=True,
        description="false: this queue's jobs are never moved to a better placement by "
        "checkpoint and restart, even where the operator's migration is on.",
    )
    fair_sharing: FairSharing | None = Field(
        default=None,
        description="Fair share over time: weigh the queue's recent usage with a half-life.",
    )
    policy: TenantPolicy = Field(
        default_factory=TenantPolicy,
        description="Tenant policy.",
        json_schema_extra={"default": {}},
    )


class ProductUsage(ApiModel):
    name: str = Field(description="Product group name.")
    quota: int = Field(default=0, description="Nominal GPUs.")
    used: int = Field(default=0, description="GPUs of admitted jobs.")
    borrowed: int = Field(
        default=0,
        description="GPUs used beyond the quota, lent by the cohort "
        "or, in a queue tree, by the parent (a parent's: its subtree's).",
    )
    pending: int = Field(default=0, description="GPUs asked by pending jobs.")


class AverageUsage(ApiModel):
    name: str = Field(description="Product group name.")
    average_gpus: float = Field(
        default=0.0, description="GPUs used, averaged with the queue's usage half-life."
    )
    holding: int = Field(default=0, description="GPUs held since `updated`.")


class FairSharingStatus(ApiModel):
    usage_half_life_seconds: int = Field(default=0, description="The half-life applied.")
    updated: str | None = Field(default=None, description="When the averages were computed.")
    usage: list[AverageUsage] = Field(
        default_factory=list, description="Decayed average of GPUs used, per product group."
    )


class TrainingQueueStatus(ApiModel):
    conditions: list[Condition] | None = Field(
        default=None,
        description="Active: True when the operator can use the queue; False with the reason "
        "(e.g. InvalidSpec) when it is broken: its jobs then wait (pendingReason QueueInvalid).",
    )
    usage: list[ProductUsage] = Field(default_factory=list, description="Per product group.")
    admitted_jobs: int = Field(default=0, description="Jobs admitted and not finished.")
    pending_jobs: int = Field(default=0, description="Jobs waiting.")
    path: str | None = Field(
        default=None,
        description="The queue's place in its tree, root first (e.g. org/vision/detect); a "
        "parent's usage, counts and borrowing add up its whole subtree.",
    )
    level: int | None = Field(default=None, description="Depth in its tree: 1 for a root.")
    summary: str | None = Field(
        default=None,
        description="Usage per product group as used/quota, with +borrowed (kubectl get tq).",
    )
    fair_sharing: FairSharingStatus | None = Field(
        default=None,
        description="spec.fairSharing's decayed usage history, the fair-share order's input.",
    )
