"""One admission pass over the cluster's TrainingJobs, TrainingQueues and pods (pure).

The operator calls `admission_pass` with what its indexes hold; it turns job bodies and
their pods into `QueuedJob`s (queue resolved, tenant policy checked, GPUs held by live
pods), runs `queueing.admit` with the planner as placer, and returns the decisions plus
each queue's usage for its status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trainop.api import constants as c
from trainop.api.trainingjob import TERMINAL_PHASES
from trainop.inventory import Snapshot
from trainop.inventory.pods import is_terminated, pod_binding, pod_request
from trainop.planner import InvalidJob, OperatorConfig, check_semantics, parse_spec
from trainop.queueing.admission import admit
from trainop.queueing.model import POLICY, Decisions, QueueConfigError, QueuedJob, QueueState
from trainop.queueing.planning import PlannerPlacer, job_policy
from trainop.queueing.resolve import QueueError, resolve_queue

_OUT_OF_LINE = TERMINAL_PHASES


@dataclass(frozen=True)
class PassResult:
    decisions: Decisions
    queue_of: Mapping[str, str]  # job key -> queue name
    queue_errors: tuple[str, ...] = ()
    jobs: Mapping[str, QueuedJob] = field(default_factory=dict)


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").timestamp()
    except ValueError:
        return None


def job_key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def _holding(
    pods: Sequence[Mapping[str, Any]], snapshot: Snapshot
) -> tuple[tuple[tuple[str, int], ...], str | None]:
    """GPUs per node held by the job's live (incl. deleting) pods, and their GPU product."""
    held: dict[str, int] = {}
    product = None
    for pod in pods:
        if is_terminated(pod):
            continue
        binding = pod_binding(pod)
        gpus = pod_request(pod)
        if binding is None or not gpus:
            continue
        node = snapshot.get(binding[1]) or snapshot.get(binding[0])
        name = node.name if node is not None else binding[1]
        held[name] = held.get(name, 0) + gpus
        if node is not None and node.gpu.product and product is None:
            product = node.gpu.product
    return tuple(sorted(held.items())), product


def _preempted_at(body: Mapping[str, Any]) -> float | None:
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Preempted" and cond.get("status") == "True":
            return _ts(cond.get("lastTransitionTime"))
    return None


def admission_pass(
    now: datetime,
    bodies: Sequence[Mapping[str, Any]],
    pods_by_job: Mapping[str, Sequence[Mapping[str, Any]]],
    queue_objects: Sequence[Mapping[str, Any]],
    namespace_labels: Mapping[str, Mapping[str, str]],
    priorities: Mapping[str, int],
    snapshot: Snapshot,
    config: OperatorConfig,
) -> PassResult:
    queues: list[QueueState] = []
    errors: list[str] = []
    for obj in queue_objects:
        try:
            queues.append(QueueState.from_resource(obj))
        except QueueConfigError as exc:
            errors.append(str(exc))
    jobs: list[QueuedJob] = []
    by_key: dict[str, Mapping[str, Any]] = {}
    queue_of: dict[str, str] = {}
    for body in bodies:
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp") or (body.get("status") or {}).get("phase") in _OUT_OF_LINE:
            continue
        try:
            spec = parse_spec(body)
            check_semantics(spec, config)  # with config: no catalog release fits -> Invalid
        except InvalidJob:
            continue  # reconcile marks it Invalid
        if spec.run_policy.suspend:
            continue
        key = job_key(body)
        ns = meta.get("namespace", "default")
        held, product = _holding(pods_by_job.get(key, ()), snapshot)
        blocked_reason, blocked_message = None, ""
        try:
            queue = resolve_queue(ns, spec.queue, queues, namespace_labels.get(ns))
        except QueueError as exc:
            queue = None
            blocked_reason, blocked_message = POLICY, str(exc)
        if queue is not None and not held:
            try:
                violations = job_policy(spec, queue, snapshot, config)
            except InvalidJob:
                violations = ()  # no image at all: the planner reports it
            if violations:
                blocked_reason, blocked_message = POLICY, "; ".join(str(v) for v in violations)
        qname = queue.name if queue is not None else (spec.queue or "")
        queue_of[key] = qname
        by_key[key] = body
        created = _ts(meta.get("creationTimestamp")) or now.timestamp()
        status = body.get("status") or {}
        jobs.append(
            QueuedJob(
                key=key,
                queue=qname,
                gpus=spec.total_gpus,
                created=created,
                priority=priorities.get(spec.priority_class_name or "", 0),
                products=tuple(spec.placement.gpu_products),
                admitted=bool(held),
                product=product if held else None,
                nodes=held,
                started=_ts(status.get("startTime")) if held else None,
                queued_since=_preempted_at(body),
                blocked_reason=blocked_reason,
                blocked_message=blocked_message,
            )
        )
    placer = PlannerPlacer(by_key, config, {q.name: q for q in queues})  # queue policy modes
    decisions = admit(now.timestamp(), queues, jobs, snapshot, placer)
    return PassResult(decisions, queue_of, tuple(errors), {j.key: j for j in jobs})


def job_pods_by_key(
    pods: Sequence[Mapping[str, Any]], bodies: Sequence[Mapping[str, Any]]
) -> dict[str, list[Mapping[str, Any]]]:
    """Pods grouped by their owning job's key (label + owner uid must both match)."""
    uids = {((b.get("metadata") or {}).get("uid")): job_key(b) for b in bodies}
    out: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if c.LABEL_JOB_NAME not in (meta.get("labels") or {}):
            continue
        for owner in meta.get("ownerReferences") or []:
            key = uids.get(owner.get("uid"))
            if key is not None:
                out.setdefault(key, []).append(pod)
    return out
