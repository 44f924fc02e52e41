"""Plain frozen records the admission core works on: queues, jobs, placement callbacks, decisions.

Neighbours: built from the TrainingQueue/TrainingJob API models (`QueueState.from_resource`) by
the operator's handlers and by the simulator; read by `queueing.admission` (the decision),
`queueing.groups` (product groups) and `queueing.ledger` (quota arithmetic). Nothing here talks
to the API server or reads a clock: times are plain seconds (e.g. `datetime.timestamp()`) passed
in by the caller.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from trainop.api.base import all_errors
from trainop.api.reasons import WaitReason
from trainop.api.trainingqueue import (
    ProductUsage,
    TenantPolicy,
    TrainingQueueSpec,
    TrainingQueueStatus,
)
from trainop.catalog.model import quota_product
from trainop.inventory import Snapshot
from trainop.placement.cost import AllreduceEstimate
from trainop.queueing.fairshare import UsageHistory, from_status
from trainop.queueing.fairshare import to_status as history_status

# Reasons a job waits (TrainingJob status.pendingReason; trainop.api.reasons.WaitReason)
# and a victim is preempted.
QUOTA = WaitReason.QUOTA
NOFIT = WaitReason.NOFIT
POLICY = WaitReason.POLICY
INCOMPATIBLE = WaitReason.INCOMPATIBLE
QUEUE_INVALID = WaitReason.QUEUE_INVALID  # the job's queue is broken: never falls through
TOPOLOGY = WaitReason.TOPOLOGY  # a bounded wait for a better domain (queueing.topowait)
INADMISSIBLE = WaitReason.INADMISSIBLE  # waits out of line (queueing.inadmissible)
WAIT_REASONS: tuple[WaitReason, ...] = (
    QUOTA,
    NOFIT,
    POLICY,
    INCOMPATIBLE,
    QUEUE_INVALID,
    TOPOLOGY,
    INADMISSIBLE,
)
RECLAIM = "Reclaim"
PRIORITY = "Priority"
MIGRATION = "Migration"  # a gang moved to a better placement (queueing.migration)
PREEMPT_REASONS: tuple[str, ...] = (RECLAIM, PRIORITY)

# The product group of a quota whose `products` is empty, when it has no name of its own.
ANY_GROUP = "any"
# Where GPUs of an admitted job land when no group of its queue covers their product (the
# queue's quotas changed under a running job): shown in status with quota 0, i.e. borrowed.
UNGROUPED = "other"


class Action(StrEnum):
    """What a JobDecision does with its job; each equals its string ("Admit" == Action.ADMIT)."""

    ADMIT = "Admit"  # newly admitted: create the gang
    WAIT = "Wait"  # stays pending, with a reason
    PREEMPT = "Preempt"  # admitted, to be evicted now
    KEEP = "Keep"  # admitted before, stays
    GROW = "Grow"  # elastic, admitted: add workers up to `size` (placement: the new ones)
    SHRINK = "Shrink"  # elastic, admitted: remove its highest workers down to `size`


class QueueConfigError(ValueError):
    """A TrainingQueue the admission core cannot use; `field` names the spec field."""

    def __init__(self, queue: str, field: str, message: str) -> None:
        super().__init__(f"TrainingQueue {queue}: {field}: {message}")
        self.queue = queue
        self.field = field
        self.detail = message


def group_key(name: str | None, products: tuple[str, ...]) -> str:
    """The name a quota group goes by in status, messages and cohort lending.

    Queues of one cohort lend each other GPUs group by group, matched by this key, so two
    tenants sharing H100s should give their H100 quota the same `name` (or the same single
    product, whose short lower-case form is the default key, e.g. "h100-80gb-hbm3"). Sliced
    products keep their suffix ("t4-shared", "a100-sxm4-40gb-mig-1g.5gb"): slices are not
    whole GPUs.
    """
    if name:
        return name
    if not products:
        return ANY_GROUP
    return "+".join(quota_product(p).lower() for p in products)


def key_of(namespace: str, name: str) -> str:
    """A job's key, "namespace/name": the one form queueing and the shell (handlers.state)
    both use for a TrainingJob."""
    return f"{namespace}/{name}"


@dataclass(frozen=True)
class QuotaGroup:
    """Nominal GPUs of one product group of a queue (TrainingQueue spec.quotas[i])."""

    name: str
    products: tuple[str, ...]  # empty: any product no other group of the queue names
    nominal: int
    borrowing_limit: int | None = None  # None: borrow as much as the cohort lends

    @property
    def is_any(self) -> bool:
        return not self.products


@dataclass(frozen=True)
class QueueState:
    """What admission needs of one TrainingQueue (build it with `from_resource`).

    `unlimited` queues do not count GPUs: jobs are admitted on fit alone. That is the
    built-in queue of namespaces no TrainingQueue serves, and any TrainingQueue without quotas.
    """

    name: str
    groups: tuple[QuotaGroup, ...] = ()
    cohort: str | None = None
    parent: str | None = None  # spec.parent: the queue's place in a tree (queueing.hierarchy)
    weight: float = 1.0
    backfill_wait_seconds: float = 300.0
    reclaim_within_cohort: bool = True
    within_queue: Literal["Never", "LowerPriority"] = "LowerPriority"
    max_running_jobs: int | None = None
    unlimited: bool = False
    topology_wait_seconds: float | None = None  # None: the operator's default (admit's)
    # Fair share over time (queueing.fairshare): spec.fairSharing.usageHalfLifeSeconds
    # (None: off) and the history status.fairSharing last recorded.
    half_life: float | None = None
    history: UsageHistory | None = field(default=None, compare=False)
    # spec.preemption.minRunSeconds: its jobs are no preemption (or migration) victim
    # before their gang ran this long (queueing.preemption.protected_for).
    min_run_seconds: float = 0.0
    # spec.migratable: false keeps its jobs where they were admitted (queueing.migration).
    migratable: bool = True
    # Queue resolution (queueing.resolve)
    namespaces: tuple[str, ...] = ()
    namespace_selector: tuple[tuple[str, str], ...] | None = None
    default: bool = False
    builtin: bool = False
    policy: TenantPolicy = field(default_factory=TenantPolicy, compare=False, repr=False)
    # Set on a queue the operator cannot use (see `broken`): it still serves its namespaces,
    # so their jobs wait on it (reason QueueInvalid) instead of falling through to another.
    error: QueueConfigError | None = field(default=None, compare=False, repr=False)

    def group(self, name: str) -> QuotaGroup | None:
        for g in self.groups:
            if g.name == name:
                return g
        return None

    def nominal(self, group: str) -> int:
        g = self.group(group)
        return g.nominal if g else 0

    @classmethod
    def from_spec(cls, name: str, spec: TrainingQueueSpec) -> QueueState:
        """The admission view of a validated TrainingQueue spec; QueueConfigError when two
        quotas share a group name or a product (a GPU must be charged to one group only)."""
        groups: list[QuotaGroup] = []
        seen_products: dict[str, int] = {}
        for i, q in enumerate(spec.quotas):
            products = tuple(q.products)
            key = group_key(q.name, products)
            where = f"spec.quotas[{i}]"
            if any(g.name == key for g in groups):
                raise QueueConfigError(
                    name, f"{where}.name", f"two quotas are called {key!r}: name each group once"
                )
            if not products and any(g.is_any for g in groups):
                raise QueueConfigError(
                    name, f"{where}.products", "only one quota may leave products empty (any)"
                )
            for p in products:
                if p in seen_products:
                    raise QueueConfigError(
                        name,
                        f"{where}.products",
                        f"{p} is already in spec.quotas[{seen_products[p]}]: each product "
                        "belongs to one group",
                    )
                seen_products[p] = i
            groups.append(QuotaGroup(key, products, q.gpus, q.borrowing_limit))
        selector = spec.namespace_selector
        return cls(
            name=name,
            groups=tuple(groups),
            cohort=spec.cohort or None,
            parent=spec.parent or None,
            weight=spec.weight,
            backfill_wait_seconds=float(spec.backfill_wait_seconds),
            reclaim_within_cohort=spec.preemption.reclaim_within_cohort,
            within_queue=spec.preemption.within_queue,
            min_run_seconds=float(spec.preemption.min_run_seconds),
            migratable=spec.migratable,
            max_running_jobs=spec.policy.max_running_jobs,
            unlimited=not groups,
            topology_wait_seconds=(
                None if spec.topology_wait_seconds is None else float(spec.topology_wait_seconds)
            ),
            half_life=(
                float(spec.fair_sharing.usage_half_life_seconds)
                if spec.fair_sharing is not None and spec.fair_sharing.usage_half_life_seconds
                else None
            ),
            namespaces=tuple(spec.namespaces),
            namespace_selector=(
                tuple(sorted(selector.match_labels.items())) if selector is not None else None
            ),
            default=spec.default,
            policy=spec.policy,
        )

    @classmethod
    def from_resource(cls, obj: Mapping[str, Any]) -> QueueState:
        """A TrainingQueue as the API returns it -> QueueState; QueueConfigError names the
        first bad field."""
        meta = obj.get("metadata") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name:
            raise QueueConfigError("<no name>", "metadata.name", "required")
        try:
            spec = TrainingQueueSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            path, msg = all_errors(exc, "spec")[0]
            raise QueueConfigError(name, path, msg) from exc
        q = cls.from_spec(name, spec)
        if q.half_life is None:
            return q
        status = obj.get("status")
        return replace(q, history=from_status(status if isinstance(status, Mapping) else None))


def broken_queue(obj: Mapping[str, Any], error: QueueConfigError) -> QueueState:
    """The serving part of a TrainingQueue that failed validation (fail closed): read
    leniently from the raw spec, so the namespaces it claims stay claimed."""
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    namespaces = spec.get("namespaces")
    selector = spec.get("namespaceSelector")
    labels = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    return QueueState(
        name=error.queue,
        unlimited=False,
        namespaces=tuple(n for n in namespaces or () if isinstance(n, str))
        if isinstance(namespaces, list)
        else (),
        namespace_selector=(
            tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))
            if isinstance(selector, Mapping)
            else None
        ),
        default=spec.get("default") is True,
        error=error,
    )


def queue_invalid_message(queue: QueueState) -> str:
    """pendingReason QueueInvalid's message: which queue, what is wrong, the fix."""
    err = queue.error
    what = f"{err.field}: {err.detail}" if err is not None else "it cannot be used"
    return (
        f"queue {queue.name} is invalid: {what}; fix the TrainingQueue (kubectl edit "
        f"trainingqueue {queue.name}); the job waits until then"
    )


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """One TrainingJob as admission sees it: pending (admitted False) or holding GPUs.

    key: "namespace/name". queue: the QueueState.name it resolved to (queueing.resolve).
    priority: the value of its PriorityClass (higher first). created: creation time, the FIFO
    order. gpus: the gang's GPUs (spec.total_gpus). products: spec.placement.gpuProducts
    (empty: any). Admitted jobs also give product (the nvidia.com/gpu.product of their nodes),
    nodes ((node, GPUs) they hold; preemption simulates releasing them) and started (victims
    are chosen youngest first). queued_since: when it last entered the queue (creation, or its
    last preemption); the backfill threshold counts from it. blocked_reason/blocked_message: a
    verdict reached before admission (Policy: queue resolution or tenant policy;
    Incompatible) that keeps the job out of line. expected_end: when an admitted job is
    expected to finish (None: unknown), which topology-aware waiting uses to tell whether a
    better domain frees up in time.
    """

    key: str
    queue: str
    gpus: int
    created: float
    priority: int = 0
    products: tuple[str, ...] = ()
    admitted: bool = False
    product: str | None = None
    nodes: tuple[tuple[str, int], ...] = ()
    started: float | None = None
    # When the job last reported a checkpoint (status.progress.lastCheckpoint; issue 24):
    # with `started`, the work an eviction loses (queueing.ordering.lost_work).
    checkpointed: float | None = None
    preemptions: int = 0
    queued_since: float | None = None
    blocked_reason: str | None = None
    blocked_message: str = ""
    expected_end: float | None = None
    # Its PriorityClass's guaranteed minimum run (annotation trainop.dev/min-run-seconds;
    # queueing.preemption.protection): with its queue's minRunSeconds, the stricter applies.
    priority_class: str = ""
    class_min_run_seconds: float = 0.0
    # How long a pending job is expected to run once started (None: unknown): what starting
    # it now is worth to migration (queueing.migration's waiting-gang gain).
    expected_run: float | None = None
    # A move under way (status.migration, phase Moving; queueing.migration): the (node, GPUs)
    # of its destination, held for it by every pass until it runs there.
    moving_to: tuple[tuple[str, int], ...] = ()
    # Elastic jobs (spec.elastic; queueing.elastic): (minReplicas, maxReplicas) of the Worker
    # role and the GPUs of one Worker; `size` the Worker count this record stands for (an
    # admitted job: the count it runs; a pending one: the size being tried), `workers` the
    # (node, GPUs) of each running Worker by index (a shrink frees the highest), `grow_from`
    # set only on a growth try (the placer places workers grow_from..size-1), `resizing` while
    # a resize the watch has not shown yet is under way (no other resize then).
    elastic: tuple[int, int] | None = None
    replica_gpus: int = 0
    size: int | None = None
    workers: tuple[tuple[str, int], ...] = ()
    grow_from: int | None = None
    resizing: bool = False

    @property
    def waiting_since(self) -> float:
        return self.created if self.queued_since is None else self.queued_since


@dataclass(frozen=True)
class Fit:
    """The gang can be placed: `placement` is whatever the placer planned (the planner's Plan
    for PlannerPlacer), `gpus_by_node` what it takes, `product` its nodes' GPU product.
    allreduce: the cost model's estimate for this placement; ideal: for the gang alone on an
    empty fleet, set only for Preferred gangs (topology-aware waiting compares the two)."""

    placement: Any
    gpus_by_node: tuple[tuple[str, int], ...]
    product: str | None
    nodes: tuple[str, ...] = ()
    allreduce: AllreduceEstimate | None = None
    ideal: AllreduceEstimate | None = None
    note: str = ""  # what the placer wants said, e.g. that an elastic growth crosses a domain


@dataclass(frozen=True)
class Unfit:
    """The gang cannot be placed on this snapshot: reason NoFit or Incompatible. `basis`:
    set when the answer follows from the snapshot's free-GPU bound alone (queueing.tail)."""

    reason: WaitReason
    message: str
    basis: Bound | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Bound:
    """Why an Unfit holds beyond its snapshot: the same answer on any snapshot whose
    `free_bound()` is `free` and whose memo holds `needs` (PlannerPlacer's "this job version
    was found placeable" key, without which the planner itself would answer)."""

    free: tuple[int, int]
    needs: Any


class Placer(Protocol):
    """try_place: place `job` on `snapshot` using only GPUs of `products` (None: any the job
    allows). Must be pure: admission calls it on what-if snapshots (simulate/undo)."""

    def __call__(
        self, job: QueuedJob, snapshot: Snapshot, products: tuple[str, ...] | None
    ) -> Fit | Unfit: ...


@dataclass(frozen=True, slots=True)
class JobDecision:
    """The verdict for one job; `admitted`, `reason`, `message`, `position` match
    reconcile.Admission, so a decision can stand in for it.

    action: Admit (newly admitted: placement holds the planned placement), Keep (admitted
    before, stays), Wait (reason Quota | NoFit | Policy | Incompatible | Topology, position 1-based among
    the queue's waiting jobs; a waiting preemptor lists its `victims` and carries the
    placement planned for when they are gone), Preempt (reason Reclaim | Priority; evict the
    whole gang, requeue it without counting a restart; `preemptor` names who needs the GPUs).
    """

    key: str
    queue: str
    action: Action
    reason: str = ""
    message: str = ""
    position: int | None = None
    group: str | None = None
    gpus: int = 0
    borrowed: int = 0
    placement: Fit | None = None
    victims: tuple[str, ...] = ()
    preemptor: str | None = None
    size: int | None = None  # elastic: the Worker count admitted (Admit, Grow, Shrink)

    @property
    def admitted(self) -> bool:
        return self.action in (Action.ADMIT, Action.KEEP, Action.GROW, Action.SHRINK)


@dataclass(frozen=True)
class GroupUsage:
    """One product group of a queue, as TrainingQueue status.usage shows it."""

    name: str
    quota: int
    used: int
    borrowed: int
    pending: int


@dataclass(frozen=True)
class QueueUsage:
    """TrainingQueue status after the decisions took effect."""

    name: str
    groups: tuple[GroupUsage, ...]
    admitted_jobs: int
    pending_jobs: int
    # The usage history to keep in status (queueing.fairshare), with its half-life.
    history: UsageHistory | None = None
    half_life: float | None = None

    def to_status(self) -> dict[str, Any]:
        """The TrainingQueue status subresource body."""
        body = self._usage_status()
        if self.history is not None and self.half_life:
            body["fairSharing"] = history_status(self.history, self.half_life)
        return body

    def _usage_status(self) -> dict[str, Any]:
        return TrainingQueueStatus(
            usage=[
                ProductUsage(
                    name=g.name, quota=g.quota, used=g.used, borrowed=g.borrowed, pending=g.pending
                )
                for g in self.groups
            ],
            admitted_jobs=self.admitted_jobs,
            pending_jobs=self.pending_jobs,
        ).to_api()


@dataclass(frozen=True)
class Decisions:
    """Everything one admission pass decided: a JobDecision per job (in queue order) and the
    resulting usage per queue."""

    jobs: Mapping[str, JobDecision]
    usage: Mapping[str, QueueUsage]
    # The snapshot as the pass left it: everything admitted, preemptors' placements and
    # holds reserved (queueing.migration looks for free placements on it).
    snapshot: Snapshot | None = field(default=None, compare=False, repr=False)

    def __getitem__(self, key: str) -> JobDecision:
        return self.jobs[key]

    def __iter__(self) -> Iterator[JobDecision]:
        return iter(self.jobs.values())

    def get(self, key: str) -> JobDecision | None:
        return self.jobs.get(key)

    def by_action(self, action: Action) -> tuple[JobDecision, ...]:
        return tuple(d for d in self.jobs.values() if d.action == action)

    @property
    def admitted(self) -> tuple[JobDecision, ...]:
        """Newly admitted jobs."""
        return self.by_action(Action.ADMIT)

    @property
    def waiting(self) -> tuple[JobDecision, ...]:
        return self.by_action(Action.WAIT)

    @property
    def preempted(self) -> tuple[JobDecision, ...]:
        """Victims: admitted jobs to evict now."""
        return self.by_action(Action.PREEMPT)
