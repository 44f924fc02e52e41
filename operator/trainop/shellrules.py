"""The decisions the operator shell used to make inline, as pure functions of what it holds.

Neighbours: `handlers.operator` (the job reconcile, its writes, its evictions),
`handlers.scheduler` (whether the admission cycle runs) and `handlers.kueue` (Kueue's
evictions) ask these and carry out the answer; `reconcile` and `queueing.cluster` give the
records and rules they rest on. Nothing here talks to the API server, reads a clock or keeps
state: tests/unit/test_shellrules.py is a named-case table for each.

- `mode`: who admits and holds gangs (trainop's loop, Kueue, or kube-scheduler's
  Workload/PodGroup), asked once instead of comparing two config strings in three places;
- `admission_for`: the loop's verdict for a job as its reconcile reads it, or the job's
  current wait (reason Pending before any verdict) while the loop has not spoken;
- `counts_only`, `admits`: which status changes are written, and when admission is
  written before the gang's pods exist;
- `taken_by_another`: a 409 on a pod name that something else holds, which no retry fixes;
- `checkpoint_first` (with `checkpoint_grace`), `preempted_already`: whether an eviction
  waits for a checkpoint first, and whether it was already told;
- `names_runtime`, `gang_live`, `runtime_recorded`: which jobs a runtime's change concerns,
  whether a job keeps the runtime merge its pods were planned from
  (`runtimes.resolve_live`), and what status records of the runtime a job was merged with
  (status.runtime when a gang is created; a RuntimeResolved condition turned True again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from trainop.api import constants as c
from trainop.api.conditions import set_condition
from trainop.api.reasons import WaitReason
from trainop.api.trainingruntime import CLUSTER_RUNTIME_KIND, RUNTIME_KIND
from trainop.planner import OperatorConfig
from trainop.queueing.cluster import in_line
from trainop.reconcile import ADMIT_ALL, RUNTIME_CONDITION, Admission


class Mode(StrEnum):
    """Who admits gangs and holds them until they fit (the config refuses two at once)."""

    TRAINOP = "trainop"  # trainop's admission loop (handlers.scheduler)
    KUEUE = "kueue"  # externalQueue: kueue; each job's Workload (handlers.kueue)
    KUBERNETES = "kubernetes"  # gangScheduling: kubernetes; kube-scheduler's PodGroups


def mode(config: OperatorConfig) -> Mode:
    if config.external_queue != "none":
        return Mode.KUEUE
    if config.gang_scheduling == Mode.KUBERNETES:
        return Mode.KUBERNETES
    return Mode.TRAINOP


class VerdictLike(Protocol):
    """What `admission_for` reads of a verdict (handlers.state.Verdict)."""

    @property
    def admission(self) -> Admission: ...

    @property
    def uid(self) -> str | None: ...

    @property
    def generation(self) -> int | None: ...


def admission_for(
    verdict: VerdictLike | None,
    body: Mapping[str, Any],
    live: bool,
    config: OperatorConfig,
    priorities: Mapping[str, int],
) -> tuple[Admission | None, bool]:
    """(What the reconcile carries out, whether `verdict` is stale). The admission is the
    loop's verdict; ADMIT_ALL for a gang with live pods or one another mode holds; None
    for a new job the loop has not decided (nothing to carry out before its first
    verdict); else the job's current wait as its status shows it, so nothing is written
    until the loop has spoken. Stale: an admission made for an older spec, which the shell
    forgets (with its assumption) so the loop decides again."""
    meta = body.get("metadata") or {}
    if live and verdict is not None and _resize(verdict, meta):
        return verdict.admission, False  # an elastic gang grows or shrinks (queueing.elastic)
    if live or mode(config) != Mode.TRAINOP:
        return ADMIT_ALL, False  # Kueue, or kube-scheduler's PodGroups, hold the gang instead
    stale = False
    if verdict is not None and verdict.uid == meta.get("uid"):
        if not verdict.admission.admitted or verdict.generation == meta.get("generation"):
            return verdict.admission, False
        stale = True  # made for an older spec: decide again
    status = body.get("status") or {}
    if not status.get("phase") and in_line(body, priorities, config):
        return None, stale
    wait = Admission(
        admitted=False,
        reason=status.get("pendingReason") or WaitReason.PENDING,
        message=status.get("pendingMessage") or "waiting for the admission cycle",
        position=status.get("queuePosition"),
    )
    return wait, stale


def _resize(verdict: VerdictLike, meta: Mapping[str, Any]) -> bool:
    """Whether a stored verdict resizes the running elastic gang of this job."""
    admission = verdict.admission
    return admission.admitted and admission.size is not None and verdict.uid == meta.get("uid")


def counts_only(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A starting gang whose only change is its pod counts: not worth a write per pod (in a
    burst that is most of the writes); the counts go out with the next real change."""
    if new.get("phase") != "Admitted" or old.get("phase") != "Admitted":
        return False
    rest = {k: v for k, v in new.items() if k != "replicaStatuses"}
    return rest == {k: v for k, v in old.items() if k != "replicaStatuses"}


def admits(body: Mapping[str, Any], status: Mapping[str, Any], creates: bool) -> bool:
    """Whether a reconcile's status and creates admit a gang (it enters Admitted and creates
    pods): then the status is written first, as news, before the pods exist."""
    entering = (body.get("status") or {}).get("phase") != "Admitted"
    return entering and status.get("phase") == "Admitted" and creates


def taken_by_another(pod: Mapping[str, Any], there: Mapping[str, Any] | None) -> str | None:
    """The message for a create that answered 409 AlreadyExists when the pod of that name
    (`there`, as the watch shows it) is not this job's, nor an earlier job's of its name that
    garbage collection is taking away, nor being deleted: the gang can never be whole, so it
    fails for good instead of being deleted and created again on every reconcile. None:
    the conflict is one a later reconcile resolves."""
    if there is None or there["metadata"].get("deletionTimestamp"):
        return None
    meta = pod["metadata"]
    owner = meta["ownerReferences"][0]
    if any(
        o.get("uid") == owner["uid"]
        or (o.get("kind"), o.get("name")) == ("TrainingJob", owner["name"])
        for o in there["metadata"].get("ownerReferences") or []
    ):
        return None
    return (
        f'pods "{meta["name"]}" already exists and is not this job\'s: delete it, or rename the job'
    )


def checkpoint_grace(victim: Mapping[str, Any], can_ask: bool) -> int | None:
    """Seconds an eviction waits for the victim's checkpoint first, or None (evict now): the
    job asks for one (spec.checkpoint, gracePeriodSeconds > 0, 120 by default) and its pods
    can be told (`can_ask`: the report endpoint is on and its URL is known)."""
    spec = (victim.get("spec") or {}).get("checkpoint") or {}
    grace = int(spec.get("gracePeriodSeconds", 120))
    if not spec or grace <= 0 or not can_ask:
        return None
    return grace


def checkpoint_first(victim: Mapping[str, Any], live: bool, note: str, can_ask: bool) -> int | None:
    """The checkpoint-first rule: seconds an eviction asks the victim to checkpoint before
    its pods go, or None (they go now). Only an eviction not told yet (not Preempted
    already), not the waiter's own (no `note`), of a gang with live pods, asks, and only as
    `checkpoint_grace` allows."""
    if preempted_already(victim) or note or not live:
        return None
    return checkpoint_grace(victim, can_ask)


def preempted_already(body: Mapping[str, Any]) -> bool:
    """The job's status says Preempted: one status change, Event and count per eviction."""
    return any(
        cd.get("type") == "Preempted" and cd.get("status") == "True"
        for cd in (body.get("status") or {}).get("conditions") or []
    )


# --- runtimes (spec.runtimeRef; trainop.runtimes) ---------------------------------------------
def names_runtime(body: Mapping[str, Any], key: tuple[str, str, str]) -> bool:
    """Whether the job's spec.runtimeRef names the runtime `key` (runtimes.runtime_key: kind,
    namespace, "" for a cluster runtime, name): its resolution changes with that runtime."""
    ref = (body.get("spec") or {}).get("runtimeRef")
    if not isinstance(ref, Mapping):
        return False
    kind = ref.get("kind") or CLUSTER_RUNTIME_KIND
    namespace = str((body.get("metadata") or {}).get("namespace") or "default")
    return (kind, namespace if kind == RUNTIME_KIND else "", ref.get("name")) == tuple(key)


def gang_live(body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the job has pods of its current gang (not being deleted, and not of an
    earlier gang generation than status.restartCount): such a gang keeps the runtime merge
    its pods were planned from (runtimes.resolve_live)."""
    restarts = int((body.get("status") or {}).get("restartCount") or 0)
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        made_for = (meta.get("annotations") or {}).get(c.ANNOTATION_RESTART_COUNT)
        if made_for is None or not str(made_for).isdigit() or int(made_for) >= restarts:
            return True
    return False


def runtime_recorded(
    status: Mapping[str, Any],
    runtime: Mapping[str, Any] | None,
    creates: bool,
    now: datetime,
    generation: int | None,
) -> dict[str, Any]:
    """The status a reconcile of a job that merges writes, with what its runtime adds:
    status.runtime (`runtime`, {kind, name, generation}) when the reconcile creates a gang
    (the merge its pods are planned from; a running gang keeps the one it has), and a
    RuntimeResolved condition left False by an earlier problem turned True. An empty
    status (nothing to write) stays empty."""
    if not status:
        return dict(status)
    out = dict(status)
    if creates and runtime is not None:
        out["runtime"] = dict(runtime)
    conditions = out.get("conditions") or []
    if any(
        cd.get("type") == RUNTIME_CONDITION and cd.get("status") == "False" for cd in conditions
    ):
        out["conditions"] = [dict(cd) for cd in conditions]
        said = (
            f"merged with {runtime.get('kind')} {runtime.get('name')}"
            if runtime is not None
            else "the job names no runtime"
        )
        set_condition(
            out["conditions"], RUNTIME_CONDITION, "True", "Resolved", said, now, generation
        )
    return out
