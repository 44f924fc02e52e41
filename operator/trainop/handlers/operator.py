"""kopf handlers: indexes of nodes/pods/jobs, the job reconcile loop, settings; a thin shell.

Every trigger (job event, pod event, timer, requeue) funnels into `reconcile_job`, which
takes a per-job lock, builds the inputs from in-memory indexes (no API reads on the hot
path), calls the pure `trainop.reconcile.reconcile`, and applies the Actions through
`trainop.kube.client.KubeApi`.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from trainop import metrics
from trainop.api import constants as c
from trainop.api.fabricprofile import FabricProfile, FabricProfileSpec
from trainop.inventory import Snapshot, build_snapshot
from trainop.kube.client import KubeApi
from trainop.kube.secrets import ssh_secret
from trainop.planner import OperatorConfig, Plan, job_ref
from trainop.queueing.cluster import PassResult, admission_pass, job_pods_by_key
from trainop.queueing.status import queue_statuses
from trainop.reconcile import ADMIT_ALL, Actions, Admission, preempted_status, reconcile

log = logging.getLogger("trainop.operator")

JOBS = "trainingjobs.trainop.dev"
QUEUES = "trainingqueues.trainop.dev"


class Runtime:
    """Process-wide state the handlers share; set up by `trainop run` before kopf starts."""

    config: OperatorConfig = OperatorConfig()
    resync_seconds: float = 10.0
    api: KubeApi | None = None
    locks: dict[tuple[str, str], asyncio.Lock] = {}
    # Last job body we wrote (status patch result): newer than the index until the watch
    # catches up, and must win so a restart count is never read stale.
    written: dict[tuple[str, str], dict[str, Any]] = {}
    requeued: dict[tuple[str, str], asyncio.TimerHandle] = {}
    # Planning reads free GPUs from the pod index, which lags our own creates by a watch
    # round-trip. One lock serialises every plan-and-create across jobs, and pods we created
    # count as used until the index shows them, so two gangs never get the same GPUs.
    placement_lock: asyncio.Lock | None = None
    inflight: dict[tuple[str, str], dict[str, Any]] = {}
    queue_status: dict[str, dict[str, Any]] = {}  # last TrainingQueue status written


def _slim_node(body: Mapping[str, Any]) -> dict[str, Any]:
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    return copy.deepcopy(
        {
            "metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {})},
            "spec": {
                "taints": spec.get("taints") or [],
                "unschedulable": spec.get("unschedulable", False),
            },
            "status": {
                k: status.get(k)
                for k in ("allocatable", "capacity", "conditions", "images")
                if status.get(k) is not None
            },
        }
    )


_POD_STATUS_KEYS = (
    "phase",
    "containerStatuses",
    "conditions",
    "reason",
    "message",
    "initContainerStatuses",
)


def _slim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    return copy.deepcopy(
        {
            "metadata": {
                k: meta.get(k)
                for k in (
                    "name",
                    "namespace",
                    "labels",
                    "annotations",
                    "deletionTimestamp",
                    "ownerReferences",
                    "uid",
                )
            },
            "spec": {
                k: spec.get(k)
                for k in (
                    "nodeName",
                    "containers",
                    "initContainers",
                    "overhead",
                    "affinity",
                    "schedulingGates",
                    "nodeSelector",
                )
            },
            # reason/message/initContainerStatuses: failure classification (issue 12).
            "status": {k: status.get(k) for k in _POD_STATUS_KEYS},
        }
    )


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # trainop's own prefixes instead of kopf.zalando.org (see docs/operator.md).
    settings.persistence.finalizer = c.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=c.ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=c.ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.execution.max_workers = 16
    Runtime.api = KubeApi()
    Runtime.placement_lock = asyncio.Lock()


@kopf.index("nodes")
def node_index(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: _slim_node(body)}


@kopf.index("pods")
def pod_index(
    namespace: str, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return {(namespace, name): _slim_pod(body)}


@kopf.index(JOBS)
def job_index(
    namespace: str, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return {(namespace, name): copy.deepcopy(dict(body))}


@kopf.index("fabricprofiles.trainop.dev")
def fabric_index(
    name: str, spec: kopf.Spec, logger: Any, **_: Any
) -> dict[str, FabricProfile] | None:
    """FabricProfile custom resources, validated once here; a bad one is skipped with a log line."""
    try:
        return {name: FabricProfile(name=name, spec=FabricProfileSpec.model_validate(dict(spec)))}
    except ValidationError as exc:
        logger.warning("FabricProfile %s ignored: %s", name, exc.errors()[0]["msg"])
        return None


@kopf.index(QUEUES)
def queue_index(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: copy.deepcopy(dict(body))}


@kopf.index("namespaces")
def namespace_index(name: str, labels: Mapping[str, str], **_: Any) -> dict[str, dict[str, str]]:
    """Namespace labels, for TrainingQueue namespaceSelector."""
    return {name: dict(labels)}


@kopf.index("priorityclasses.scheduling.k8s.io")
def priority_index(name: str, body: kopf.Body, **_: Any) -> dict[str, int]:
    """PriorityClass values: spec.priorityClassName orders jobs within a queue."""
    return {name: int(body.get("value") or 0)}


def _config_with_profiles(fabric_index: kopf.Index[Any, Any]) -> OperatorConfig:
    profiles: list[FabricProfile] = [p for _, store in fabric_index.items() for p in store]
    crs = tuple(sorted(profiles, key=lambda p: p.name))
    if not crs:
        return Runtime.config
    return dataclasses.replace(
        Runtime.config, fabric_profiles=(*Runtime.config.fabric_profiles, *crs)
    )


def _values(index: kopf.Index[Any, Any]) -> list[dict[str, Any]]:
    return [v for _, store in index.items() for v in store]


def _rv(body: Mapping[str, Any] | None) -> int:
    try:
        return int((body or {}).get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _current_body(key: tuple[str, str], job_index: kopf.Index[Any, Any]) -> dict[str, Any] | None:
    stored = list(job_index.get(key, []))
    indexed = stored[0] if stored else None
    written = Runtime.written.get(key)
    if indexed is None:
        return None  # deleted
    if (
        written is not None
        and written["metadata"].get("uid") == indexed["metadata"].get("uid")
        and (_rv(written) > _rv(indexed))
    ):
        return written
    return indexed


@dataclass(frozen=True)
class Indexes:
    """The kopf indexes a reconcile reads (kopf injects them into handler kwargs by name)."""

    node: kopf.Index[Any, Any]
    pod: kopf.Index[Any, Any]
    job: kopf.Index[Any, Any]
    fabric: kopf.Index[Any, Any]
    queue: kopf.Index[Any, Any]
    namespace: kopf.Index[Any, Any]
    priority: kopf.Index[Any, Any]

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> Indexes:
        return cls(
            kwargs["node_index"],
            kwargs["pod_index"],
            kwargs["job_index"],
            kwargs["fabric_index"],
            kwargs["queue_index"],
            kwargs["namespace_index"],
            kwargs["priority_index"],
        )


def _requeue(key: tuple[str, str], delay: float, idx: Indexes) -> None:
    """Run the reconcile again after `delay` unless something else runs it first."""
    if delay >= Runtime.resync_seconds:
        return  # the timer covers it
    loop = asyncio.get_running_loop()
    old = Runtime.requeued.pop(key, None)
    if old is not None:
        old.cancel()
    Runtime.requeued[key] = loop.call_later(
        max(delay, 0.2), lambda: asyncio.ensure_future(reconcile_job(key, idx))
    )


async def reconcile_job(key: tuple[str, str], idx: Indexes) -> None:
    lock = Runtime.locks.setdefault(key, asyncio.Lock())
    acts: Actions | None = None
    async with lock:
        body = _current_body(key, idx.job)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        started = time.monotonic()
        try:
            if _job_pods(key, body, _pods_with_inflight(idx.pod)):
                acts = await _reconcile_once(key, body, idx)
            else:  # may plan a new gang: one planner at a time (see Runtime.inflight)
                assert Runtime.placement_lock is not None
                async with Runtime.placement_lock:
                    acts = await _reconcile_once(key, body, idx)
        except Exception:
            metrics.RECONCILE_ERRORS.labels(handler="trainingjob").inc()
            log.exception("reconcile of %s/%s failed", *key)
        finally:
            metrics.RECONCILE_DURATION.labels(handler="trainingjob").observe(
                time.monotonic() - started
            )
    if acts is not None and acts.requeue_after is not None:
        _requeue(key, acts.requeue_after, idx)


def _job_pods(
    key: tuple[str, str], body: Mapping[str, Any], pods: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    ns, name = key
    uid = body["metadata"].get("uid")
    return [
        p
        for p in pods
        if p["metadata"].get("namespace") == ns
        and (p["metadata"].get("labels") or {}).get(c.LABEL_JOB_NAME) == name
        and any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or [])
    ]


def _pods_with_inflight(pod_index: kopf.Index[Any, Any]) -> list[dict[str, Any]]:
    indexed = _values(pod_index)
    seen = {(p["metadata"].get("namespace"), p["metadata"].get("name")) for p in indexed}
    for pod_key in [k for k in Runtime.inflight if k in seen]:
        del Runtime.inflight[pod_key]  # the index caught up
    return indexed + list(Runtime.inflight.values())


async def _reconcile_once(key: tuple[str, str], body: dict[str, Any], idx: Indexes) -> Actions:
    ns, name = key
    all_pods = _pods_with_inflight(idx.pod)
    mine = _job_pods(key, body, all_pods)
    config = _config_with_profiles(idx.fabric)

    def snapshot() -> Snapshot:
        return build_snapshot(_values(idx.node), all_pods, levels=config.topology_levels)

    now = datetime.now(UTC).replace(tzinfo=None)
    admission = ADMIT_ALL
    live = [p for p in mine if not p["metadata"].get("deletionTimestamp")]
    if not live and config.external_queue == "none":  # our queues decide on a new gang
        result = _admission_pass(now, idx, all_pods, snapshot(), config)
        decision = result.decisions.jobs.get(f"{ns}/{name}")
        if decision is not None:
            plan = decision.placement.placement if decision.placement is not None else None
            admission = Admission(
                admitted=decision.action == "Admit",
                reason=decision.reason,
                message=decision.message,
                position=decision.position,
                plan=plan if isinstance(plan, Plan) else None,
                queue=decision.queue,
            )
        await _apply_pass(result, idx, now)
    acts = reconcile(body, mine, snapshot, config, now, admission, _priority_names(idx))
    await _apply(ns, name, body, acts)
    return acts


def _admission_pass(
    now: datetime,
    idx: Indexes,
    all_pods: list[dict[str, Any]],
    snapshot: Snapshot,
    config: OperatorConfig,
) -> PassResult:
    bodies = [
        _current_body(key, idx.job) or body for key, store in idx.job.items() for body in store
    ]
    priorities = {name: value for name, store in idx.priority.items() for value in store}
    labels = {name: lab for name, store in idx.namespace.items() for lab in store}
    return admission_pass(
        now,
        bodies,
        job_pods_by_key(all_pods, bodies),
        _values(idx.queue),
        labels,
        priorities,
        snapshot,
        config,
    )


async def _apply_pass(result: PassResult, idx: Indexes, now: datetime) -> None:
    """Evict preemption victims and publish queue usage (status + metrics)."""
    api = Runtime.api
    assert api is not None
    for key, decision in sorted(result.decisions.jobs.items()):
        if decision.action != "Preempt":
            continue
        ns, name = key.split("/", 1)
        victim = _current_body((ns, name), idx.job)
        if victim is None:
            continue
        pods = _job_pods((ns, name), victim, _values(idx.pod))
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        already = any(
            cd.get("type") == "Preempted" and cd.get("status") == "True"
            for cd in (victim.get("status") or {}).get("conditions") or []
        )
        if not already:  # one status change, Event and count per eviction
            status = preempted_status(victim, decision.reason, decision.message, now)
            written = await asyncio.to_thread(
                api.patch_job_status, ns, name, status, victim.get("status") or {}
            )
            if written is not None:
                Runtime.written[(ns, name)] = written
            metrics.PREEMPTIONS.labels(decision.queue, decision.reason).inc()
            kopf.event(victim, type="Warning", reason="Preempted", message=decision.message[:1000])
        for pod in live:
            await asyncio.to_thread(api.delete_pod, ns, pod["metadata"]["name"])
    for qname, status in _queue_statuses(result, idx, now).items():
        for group in status.get("usage", []):
            for kind in ("quota", "used", "borrowed", "pending"):
                metrics.QUEUE_GPUS.labels(qname, group["name"], kind).set(group.get(kind, 0))
        stored = next(iter(idx.queue.get(qname, [])), None)
        if stored is None or Runtime.queue_status.get(qname) == status:
            continue
        if (stored.get("status") or {}) != status:
            await asyncio.to_thread(api.patch_queue_status, qname, status)
        Runtime.queue_status[qname] = status


def _priority_names(idx: Indexes) -> frozenset[str]:
    """PriorityClass names the cluster has (issue 12: checked before a gang is created)."""
    return frozenset(name for name, _ in idx.priority.items())


def _queue_statuses(result: PassResult, idx: Indexes, now: datetime) -> dict[str, dict[str, Any]]:
    """Status per TrainingQueue, with the Active condition (issue 12: broken queues fail
    closed and say so)."""
    stored = {name: body for name, store in idx.queue.items() for body in store}
    return queue_statuses(result.decisions, result.broken, stored, now)


async def _apply(ns: str, name: str, body: dict[str, Any], acts: Actions) -> None:
    api = Runtime.api
    assert api is not None
    for pod in acts.delete_pods:
        Runtime.inflight.pop((ns, pod), None)
        await asyncio.to_thread(api.delete_pod, ns, pod)
    if acts.needs_ssh_secret:  # before the pods that mount it; a 409 keeps the existing keys
        secret = ssh_secret(job_ref(body), acts.needs_ssh_secret)
        await asyncio.to_thread(api.create, secret)
    for obj in acts.create:
        created = await asyncio.to_thread(api.create, obj)
        # Reserve its GPUs until the index shows it; a pod never created reserves nothing.
        if obj["kind"] == "Pod" and created is not None:
            Runtime.inflight[(ns, obj["metadata"]["name"])] = obj
    for pod in acts.ungate:
        await asyncio.to_thread(api.ungate_pod, ns, pod, acts.keep_gates.get(pod, []))
    old_status = body.get("status") or {}
    if acts.status and acts.status != old_status:
        written = await asyncio.to_thread(api.patch_job_status, ns, name, acts.status, old_status)
        if written is not None:
            Runtime.written[(ns, name)] = written
        old_phase, new_phase = old_status.get("phase"), acts.status.get("phase")
        if new_phase and new_phase != old_phase:
            metrics.observe_transition(body, old_phase, new_phase, acts.status)
    for etype, reason, message in acts.events:
        kopf.event(body, type=etype, reason=reason, message=message[:1000])
    if acts.delete_job:
        await asyncio.to_thread(api.delete_job, ns, name)


@kopf.on.event(JOBS)
async def on_job_event(event: kopf.RawEvent, namespace: str, name: str, **kwargs: Any) -> None:
    if event.get("type") == "DELETED":
        Runtime.written.pop((namespace, name), None)
        metrics.forget_job(namespace, name)
        return
    await reconcile_job((namespace, name), Indexes.of(kwargs))


@kopf.on.event("pods", labels={c.LABEL_JOB_NAME: kopf.PRESENT})
async def on_pod_event(labels: Mapping[str, str], namespace: str, **kwargs: Any) -> None:
    key = (namespace, labels[c.LABEL_JOB_NAME])
    idx = Indexes.of(kwargs)
    if key in idx.job:
        await reconcile_job(key, idx)


@kopf.timer(JOBS, interval=10.0, sharp=False)
async def resync(namespace: str, name: str, **kwargs: Any) -> None:
    """Level-based safety net: every job is looked at again even if no event arrives."""
    await reconcile_job((namespace, name), Indexes.of(kwargs))


@kopf.timer(QUEUES, interval=15.0, sharp=False)
async def queue_resync(name: str, **kwargs: Any) -> None:
    """Keep TrainingQueue status and queue metrics current while no job needs planning."""
    idx = Indexes.of(kwargs)
    assert Runtime.placement_lock is not None
    async with Runtime.placement_lock:
        config = _config_with_profiles(idx.fabric)
        all_pods = _pods_with_inflight(idx.pod)
        snap = build_snapshot(_values(idx.node), all_pods, levels=config.topology_levels)
        now = datetime.now(UTC).replace(tzinfo=None)
        result = _admission_pass(now, idx, all_pods, snap, config)
        await _apply_pass(result, idx, now)


@kopf.on.delete(JOBS)
async def on_job_delete(namespace: str, name: str, **_: Any) -> None:
    """Delete the pods at once (garbage collection would too, later) so GPUs free up fast."""
    api = Runtime.api
    assert api is not None
    for pod in await asyncio.to_thread(api.list_job_pods, namespace, name):
        await asyncio.to_thread(api.delete_pod, namespace, pod["metadata"]["name"])
    Runtime.written.pop((namespace, name), None)
