"""The shell of `externalQueue: kueue`: Kueue's objects in, the job's Kueue verdict out.

Neighbours: `handlers.operator.reconcile_job` asks `gate` for a job's verdict instead of
trainop's admission loop (which stands aside in this mode); `queueing.kueue` holds the
pure rules (the Workload, its states, the status patches); `kube.kueue` writes. The
watches are registered by `register`, which `trainop run` calls with the operator's
callbacks, only in this mode (the Kueue CRDs need not exist otherwise). docs/kueue.md describes the whole route.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import kopf

from trainop import shellrules
from trainop.api.trainingjob import TERMINAL_PHASES
from trainop.handlers.state import JobKey, ShellState, job_key, split_key
from trainop.kube import kueue as writes
from trainop.kube.client import KubeApi
from trainop.planner import InvalidJob, OperatorConfig
from trainop.queueing import kueue as rules
from trainop.reconcile import ADMIT_ALL, INADMISSIBLE, Admission, preempted_status
from trainop.validation import checked_spec

log = logging.getLogger("trainop.kueue")


def _job_key(body: Mapping[str, Any]) -> JobKey | None:
    meta = body.get("metadata") or {}
    job = (meta.get("labels") or {}).get("trainop.dev/job-name")
    return job_key(str(meta.get("namespace")), str(job)) if job else None


def remember_workload(
    state: ShellState, event: Mapping[str, Any], body: Mapping[str, Any]
) -> JobKey | None:
    """Keep a Workload trainop made in its job's record; the key (None: not trainop's, or
    the Workload of a job the state does not know and that is gone)."""
    key = _job_key(body)
    if key is None:
        return None
    if event.get("type") == "DELETED":
        mem = state.jobs.get(key)
        if mem is not None:
            mem.lost_workload(body["metadata"]["name"])
            state.drop_if_gone(key)
    else:  # a Workload seen before its job's first event waits in the job's record
        state.memory(key).saw_workload(dict(body))
    return key


def remember(
    state: ShellState, plural: str, event: Mapping[str, Any], body: Mapping[str, Any]
) -> None:
    """Keep a ResourceFlavor's nodeLabels or a WorkloadPriorityClass's value."""
    name, deleted = str(body["metadata"]["name"]), event.get("type") == "DELETED"
    if plural == "workloadpriorityclasses":
        if deleted:
            state.kueue_priorities.pop(name, None)
        else:
            state.kueue_priorities[name] = int(body.get("value") or 0)
    elif deleted:
        state.kueue_flavors.pop(name, None)
    else:
        state.kueue_flavors[name] = dict((body.get("spec") or {}).get("nodeLabels") or {})


def workload_of(state: ShellState, key: JobKey) -> dict[str, Any] | None:
    mem = state.jobs.get(key)
    return None if mem is None else mem.workload


def register(
    reconcile: Callable[[JobKey], Awaitable[None]],
    state: ShellState,
    registry: kopf.OperatorRegistry,
) -> None:
    """Watch Workloads (a change reconciles its job), ResourceFlavors and
    WorkloadPriorityClasses (a change reconciles the jobs Kueue has not admitted: one may
    have waited for it) in the operator's registry, before it starts. (A deleted
    TrainingJob's Workload is deleted by the job's own handler: `delete_workload`.)"""

    @kopf.on.event(f"workloads.{rules.GROUP}", id="kueue_workloads", registry=registry)
    async def on_workload(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        key = remember_workload(state, event, body)
        mem = state.jobs.get(key) if key is not None else None
        if key is not None and mem is not None and mem.body is not None:
            await reconcile(key)

    def on_flavor_or_priority(plural: str) -> Any:
        async def handler(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
            remember(state, plural, event, body)
            for key in [k for k, m in state.jobs.items() if m.body is not None]:
                if rules.verdict(workload_of(state, key)).state in ("absent", "pending"):
                    await reconcile(key)

        return handler

    for plural in ("resourceflavors", "workloadpriorityclasses"):
        kopf.on.event(f"{plural}.{rules.GROUP}", id=f"kueue_{plural}", registry=registry)(
            on_flavor_or_priority(plural)
        )


async def delete_workload(
    api: KubeApi, namespace: str, workload: Mapping[str, Any] | None, uid: str | None
) -> None:
    """A deleted TrainingJob's Workload goes at once (its ownerReference would have the
    garbage collector do it later), so Kueue gets the quota back without delay."""
    if workload is not None and rules.owned_by(workload, uid):
        await asyncio.to_thread(
            writes.delete_workload, api, namespace, workload["metadata"]["name"]
        )


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _priority(
    body: Mapping[str, Any], pod_priorities: Mapping[str, int], wpcs: Mapping[str, int]
) -> int | None:
    """The Workload's spec.priority: its WorkloadPriorityClass's value (Kueue's scheduler
    reads spec.priority; for its own jobs Kueue's reconciler resolves it the same way)."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    wpc = labels.get(rules.PRIORITY_LABEL)
    if wpc:
        return wpcs.get(wpc)
    pc = (body.get("spec") or {}).get("priorityClassName")
    return pod_priorities.get(pc) if pc else None


async def gate(
    api: KubeApi,
    key: JobKey,
    body: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    config: OperatorConfig,
    state: ShellState,
) -> tuple[Admission, Mapping[str, Any]] | None:
    """The job's verdict from its Workload, and the body to plan with (each role narrowed to
    its admitted flavors' nodes). None: handled here (an evicted gang torn down, a finished
    job's Workload released), nothing for the reconcile to do now."""
    wl = workload_of(state, key)
    if wl is not None and not rules.owned_by(wl, (body.get("metadata") or {}).get("uid")):
        wl = None  # a predecessor's, garbage collected with it
    found = rules.verdict(wl)
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
        if wl is not None and found.state != "finished":
            await _patch_status(api, wl, rules.finished_status(wl, body, _now()))
        return ADMIT_ALL, body
    if wl is not None and await _suspension(api, key, body, pods, wl, found):
        return ADMIT_ALL, body  # the reconcile deletes the gang and says Suspended
    if live and found.state in ("evicted", "pending"):
        await _tear_down(api, state, key, body, live, found)
        return None
    if found.state == "evicted" and wl is not None:
        if pods or found.reserved:  # Kueue's order: the gang gone, then the reservation
            if not pods:
                await _patch_status(api, wl, rules.requeued_status(wl, _now()))
            return None
        found = rules.waiting(wl)  # requeued: waits like any pending Workload
    if found.state == "absent":
        return await _create(api, body, config, state, live)
    return _carry_out(found, body, live, state.kueue_flavors)


def _carry_out(
    found: rules.KueueVerdict,
    body: Mapping[str, Any],
    live: Sequence[Mapping[str, Any]],
    node_labels: Mapping[str, Mapping[str, str]],
) -> tuple[Admission, Mapping[str, Any]]:
    """Admitted: the body narrowed to the flavors' nodes; pending: Kueue's reason."""
    if found.state == "admitted":
        flavors = found.flavors or {}
        missing = sorted({f for names in flavors.values() for f in names} - set(node_labels))
        if missing:
            message = f"admitted by Kueue; ResourceFlavor(s) {', '.join(missing)} not seen yet"
            return Admission(False, rules.WAITING, message), body
        return ADMIT_ALL, rules.flavored(body, flavors, node_labels)
    if live:  # finished Workload under a live gang (never expected): leave the gang be
        return ADMIT_ALL, body
    reason = INADMISSIBLE if found.reason == "Inadmissible" else rules.WAITING
    return Admission(False, reason, f"Kueue: {found.message}"), body


async def _patch_status(api: KubeApi, wl: Mapping[str, Any], patch: Mapping[str, Any]) -> None:
    meta = wl["metadata"]
    await asyncio.to_thread(
        writes.patch_workload_status, api, meta["namespace"], meta["name"], patch
    )


async def _suspension(
    api: KubeApi,
    key: JobKey,
    body: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    wl: Mapping[str, Any],
    found: rules.KueueVerdict,
) -> bool:
    """A suspended job's Workload is inactive, so Kueue takes its quota back; resumed, it
    is active again and Kueue queues it anew. Whether the job is suspended."""
    suspended = bool(((body.get("spec") or {}).get("runPolicy") or {}).get("suspend"))
    name = wl["metadata"]["name"]
    if rules.active(wl) == suspended:
        patch = {"spec": {"active": not suspended}}
        await asyncio.to_thread(writes.patch_workload, api, split_key(key)[0], name, patch)
    if suspended and not pods and found.state == "evicted" and found.reserved:
        await _patch_status(api, wl, rules.requeued_status(wl, _now()))  # Requeued False
    return suspended


async def _create(
    api: KubeApi,
    body: Mapping[str, Any],
    config: OperatorConfig,
    state: ShellState,
    live: Sequence[Mapping[str, Any]],
) -> tuple[Admission, Mapping[str, Any]]:
    """No Workload yet: create it. A gang already running (the mode was switched under
    it) runs on until Kueue's first verdict: if that is not an admission, it is torn down
    and waits for Kueue like any other job."""
    try:
        spec = checked_spec(body, config)
    except InvalidJob:
        return ADMIT_ALL, body  # the reconcile says what is wrong with it
    wpc = ((body.get("metadata") or {}).get("labels") or {}).get(rules.PRIORITY_LABEL)
    if wpc and wpc not in state.kueue_priorities:  # its value is the Workload's priority
        message = f"no WorkloadPriorityClass {wpc} (label {rules.PRIORITY_LABEL}) yet"
        return Admission(False, rules.WAITING, message), body
    wl = rules.build_workload(body, spec, _priority(body, state.priorities, state.kueue_priorities))
    await asyncio.to_thread(writes.create_workload, api, wl)
    if live:
        return ADMIT_ALL, body
    where = f"LocalQueue {spec.queue}" if spec.queue else "no LocalQueue (spec.queue is empty)"
    message = f"Workload {wl['metadata']['name']} created in {where}; waiting for Kueue"
    return Admission(False, rules.WAITING, message), body


async def _tear_down(
    api: KubeApi,
    state: ShellState,
    key: JobKey,
    body: Mapping[str, Any],
    live: Sequence[Mapping[str, Any]],
    found: rules.KueueVerdict,
) -> None:
    """Kueue took the quota back: the whole gang goes (a collective cannot run short of a
    peer), the job is Queued with Kueue's reason until the Workload is admitted again."""
    if live and not shellrules.preempted_already(body):
        message = f"Kueue evicted the Workload ({found.reason}): {found.message}"
        status = preempted_status(body, rules.EVICTED, message, _now())
        written = await asyncio.to_thread(
            api.patch_job_status, *split_key(key), status, body.get("status") or {}
        )
        if written is not None:
            state.record_written(key, written)
        await asyncio.to_thread(api.post_event, body, "Warning", rules.EVICTED, message)
        log.info("%s: %s; deleting its %d pods", key, message, len(live))
    for pod in live:
        await asyncio.to_thread(api.delete_pod, split_key(key)[0], pod["metadata"]["name"])
