"""kopf handlers: feed the shell state from the watches, carry out decisions; a thin shell.

Neighbours: `handlers.shell.Shell` is the one object of the process, which `trainop run`
makes and hands to `register`: every handler here is a closure over it, or takes it as its
first argument (no module or class attribute holds state). Its `state`
(`handlers.state.ShellState`) holds everything this process knows;
`handlers.scheduler.AdmissionLoop` is the only place that decides which
pending gang is admitted; the pure `trainop.reconcile.reconcile` decides what one job needs
next; `trainop.kube.client.KubeApi` carries it out.

Watches: at start-up `configure` lists every watched kind in full into the state and only
then marks it synced (no decision before that); kopf's event handlers then upsert or
remove each object as the watches report it and, for pods, jobs and nodes, reconcile the
jobs concerned. A job's reconcile reads the admission loop's verdict for it and never runs
admission itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from trainop import metrics, progress, shellrules
from trainop.api import constants as c
from trainop.api.conditions import iso
from trainop.api.fabricprofile import FabricProfile, FabricProfileSpec
from trainop.handlers import heap, kueue, podfeed
from trainop.handlers.progress import ProgressService, serve
from trainop.handlers.scheduler import AdmissionLoop
from trainop.handlers.shell import Shell
from trainop.handlers.state import JobKey, JobMemory, ShellState, job_key, split_key
from trainop.inventory.pods import is_gated
from trainop.kube.client import CONCURRENCY, KubeApi
from trainop.kube.errors import ApplyError, backoff, classify
from trainop.kube.lease import Elector
from trainop.kube.secrets import ssh_secret
from trainop.planner import job_ref
from trainop.queueing.cluster import PassResult
from trainop.queueing.migration import Move
from trainop.queueing.model import MIGRATION, Action, JobDecision
from trainop.queueing.status import queue_statuses
from trainop.reconcile import (
    Actions,
    Admission,
    preempted_status,
    reconcile,
    rejected_status,
    runtime_wait_status,
)
from trainop.runtimes import Resolved, RuntimeProblem

log = logging.getLogger("trainop.operator")

JOBS = "trainingjobs.trainop.dev"
RUNTIMES = ("clustertrainingruntimes.trainop.dev", "trainingruntimes.trainop.dev")
QUEUES = "trainingqueues.trainop.dev"
# Seconds a job that merely waits on the admission loop is not looked at again by timers.
_RESYNC_PHASES = ("Admitted", "Running", "Restarting")


# Admitted gangs carried out at once. A carry-out renders its gang's pod manifests (about
# 16 KB of Python objects each) and holds them until their creates return; a cycle that
# admits 250 gangs of 32 pods used to render all 8,000 before the first create returned,
# the operator's peak memory. In turn, in the cycle's order (asyncio.Semaphore wakes its
# waiters first come, first served), each gang is created whole and sooner.
CARRY_OUTS = 32


class _NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf deep-copies every object on every event to detect what changed, for
    create/update/delete handlers; trainop has none (only event handlers), so nothing
    is built or stored. At thousands of pods that copying was a quarter of the operator's
    time. Add a resource-changing handler and this must go."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> Any:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


def register(shell: Shell, registry: kopf.OperatorRegistry) -> None:
    """Register trainop's kopf handlers in `registry`, each a closure over `shell` (the one
    object `trainop run` made): start-up and cleanup, the mirrors of the small kinds, nodes
    and jobs, and, with `externalQueue: kueue`, Kueue's kinds (handlers.kueue)."""

    # kopf's default registry logs in through the kubernetes client (its fallback); this
    # one is the operator's own, so it says so itself.
    kopf.on.login(registry=registry, id="login_via_client", errors=kopf.ErrorsMode.IGNORED)(
        kopf.login_via_client
    )

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        await configure(shell, settings)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await release_lease(shell)

    for resource, upsert, remove in _MIRRORED:
        kopf.on.event(resource, id=f"mirror_{resource.split('.')[0]}", registry=registry)(
            _mirror(shell, upsert, remove)
        )

    @kopf.on.event("nodes", id="on_node_event", registry=registry)
    async def nodes(event: kopf.RawEvent, body: kopf.Body, name: str, **_: Any) -> None:
        await on_node_event(shell, event, body, name)

    for resource in RUNTIMES:
        kopf.on.event(resource, id=f"on_{resource.split('.')[0]}", registry=registry)(
            _runtime_handler(shell)
        )

    @kopf.on.event(JOBS, id="on_job_event", registry=registry)
    async def jobs(
        event: kopf.RawEvent, body: kopf.Body, namespace: str, name: str, **_: Any
    ) -> None:
        await on_job_event(shell, event, body, namespace, name)

    if shellrules.mode(shell.config) == shellrules.Mode.KUEUE:  # else its CRDs may not exist
        kueue.register(functools.partial(reconcile_job, shell), shell.state, registry)


async def configure(shell: Shell, settings: kopf.OperatorSettings) -> None:
    """Start-up: kopf's settings, the API client, the admission loop, the resync, the
    progress endpoint, the full listing of every watched kind, then the pod feed."""
    # trainop's own prefixes instead of kopf.zalando.org (see docs/operator.md). No handler
    # needs a finalizer; kopf removes this one from jobs that an older trainop gave it.
    settings.persistence.finalizer = c.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=c.ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = _NoDiffBase(
        prefix=c.ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # kopf would post every "Handler succeeded" line as an Event: thousands of writes in a
    # burst. trainop posts its own Events; kopf posts only its warnings and errors.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.execution.max_workers = 16
    # SIGTERM must end the process well inside Kubernetes' default 30 s grace period, even
    # mid-burst: workers get 1 s to drain, and kopf kills itself if it is not out in 8 s.
    settings.queueing.exit_timeout = 1.0
    # kopf runs a worker task per object that saw an event, and an idle worker keeps that
    # object's last whole body until it exits (kopf's default: 5 s). In a burst of
    # thousands of pods that was thousands of whole bodies alive at once; the state keeps
    # slim copies (handlers.slim), so the workers may go after half a second.
    settings.queueing.idle_timeout = 0.5
    settings.process.ultimate_exiting_timeout = 8.0
    shell.api = KubeApi()
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="trainop-api")
    )
    shell.carry_outs = asyncio.Semaphore(CARRY_OUTS)
    metrics.JOBS.source = shell.state.job_bodies
    shell.state.leader = shell.elector is None
    shell.stopping = False
    shell.loop = AdmissionLoop(
        shell.state,
        shell.current_config,
        functools.partial(reconcile_job, shell),
        functools.partial(evict, shell),
        functools.partial(publish, shell),
        migrate=functools.partial(migrate, shell),
    )
    shell.spawn(shell.loop.run())
    shell.spawn(_resync_forever(shell))
    if shell.progress_port:
        shell.progress = ProgressService(
            lambda: shell.api,
            lambda: shell.state,
            shell.config.progress_interval,
            on_checkpoint=lambda key: shell.spawn(reconcile_job(shell, key)),
        )
        context = await _progress_tls(shell)
        shell.spawn(serve(shell.progress, shell.progress_port, context))
    versions = await _list_everything(shell, shell.namespaces)  # before kopf starts its watches
    if shell.podfeed is not None:
        shell.podfeed.close()  # an earlier start's (tests start the handlers again)
    shell.podfeed = podfeed.PodFeed(
        shell.api, asyncio.get_running_loop(), functools.partial(apply_pod_events, shell)
    )
    shell.podfeed.start(versions)
    if shell.elector is not None:
        shell.spawn(_lead(shell, shell.elector))


async def _lead(shell: Shell, elector: Elector) -> None:
    """Hold the Lease: renew every `renew_seconds`; a new leader reconciles every job once."""
    while not shell.stopping:
        try:
            held = await asyncio.to_thread(elector.step)
        except Exception:  # never let a bad answer end the election: just not leader
            log.exception("leader election step failed")
            held = False
        if shell.stopping:
            return  # shutting down: the cleanup handler releases the Lease
        if shell.state.set_leader(held):
            log.info("leader election: %s", "leading" if held else "standing by")
            if held:
                for key in sorted(shell.state.jobs):
                    shell.spawn(reconcile_job(shell, key))
        await asyncio.sleep(shell.renew_seconds)


async def release_lease(shell: Shell) -> None:
    """On SIGTERM: give the Lease up at once so the standby takes over without waiting."""
    shell.stopping = True
    shell.state.leader = False
    if shell.podfeed is not None:
        shell.podfeed.close()
    if shell.elector is not None:
        await asyncio.to_thread(shell.elector.release)
        log.info("leader election: Lease released")


# --- watches -> state ---------------------------------------------------------------------
# The start-up listing (`_list_everything`, from `configure`, before kopf starts watching)
# fills the state and marks it synced; from then on every watch event upserts or removes.
# Not kopf indexes: kopf holds each object of an indexed kind back until every object of
# every indexed kind is in, waking all waiters on each one, which is quadratic in the
# objects listed (minutes at 10,000 pods). Every handler that touches the state is
# `async`: kopf runs those on the event loop, where the admission loop and the reconciles
# run too, so the state is only ever changed from one thread.
KINDS = (
    "nodes",
    "pods",
    "trainingjobs",
    "trainingqueues",
    "namespaces",
    "priorityclasses",
    "fabricprofiles",
    "clustertrainingruntimes",
    "trainingruntimes",
)


async def _listed(
    shell: Shell, kind: str, namespaces: list[str], versions: dict[str | None, str] | None = None
) -> AsyncIterator[list[dict[str, Any]]]:
    """A full listing of `kind`, page by page (KubeApi.list_pages, each page fetched in a
    worker thread): only one page of whole bodies is alive at a time. Pods are listed per
    watch scope, and with `versions` each scope's resourceVersion is kept for the pod feed."""
    api = shell.api
    assert api is not None
    if kind == "pods" and versions is not None:
        for scope in podfeed.scopes(namespaces):
            pages = api.list_pod_pages(scope, versions)
            while (page := await asyncio.to_thread(next, pages, None)) is not None:
                yield page
        return
    pages = api.list_pages(kind, namespaces)
    while (page := await asyncio.to_thread(next, pages, None)) is not None:
        yield page


async def _list_everything(shell: Shell, namespaces: list[str]) -> dict[str | None, str]:
    """Fill the state from a full listing of every watched kind, then let the loop decide.
    Returns the resourceVersion of each pod scope's listing, where the pod feed starts."""
    versions: dict[str | None, str] = {}
    for kind in KINDS:
        count = 0
        async for page in _listed(shell, kind, namespaces, versions):
            shell.state.load(kind, page)
            count += len(page)
        log.info("start-up listing: %d %s", count, kind)
    shell.state.mark_synced()
    return versions


async def _prune(shell: Shell, namespaces: list[str]) -> None:
    """Drop nodes and jobs a fresh listing no longer holds (see ShellState.prune). Pods need
    no such listing: the pod feed's watch goes on from the start-up listing's version with
    no gap, and lists again itself after 410 Gone (handlers.podfeed)."""
    for kind in ("nodes", "trainingjobs"):
        since = shell.state.clock()
        names: list[dict[str, Any]] = []  # the listed objects' names, not their bodies
        async for page in _listed(shell, kind, namespaces):
            for body in page:
                meta = body.get("metadata") or {}
                names.append({"metadata": {k: meta.get(k) for k in ("name", "namespace")}})
        gone = shell.state.prune(kind, names, since)
        if gone:
            log.info("%d %s were gone without a watch event; forgotten", gone, kind)


def _mirror(
    shell: Shell, upsert: Callable[[ShellState, kopf.Body], Any], remove: Callable[..., None]
) -> Any:
    async def on_event(event: kopf.RawEvent, body: kopf.Body, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            remove(shell.state, name)
        else:
            upsert(shell.state, body)

    return on_event


def _upsert_fabric(state: ShellState, body: kopf.Body) -> None:
    """FabricProfile custom resources, validated once here; a bad one is skipped with a log line."""
    name = body["metadata"]["name"]
    try:
        spec = FabricProfileSpec.model_validate(dict(body.get("spec") or {}))
    except ValidationError as exc:
        log.warning("FabricProfile %s ignored: %s", name, exc.errors()[0]["msg"])
        state.remove_fabric(name)
        return
    state.upsert_fabric(FabricProfile(name=name, spec=spec))


# Cluster-scoped kinds that only feed the state: (resource, upsert, remove).
_MIRRORED: tuple[tuple[str, Callable[[ShellState, kopf.Body], Any], Callable[..., None]], ...] = (
    (QUEUES, ShellState.upsert_queue, ShellState.remove_queue),
    ("namespaces", ShellState.upsert_namespace, ShellState.remove_namespace),
    (
        "priorityclasses.scheduling.k8s.io",
        ShellState.upsert_priority_class,
        ShellState.remove_priority,
    ),
    ("fabricprofiles.trainop.dev", _upsert_fabric, ShellState.remove_fabric),
)


def _runtime_handler(shell: Shell) -> Any:
    """A ClusterTrainingRuntime or TrainingRuntime event: into the state (its revision
    bumped on any change or delete), then a reconcile of each job that names it, so a job
    waiting for it starts and a queued job whose runtime went waits with the condition
    and the Event. A gang that runs keeps its merge (runtimes.resolve_live)."""

    async def on_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        state = shell.state
        if event.get("type") == "DELETED":
            meta = body.get("metadata") or {}
            jobs = state.remove_runtime(
                str(body.get("kind") or ""), meta.get("namespace"), str(meta.get("name") or "")
            )
        else:
            jobs = state.upsert_runtime(body)
        for key in jobs if state.synced else ():
            shell.spawn(reconcile_job(shell, key))

    return on_event


async def on_node_event(shell: Shell, event: kopf.RawEvent, body: kopf.Body, name: str) -> None:
    """A node that changed may end the gangs on it (NotReady, GPUs lost): they are looked
    at now, not at the next resync."""
    state = shell.state
    if event.get("type") == "DELETED":
        jobs = state.jobs_on_node(name)
        state.remove_node(name)
    else:
        jobs = state.jobs_on_node(name) if state.upsert_node(body) else []
    for key in jobs if state.synced else ():
        shell.spawn(reconcile_job(shell, key))


def apply_pod_events(shell: Shell, items: list[podfeed.Item]) -> None:
    """A batch of the pod feed (handlers.podfeed), on the event loop: the state first, then
    one reconcile per job whose pods changed (a burst's events coalesce per job)."""
    state = shell.state
    touched: set[JobKey] = set()
    for kind, obj, scope in items:
        if kind == podfeed.RELISTED:
            gone = state.relisted_pods(scope, obj)
            log.info("pods listed again (%s): %d forgotten", scope or "all namespaces", gone)
            touched.update(state.jobs)
            continue
        meta = obj["metadata"]
        if kind == "DELETED":
            state.remove_pod(meta["namespace"], meta["name"])
        else:
            state.upsert_slim_pod(obj)
        job = (meta.get("labels") or {}).get(c.LABEL_JOB_NAME)
        if job:
            touched.add(job_key(meta["namespace"], job))
    for key in touched:
        if key in state.jobs:
            shell.spawn(reconcile_job(shell, key))


async def on_job_event(
    shell: Shell, event: kopf.RawEvent, body: kopf.Body, namespace: str, name: str
) -> None:
    if event.get("type") == "DELETED":
        key = job_key(namespace, name)
        uid = body.get("metadata", {}).get("uid")
        pods = shell.state.job_pods(key, uid)
        names = [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]
        workload = kueue.workload_of(shell.state, key)
        shell.state.remove_job(namespace, name)  # its lock, requeue and Workload go with it
        if shell.progress is not None:
            shell.progress.forget(key)
        if shell.state.leader and names:
            shell.spawn(_delete_pods(shell, namespace, names))
        if shell.state.leader and shell.api is not None and workload is not None:
            await kueue.delete_workload(shell.api, namespace, workload, uid)
        return
    echo = shell.state.is_own_write(body)
    shell.state.upsert_job(body)
    if not echo:  # the echo of our own status write: its reconcile has seen all of it
        await reconcile_job(shell, job_key(namespace, name))


async def _resync_forever(shell: Shell) -> None:
    """Level-based safety net for jobs that hold pods (waiting jobs belong to the loop):
    every `resync_seconds`, each such job is reconciled once. trainop's own loop, not a
    kopf timer: a kopf timer makes kopf put a finalizer on every TrainingJob (two more
    writes per job, and deletions that hang while the operator is away)."""
    next_prune = time.monotonic() + shell.resync_seconds
    while not shell.stopping:
        await asyncio.sleep(shell.resync_seconds)
        if time.monotonic() >= next_prune:  # a minute after start-up, then every 10 minutes
            next_prune = time.monotonic() + 600.0
            try:
                await _prune(shell, shell.namespaces)
            except Exception as exc:  # the next round tries again
                log.warning("listing to prune vanished objects failed: %s", exc)
        state = shell.state
        for key in sorted(state.jobs):
            body = state.job(key)
            if body is not None and (body.get("status") or {}).get("phase") in _RESYNC_PHASES:
                shell.spawn(reconcile_job(shell, key))
        heap.trim()  # what a burst's events and decisions freed goes back to the system


async def _delete_pods(shell: Shell, namespace: str, names: list[str]) -> None:
    """A deleted job's pods go now (garbage collection would too, later) so GPUs free fast.
    By name, from the state: listing them read every whole pod of the job again, and the
    deletions of a quarter of a 2,000-node fleet's gangs held 2,000 pod objects at once."""
    api = shell.api
    assert api is not None
    try:
        for name in names:
            await asyncio.to_thread(api.delete_pod, namespace, name)
    except Exception as exc:  # the garbage collector deletes them anyway (ownerReferences)
        log.warning("pods %s in %s left to garbage collection: %s", names, namespace, exc)


# --- one job ------------------------------------------------------------------------------
def _requeue(shell: Shell, key: JobKey, delay: float) -> None:
    """Run the reconcile again after `delay` unless something else runs it first."""
    mem = shell.state.jobs.get(key)
    if mem is None:
        return  # gone: nothing to look at again
    loop = asyncio.get_running_loop()
    mem.requeue_in(loop.call_later(max(delay, 0.2), lambda: shell.spawn(reconcile_job(shell, key))))


def _lock(shell: Shell, key: JobKey) -> asyncio.Lock | None:
    """The job's lock, held by its reconcile and its evictions (None: the job is gone)."""
    mem = shell.state.jobs.get(key)
    return mem.job_lock() if mem is not None else None


def _admission_for(
    shell: Shell, key: JobKey, body: Mapping[str, Any], live: bool
) -> Admission | None:
    """The loop's verdict for a job without live pods, or its current wait, as
    `shellrules.admission_for` reads it (None: a new job, nothing to carry out yet). A
    verdict made for an older spec is forgotten, with its assumption."""
    mem = shell.state.jobs.get(key)
    verdict = mem.verdict if mem is not None else None
    config = shell.current_config()
    admission, stale = shellrules.admission_for(verdict, body, live, config, shell.state.priorities)
    if stale:
        if mem is not None:
            mem.undecided()
        shell.state.forget(key)
    return admission


async def reconcile_job(shell: Shell, key: JobKey) -> None:
    mem = shell.state.jobs.get(key)
    # A gang's pod events in a burst coalesce into a few reconciles: none is queued while
    # one waits for the lock (it will see this change too).
    if mem is None or not mem.enqueue():
        return  # gone, or the reconcile already waiting will see this change too
    try:
        await _reconcile_locked(shell, key, mem)
    finally:
        shell.state.drop_if_gone(key)


async def _reconcile_locked(shell: Shell, key: JobKey, mem: JobMemory) -> None:
    """The reconcile of one job under its lock, then its requeue."""
    acts: Actions | None = None
    admission: Admission | None = None
    async with mem.job_lock():
        mem.dequeue()
        state = shell.state
        mem = state.jobs.get(key) or mem  # the job may be new under its name since
        body = mem.newest()
        if not state.leader:
            return
        if body is None or body["metadata"].get("deletionTimestamp"):
            state.forget(key)  # nothing will be created for it: its assumption goes now
            return
        if state.is_rejected(key, body):
            state.forget(key)
            return  # refused for good; tried again once the spec changes
        mem.accepted()
        started = time.monotonic()
        try:
            pods = state.job_pods(key, body["metadata"].get("uid"))
            live = any(not p["metadata"].get("deletionTimestamp") for p in pods)
            resolved = state.resolution(key)  # merged with its runtime (spec.runtimeRef)
            if not isinstance(resolved, Resolved):
                if resolved is not None:
                    await _runtime_wait(shell, key, body, resolved, live)
                return
            body = resolved.body  # what the core sees: the merged spec, the job's status
            plan_body: Mapping[str, Any] = body
            if shellrules.mode(shell.config) == shellrules.Mode.KUEUE:
                assert shell.api is not None
                gated = await kueue.gate(shell.api, key, body, pods, shell.current_config(), state)
                if gated is None:
                    return  # Kueue's verdict carried out there (an evicted gang torn down)
                admission, plan_body = gated  # roles narrowed to the admitted flavors' nodes
            else:
                admission = _admission_for(shell, key, body, live)
            if admission is None:
                return  # a new job: the admission loop reconciles it once it has decided
            async with _carry_out_slot(shell, admission, live):
                acts = await _carry_out(shell, key, resolved, plan_body, pods, admission)
            mem.carried_out()
            if admission.admitted and (admission.plan is not None or admission.size is not None):
                mem.undecided()  # carried out: the next gang decides anew
        except Exception as exc:
            metrics.RECONCILE_ERRORS.labels(handler="trainingjob").inc()
            await _report_failure(
                shell, key, state.job(key) or body, exc
            )  # with any status written
            acts = None
        finally:
            metrics.RECONCILE_DURATION.labels(handler="trainingjob").observe(
                time.monotonic() - started
            )
    waiting = admission is not None and not admission.admitted
    if acts is not None and acts.requeue_after is not None and not waiting:
        _requeue(shell, key, acts.requeue_after)


def _carry_out_slot(
    shell: Shell, admission: Admission, live: bool
) -> contextlib.AbstractAsyncContextManager[Any]:
    """A slot among CARRY_OUTS for an admitted gang without live pods (it creates them);
    none for a gang that waits (a status write at most) or runs (its pods' news)."""
    if admission.admitted and not live and shell.carry_outs is not None:
        return shell.carry_outs
    return contextlib.nullcontext()


async def _carry_out(
    shell: Shell,
    key: JobKey,
    resolved: Resolved,
    plan_body: Mapping[str, Any],
    pods: list[dict[str, Any]],
    admission: Admission,
) -> Actions:
    """Plan the job's actions on the current snapshot and apply them. A gang created from
    a runtime merge keeps it (JobMemory.planned_from) and status.runtime records it."""
    state = shell.state
    body = resolved.body
    now = datetime.now(UTC).replace(tzinfo=None)
    acts = reconcile(
        plan_body,
        pods,
        state.snapshot,
        shell.current_config(),
        now,
        admission,
        state.priorities,
        fleet=state.fleet,
    )
    if admission.plan is not None and not acts.create:
        # An admission this reconcile does not carry out: the cycle decided on a body
        # older than what the reconcile saw (a restart's backoff written meanwhile, say).
        # Its GPUs go back and the loop decides again at once, instead of when the
        # assumption expires.
        state.forget(key)
    creates = any(o["kind"] == "Pod" for o in acts.create)
    acts.status = shellrules.runtime_recorded(
        acts.status,
        resolved.status().get("runtime"),
        creates,
        now,
        body["metadata"].get("generation"),
    )
    mem = state.jobs.get(key)
    if creates and mem is not None and resolved.runtime is not None:
        mem.planned_from(resolved)
    await _apply(shell, *split_key(key), body, acts)
    return acts


async def _runtime_wait(
    shell: Shell, key: JobKey, body: dict[str, Any], problem: RuntimeProblem, live: bool
) -> None:
    """A job whose runtime is missing or invalid (runtimes.RuntimeProblem) waits with no
    pods: nothing assumed or decided for it is kept, its status says Queued (pendingReason
    Runtime) with the condition RuntimeResolved False naming the runtime and the fix, and
    one Warning Event with the problem's reason. Not Invalid: the fix may be the
    runtime's. A live gang whose merge this process does not know (it started before a
    restart of the operator, and its runtime went meanwhile) runs on, told the same."""
    state, mem = shell.state, shell.state.jobs.get(key)
    if not live:
        if mem is not None:
            mem.undecided()
        state.forget(key)
    now = datetime.now(UTC).replace(tzinfo=None)
    status, events = runtime_wait_status(body, problem.reason, str(problem), now, live)
    ns, name = split_key(key)
    await _write_status(shell, ns, name, body, status)
    for etype, reason, message in events:
        log.info("%s waits for its runtime: %s", key, message)
        await _event(shell, body, etype, reason, message)


async def _report_failure(
    shell: Shell, key: JobKey, body: Mapping[str, Any], exc: Exception
) -> None:
    """A decision could not be carried out: free what was assumed, then either retry with
    capped backoff (transient) or, for good (permanent), delete what was half-created and
    tell the user on the job's status and in a Warning Event."""
    state = shell.state
    # Before forget(), which drops the pods created that the watch has not shown yet: a
    # half-created gang (say, quota for 1 of its 4 pods) must go too, or it holds its GPUs.
    made = state.job_pods(key, body["metadata"].get("uid"))
    mem = state.jobs.get(key) or JobMemory()  # gone meanwhile: counted in a record kept by none
    state.forget(key)
    mem.undecided()
    failure = classify(exc)
    log.warning("reconcile of %s failed (%s): %s", key, failure.kind, failure.message)
    if not failure.permanent:
        attempt = mem.failed()
        if attempt in (1, 5) or attempt % 20 == 0:  # loud, but not an Event per retry
            with contextlib.suppress(Exception):
                await _event(shell, body, "Warning", "RetryingAfterError", failure.message)
        _requeue(shell, key, backoff(attempt))
        return
    api = shell.api
    assert api is not None
    namespace = split_key(key)[0]
    with contextlib.suppress(Exception):
        for pod in made:
            state.drop_created(namespace, pod["metadata"]["name"])
            await asyncio.to_thread(api.delete_pod, namespace, pod["metadata"]["name"])
        now = datetime.now(UTC).replace(tzinfo=None)
        status, events = rejected_status(body, failure.message, now)
        written = await asyncio.to_thread(
            api.patch_job_status, *split_key(key), status, body.get("status") or {}
        )
        if written is not None:
            state.record_written(key, written)
        for etype, reason, message in events:
            await _event(shell, body, etype, reason, message)
    state.reject(key, body["metadata"].get("generation"))


async def _write(what: str, call: Any, *args: Any) -> Any:
    """One API write in a worker thread; a failure names the object it was about."""
    try:
        return await asyncio.to_thread(call, *args)
    except Exception as exc:
        raise ApplyError(what, exc) from exc


async def _apply(shell: Shell, ns: str, name: str, body: dict[str, Any], acts: Actions) -> None:
    """Carry out Actions in a fixed order: delete, create, release, status, Events, job."""
    api = shell.api
    assert api is not None
    state = shell.state
    for gone in acts.delete_pods:
        state.drop_created(ns, gone)
    forced = await _force_delete(shell, ns, acts.force_delete)
    await asyncio.gather(
        *(asyncio.to_thread(api.delete_pod, ns, g) for g in acts.delete_pods if g not in forced)
    )
    # Admission is news before the gang's pods exist (Kueue's Workload is admitted before
    # its pods, too): a large gang takes seconds to create. Should a create fail, the job
    # goes back in line (_report_failure), where it waits with the reason.
    pods = [o for o in acts.create if o["kind"] == "Pod"]
    if pods:  # taken before the first await: no other job's reconcile plans on these GPUs
        held = {p["metadata"]["name"]: state.holding(p) for p in pods}
        state.assume(
            job_key(ns, name), {k: v for k, v in held.items() if v is not None}, time.monotonic()
        )
    admitted_first = shellrules.admits(body, acts.status, bool(acts.create))
    if admitted_first:
        await _write_status(shell, ns, name, body, acts.status)
    await _create(shell, ns, name, body, acts)
    ungate = list(acts.ungate)
    if acts.release_created:  # the whole gang exists now: release it without a round trip
        ungate += [o["metadata"]["name"] for o in acts.create if o["kind"] == "Pod" and is_gated(o)]
    release = state.to_release(ns, ungate, time.monotonic())
    await asyncio.gather(
        *(
            _write(f"Pod {p} (release)", api.ungate_pod, ns, p, acts.keep_gates.get(p, []))
            for p in release
        )
    )
    state.released.update({(ns, p): time.monotonic() for p in release})
    if not admitted_first:
        await _write_status(shell, ns, name, body, acts.status)
    await _budget(shell, ns, name, acts)
    for etype, reason, message in acts.events:
        await _event(shell, body, etype, reason, message)
    if acts.delete_job:
        await asyncio.to_thread(api.delete_job, ns, name)


async def _progress_tls(shell: Shell) -> ssl.SSLContext | None:
    """The endpoint's TLS context (handlers.tls), its CA bundle in the config pods are wired
    from, and the keeper that renews both; None, with a warning, for plain HTTP."""
    keeper, api = shell.tls, shell.api
    assert api is not None
    if keeper is None:
        log.warning(
            "progress reports travel as plain HTTP (--progress-tls off): a token or a report "
            "can be read and replayed by anyone who sees pod traffic (docs/progress.md)"
        )
        return None
    bundle = await asyncio.to_thread(keeper.ensure, api)

    def publish_ca(new: Any) -> None:
        shell.config = dataclasses.replace(shell.config, progress_ca=new.ca_bundle())

    publish_ca(bundle)
    shell.spawn(keeper.keep(api, publish_ca))
    return keeper.context


async def _budget(shell: Shell, ns: str, name: str, acts: Actions) -> None:
    """Make or delete the job's PodDisruptionBudget as the reconcile decided, only when it
    differs from what this process last did (after a restart: once, 409/404 tolerated); a
    gang of another size (elastic) gets a new one."""
    api, mem = shell.api, shell.state.jobs.get(job_key(ns, name))
    assert api is not None
    if mem is None:
        return
    try:
        if acts.budget is not None:
            size = int(acts.budget["spec"]["minAvailable"])
            if mem.budget != size:
                if mem.budget != 0:  # one of another size, or not known: made anew
                    await asyncio.to_thread(
                        api.delete_disruption_budget, ns, acts.budget["metadata"]["name"]
                    )
                await asyncio.to_thread(api.create, acts.budget)
                mem.budget_now(size)
        elif acts.drop_budget is not None and mem.budget != 0:
            await asyncio.to_thread(api.delete_disruption_budget, ns, acts.drop_budget)
            mem.budget_now(0)
    except Exception as exc:  # not the job's failure: tried again at its next reconcile
        log.warning(
            "PodDisruptionBudget of %s/%s not %s (%s): a drain %s; the chart's ClusterRole "
            "grants poddisruptionbudgets create and delete",
            ns,
            name,
            "made" if acts.budget is not None else "deleted",
            exc,
            "will not wait for its checkpoint" if acts.budget is not None else "stays blocked",
        )


async def _force_delete(shell: Shell, ns: str, stranded: Mapping[str, str]) -> set[str]:
    """Pods bound to a node that left the fleet, deleted with no grace once the API server
    confirms the Node is gone, as kube-controller-manager's pod garbage collector checks
    before it does the same after its quarantine. Returns the pods deleted."""
    api = shell.api
    assert api is not None
    nodes = sorted(set(stranded.values()))
    answers = await asyncio.gather(*(asyncio.to_thread(api.node_gone, n) for n in nodes))
    gone = {n for n, is_gone in zip(nodes, answers, strict=True) if is_gone}
    forced = {pod for pod, node in stranded.items() if node in gone}
    for pod in sorted(forced):
        log.info("pod %s/%s: node %s is gone; deleted without grace", ns, pod, stranded[pod])
    await asyncio.gather(*(asyncio.to_thread(api.delete_pod, ns, p, 0) for p in sorted(forced)))
    return forced


async def _create(shell: Shell, ns: str, name: str, body: Mapping[str, Any], acts: Actions) -> None:
    """The SSH Secret, then Service/ConfigMap/claim templates/ComputeDomain, then the gang's
    pods in parallel; the gang's GPUs count as taken (from `_apply`) until the watch shows them."""
    api, state = shell.api, shell.state
    assert api is not None
    if acts.needs_ssh_secret:  # before the pods that mount it; a 409 keeps the existing keys
        secret = ssh_secret(job_ref(body), acts.needs_ssh_secret)
        await _write(f"Secret {acts.needs_ssh_secret}", api.create, secret)
    pods = [o for o in acts.create if o["kind"] == "Pod"]  # assumed by _apply already
    for obj in (o for o in acts.create if o["kind"] != "Pod"):
        await _write(f"{obj['kind']} {obj['metadata']['name']}", api.create, obj)
    results = await asyncio.gather(
        *(_write(f"Pod {p['metadata']['name']}", api.create, p) for p in pods),
        return_exceptions=True,
    )
    for new, created in zip(pods, results, strict=True):
        if created is not None and not isinstance(created, BaseException):
            state.created(new, time.monotonic())
    failed = [r for r in results if isinstance(r, BaseException)]
    for new, created in zip(pods, results, strict=True):
        taken = _taken(shell, new) if created is False else None
        if taken is not None:
            failed.append(taken)
    if failed:
        raise failed[0]


def _taken(shell: Shell, pod: Mapping[str, Any]) -> ApplyError | None:
    """A 409 that no retry fixes (`shellrules.taken_by_another`), as the permanent failure
    the reconcile reports: the job fails, naming the pod."""
    meta = pod["metadata"]
    there = shell.state.pods.get((meta["namespace"], meta["name"]))
    message = shellrules.taken_by_another(pod, there)
    if message is None:
        return None
    cause = ApiException(status=409, reason="AlreadyExists")
    cause.body = json.dumps({"message": message})
    return ApplyError(f"Pod {meta['name']}", cause)


async def _write_status(
    shell: Shell, ns: str, name: str, body: Mapping[str, Any], status: Mapping[str, Any]
) -> None:
    api = shell.api
    assert api is not None
    old = body.get("status") or {}
    if not status or status == old or shellrules.counts_only(old, status):
        return
    written = await asyncio.to_thread(api.patch_job_status, ns, name, status, old)
    if written is not None:
        shell.state.record_written(job_key(ns, name), written)
    old_phase, new_phase = old.get("phase"), status.get("phase")
    if new_phase and new_phase != old_phase:
        metrics.observe_transition(body, old_phase, new_phase, status)
    _progress_metrics(ns, name, status)


def _progress_metrics(ns: str, name: str, status: Mapping[str, Any]) -> None:
    """trainop_job_degraded from the Degraded condition; a finished job's series go."""
    if status.get("phase") in ("Succeeded", "Failed"):
        metrics.forget_job(ns, name)  # the endpoint may still write its last report
        return
    if status.get("progress") is not None:
        degraded = any(
            cd.get("type") == progress.DEGRADED and cd.get("status") == "True"
            for cd in status.get("conditions") or []
        )
        metrics.JOB_DEGRADED.labels(ns, name).set(1 if degraded else 0)


async def _event(
    shell: Shell, body: Mapping[str, Any], etype: str, reason: str, message: str
) -> None:
    api = shell.api
    assert api is not None
    await asyncio.to_thread(api.post_event, body, etype, reason, message)


# --- what the admission loop asks of the shell ----------------------------------------------
async def evict(shell: Shell, decision: JobDecision, now: datetime) -> None:
    """Evict a preemption victim: status Preempted (once), Event, count, delete its pods.

    Under the job's lock, as a reconcile: a reconcile of the victim already under way would
    otherwise write its status, computed before the eviction, over the Preempted condition.
    """
    key = decision.key
    lock = _lock(shell, key)
    if lock is None:
        return  # gone: nothing to evict
    async with lock:
        victim = shell.state.merged(key)  # its spec.checkpoint may be its runtime's
        if victim is not None:
            await _evict(shell, key, victim, decision, now)
    shell.state.drop_if_gone(key)


async def migrate(shell: Shell, move: Move, now: datetime) -> None:
    """Start a move (queueing.migration): status.migration (phase Moving: the destination
    is held from now on), a Migrating Event and the count, then the eviction path with
    reason Migration, so a gang with spec.checkpoint checkpoints first and one whose
    checkpoint never comes is evicted at the deadline, as a preemption is."""
    key = move.key
    lock = _lock(shell, key)
    if lock is None:
        return
    api = shell.api
    assert api is not None
    async with lock:
        job = shell.state.job(key)
        if job is None or shellrules.preempted_already(job):
            return
        status = job.get("status") or {}
        before = status.get("migration") or {}
        record = {
            "phase": "Moving",
            "source": list(move.source),
            "destination": list(move.destination),
            "reserved": dict(move.to.gpus_by_node),
            "estimatedGainSeconds": round(move.gain, 1),
            "estimatedCostSeconds": round(move.cost, 1),
            "requestedAt": iso(now),
            "moves": int(before.get("moves") or 0) + 1,
            "message": move.message,
        }
        if before.get("measuredCostSeconds") is not None:
            record["measuredCostSeconds"] = before["measuredCostSeconds"]
        written = await asyncio.to_thread(
            api.patch_job_status, *split_key(key), {"migration": record}, {}
        )
        if written is None:
            return
        shell.state.record_written(key, written)
        log.info("migrating %s: %s", key, move.message)
        metrics.MIGRATIONS.labels(str(status.get("queue") or "")).inc()
        metrics.MIGRATION_GAIN_SECONDS.inc(move.gain)
        await _event(shell, job, "Normal", "Migrating", move.message)
        queue = str(status.get("queue") or "")
        decision = JobDecision(key, queue, Action.PREEMPT, MIGRATION, move.message)
        victim = shell.state.merged(key)  # its spec.checkpoint may be its runtime's
        if victim is not None:
            await _evict(shell, key, victim, decision, now)
    shell.state.drop_if_gone(key)


async def _evict(
    shell: Shell,
    key: JobKey,
    victim: Mapping[str, Any],
    decision: JobDecision,
    now: datetime,
    note: str = "",
) -> None:
    api = shell.api
    assert api is not None
    pods = shell.state.job_pods(key, victim["metadata"].get("uid"))
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    already = shellrules.preempted_already(victim)
    can_ask = shell.progress is not None and bool(shell.config.progress_url)
    grace = shellrules.checkpoint_first(victim, bool(live), note, can_ask)
    if grace is not None and await _checkpoint_first(shell, key, victim, decision, now, grace):
        return  # a checkpoint is asked for: the waiter evicts when it is in, or at the deadline
    if not already:  # one status change, Event and count per eviction
        message = f"{decision.message}; {note}" if note else decision.message
        status = preempted_status(victim, decision.reason, message, now)
        written = await asyncio.to_thread(
            api.patch_job_status, *split_key(key), status, victim.get("status") or {}
        )
        if written is not None:
            shell.state.record_written(key, written)
        metrics.PREEMPTIONS.labels(decision.queue, decision.reason).inc()
        if decision.reason == MIGRATION:  # a move, not a loss: Normal, and said as such
            await _event(shell, victim, "Normal", "Migrated", f"restarting elsewhere: {message}")
        else:
            await _event(shell, victim, "Warning", "Preempted", message)
    for pod in live:
        await asyncio.to_thread(api.delete_pod, split_key(key)[0], pod["metadata"]["name"])


# --- checkpoint before eviction (trainop.progress, docs/progress.md) ------------------------
async def _checkpoint_first(
    shell: Shell,
    key: JobKey,
    victim: Mapping[str, Any],
    decision: JobDecision,
    now: datetime,
    grace: int,
) -> bool:
    """Whether the eviction waits for a checkpoint (`shellrules.checkpoint_first` said it
    may, for `grace` seconds). Writes status.checkpointRequest once and starts the waiter;
    the admission loop never waits (it may decide the same eviction again meanwhile:
    nothing more happens)."""
    service = shell.progress
    assert service is not None  # checkpoint_first asks only when the endpoint is on
    mem = shell.state.jobs.get(key)
    if mem is None:
        return False  # gone meanwhile: no one to wait for
    if mem.checkpoint_wait:
        return True
    request = (victim.get("status") or {}).get("checkpointRequest")
    if not request:  # else: asked before a restart or failover of the operator; go on waiting
        latest = service.latest(key) or (victim.get("status") or {}).get("progress")
        why = "Migration" if decision.reason == MIGRATION else "Preempted"
        request = progress.checkpoint_request(latest, grace, why, now)
        api = shell.api
        assert api is not None
        written = await asyncio.to_thread(
            api.patch_job_status, *split_key(key), {"checkpointRequest": request}, {}
        )
        if written is None:
            return False
        shell.state.record_written(key, written)
        await _event(
            shell,
            victim,
            "Normal",
            "CheckpointRequested",
            f"checkpoint asked for before preemption ({decision.message}); evicted once it is "
            f"reported, or in {grace} s",
        )
    mem.await_checkpoint()
    shell.spawn(_wait_then_evict(shell, key, decision, request))
    return True


async def _wait_then_evict(
    shell: Shell, key: JobKey, decision: JobDecision, request: Mapping[str, Any]
) -> None:
    """Wait for a checkpoint newer than `request` (or its deadline), then evict."""
    service = shell.progress
    assert service is not None
    started = time.monotonic()
    try:
        while True:
            now = datetime.now(UTC).replace(tzinfo=None)
            job = shell.state.job(key)
            if job is None or shell.stopping:
                return
            latest = service.latest(key) or (job.get("status") or {}).get("progress")
            done, note = progress.eviction_note(latest, request, now)
            if done:
                break
            deadline = progress.parse_time(request.get("deadline")) or now
            event = service.checkpointed(key)
            event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), max(0.1, (deadline - now).total_seconds()))
        outcome = "checkpointed" if note.startswith("checkpointed") else "deadline"
        metrics.CHECKPOINT_WAITS.labels(outcome).observe(time.monotonic() - started)
        note = f"{note} (waited {time.monotonic() - started:.1f} s)"
        lock = _lock(shell, key)
        if lock is None:
            return  # gone meanwhile
        async with lock:
            victim = shell.state.merged(key)
            if victim is not None:
                await _evict(shell, key, victim, decision, now, note=note)
    finally:
        mem = shell.state.jobs.get(key)
        if mem is not None:
            mem.checkpoint_waited()
            shell.state.drop_if_gone(key)


async def publish(shell: Shell, result: PassResult) -> None:
    """Queue usage to TrainingQueue status (only when it changed) and to metrics."""
    api = shell.api
    assert api is not None
    state = shell.state
    now = datetime.now(UTC).replace(tzinfo=None)
    statuses = queue_statuses(result.decisions, result.broken, state.queues, now)
    for qname, status in statuses.items():
        for group in status.get("usage", []):
            for kind in ("quota", "used", "borrowed", "pending"):
                metrics.QUEUE_GPUS.labels(qname, group["name"], kind).set(group.get(kind, 0))
        stored = state.queues.get(qname)
        if stored is None or state.queue_status.get(qname) == status:
            continue
        if (stored.get("status") or {}) != status:
            await asyncio.to_thread(api.patch_queue_status, qname, status)
        state.queue_status[qname] = status
