"""The operator shell's whole state in one explicit object: caches, assumed gangs, decisions.

Neighbours: `handlers.operator` fills it at start-up from its own full listing of every
watched kind (`load`, then `mark_synced`), keeps it current from kopf's event handlers
(`upsert_*` / `remove_*`) and reads it in the job reconcile; `handlers.scheduler` runs the
admission cycle over it. It never talks to the API server and never imports kopf,
so its unit tests drive it with plain dicts.

What it keeps, and how it stays current without rebuilding:
- nodes: one parsed NodeInfo per node (re-parsed only when that node's event arrives);
- pods: the slim pod dicts, the GPUs each live pod holds on which node, and pods per job;
- jobs: one `JobMemory` per job (as kopf keeps one ResourceMemory per object), made on
  first sight and dropped with the job by `remove_job`, in one place: the watch's body,
  our own status write, the admission loop's verdict, the intake kept for the job's
  version, the assumed gang, the pods created that the watch has not shown, the error
  channel, the shell's lock, queued flag and requeue timer for its reconcile, the
  progress endpoint's newest report and throttled write, and (externalQueue: kueue) its
  Workload. Other modules change a record only through its methods (`enqueue`,
  `decided`, `failed`, `saw_workload`, ...);
- queues, namespaces, PriorityClasses, FabricProfiles, and Kueue's ResourceFlavors and
  WorkloadPriorityClasses: the latest bodies (or what trainop reads of them);
- runtimes (ClusterTrainingRuntime, TrainingRuntime) by `runtimes.runtime_key`, with a
  revision bumped on every change or delete; each job's record keeps its last resolution
  against them (`resolution`, memoized while neither its spec nor the runtimes move) and
  the merge its current gang was planned from (`planned`), which `runtimes.resolve_live`
  keeps while that gang lives;
- assumed gangs: the placement the admission cycle gave a job, counted as used GPUs at
  once, so the next decision of the same cycle, and every cycle until the pods show up in
  the watch, sees them taken (Kueue's assume/forget). An assumption is forgotten when all
  of the gang's pods are visible, when the create fails, when the job goes away, or after
  `assume_ttl` seconds. Kept in the job's record, with an index of the jobs that have one
  (a snapshot reads the few assumed gangs, not every job);
- a revision counter bumped by every change that can alter a decision, and a wake-up
  callback for the admission loop (so a waiting job is retried on change, never polled).

The snapshot for a cycle is derived from the node cache and the per-node usage; it is
rebuilt only when the revision moved, and reuses every NodeInfo whose usage did not change.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trainop import shellrules
from trainop.api import constants as c
from trainop.api.fabricprofile import FabricProfile, FabricProfileSpec
from trainop.api.trainingjob import TERMINAL_PHASES
from trainop.api.trainingruntime import CLUSTER_RUNTIME_KIND, RUNTIME_KIND
from trainop.handlers.slim import slim_job, slim_node, slim_pod
from trainop.inventory import NodeInfo, Snapshot, is_terminated, node_info, pod_binding, pod_request
from trainop.inventory.pods import BY_HOSTNAME, BY_NAME, is_gated
from trainop.queueing.model import JobDecision, key_of
from trainop.queueing.planning import memo_job
from trainop.queueing.preemption import class_min_run
from trainop.reconcile import Admission
from trainop.runtimes import Resolved, RuntimeKey, RuntimeProblem, resolve_live, runtime_key

# A job's key, in the shell and in queueing alike (QueuedJob.key, JobDecision.key,
# `queueing.cluster.job_key`): "namespace/name". A pod's key is the pair (namespace, name).
JobKey = str
PodKey = tuple[str, str]


def job_key(namespace: str, name: str) -> JobKey:
    return key_of(namespace, name)


def split_key(key: JobKey) -> tuple[str, str]:
    """(namespace, name) of a job key, for the API calls that take them apart."""
    namespace, _, name = key.partition("/")
    return namespace, name


def _rv(body: Mapping[str, Any] | None) -> int:
    try:
        return int((body or {}).get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


@dataclass(frozen=True)
class Verdict:
    """A decision as the reconcile reads it, tied to the job generation it was made for."""

    admission: Admission
    uid: str | None
    generation: int | None
    told: float = 0.0  # when this wait last reached the job (monotonic)
    # The cycle's decision this verdict was made from: a later cycle that decides the same
    # for the same job version keeps the verdict as it is (no rebuild, nothing to tell).
    source: JobDecision | None = field(default=None, compare=False)


@dataclass
class Assumed:
    """GPUs a gang was given by the admission cycle but whose pods the watch has not shown."""

    pods: dict[str, tuple[str, str, int]]  # pod name -> (BY_NAME | BY_HOSTNAME, node, GPUs)
    expires: float

    def pending(self, visible: Iterable[str]) -> dict[str, tuple[str, str, int]]:
        seen = set(visible)
        return {p: v for p, v in self.pods.items() if p not in seen}


@dataclass(slots=True, eq=False)
class JobMemory:
    """All the shell remembers of one job; `ShellState.jobs` holds one per job key."""

    body: dict[str, Any] | None = None  # the watch's latest (slim) body; None: not shown
    written: dict[str, Any] | None = None  # our own latest status write, as it came back
    seen: float = 0.0  # when the watch or a listing last showed it (monotonic; `prune`)
    # Bumped by every change the job's intake reads (its body, pods, assumption): the
    # admission cycle takes a job in again only when this (or what all jobs read) moved.
    version: int = 0
    intake: tuple[tuple[Any, ...], Any] | None = None  # (signature, QueuedJob or None)
    verdict: Verdict | None = None  # the admission loop's latest, which the reconcile reads
    assumed: Assumed | None = None
    created: set[str] | None = None  # pods we created that the watch has not shown yet
    # The error channel: transient failures in a row (capped backoff), and whether the API
    # server refused `rejected_generation` for good (not retried until the spec changes).
    failures: int = 0
    rejected: bool = False
    rejected_generation: int | None = None
    # handlers.operator's: the reconcile's lock (evictions take it too), whether a
    # reconcile waits for it (later requests are covered by that one), the pending requeue,
    # and whether an eviction waits for the job's checkpoint.
    lock: asyncio.Lock | None = None
    queued: bool = False
    requeue: asyncio.TimerHandle | None = None
    checkpoint_wait: bool = False
    # handlers.progress's: the newest progress report (status.progress may lag it by one
    # write interval), when it was last written (monotonic), the event a checkpoint wait
    # listens on, and the write a throttled report waits for.
    progress: dict[str, Any] | None = None
    progress_written: float | None = None
    checkpointed: asyncio.Event | None = None
    trailing: asyncio.Future[None] | None = None
    # handlers.kueue's (externalQueue: kueue): the job's Workload as the watch shows it.
    workload: dict[str, Any] | None = None
    # handlers.operator's: the job's PodDisruptionBudget as trainop last made it (its
    # minAvailable, the gang's size) or deleted it (0); None: not known since this process
    # started (issue 35).
    budget: int | None = None
    # The runtime merge (spec.runtimeRef) the job's current gang was planned from, and the
    # last resolution with what it was made from (runtimes.resolve_live; ShellState.resolution).
    planned: Resolved | None = None
    merged: tuple[tuple[Any, ...], Resolved | RuntimeProblem] | None = None
    # The job's key and the shell's set of records the admission cycle must gather again
    # (ShellState.marked): every transition that changes what the gather reads of the job
    # adds the key, so a job that did not change costs the gather nothing (issue 33).
    key: JobKey = field(default="", repr=False, compare=False)
    marks: set[JobKey] | None = field(default=None, repr=False, compare=False)

    # --- transitions: other modules change a record only through these ------------------
    def mark(self) -> None:
        """Something the admission cycle's gather reads of this job changed."""
        if self.marks is not None:
            self.marks.add(self.key)

    def moved(self) -> None:
        """Something the job's intake reads changed (its body, pods or assumption)."""
        self.version += 1
        self.mark()

    def budget_now(self, size: int) -> None:
        """The job's PodDisruptionBudget was just made for a gang of `size` pods, or
        deleted (0)."""
        self.budget = size

    def planned_from(self, resolved: Resolved) -> None:
        """A gang is created from `resolved`: it keeps this merge while it lives."""
        self.planned = resolved
        self.mark()

    def resolution(
        self,
        body: dict[str, Any],
        runtimes: Mapping[RuntimeKey, Mapping[str, Any]],
        revision: int,
        live: bool,
    ) -> Resolved | RuntimeProblem:
        """`runtimes.resolve_live` of `body`, made again only when the job's spec
        (generation), the runtimes (`revision`), whether its gang lives or the merge that
        gang was planned from changed; a kept merge takes the body's current metadata and
        status."""
        meta = body.get("metadata") or {}
        memo = (meta.get("uid"), meta.get("generation"), revision, live, id(self.planned))
        if self.merged is not None and self.merged[0] == memo:
            kept = self.merged[1]
            if isinstance(kept, RuntimeProblem):
                return kept
            return Resolved({**body, "spec": kept.body.get("spec") or {}}, kept.runtime)
        answer = resolve_live(body, runtimes, self.planned, live)
        self.merged = (memo, answer)
        return answer

    def job_lock(self) -> asyncio.Lock:
        """The lock its reconcile and its evictions hold, made on first use."""
        if self.lock is None:
            self.lock = asyncio.Lock()
        return self.lock

    def enqueue(self) -> bool:
        """A reconcile is asked for: False when one already waits for the lock (it will
        see this change too)."""
        if self.queued:
            return False
        self.queued = True
        return True

    def dequeue(self) -> None:
        """The waiting reconcile has the lock: a change from now on needs another."""
        self.queued = False

    def decided(self, verdict: Verdict) -> None:
        """The admission loop's new verdict."""
        self.verdict = verdict

    def undecided(self) -> None:
        """Forget the verdict (carried out, made for an older spec, or failed): the loop
        decides again."""
        self.verdict = None
        self.mark()  # (the loop's record of its decisions looks at it again too)

    def took_in(self, signature: tuple[Any, ...], job: Any) -> None:
        """The admission cycle's intake of this job version (reused while it holds)."""
        self.intake = (signature, job)
        self.mark()

    def requeue_in(self, handle: asyncio.TimerHandle) -> None:
        """The reconcile runs again by `handle`; a requeue pending before is cancelled."""
        if self.requeue is not None:
            self.requeue.cancel()
        self.requeue = handle

    def carried_out(self) -> None:
        """A reconcile went through: the error channel starts again."""
        self.failures = 0

    def failed(self) -> int:
        """A transient failure; how many in a row."""
        self.failures += 1
        return self.failures

    def accepted(self) -> None:
        """The spec is tried again (a refusal for good holds only its own generation)."""
        self.rejected = False
        self.mark()

    def refused(self, generation: int | None) -> None:
        """The API server refused this generation of the job for good."""
        self.rejected, self.rejected_generation = True, generation
        self.mark()

    def await_checkpoint(self) -> bool:
        """An eviction starts waiting for the job's checkpoint; False when one waits."""
        if self.checkpoint_wait:
            return False
        self.checkpoint_wait = True
        return True

    def checkpoint_waited(self) -> None:
        self.checkpoint_wait = False

    def checkpoint_event(self) -> asyncio.Event:
        """The event a checkpoint wait listens on, made on first use."""
        if self.checkpointed is None:
            self.checkpointed = asyncio.Event()
        return self.checkpointed

    def reported(self, progress: dict[str, Any]) -> None:
        """The newest progress report (status.progress may lag it by one write)."""
        self.progress = progress

    def progress_written_at(self, when: float) -> None:
        self.progress_written = when

    def trail(self, write: asyncio.Future[None]) -> None:
        """The write a throttled report waits for."""
        self.trailing = write

    def trailed(self, write: asyncio.Future[None] | None) -> None:
        """`write` is over: no trailing write pending, unless a newer one is."""
        if self.trailing is write:
            self.trailing = None

    def saw_workload(self, body: dict[str, Any]) -> None:
        """The job's Kueue Workload as the watch shows it."""
        self.workload = body

    def lost_workload(self, name: str) -> None:
        """Workload `name` was deleted (a successor's, under a new name, stays)."""
        if self.workload is not None and self.workload["metadata"]["name"] == name:
            self.workload = None

    def newest(self) -> dict[str, Any] | None:
        """The newest body we know: the watch's, or our own write when it is newer."""
        indexed, written = self.body, self.written
        if indexed is None:
            return None
        if (
            written is not None
            and written["metadata"].get("uid") == indexed["metadata"].get("uid")
            and _rv(written) > _rv(indexed)
        ):
            return written
        return indexed

    def idle(self) -> bool:
        """Nothing left to keep: the job is gone, its Workload too, and nothing of the
        shell's is under way."""
        return (
            self.body is None
            and self.assumed is None
            and not self.created
            and not self.queued
            and not self.checkpoint_wait
            and self.workload is None
            and (self.lock is None or not self.lock.locked())
        )


@dataclass
class ShellState:
    """Everything the operator process knows; see the module docstring."""

    levels: tuple[str, ...] = c.DEFAULT_TOPOLOGY_LEVELS
    assume_ttl: float = 120.0
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    node_bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    hostnames: dict[str, str] = field(default_factory=dict)  # hostname label -> node name
    _hostname_of: dict[str, str] = field(default_factory=dict)  # node name -> its hostname
    pods: dict[PodKey, dict[str, Any]] = field(default_factory=dict)
    pod_gpus: dict[PodKey, tuple[str, str, int]] = field(default_factory=dict)  # kind, node, GPUs
    _pods_on: dict[str, set[PodKey]] = field(default_factory=lambda: defaultdict(set))  # by node
    pods_of_job: dict[JobKey, set[str]] = field(default_factory=lambda: defaultdict(set))
    jobs: dict[JobKey, JobMemory] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    terminating: set[str] = field(default_factory=set)  # namespaces being deleted
    priorities: dict[str, int] = field(default_factory=dict)
    min_runs: dict[str, float] = field(default_factory=dict)  # PriorityClass -> min run (s)
    fabrics: dict[str, FabricProfile] = field(default_factory=dict)
    # externalQueue: kueue (handlers.kueue): ResourceFlavors' nodeLabels, and the values of
    # WorkloadPriorityClasses. Each job's Workload is in its record.
    kueue_flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    kueue_priorities: dict[str, int] = field(default_factory=dict)
    # ClusterTrainingRuntimes and TrainingRuntimes by runtimes.runtime_key, and a revision
    # bumped by every change or delete (a job's resolution is memoized against it).
    runtimes: dict[RuntimeKey, dict[str, Any]] = field(default_factory=dict)
    runtimes_revision: int = 0
    _assuming: set[JobKey] = field(default_factory=set)  # the jobs whose record has `assumed`
    # Pods we created that the watch has not shown yet (by pod; per job in its record's
    # `created`): the reconcile counts them as present, so a gang seen half-way through the
    # watch is never taken for a broken one.
    inflight: dict[PodKey, dict[str, Any]] = field(default_factory=dict)
    inflight_ttl: float = 600.0
    _inflight_at: dict[PodKey, float] = field(default_factory=dict)
    # Pods we released (removed trainop's gate from) that the watch still shows gated: not
    # released again by every reconcile until the watch catches up.
    released: dict[PodKey, float] = field(default_factory=dict)  # pod -> when (monotonic)
    queue_status: dict[str, dict[str, Any]] = field(default_factory=dict)
    synced: bool = False
    # Leader election (kube.lease): a standby keeps every cache warm but decides nothing
    # and writes nothing; True when the operator runs without election (one replica).
    leader: bool = True
    revision: int = 0
    on_change: Callable[[], None] | None = None
    _snapshot: Snapshot | None = None
    _snapshot_revision: int = -1
    node_revision: int = 0  # bumped when a node is added, changed or removed
    _snapshot_nodes: int = -1
    # Usage kept as it changes, so the next snapshot is derived from the last one by the
    # nodes that moved (Snapshot.with_usage), never rebuilt from every pod: GPUs of the
    # pods seen per (BY_NAME | BY_HOSTNAME, value), the values that moved since the last
    # snapshot, and the assumed / in-flight GPUs per node that snapshot counted.
    _seen_used: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    _dirty: set[tuple[str, str]] = field(default_factory=set)
    _pending_prev: dict[str, int] = field(default_factory=dict)
    _seen_total: int = 0  # sum of _seen_used
    _fleet: Snapshot | None = None
    _fleet_revision: int = -1
    _jobs_gone: bool = False  # a job went: the next snapshot forgets its memos
    # Jobs whose record changed since the admission cycle last gathered (JobMemory.mark);
    # the gather takes and empties it (take_marked).
    marked: set[JobKey] = field(default_factory=set)
    # When each pod and node was last upserted (monotonic; a job's is in its record):
    # `prune` drops the ones a later full listing no longer holds (deleted while no watch
    # was there to say so).
    _seen: dict[tuple[str, Any], float] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    # The admission cycle keeps each job's intake in its record (see `intake_signature`):
    # a job whose body, pods and assumption did not change, on the same nodes, queues and
    # config, is not taken in again (its QueuedJob, or None when out of line, is reused).
    inputs_revision: int = 0  # queues, namespaces, PriorityClasses, FabricProfiles

    # --- change tracking ---------------------------------------------------------------
    def touch(self) -> None:
        """Something a decision depends on changed: bump the revision, wake the loop."""
        self.revision += 1
        if self.on_change is not None and self.synced:
            self.on_change()

    def memory(self, key: JobKey) -> JobMemory:
        """The job's record, made on first sight (its watch event, or our own assumption
        or create for it)."""
        mem = self.jobs.get(key)
        if mem is None:
            mem = self.jobs[key] = JobMemory(key=key, marks=self.marked)
            mem.mark()
        return mem

    def _changed_job(self, key: JobKey) -> None:
        """Something the job's intake reads changed: its body, pods or assumption."""
        mem = self.jobs.get(key)
        if mem is not None:
            mem.moved()

    def take_marked(self) -> set[JobKey]:
        """The jobs marked since the last call, and none marked from now on."""
        taken = set(self.marked)
        self.marked.clear()  # the same set: every record holds it
        return taken

    def _changed_inputs(self) -> None:
        self.inputs_revision += 1
        self.touch()

    def intake_signature(self, key: JobKey) -> tuple[int, int, int]:
        """What a job's intake depends on besides the config: equal signatures, equal
        QueuedJob (the cycle keeps the config object with it and compares that too)."""
        mem = self.jobs.get(key)
        return (0 if mem is None else mem.version, self.node_revision, self.inputs_revision)

    def mark_synced(self) -> None:
        """Every watch has been listed in full (kopf opens handlers only then)."""
        if not self.synced:
            self.synced = True
            self.touch()

    def set_leader(self, leader: bool) -> bool:
        """Record the election outcome; True when it changed (a new leader catches up)."""
        if leader == self.leader:
            return False
        self.leader = leader
        if leader:
            # Decide afresh: a verdict or an assumption kept from before a lost lease may
            # belong to a reconcile that was skipped while standing by (a gang never
            # created), and would look settled to the loop until the assumption expired.
            for mem in self.jobs.values():
                mem.undecided()
            for key in list(self._assuming):
                self._unassume(key)
            self.touch()
        return True

    # --- nodes ---------------------------------------------------------------------------
    def upsert_node(self, body: Mapping[str, Any]) -> bool:
        """Store a node; False when nothing trainop reads changed (heartbeats and such)."""
        slim = slim_node(body)
        name = str(slim["metadata"]["name"])
        self._seen[("nodes", name)] = self.clock()
        if self.node_bodies.get(name) == slim:
            return False
        self.node_bodies[name] = slim
        self.nodes[name] = node_info(slim, levels=self.levels)
        self.node_revision += 1
        hostname = slim["metadata"]["labels"].get(c.LABEL_HOSTNAME) or name
        self._forget_hostname(name)
        self.hostnames.setdefault(hostname, name)
        if self.hostnames[hostname] == name:
            self._hostname_of[name] = hostname
        self.touch()
        return True

    def remove_node(self, name: str) -> None:
        self._seen.pop(("nodes", name), None)
        if self.nodes.pop(name, None) is not None:
            self.node_revision += 1
            self.node_bodies.pop(name, None)
            self._forget_hostname(name)
            self.touch()

    def _forget_hostname(self, name: str) -> None:
        hostname = self._hostname_of.pop(name, None)
        if hostname is not None and self.hostnames.get(hostname) == name:
            del self.hostnames[hostname]

    # --- pods ----------------------------------------------------------------------------
    def upsert_pod(self, body: Mapping[str, Any]) -> None:
        self.upsert_slim_pod(slim_pod(body))

    def upsert_slim_pod(self, slim: dict[str, Any]) -> None:
        """A pod as `handlers.slim.slim_pod` made it (the pod feed slims in its thread)."""
        meta = slim["metadata"]
        key = (str(meta.get("namespace")), str(meta.get("name")))
        self._seen[("pods", key)] = self.clock()
        old_gpus = self.pod_gpus.get(key)
        self.pods[key] = slim
        self._pop_inflight(key)
        if key in self.released and not is_gated(slim):
            self.released.pop(key, None)
        job = (meta.get("labels") or {}).get(c.LABEL_JOB_NAME)
        if job:
            jk = job_key(key[0], job)
            self.pods_of_job[jk].add(key[1])
            self._changed_job(jk)
            if jk in self._assuming:
                self.revision += 1  # what its assumption still holds changed: snapshot stale
            self._settle_assumed(jk)
        new_gpus = self.holding(slim)
        self._place_pod(key, old_gpus, new_gpus)
        if old_gpus != new_gpus:
            self.touch()

    def remove_pod(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        slim = self.pods.pop(key, None)
        self.released.pop(key, None)
        self._seen.pop(("pods", key), None)
        if slim is None:
            return
        job = (slim["metadata"].get("labels") or {}).get(c.LABEL_JOB_NAME)
        last = False
        if job:
            jk = job_key(namespace, job)
            self._changed_job(jk)
            if jk in self._assuming:
                self.revision += 1  # its assumption holds this pod's GPUs again
            names = self.pods_of_job.get(jk)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.pods_of_job[jk]
                    last = True
        held = self.pod_gpus.get(key)
        if held is not None:
            self._place_pod(key, held, None)
        # A stopped pod holds no GPUs, but the job's last pod object going away may let it
        # in line again (queueing.cluster.intake waits for its old gang's names).
        if held is not None or last:
            self.touch()

    def _place_pod(
        self, key: PodKey, old: tuple[str, str, int] | None, new: tuple[str, str, int] | None
    ) -> None:
        """Keep pod_gpus and its index by node (name or hostname) in step."""
        if old is not None:
            self._seen_used[(old[0], old[1])] -= old[2]
            self._seen_total -= old[2]
            self._dirty.add((old[0], old[1]))
            on = self._pods_on.get(old[1])
            if on is not None:
                on.discard(key)
                if not on:
                    del self._pods_on[old[1]]
        if new is None:
            self.pod_gpus.pop(key, None)
        else:
            self.pod_gpus[key] = new
            self._pods_on[new[1]].add(key)
            self._seen_used[(new[0], new[1])] += new[2]
            self._seen_total += new[2]
            self._dirty.add((new[0], new[1]))

    @staticmethod
    def holding(pod: Mapping[str, Any]) -> tuple[str, str, int] | None:
        """(BY_NAME | BY_HOSTNAME, node, GPUs) a live pod holds, or None."""
        if is_terminated(pod):
            return None
        binding = pod_binding(pod)
        gpus = pod_request(pod)
        if binding is None or not gpus:
            return None
        return (binding[0], binding[1], gpus)

    def to_release(self, namespace: str, pods: list[str], now: float) -> list[str]:
        """The pods of `pods` not released in the last 30 s (a release the watch has not
        shown by then, e.g. lost to a conflict, is sent again)."""
        return [p for p in pods if now - self.released.get((namespace, p), -1e9) > 30.0]

    def job_pods(self, key: JobKey, uid: str | None) -> list[dict[str, Any]]:
        """The job's pods (label job-name and an owner reference to this job's uid), with
        the ones we created that the watch has not shown yet."""
        out = []
        names = set(self.pods_of_job.get(key, ()))
        mem = self.jobs.get(key)
        if mem is not None and mem.created:
            names.update(mem.created)
        namespace = split_key(key)[0]
        for name in sorted(names):
            pod = self.pods.get((namespace, name)) or self.inflight.get((namespace, name))
            if pod is None:
                continue
            owners = pod["metadata"].get("ownerReferences") or []
            if uid is None or any(o.get("uid") == uid for o in owners):
                out.append(pod)
        return out

    # --- jobs and the small kinds ----------------------------------------------------------
    def is_own_write(self, body: Mapping[str, Any]) -> bool:
        """Whether a watched body is the echo of trainop's own last status write (same
        object, same resourceVersion): nothing in it that the writer did not know. A write
        that ended the job is not one: what follows the end reads the terminal phase the
        writing reconcile planned without (Kueue's Workload marked Finished, cleanup, TTL)."""
        meta = body.get("metadata") or {}
        if (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return False
        mem = self.jobs.get(job_key(meta.get("namespace") or "default", meta.get("name", "")))
        written = mem.written if mem is not None else None
        return (
            written is not None
            and written["metadata"].get("uid") == meta.get("uid")
            and written["metadata"].get("resourceVersion") == meta.get("resourceVersion")
        )

    def upsert_job(self, body: Mapping[str, Any]) -> None:
        key = job_key(body["metadata"].get("namespace") or "default", body["metadata"]["name"])
        mem = self.memory(key)
        mem.seen = self.clock()
        old, newest = mem.body, mem.newest()
        mem.body = slim_job(body)
        mem.moved()
        if (
            old is None
            or old.get("spec") != body.get("spec")
            or _meta_changed(old, body)
            or _finished(newest or old, body)
        ):
            self.touch()

    def remove_job(self, namespace: str, name: str) -> None:
        """The job is gone: its record goes, with everything in it (the assumption and the
        pods created for it count no more, its requeue is cancelled). Only a lock that a
        reconcile or an eviction holds now is kept, in an empty record, so a job made
        again under the name waits for it; `drop_if_gone` removes that record after."""
        key = job_key(namespace, name)
        self._drop_inflight(key)
        mem = self.jobs.pop(key, None)
        if mem is not None:
            self._assuming.discard(key)
            for pending in (mem.requeue, mem.trailing):
                if pending is not None:
                    pending.cancel()
            if mem.lock is not None and mem.lock.locked():
                self.jobs[key] = JobMemory(lock=mem.lock, key=key, marks=self.marked)
        self.marked.add(key)  # the gather lets it go (or takes in the lock's empty record)
        self._jobs_gone = True
        self.touch()

    def drop_if_gone(self, key: JobKey) -> None:
        """Drop the record of a job that is gone once nothing of the shell's is under way."""
        mem = self.jobs.get(key)
        if mem is not None and mem.idle():
            del self.jobs[key]
            self.marked.add(key)
            if mem.requeue is not None:
                mem.requeue.cancel()

    def is_rejected(self, key: JobKey, body: Mapping[str, Any]) -> bool:
        """The API server refused this job's current generation for good: out of line,
        holding nothing, until its spec changes."""
        mem = self.jobs.get(key)
        return (
            mem is not None
            and mem.rejected
            and mem.rejected_generation == body["metadata"].get("generation")
        )

    def reject(self, key: JobKey, generation: int | None) -> None:
        """The API server refused this generation of the job for good."""
        mem = self.jobs.get(key)
        if mem is not None:
            mem.refused(generation)

    def record_written(self, key: JobKey, body: Mapping[str, Any]) -> None:
        """Our own status patch result: newer than the watch until the watch catches up."""
        mem = self.jobs.get(key)
        before = None if mem is None else mem.newest()
        if mem is None or before is None:
            return  # gone meanwhile: nothing to be newer than
        mem.written = slim_job(body)
        mem.moved()
        if _finished(before, body):
            self.touch()

    def job(self, key: JobKey) -> dict[str, Any] | None:
        """The newest body we know: the watch's, or our own write when it is newer."""
        mem = self.jobs.get(key)
        return None if mem is None else mem.newest()

    def job_bodies(self) -> list[dict[str, Any]]:
        return [b for b in (self.jobs[k].newest() for k in sorted(self.jobs)) if b is not None]

    def upsert_queue(self, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        old = self.queues.get(name)
        self.queues[name] = copy.deepcopy(dict(body))
        if old is None or old.get("spec") != body.get("spec"):
            self._changed_inputs()

    def remove_queue(self, name: str) -> None:
        if self.queues.pop(name, None) is not None:
            self.queue_status.pop(name, None)
            self._changed_inputs()

    def upsert_namespace(self, body: Mapping[str, Any]) -> None:
        """A namespace's labels (queues select by them) and whether it is being deleted."""
        meta = body["metadata"]
        name, labels = meta["name"], dict(meta.get("labels") or {})
        going = bool(meta.get("deletionTimestamp"))
        if self.namespaces.get(name) != labels or (name in self.terminating) != going:
            self.namespaces[name] = labels
            (self.terminating.add if going else self.terminating.discard)(name)
            self._changed_inputs()

    def remove_namespace(self, name: str) -> None:
        self.terminating.discard(name)
        if self.namespaces.pop(name, None) is not None:
            self._changed_inputs()

    def going_away(self, key: JobKey) -> bool:
        """A job whose namespace is being deleted and that has no live pod: it will never
        run (the API server refuses new objects there), so it is not admitted. Its pods
        often go before it does, and the gang looked as if it had to start again."""
        if not self.terminating or split_key(key)[0] not in self.terminating:
            return False  # (the cycle asks for every job: nothing to split, mostly)
        mem = self.jobs.get(key)
        body = mem.newest() if mem is not None else None
        uid = body["metadata"].get("uid") if body is not None else None
        return not any(not p["metadata"].get("deletionTimestamp") for p in self.job_pods(key, uid))

    def upsert_priority(self, name: str, value: int, min_run: float = 0.0) -> None:
        if self.priorities.get(name) != value or self.min_runs.get(name, 0.0) != min_run:
            self.priorities[name] = value
            if min_run > 0:
                self.min_runs[name] = min_run
            else:
                self.min_runs.pop(name, None)
            self._changed_inputs()

    def upsert_priority_class(self, body: Mapping[str, Any]) -> None:
        """A PriorityClass: its value, and its guaranteed minimum run (annotation
        trainop.dev/min-run-seconds; an unreadable one counts as none, and trainop explain
        names it on the jobs of the class)."""
        meta = body["metadata"]
        try:
            min_run = class_min_run(meta["name"], meta.get("annotations"))
        except ValueError:
            min_run = 0.0
        self.upsert_priority(meta["name"], int(body.get("value") or 0), min_run)

    def remove_priority(self, name: str) -> None:
        self.min_runs.pop(name, None)
        if self.priorities.pop(name, None) is not None:
            self._changed_inputs()

    # --- runtimes (spec.runtimeRef) ----------------------------------------------------------
    def upsert_runtime(self, body: Mapping[str, Any]) -> list[JobKey]:
        """A ClusterTrainingRuntime or TrainingRuntime (its `kind` set); returns the jobs that
        name it when it changed (their reconcile looks again: a waiting one may start)."""
        key = runtime_key(body)
        slim = slim_job(body)  # the body less its managedFields
        old = self.runtimes.get(key)
        self.runtimes[key] = slim
        if old is not None and old.get("spec") == slim.get("spec"):
            same = (old.get("metadata") or {}).get("generation")
            if same == (slim.get("metadata") or {}).get("generation"):
                return []
        return self._runtime_changed(key)

    def remove_runtime(self, kind: str, namespace: str | None, name: str) -> list[JobKey]:
        """A runtime deleted; returns the jobs that name it (a queued one now waits)."""
        key = runtime_key({"kind": kind, "metadata": {"namespace": namespace, "name": name}})
        if self.runtimes.pop(key, None) is None:
            return []
        return self._runtime_changed(key)

    def _runtime_changed(self, key: RuntimeKey) -> list[JobKey]:
        self.runtimes_revision += 1
        naming = [
            k
            for k, mem in sorted(self.jobs.items())
            if (body := mem.newest()) is not None and shellrules.names_runtime(body, key)
        ]
        for k in naming:
            self._changed_job(k)  # their intake reads the merged spec: taken in again
        self.touch()
        return naming

    def resolution(self, key: JobKey) -> Resolved | RuntimeProblem | None:
        """The job as the shell hands it to the core: merged with the runtime it names (its
        live gang's merge kept, runtimes.resolve_live), or why it cannot be; a job naming
        none is its body as it is (no copy). None: the job is gone."""
        mem = self.jobs.get(key)
        body = mem.newest() if mem is not None else None
        if mem is None or body is None:
            return None
        if (body.get("spec") or {}).get("runtimeRef") is None:
            return Resolved(body)
        live = shellrules.gang_live(body, self.job_pods(key, body["metadata"].get("uid")))
        return mem.resolution(body, self.runtimes, self.runtimes_revision, live)

    def merged(self, key: JobKey) -> dict[str, Any] | None:
        """The job's body with the spec its gang runs with (`resolution`), or the body as it
        is when its runtime cannot be merged; None: gone. For the readers of spec fields
        (progress, checkpoint, eviction)."""
        resolved = self.resolution(key)
        if isinstance(resolved, Resolved):
            return resolved.body
        return self.job(key)

    def upsert_fabric(self, profile: FabricProfile) -> None:
        self.fabrics[profile.name] = profile
        self._changed_inputs()

    def remove_fabric(self, name: str) -> None:
        if self.fabrics.pop(name, None) is not None:
            self._changed_inputs()

    # --- full listings -------------------------------------------------------------------
    def relisted_pods(self, namespace: str | None, listed: Iterable[dict[str, Any]]) -> int:
        """A fresh listing of the pods of `namespace` (None: all) after the watch lost its
        place: pods of that scope it does not hold are gone; the rest are upserted. Returns
        how many were forgotten."""
        slims = list(listed)
        present = {(p["metadata"].get("namespace"), p["metadata"].get("name")) for p in slims}
        gone = [
            key
            for key in self.pods
            if key not in present and (namespace is None or key[0] == namespace)
        ]
        for key in gone:
            self.remove_pod(*key)
        for slim in slims:
            self.upsert_slim_pod(slim)
        return len(gone)

    def load(self, kind: str, items: Iterable[Mapping[str, Any]]) -> None:
        """Every object of a kind from a full listing (start-up, before any decision)."""
        for body in items:
            _LOADERS[kind](self, body)

    def prune(self, kind: str, listed: Iterable[Mapping[str, Any]], since: float) -> int:
        """Forget the pods, nodes or jobs that a listing begun at `since` no longer holds
        and that no event has shown since: deleted while no watch was there to say so
        (between the start-up listing and the watch's own, or across a watch gap). Only
        objects last seen before `since` go, so one created during the listing stays.
        Returns how many went."""
        present = {_list_key(kind, b) for b in listed}
        if kind == "trainingjobs":
            seen_at: Iterable[tuple[Any, float]] = (
                (k, m.seen) for k, m in self.jobs.items() if m.body is not None
            )
        else:
            seen_at = ((key, t) for (k, key), t in self._seen.items() if k == kind)
        gone = [key for key, seen in seen_at if seen < since and key not in present]
        for key in gone:
            self._seen.pop((kind, key), None)
            if kind == "pods":
                self.remove_pod(*key)
            elif kind == "nodes":
                self.remove_node(key)
            else:
                self.remove_job(*split_key(key))
        return len(gone)

    # --- assume / forget -----------------------------------------------------------------
    def assume(self, key: JobKey, pods: Mapping[str, tuple[str, str, int]], now: float) -> None:
        """Count a gang's GPUs as used from now on (its pods are about to be created)."""
        mem = self.memory(key)
        mem.assumed = Assumed(dict(pods), now + self.assume_ttl)
        mem.moved()
        self._assuming.add(key)
        self._settle_assumed(key)
        self.revision += 1  # capacity changed; no wake-up: the cycle that assumed goes on

    def created(self, pod: Mapping[str, Any], now: float = 0.0) -> None:
        """A pod we just created: present for the reconcile, and its GPUs used, until the
        watch shows it (or it is deleted, or `inflight_ttl` passes: a watch that lags a
        burst by minutes must not make a created gang look half-gone)."""
        meta = pod["metadata"]
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if key not in self.pods:
            self.inflight[key] = slim_pod(pod)
            self._inflight_at[key] = now
            job = (meta.get("labels") or {}).get(c.LABEL_JOB_NAME)
            if job:
                mem = self.memory(job_key(key[0], job))
                if mem.created is None:
                    mem.created = set()
                mem.created.add(key[1])
                mem.moved()
            self.revision += 1  # counted from now on: the cached snapshot is stale

    def _pop_inflight(self, pod_key: PodKey) -> None:
        pod = self.inflight.pop(pod_key, None)
        self._inflight_at.pop(pod_key, None)
        if pod is None:
            return
        self.revision += 1  # no longer counted as created: the cached snapshot is stale
        job = (pod["metadata"].get("labels") or {}).get(c.LABEL_JOB_NAME)
        jk = job_key(pod_key[0], job) if job else ""
        mem = self.jobs.get(jk) if job else None
        if mem is not None:
            mem.moved()
            if mem.created is not None:
                mem.created.discard(pod_key[1])
                if not mem.created:
                    mem.created = None
            self.drop_if_gone(jk)

    def drop_created(self, namespace: str, name: str) -> None:
        """A pod we created and then deleted before the watch showed it."""
        self._pop_inflight((namespace, name))

    def forget(self, key: JobKey) -> None:
        """Drop an assumption (the create failed, or the job went away): GPUs free again."""
        self._drop_inflight(key)
        if self._unassume(key):
            self.touch()
        self.drop_if_gone(key)

    def _unassume(self, key: JobKey) -> bool:
        """Drop the job's assumption; whether it had one."""
        if key not in self._assuming:
            return False
        self._assuming.discard(key)
        mem = self.jobs[key]
        mem.assumed = None
        mem.moved()
        return True

    def _drop_inflight(self, key: JobKey) -> None:
        mem = self.jobs.get(key)
        namespace = split_key(key)[0]
        for name in list(mem.created or ()) if mem is not None else ():
            self._pop_inflight((namespace, name))

    def expire(self, now: float) -> list[JobKey]:
        """Forget assumptions older than `assume_ttl` (the gang was never created) and
        created pods the watch has not shown for `inflight_ttl` (gone before we saw them);
        created pods themselves stay counted until then."""
        stale = sorted(k for k in self._assuming if self._assumed(k).expires <= now)
        for key in stale:
            self._unassume(key)
            self.touch()
            self.drop_if_gone(key)
        for pod_key in [k for k, t in self._inflight_at.items() if t + self.inflight_ttl <= now]:
            self._pop_inflight(pod_key)
            self.touch()
        return stale

    def expiries(self) -> list[float]:
        """When each assumption runs out (monotonic): the loop wakes up then."""
        return [self._assumed(k).expires for k in self._assuming]

    def _assumed(self, key: JobKey) -> Assumed:
        assumed = self.jobs[key].assumed
        assert assumed is not None  # _assuming indexes the records that have one
        return assumed

    def _settle_assumed(self, key: JobKey) -> None:
        if key in self._assuming and not self._assumed(key).pending(self.pods_of_job.get(key, ())):
            self._unassume(key)  # every pod is visible: the pod cache counts them now

    def assumed_holding(self, key: JobKey) -> tuple[tuple[str, int], ...]:
        """GPUs per node an assumed gang holds (for admission: the job counts as admitted)."""
        if key not in self._assuming:
            return ()
        assumed = self._assumed(key)
        held: dict[str, int] = defaultdict(int)
        for kind, value, gpus in assumed.pods.values():
            node = self._node_of(kind, value)
            if node is not None:
                held[node] += gpus
        return tuple(sorted(held.items()))

    def _node_of(self, kind: str, value: str) -> str | None:
        node = value if kind == BY_NAME else self.hostnames.get(value)
        return node if node in self.nodes else None

    # --- snapshot --------------------------------------------------------------------------
    def _pending_by_node(self) -> dict[str, int]:
        """GPUs per node of assumed gangs' pods not yet seen, and of pods we created that
        the watch has not shown (and no assumption counts): small, so kept from scratch."""
        used: dict[str, int] = defaultdict(int)
        counted: set[PodKey] = set()
        for key in self._assuming:
            pending = self._assumed(key).pending(self.pods_of_job.get(key, ()))
            namespace = split_key(key)[0]
            for pod_name, (kind, value, gpus) in pending.items():
                counted.add((namespace, pod_name))
                node = self._node_of(kind, value)
                if node is not None:
                    used[node] += gpus
        for pod_key, created in self.inflight.items():  # created, not yet seen, not assumed
            held = None if pod_key in counted else self.holding(created)
            if held is not None:
                node = self._node_of(held[0], held[1])
                if node is not None:
                    used[node] += held[2]
        return used

    def _seen_on(self, node: str) -> int:
        """GPUs of the seen pods bound or pinned to `node` (by name or by its hostname)."""
        used = self._seen_used.get((BY_NAME, node), 0)
        hostname = self._hostname_of.get(node)
        if hostname is not None:
            used += self._seen_used.get((BY_HOSTNAME, hostname), 0)
        return used

    def used_by_node(self) -> dict[str, int]:
        used: dict[str, int] = defaultdict(int)
        for (kind, value), gpus in self._seen_used.items():
            node = self._node_of(kind, value)
            if node is not None and gpus:
                used[node] += gpus
        for node, gpus in self._pending_by_node().items():
            used[node] += gpus
        return used

    def gpu_usage(self) -> tuple[int, int]:
        """(GPUs admission counts as used, of which assumed or created but not yet seen):
        the first is what the live pods it sees hold (on any node) plus the second. A second figure that
        stays above 0 is a leaked assumption (exported as trainop_assumed_gpus)."""
        pending = sum(self._pending_by_node().values())
        return self._seen_total + pending, pending

    def snapshot(self) -> Snapshot:
        """The fleet as placement sees it now; only when the revision moved is a new one
        made, derived from the last by the nodes whose usage changed (a full rebuild only
        when a node was added, changed or removed)."""
        if self._snapshot is not None and self._snapshot_revision == self.revision:
            return self._snapshot
        pending = self._pending_by_node()
        if self._snapshot is None or self._snapshot_nodes != self.node_revision:
            snapshot = self._rebuilt(pending)
        else:
            moved = {self._node_of(kind, value) for kind, value in self._dirty}
            moved.update(pending, self._pending_prev)
            snapshot = self._snapshot.with_usage(
                {
                    n: self._seen_on(n) + pending.get(n, 0)
                    for n in moved
                    if n is not None and n in self.nodes
                }
            )
        self._dirty.clear()
        self._pending_prev = pending
        if self._jobs_gone:  # the memos of jobs that are gone (any left by an earlier cycle)
            snapshot.forget_static(lambda k: (j := memo_job(k)) is not None and j not in self.jobs)
            self._jobs_gone = False
        self._snapshot, self._snapshot_revision = snapshot, self.revision
        self._snapshot_nodes = self.node_revision
        return snapshot

    def _rebuilt(self, pending: Mapping[str, int]) -> Snapshot:
        infos = []
        for name, info in self.nodes.items():
            n = self._seen_on(name) + pending.get(name, 0)
            if n != info.gpus_used:
                info = replace(info, gpus_used=n, gpus_free=max(0, info.gpus_allocatable - n))
            infos.append(info)
        return Snapshot(nodes=tuple(infos), levels=self.levels)

    def fleet(self) -> Snapshot:
        """The nodes as they are, their GPU use NOT counted: what a running gang's checks
        read (is my node still there, Ready, with its GPUs). Rebuilt only when a node
        changed, where `snapshot()` is rebuilt on every pod that starts or ends."""
        if self._fleet is None or self._fleet_revision != self.node_revision:
            self._fleet = Snapshot(nodes=tuple(self.nodes.values()), levels=self.levels)
            self._fleet_revision = self.node_revision
        return self._fleet

    def jobs_on_node(self, name: str) -> list[JobKey]:
        """Jobs with a pod bound or pinned to node `name` (its change may end their gang)."""
        values = {name, self._hostname_of.get(name, name)}
        out: set[JobKey] = set()
        for value in values:
            for ns, pod_name in self._pods_on.get(value, ()):
                labels = self.pods[(ns, pod_name)]["metadata"].get("labels") or {}
                job = labels.get(c.LABEL_JOB_NAME)
                if job and job_key(ns, job) in self.jobs:
                    out.add(job_key(ns, job))
        return sorted(out)


def _list_key(kind: str, body: Mapping[str, Any]) -> Any:
    meta = body.get("metadata") or {}
    if kind == "nodes":
        return str(meta.get("name"))
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    return job_key(namespace, name) if kind == "trainingjobs" else (namespace, name)


def _load_fabric(state: ShellState, body: Mapping[str, Any]) -> None:
    from pydantic import ValidationError

    try:
        spec = FabricProfileSpec.model_validate(dict(body.get("spec") or {}))
    except ValidationError:
        return  # the event handler logs it when the watch shows it
    state.upsert_fabric(FabricProfile(name=body["metadata"]["name"], spec=spec))


# kind (as `KubeApi.list_all` names it) -> how one listed object enters the state
_LOADERS: dict[str, Callable[[ShellState, Mapping[str, Any]], Any]] = {
    "nodes": ShellState.upsert_node,
    "pods": ShellState.upsert_pod,
    "trainingjobs": ShellState.upsert_job,
    "trainingqueues": ShellState.upsert_queue,
    "namespaces": ShellState.upsert_namespace,
    "priorityclasses": ShellState.upsert_priority_class,
    "fabricprofiles": _load_fabric,
    "clustertrainingruntimes": lambda s, b: s.upsert_runtime({**b, "kind": CLUSTER_RUNTIME_KIND}),
    "trainingruntimes": lambda s, b: s.upsert_runtime({**b, "kind": RUNTIME_KIND}),
}


def _finished(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The job just left the line for good (Succeeded or Failed): the quota it was charged
    is free for the jobs that wait, so the admission loop must look again. (A gang whose
    pods all completed a moment before this status is written looks pending to a cycle
    in between, which admits it again; nothing else would wake the loop afterwards.)"""
    was = (old.get("status") or {}).get("phase")
    now = (new.get("status") or {}).get("phase")
    return now in TERMINAL_PHASES and was != now


def _meta_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Deletion started or the uid changed (a job recreated under the same name)."""
    o, n = old.get("metadata") or {}, new.get("metadata") or {}
    return bool(
        o.get("uid") != n.get("uid") or o.get("deletionTimestamp") != n.get("deletionTimestamp")
    )
