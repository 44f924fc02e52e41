"""The TrainingJob lifecycle as a pure function: observed job + its pods + snapshot -> Actions.

Level-based: every call looks at the whole observed state and says what to do next, so a
missed event, an operator restart or a pod deleted by hand converge on the next call.

Lifecycle (phases; each also a condition):
  Queued -> Admitted (gang created: pinned, ungated; or gated, then ungated together) -> Running
  -> Succeeded | Failed;  Restarting between gangs;  Suspended;  Invalid.
Success policy: AllWorkers (default) - every pod of the success roles exited 0 (Worker; the
Chief for TensorFlow jobs that have one; the Launcher for MPI). RankZero - rank 0 exited 0.
Failures are classified first (trainop.failures, recorded in status.lastFailure): Never ->
Failed. OnFailure -> restart the whole gang (a collective cannot go on without a peer).
ExitCode -> the reason decides: exit codes 1-127 permanent (Failed); signals, OOM kills,
NCCL errors and GPU Xids retryable. Restarts wait base * 2^(n-1) seconds (capped) and count
against backoffLimit; pods deleted by hand, lost nodes, evictions and preemptions restart the
gang without counting. A gang stuck pulling its image fails (ImagePullFailed) after a grace.
Before anything is created, generated names and the PriorityClass are checked
(trainop.validation): a job that fails them is Invalid with nothing created.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from trainop import progress
from trainop.api import constants as c
from trainop.api.conditions import find_condition, iso, set_condition
from trainop.api.reasons import WaitReason
from trainop.api.trainingjob import TERMINAL_PHASES, RunPolicy, TrainingJobSpec
from trainop.failures import (
    EXIT_CODE,
    IMAGE_PULL,
    UNKNOWN,
    classify_failed,
    image_pull_failure,
    strongest,
)
from trainop.inventory import Snapshot, pod_request
from trainop.inventory.pods import is_gated
from trainop.manifests import build_disruption_budget, disruption_budget_name, pod_name
from trainop.planner import (
    InvalidJob,
    OperatorConfig,
    Plan,
    Wait,
    checkpoint_location,
    job_ref,
    plan_job,
    size_estimates,
    success_roles,
    with_workers,
)
from trainop.validation import check_priority_class, checked_spec
from trainop.workload import gang_name, name_gang

# pendingReason of a job whose queue is broken (queueing.model.QUEUE_INVALID).
QUEUE_INVALID = WaitReason.QUEUE_INVALID
# pendingReason and condition of a job that can never be admitted as written
# (queueing.model.INADMISSIBLE).
INADMISSIBLE = WaitReason.INADMISSIBLE

# Phases that exclude each other; entering one sets the others' conditions False.
_EXCLUSIVE = ("Queued", "Admitted", "Running", "Restarting", "Suspended")

Event = tuple[str, str, str]
_PENDING_FIELDS = (
    "pendingReason",
    "pendingMessage",
    "queuePosition",
)  # (type Normal|Warning, reason, message)


@dataclass
class Actions:
    """What the shell should do; applied in this order: delete, create, ungate, status (the
    status first when it admits a gang: admission is news before the pods exist)."""

    delete_pods: list[str] = field(default_factory=list)
    create: list[dict[str, Any]] = field(default_factory=list)
    ungate: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    delete_job: bool = False
    requeue_after: float | None = None
    needs_ssh_secret: str | None = None
    # Gates of other controllers that must stay on a pod trainop releases (name -> gates).
    keep_gates: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # The pods in `create` are a whole gang: release them as soon as every create has
    # succeeded, without waiting for the watch to show them (a failed create releases none).
    release_created: bool = False
    # Pods ending on a node that was deleted: no kubelet will confirm their end, so they are
    # deleted with no grace (pod name -> node; the shell checks the node is gone first).
    force_delete: dict[str, str] = field(default_factory=dict)
    # Jobs with spec.checkpoint: the PodDisruptionBudget their running gang should have now
    # (`budget`), or the name of the one to delete (`drop_budget`); jobs without get neither
    # (progress.budget_stands decides; docs/progress.md).
    budget: dict[str, Any] | None = None
    drop_budget: str | None = None


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=None)
    except ValueError:
        return None


def _generation(pod: Mapping[str, Any]) -> int | None:
    """The gang generation (restart count) a pod was created for."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_RESTART_COUNT)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _role_of(pod: Mapping[str, Any], spec: TrainingJobSpec) -> str | None:
    lower = ((pod.get("metadata") or {}).get("labels") or {}).get(c.LABEL_REPLICA_TYPE, "")
    for role in spec.replica_specs:
        if role.lower() == lower:
            return role
    return None


def expected_pod_names(name: str, spec: TrainingJobSpec) -> set[str]:
    return {
        pod_name(name, role, i) for role, r in spec.replica_specs.items() for i in range(r.replicas)
    }


def replica_statuses(pods: Sequence[Mapping[str, Any]], spec: TrainingJobSpec) -> dict[str, Any]:
    out = {
        role: {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
        for role in spec.replica_specs
    }
    for pod in pods:
        role = _role_of(pod, spec)
        if role is None:
            continue
        phase = _phase(pod)
        key = {"Running": "running", "Succeeded": "succeeded", "Failed": "failed"}.get(
            phase, "pending"
        )
        out[role][key] += 1
    return out


@dataclass(frozen=True)
class Admission:
    """The queue's verdict for a job without pods: admitted, or why it waits."""

    admitted: bool
    reason: str = ""
    message: str = ""
    position: int | None = None
    plan: Plan | None = None  # the plan admission checked quota against; used as is
    queue: str | None = None  # the queue that decided (written to status.queue)
    size: int | None = None  # elastic: the Worker count admitted (a growth's plan: new pods)


ADMIT_ALL = Admission(admitted=True)


class _Status:
    """Mutable copy of the job's status with phase/condition/event bookkeeping."""

    def __init__(self, body: Mapping[str, Any], now: datetime) -> None:
        self.old = dict(body.get("status") or {})
        self.new: dict[str, Any] = {k: v for k, v in self.old.items()}
        self.new["conditions"] = [dict(x) for x in self.old.get("conditions") or []]
        self.now = now
        self.generation = (body.get("metadata") or {}).get("generation")
        self.events: list[Event] = []
        self.new["observedGeneration"] = self.generation

    @property
    def phase(self) -> str | None:
        return self.new.get("phase")

    def cond(self, ctype: str, status: bool, reason: str, message: str = "") -> None:
        set_condition(
            self.new["conditions"],
            ctype,
            "True" if status else "False",
            reason,
            message,
            self.now,
            self.generation,
        )

    def wait(
        self, reason: str, message: str, position: int | None = None, warning: bool = False
    ) -> None:
        """Enter Queued with exactly the current wait's fields (no stale position or reason)."""
        for key in _PENDING_FIELDS:
            self.new.pop(key, None)
        if reason:
            self.new["pendingReason"] = reason
        if message:
            self.new["pendingMessage"] = message
        if position is not None:
            self.new["queuePosition"] = position
        self.enter("Queued", reason or "Pending", message, warning=warning)

    def replan(self, reason: str, message: str) -> None:
        """Back to Queued for a moment while a broken gang is dropped (no queue wait)."""
        for key in _PENDING_FIELDS:
            self.new.pop(key, None)
        self.enter("Queued", reason, message)

    def enter(
        self, phase: str, reason: str, message: str, warning: bool = False, event: bool = True
    ) -> None:
        """Move to `phase` (idempotent): its condition True, exclusive ones False, one Event
        (none with `event=False`: the condition alone says it; see docs/operator.md)."""
        changed = self.old.get("phase") != phase
        self.new["phase"] = phase
        if phase != "Invalid":
            self.cond("Invalid", False, "Valid")
        if phase in _EXCLUSIVE or phase == "Invalid":
            for other in _EXCLUSIVE:
                if other != phase:
                    self.cond(other, False, reason)
        if phase != "Queued":  # pending fields describe only a current wait
            for key in _PENDING_FIELDS:
                self.new.pop(key, None)
        self.cond(phase, True, reason, message)
        if phase not in ("Queued", "Invalid", "Suspended"):
            self.cond("Created", True, "PodsCreated" if phase != "Created" else reason)
        if event and (changed or self._news(phase, reason, message)):
            self.events.append(("Warning" if warning else "Normal", reason, message))

    def _news(self, phase: str, reason: str, message: str) -> bool:
        """Whether the condition changed enough for an Event. A wait whose reason stays is
        no news when only its message moves (a NoFit quoting the free GPUs would otherwise
        post an Event for every waiting job whenever any gang starts or ends)."""
        for cond in self.old.get("conditions") or []:
            if cond.get("type") == phase:
                if phase == "Queued":
                    return bool(cond.get("reason") != reason)
                return bool(cond.get("message") != message)
        return True


@dataclass
class _Ctx:
    """One reconcile's inputs and its output in the making; the phase handlers share it."""

    body: Mapping[str, Any]
    snapshot: Callable[[], Snapshot]  # with GPU use: for planning
    fleet: Callable[[], Snapshot]  # node facts (may lag on use): for "is my node still fine"
    config: OperatorConfig
    now: datetime
    admission: Admission
    priority_classes: Collection[str] | None
    st: _Status
    live: list[Mapping[str, Any]]
    deleting: list[Mapping[str, Any]]
    acts: Actions = field(default_factory=Actions)
    spec: TrainingJobSpec | None = None

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name", ""))

    @property
    def job_spec(self) -> TrainingJobSpec:
        assert self.spec is not None, "validated first"
        return self.spec

    @property
    def restarts(self) -> int:
        return int(self.st.new.get("restartCount") or 0)

    def finish(self, requeue: float | None = None) -> Actions:
        acts = self.acts
        acts.status = self.st.new
        acts.events = self.st.events
        # The earliest of every reason to look again (deadline, backoff, follow-ups).
        due = [t for t in (requeue, acts.requeue_after) if t is not None]
        acts.requeue_after = min(due) if due else None
        # One action per pod: a pod being deleted is neither deleted twice nor released.
        acts.delete_pods = list(dict.fromkeys(acts.delete_pods))
        acts.ungate = [n for n in acts.ungate if n not in acts.delete_pods]
        acts.force_delete = _stranded(self, acts.delete_pods)
        _budget(self)
        return acts

    def delete_all(self) -> None:
        self.acts.delete_pods.extend(sorted(p["metadata"]["name"] for p in self.live))

    def invalid(self, exc: InvalidJob) -> Actions:
        self.st.enter("Invalid", exc.reason, f"{exc.field}: {exc.detail}", warning=True)
        return self.finish()


def _budget(ctx: _Ctx) -> None:
    """A job with spec.checkpoint (as written: an invalid or finished one too) keeps a
    PodDisruptionBudget while progress.budget_stands, and loses it otherwise. Only where
    pods are wired to report (config.progress_url): without the channel no checkpoint can
    answer a drain, and the budget would hold the drain until someone deleted it."""
    if not isinstance((ctx.body.get("spec") or {}).get("checkpoint"), Mapping):
        return
    going = set(ctx.acts.delete_pods)
    gang = sum(1 for p in ctx.live if p["metadata"]["name"] not in going)
    st = ctx.st
    stands = (
        ctx.spec is not None
        and bool(ctx.config.progress_url)
        and progress.budget_stands(
            st.phase, gang > 0, st.new.get("checkpointRequest"), st.new.get("progress"), ctx.now
        )
    )
    if stands:
        ctx.acts.budget = build_disruption_budget(job_ref(ctx.body), gang)
    else:
        ctx.acts.drop_budget = disruption_budget_name(ctx.name)


Step = Callable[[_Ctx], "Actions | None"]  # None: go on to the next step


def reconcile(
    body: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    snapshot_for_planning: Callable[[], Snapshot],
    config: OperatorConfig,
    now: datetime,
    admission: Admission = ADMIT_ALL,
    priority_classes: Collection[str] | None = None,
    fleet: Callable[[], Snapshot] | None = None,
) -> Actions:
    """Decide the next actions for one TrainingJob (see the module docstring).

    `priority_classes`: the PriorityClass names the cluster has (None: unknown, not checked);
    a gang is never started for a job naming a missing one. `fleet`: the nodes without
    their GPU use, cheaper to keep current than the planning snapshot, for the checks of a
    started gang (default: the planning snapshot).

    The checks that hold in every phase run first (_CHECKS, in order); then the handler of
    the job's situation (_HANDLERS, chosen by `_situation`) decides."""
    ctx = _Ctx(
        body=body,
        snapshot=snapshot_for_planning,
        fleet=fleet or snapshot_for_planning,
        config=config,
        now=now,
        admission=admission,
        priority_classes=priority_classes,
        st=_Status(body, now),
        live=[p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")],
        deleting=[p for p in pods if (p.get("metadata") or {}).get("deletionTimestamp")],
    )
    if ctx.st.phase in TERMINAL_PHASES:
        return _on_terminal(ctx)
    for check in _CHECKS:
        done = check(ctx)
        if done is not None:
            return done
    return _HANDLERS[_situation(ctx)](ctx)


def _situation(ctx: _Ctx) -> str:
    """Which handler decides: by the pods the job has, not by the phase it last wrote."""
    if not ctx.live:
        return "restarting" if ctx.st.phase == "Restarting" else "waiting"
    if any(is_gated(p) for p in ctx.live):
        return "admitted"
    return "running"


# --- checks of every phase -------------------------------------------------------------------
def _check_valid(ctx: _Ctx) -> Actions | None:
    """A spec that can never run gets a condition and an Event, and no pods."""
    try:
        ctx.spec = checked_spec(ctx.body, ctx.config)
    except InvalidJob as exc:
        ctx.delete_all()
        return ctx.invalid(exc)
    ctx.st.new["gpus"] = ctx.spec.total_gpus
    ctx.st.new["framework"] = ctx.spec.framework.name  # a runtime's too: kubectl get tj shows it
    ctx.st.new["replicaStatuses"] = replica_statuses(ctx.live, ctx.spec)
    if ctx.spec.elastic is not None:
        _size_elastic(ctx)
    return None


def _size_elastic(ctx: _Ctx) -> None:
    """An elastic job's gang is its admitted size (queueing.elastic): Workers above it are
    strays (a shrink deletes them), Workers below it missing (a growth creates them from
    the verdict's plan). status.elastic shows current and target; a resize posts an Event."""
    spec = ctx.job_spec
    el = spec.elastic
    assert el is not None
    prefix = f"{ctx.name}-worker-"
    live = sum(1 for p in ctx.live if str(p["metadata"]["name"]).startswith(prefix))
    size = ctx.admission.size or live or el.max_replicas
    size = max(el.min_replicas, min(el.max_replicas, size))
    ctx.spec = with_workers(spec, size)
    old = ctx.st.old.get("elastic") or {}
    ctx.st.new["elastic"] = {
        **old,
        "currentReplicas": live,
        "targetReplicas": size,
        "minReplicas": el.min_replicas,
        "maxReplicas": el.max_replicas,
    }
    if "allreduceBySize" not in old:
        ctx.st.new["elastic"]["allreduceBySize"] = size_estimates(
            ctx.body, ctx.snapshot(), ctx.config
        )
    before = old.get("targetReplicas")
    if before and before != size and live:
        verb = "Grown" if size > before else "Shrunk"
        why = f": {ctx.admission.message}" if ctx.admission.message else ""
        ctx.st.events.append(("Normal", verb, f"target {before} -> {size} workers{why}"))


def _check_suspended(ctx: _Ctx) -> Actions | None:
    if ctx.job_spec.run_policy.suspend:
        ctx.delete_all()
        # As for a Kubernetes Job, the deadline clock restarts on resume.
        ctx.st.new.pop("startTime", None)
        ctx.st.enter("Suspended", "Suspended", "spec.runPolicy.suspend is true; pods deleted")
        return ctx.finish()
    if ctx.st.phase == "Suspended":  # resuming: as for a Kubernetes Job, the deadline restarts
        ctx.st.new.pop("startTime", None)
    return None


def _check_deadline(ctx: _Ctx) -> Actions | None:
    """activeDeadlineSeconds runs from the first admission, across restarts."""
    policy = ctx.job_spec.run_policy
    started = parse_time(ctx.st.new.get("startTime"))
    if not (policy.active_deadline_seconds and started):
        return None
    over = (ctx.now - started).total_seconds() - policy.active_deadline_seconds
    if over < 0:
        ctx.acts.requeue_after = -over
        return None
    ctx.delete_all()
    _terminal(
        ctx.st,
        "Failed",
        "DeadlineExceeded",
        f"ran longer than spec.runPolicy.activeDeadlineSeconds ({policy.active_deadline_seconds} s)",
    )
    return ctx.finish()


def _check_old_gang(ctx: _Ctx) -> Actions | None:
    """Pods of an earlier gang generation that the watch still shows alive (our delete has
    not reached it yet) are only deleted, never judged again: a failure counts once."""
    restarts = ctx.restarts
    old = [p for p in ctx.live if (g := _generation(p)) is not None and g < restarts]
    if not old:
        return None
    ctx.acts.delete_pods.extend(sorted(p["metadata"]["name"] for p in old))
    ctx.live = [p for p in ctx.live if p not in old]
    return None if ctx.live else ctx.finish(requeue=1.0)


_CHECKS: tuple[Step, ...] = (_check_valid, _check_suspended, _check_deadline, _check_old_gang)


# --- the phase handlers ------------------------------------------------------------------------
def _on_terminal(ctx: _Ctx) -> Actions:
    """Succeeded/Failed: free GPUs held by pods still running (PS, sidecars), then the TTL."""
    ctx.acts.delete_pods.extend(
        sorted(p["metadata"]["name"] for p in ctx.live if _phase(p) not in ("Succeeded", "Failed"))
    )
    ttl = ((ctx.body.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
    done = parse_time(ctx.st.new.get("completionTime"))
    if ttl is None or done is None:
        return ctx.finish()
    left = (done + timedelta(seconds=int(ttl)) - ctx.now).total_seconds()
    if left <= 0:
        ctx.acts.delete_job = True
        return ctx.finish()
    return ctx.finish(requeue=left)


def _on_restarting(ctx: _Ctx) -> Actions:
    """Between two gangs: as waiting, but the restart backoff runs out first."""
    return _on_waiting(ctx, backoff=True)


def _on_waiting(ctx: _Ctx, backoff: bool = False) -> Actions:
    """No live pods: queued until the admission verdict admits a gang, then create it."""
    if ctx.deleting:
        return ctx.finish(requeue=1.0)  # old gang still going away; names are reused
    try:  # checked before each new gang only: a running gang keeps its class
        check_priority_class(ctx.job_spec, ctx.priority_classes)
    except InvalidJob as exc:
        return ctx.invalid(exc)
    last = parse_time(ctx.st.new.get("lastRestartTime"))
    if backoff and last is not None:
        wait = backoff_seconds(ctx.config, ctx.restarts) - (ctx.now - last).total_seconds()
        if wait > 0:
            return ctx.finish(requeue=wait)
    return _start_gang(ctx)


def _on_admitted(ctx: _Ctx) -> Actions:
    """A gated gang: release it whole, or start over when it is incomplete or its node went."""
    missing = _stray_and_missing(ctx)
    gated = [p for p in ctx.live if is_gated(p)]
    if missing:
        # A half-created gang (operator stopped mid-create): nothing ran yet, so
        # start over rather than trust an old placement.
        ctx.delete_all()
        ctx.st.replan("Replanning", "gang was incomplete before it ran; re-planning")
        return ctx.finish(requeue=1.0)
    lost = _lost_nodes(gated, ctx.fleet())
    if lost:
        ctx.delete_all()
        ctx.st.replan("NodeLost", f"planned node(s) {', '.join(lost)} are gone; re-planning")
        return ctx.finish(requeue=1.0)
    ctx.acts.ungate.extend(sorted(p["metadata"]["name"] for p in gated))
    for p in gated:
        _keep_other_gates(ctx.acts, p)
    return ctx.finish(requeue=1.0)


def _keep_other_gates(acts: Actions, pod: Mapping[str, Any]) -> None:
    """Other controllers' scheduling gates stay on a pod trainop releases."""
    others = [
        g
        for g in (pod.get("spec") or {}).get("schedulingGates") or []
        if g.get("name") != c.SCHEDULING_GATE
    ]
    if others:
        acts.keep_gates[pod["metadata"]["name"]] = others


def _on_running(ctx: _Ctx) -> Actions:
    """A released gang: success first, then failures, then what keeps it from running."""
    missing = _stray_and_missing(ctx)
    if missing and _incomplete(ctx, missing):
        return ctx.finish(requeue=1.0)
    for step in (_succeeded, _failed):
        done = step(ctx)
        if done is not None:
            return done
    if missing and _growing(ctx, missing):
        return ctx.finish(requeue=1.0)
    if missing:
        ctx.delete_all()
        ctx.st.enter(
            "Restarting",
            "PodMissing",
            f"pod(s) {', '.join(sorted(missing))} disappeared; restarting the gang (not counted "
            "against backoffLimit)",
            warning=True,
        )
        return ctx.finish(requeue=1.0)
    for step in (_nodes_broken, _draining, _image_stuck):
        done = step(ctx)
        if done is not None:
            return done
    if all(_phase(p) in ("Running", "Succeeded") for p in ctx.live):
        # No Event: a gang reaching Running is the expected outcome of its GangPlaced Event
        # (one Event per admission, as Kueue posts), and the condition and phase say it.
        ctx.st.enter("Running", "AllPodsRunning", f"{len(ctx.live)} pods running", event=False)
        _moved(ctx)
        if _degraded(ctx):
            return ctx.finish(requeue=1.0)
        # Nothing to poll: pod and node events bring the job back; only a node that is
        # NotReady but still within its grace needs a look when the grace ends, and a gang
        # that has not reported yet when its startup deadline comes.
        due = [t for t in (_grace_left(ctx), _startup(ctx)) if t is not None]
        return ctx.finish(requeue=min(due) if due else None)
    lost = _lost_nodes([p for p in ctx.live if _phase(p) == "Pending"], ctx.fleet())
    if lost:
        ctx.delete_all()
        ctx.st.enter(
            "Restarting",
            "NodeLost",
            f"node(s) {', '.join(lost)} disappeared before the pods started; re-planning",
        )
        return ctx.finish(requeue=1.0)
    return ctx.finish(requeue=2.0)


_HANDLERS: dict[str, Callable[[_Ctx], Actions]] = {
    "waiting": _on_waiting,
    "restarting": _on_restarting,
    "admitted": _on_admitted,
    "running": _on_running,
}


# --- steps of the running phase -------------------------------------------------------------
def _stray_and_missing(ctx: _Ctx) -> set[str]:
    """Delete pods no longer part of the gang (e.g. replicas lowered); return the missing."""
    expected = expected_pod_names(ctx.name, ctx.job_spec)
    have = {p["metadata"]["name"] for p in ctx.live}
    ctx.acts.delete_pods.extend(sorted(have - expected))
    return expected - have


def _incomplete(ctx: _Ctx, missing: set[str]) -> bool:
    """A gang that lacks pods while its status still says Admitted (written before its
    pods were created; Running is written once every pod runs) was never whole: a create
    failed, or the operator stopped mid-create. Pinned gangs are created without a gate
    (planner.needs_gate), so its pods may have started and failed waiting for peers that
    never came: nothing of it is judged as a gang's run. Deleted and planned again, not
    counted, as a gated gang found incomplete is (`_on_admitted`)."""
    if ctx.st.old.get("phase") != "Admitted" or _growth(ctx, missing) is not None:
        return False
    ctx.delete_all()
    ctx.st.replan("Replanning", "gang was incomplete before it ran; re-planning")
    return True


def _growth(ctx: _Ctx, missing: set[str]) -> list[dict[str, Any]] | None:
    """An elastic job admitted to a larger size: the missing Workers from the growth's
    plan (None: the missing pods are no growth)."""
    plan = ctx.admission.plan
    if ctx.job_spec.elastic is None or plan is None:
        return None
    grown = [p for p in plan.pods if p["metadata"]["name"] in missing]
    return grown if len(grown) == len(missing) else None


def _growing(ctx: _Ctx, missing: set[str]) -> bool:
    """Create the missing Workers of a growth (`_growth`): they join the running
    rendezvous; the others keep running."""
    grown = _growth(ctx, missing)
    if grown is None:
        return False
    ctx.acts.create.extend(grown)
    return True


def _succeeded(ctx: _Ctx) -> Actions | None:
    """A finished rank 0 with peers exiting is success, not failure: checked first."""
    spec, policy = ctx.job_spec, ctx.job_spec.run_policy
    by_name = {p["metadata"]["name"]: p for p in ctx.live}
    roles = success_roles(spec)
    if policy.success_policy == "RankZero":
        rank0 = [
            p
            for p in ctx.live
            if (p["metadata"].get("annotations") or {}).get(c.ANNOTATION_RANK) == "0"
        ]
        succeeded = bool(rank0) and _phase(rank0[0]) == "Succeeded"
    else:
        needed = [
            pod_name(ctx.name, role, i)
            for role in roles
            if role in spec.replica_specs
            for i in range(spec.replica_specs[role].replicas)
        ]
        succeeded = bool(needed) and all(
            n in by_name and _phase(by_name[n]) == "Succeeded" for n in needed
        )
    if not succeeded:
        return None
    ctx.acts.delete_pods.extend(
        sorted(n for n, p in by_name.items() if _phase(p) not in ("Succeeded", "Failed"))
    )
    _terminal(
        ctx.st,
        "Succeeded",
        "JobSucceeded",
        f"{', '.join(roles)} pods completed (successPolicy {policy.success_policy})",
    )
    return ctx.finish()


def _failed(ctx: _Ctx) -> Actions | None:
    """Every outcome of a failed pod drops the gang: restart it, or fail the job."""
    failed = sorted(
        (p for p in ctx.live if _phase(p) == "Failed"), key=lambda p: p["metadata"]["name"]
    )
    if not failed:
        return None
    ctx.delete_all()
    _judge_failure(ctx.st, failed, ctx.job_spec.run_policy, ctx.restarts)
    return ctx.finish(requeue=1.0 if ctx.st.phase == "Restarting" else None)


def _nodes_broken(ctx: _Ctx) -> Actions | None:
    bound = [p for p in ctx.live if (p.get("spec") or {}).get("nodeName")]
    if not bound:
        return None
    broken = _broken_nodes(bound, ctx.fleet(), ctx.now, ctx.config.node_lost_seconds)
    if not broken:
        return None
    ctx.delete_all()
    ctx.st.enter(
        "Restarting",
        "NodeLost",
        f"{'; '.join(broken)}; restarting the whole gang elsewhere (not counted against "
        "backoffLimit)",
        warning=True,
    )
    return ctx.finish(requeue=1.0)


def _startup(ctx: _Ctx) -> float | None:
    """Condition Progressing from the trainer's first report after the gang started running
    (trainop.progress.judge_startup): a gang whose pods run but whose trainer never reports
    turns Progressing=False (NoReport) at its deadline, with one Warning Event, instead of
    looking healthy for ever (issue 38). Returns the seconds until the deadline."""
    st, spec = ctx.st, ctx.job_spec
    expects = spec.checkpoint is not None or spec.progress.total_steps is not None
    deadline = progress.startup_deadline(
        spec.progress.startup_deadline_seconds, expects, bool(ctx.config.progress_url)
    )
    running = find_condition(st.new["conditions"], "Running") or {}
    since = (
        parse_time(running.get("lastTransitionTime")) if running.get("status") == "True" else None
    )
    verdict = progress.judge_startup(st.new.get("progress"), since, deadline, ctx.now)
    if verdict.status is None:
        return verdict.recheck
    was = (find_condition(st.new["conditions"], progress.PROGRESSING) or {}).get("status")
    st.cond(progress.PROGRESSING, verdict.status, verdict.reason, verdict.message)
    if not verdict.status and was != "False":
        st.events.append(("Warning", verdict.reason, verdict.message))
    return verdict.recheck


REPLACE_DEGRADED_EVERY = timedelta(hours=1)


def _degraded(ctx: _Ctx) -> bool:
    """Condition Degraded from the reported step times (trainop.progress.judge_degraded);
    with spec.placement.replaceDegraded, restart the gang (at most once an hour): True."""
    st, spec = ctx.st, ctx.job_spec
    reported = st.new.get("progress")
    if not reported:
        return False
    verdict = progress.judge_degraded(
        reported, st.new.get("placement"), spec.progress.degraded_factor, spec.progress.warmup_steps
    )
    was = (find_condition(st.new["conditions"], progress.DEGRADED) or {}).get("status") == "True"
    if verdict.degraded:
        st.cond(progress.DEGRADED, True, verdict.reason, verdict.message)
        if not was:
            st.events.append(("Warning", progress.DEGRADED, verdict.message))
    elif was and verdict.reason == "AsExpected":
        st.cond(progress.DEGRADED, False, "AsExpected", "step time back within the expected")
    replaced = parse_time(reported.get("replacedAt"))
    if not (verdict.degraded and spec.placement.replace_degraded):
        return False
    if replaced is not None and ctx.now - replaced < REPLACE_DEGRADED_EVERY:
        return False
    ctx.delete_all()
    st.new["progress"] = {**reported, "replacedAt": iso(ctx.now)}
    st.enter(
        "Restarting",
        "Degraded",
        f"{verdict.message}; restarting the gang on a new placement (spec.placement."
        "replaceDegraded, at most once an hour; not counted against backoffLimit)",
        warning=True,
    )
    return True


def _moved(ctx: _Ctx) -> None:
    """A gang that was moving (status.migration, queueing.migration) runs again: the move is
    done; its measured cost (checkpoint request to Running again) prices its next move."""
    move = ctx.st.new.get("migration")
    if not isinstance(move, Mapping) or move.get("phase") != "Moving":
        return
    asked = parse_time(move.get("requestedAt"))
    nodes = sorted({str((p.get("spec") or {}).get("nodeName") or "") for p in ctx.live} - {""})
    readmitted = next(
        (
            parse_time(cd.get("lastTransitionTime"))
            for cd in ctx.st.new.get("conditions") or []
            if cd.get("type") == "Preempted" and cd.get("status") == "False"
        ),
        None,
    )
    again = readmitted is not None and asked is not None and readmitted >= asked
    if not again and set(nodes) == set(move.get("source") or []):
        return  # the gang that was asked to checkpoint still runs: the move is under way
    cost = max(0.0, (ctx.now - asked).total_seconds()) if asked is not None else None
    done = {**move, "phase": "Moved", "movedAt": iso(ctx.now)}
    if cost is not None:
        done["measuredCostSeconds"] = round(cost, 1)
    ctx.st.new["migration"] = done
    ctx.st.events.append(
        (
            "Normal",
            "Migrated",
            f"runs again on {', '.join(nodes)} after moving from "
            f"{', '.join(move.get('source') or [])}: est. gain "
            f"{float(move.get('estimatedGainSeconds') or 0):.0f} s, measured cost "
            f"{cost if cost is not None else float('nan'):.0f} s (estimated "
            f"{float(move.get('estimatedCostSeconds') or 0):.0f} s)",
        )
    )


# Taints that say a node is about to go (besides a cordon): cluster-autoscaler's scale-down
# (https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md) and
# Karpenter's disruption (https://karpenter.sh/docs/concepts/disruption/).
LEAVING_TAINTS = ("ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted")


def _leaving(ctx: _Ctx) -> list[str]:
    """Ready nodes under the gang that are cordoned or tainted to go: '<node> (<why>)'."""
    fleet, out = ctx.fleet(), []
    for name in sorted({str((p.get("spec") or {}).get("nodeName") or "") for p in ctx.live} - {""}):
        node = fleet.get(name)
        if node is None or node.not_ready_since is not None:
            continue  # gone or NotReady: _nodes_broken's to judge, no trainer can answer there
        taint = next((t for t in node.taints if t.key in LEAVING_TAINTS), None)
        if taint is not None:
            out.append(f"{name} (taint {taint.key})")
        elif (node.unschedulable_reason or "").startswith("cordoned"):
            out.append(f"{name} (cordoned)")
    return out


def _draining(ctx: _Ctx) -> Actions | None:
    """A node under the gang is being drained (cordoned, or tainted by an autoscaler): with
    spec.checkpoint, ask for a checkpoint (status.checkpointRequest, which the report
    endpoint passes on), then restart the gang elsewhere once a newer checkpoint is reported
    or at the deadline (not counted against backoffLimit)."""
    ckpt = ctx.job_spec.checkpoint
    leaving = _leaving(ctx) if ckpt is not None and ctx.config.progress_url else []
    if ckpt is None or not leaving:
        return None
    st = ctx.st
    request = st.new.get("checkpointRequest")
    if not request:
        request = progress.checkpoint_request(
            st.new.get("progress"), ckpt.grace_period_seconds, "NodeDrain", ctx.now
        )
        st.new["checkpointRequest"] = request
        st.events.append(
            (
                "Normal",
                "CheckpointRequested",
                f"node(s) {', '.join(leaving)} going away: checkpoint asked for; the gang "
                f"restarts elsewhere once it is reported, or in {ckpt.grace_period_seconds} s",
            )
        )
    done, note = progress.eviction_note(st.new.get("progress"), request, ctx.now)
    if not done:
        deadline = progress.parse_time(request.get("deadline")) or ctx.now
        return ctx.finish(requeue=max(1.0, (deadline - ctx.now).total_seconds()))
    ctx.delete_all()
    st.enter(
        "Restarting",
        "NodeDrain",
        f"node(s) {', '.join(leaving)} going away; {note}; restarting the whole gang elsewhere "
        "(not counted against backoffLimit)",
        warning=True,
    )
    return ctx.finish(requeue=1.0)


def _grace_left(ctx: _Ctx) -> float | None:
    """Seconds until a NotReady node under the gang has been so for node_lost_seconds."""
    fleet, grace, left = ctx.fleet(), ctx.config.node_lost_seconds, []
    for name in {str((p.get("spec") or {}).get("nodeName") or "") for p in ctx.live} - {""}:
        node = fleet.get(name)
        since = parse_time((node.not_ready_since or "").replace(".000000", "")) if node else None
        if since is not None:
            left.append(max(1.0, grace - (ctx.now - since).total_seconds()))
    return min(left) if left else None


def _image_stuck(ctx: _Ctx) -> Actions | None:
    pulled = _image_pull(ctx.live, ctx.st, ctx.config, ctx.now)
    if pulled is None:
        return None
    if pulled <= 0:  # never retried for ever: the image will not appear by itself
        ctx.delete_all()
        return ctx.finish()
    ctx.acts.requeue_after = min(pulled, ctx.acts.requeue_after or pulled)
    return None


def _broken_nodes(
    pods: Sequence[Mapping[str, Any]], snapshot: Snapshot, now: datetime, grace: float
) -> list[str]:
    """Why the nodes under a started gang can no longer carry it: the node was deleted, has
    not been Ready for `grace` seconds, or lost GPUs (allocatable fell below what its pods
    hold, e.g. a GPU fell off the bus). One phrase per node, sorted."""
    out = []
    for node_name in sorted(
        {str((p.get("spec") or {}).get("nodeName") or "") for p in pods} - {""}
    ):
        node = snapshot.get(node_name)
        if node is None:
            out.append(f"node {node_name} was deleted")
            continue
        since = parse_time((node.not_ready_since or "").replace(".000000", ""))
        if since is not None and (now - since).total_seconds() >= grace:
            out.append(f"node {node_name} has not been Ready since {node.not_ready_since}")
        elif (held := _gang_gpus_on(pods, node_name)) > node.gpus_allocatable:
            # The gang's own pods only: what other pods hold could be counted twice while
            # the watch lags, and a restart must never come from bookkeeping.
            out.append(
                f"node {node_name} lost GPUs: {node.gpus_allocatable} allocatable, "
                f"{held} held by this gang"
            )
    return out


def _judge_failure(
    st: _Status, failed: Sequence[Mapping[str, Any]], policy: RunPolicy, restarts: int
) -> None:
    """Restart the gang or fail the job for its failed pods, by classified reason
    (trainop.failures) and restartPolicy; status.lastFailure records the reason."""
    failure = strongest([classify_failed(p) for p in failed])
    st.new["lastFailure"] = failure.to_status()
    if failure.infrastructure and policy.restart_policy != "Never":
        msg = f"{failure.message}; restarting the whole gang (not counted against backoffLimit)"
        st.enter("Restarting", failure.reason, msg, warning=True)
        return
    code = failure.exit_code
    what = f"pod {failure.pod} failed" + (f" with exit code {code}" if code is not None else "")
    if failure.reason not in (EXIT_CODE, UNKNOWN):
        what += f" ({failure.message})"
    retryable = policy.restart_policy == "OnFailure" or (
        policy.restart_policy == "ExitCode" and failure.retryable
    )
    if not retryable:
        why = {
            "Never": "restartPolicy is Never",
            "ExitCode": "exit codes 1-127 are permanent under restartPolicy ExitCode"
            if failure.reason == EXIT_CODE
            else f"{failure.reason} failures are permanent under restartPolicy ExitCode",
        }.get(policy.restart_policy, "")
        _terminal(st, "Failed", "PodFailed", f"{what}; {why}")
        return
    if restarts >= policy.backoff_limit:
        msg = f"{what}; the gang restarted {restarts} times (backoffLimit {policy.backoff_limit})"
        _terminal(st, "Failed", "BackoffLimitExceeded", msg)
        return
    st.new["restartCount"] = restarts + 1
    st.new["lastRestartTime"] = iso(st.now)
    msg = f"{what}; restarting the whole gang (restart {restarts + 1} of {policy.backoff_limit})"
    st.enter("Restarting", "GangRestart", msg, warning=True)


def _image_pull(
    live: Sequence[Mapping[str, Any]], st: _Status, config: OperatorConfig, now: datetime
) -> float | None:
    """Seconds left before a gang stuck pulling its image fails (None: nothing stuck); at
    <= 0 the job has been moved to Failed (reason ImagePullFailed, the image named)."""
    stuck = [f for p in live if (f := image_pull_failure(p)) is not None]
    if not stuck:
        return None
    failure, permanent = min(stuck, key=lambda x: x[0].pod)
    since = parse_time(st.new.get("lastRestartTime")) or parse_time(st.new.get("startTime")) or now
    left = config.image_pull_grace_seconds - (now - since).total_seconds()
    if permanent or left <= 0:
        st.new["lastFailure"] = failure.to_status()
        grace = "" if permanent else f" for {config.image_pull_grace_seconds:.0f} s"
        _terminal(st, "Failed", IMAGE_PULL, f"{failure.message}; not retried{grace}")
        return 0.0
    return left


def _gang_gpus_on(pods: Sequence[Mapping[str, Any]], node_name: str) -> int:
    return sum(pod_request(p) for p in pods if (p.get("spec") or {}).get("nodeName") == node_name)


def _known_names(snapshot: Snapshot) -> set[str]:
    """Every node name and hostname label (kept by the snapshot: nodes, not their use)."""
    return {n.name for n in snapshot.nodes} | {
        n.labels.get(c.LABEL_HOSTNAME, "") for n in snapshot.nodes
    }


def _stranded(ctx: _Ctx, deleted: list[str]) -> dict[str, str]:
    """Pods being deleted (now, or before) that are bound to a node no longer in the fleet.
    Left to Kubernetes, they stay Terminating until kube-controller-manager's pod garbage
    collector removes pods of deleted nodes, after a quarantine of 40 s or more
    (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-garbage-collection),
    and a gang restarted elsewhere reuses their names, so it waited as long."""
    ending = set(deleted) | {p["metadata"]["name"] for p in ctx.deleting}
    bound = {
        p["metadata"]["name"]: str((p.get("spec") or {}).get("nodeName") or "")
        for p in [*ctx.live, *ctx.deleting]
        if p["metadata"]["name"] in ending
    }
    if not any(bound.values()):
        return {}
    fleet = ctx.fleet()
    return {name: node for name, node in bound.items() if node and fleet.get(node) is None}


def _lost_nodes(pods: Sequence[Mapping[str, Any]], snapshot: Snapshot) -> list[str]:
    """Pinned nodes of still-pending pods that no longer exist in the cluster."""
    lost: set[str] = set()
    known: set[str] = snapshot.memo(("static", "node-names"), lambda: _known_names(snapshot))
    for pod in pods:
        terms = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution", {}
        ).get("nodeSelectorTerms") or []
        for term in terms[:1]:
            for expr in term.get("matchExpressions") or []:
                if expr.get("key") == c.LABEL_HOSTNAME and expr.get("operator") == "In":
                    lost.update(v for v in expr.get("values") or [] if v not in known)
    return sorted(lost)


def _terminal(st: _Status, phase: str, reason: str, message: str) -> None:
    for other in _EXCLUSIVE:
        st.cond(other, False, reason)
    st.new["completionTime"] = st.new.get("completionTime") or iso(st.now)
    st.enter(phase, reason, message, warning=phase == "Failed")


def backoff_seconds(config: OperatorConfig, restarts: int) -> float:
    if restarts <= 0:
        return 0.0
    return float(
        min(
            config.restart_backoff_seconds * 2 ** (restarts - 1), config.restart_backoff_max_seconds
        )
    )


def _start_gang(ctx: _Ctx) -> Actions:
    """Carry out the admission verdict: wait with its reason, or create the planned gang."""
    st, admission = ctx.st, ctx.admission
    if admission.queue:  # the queue that admitted the job, or that it waits in
        st.new["queue"] = admission.queue
    if not admission.admitted and admission.reason == WaitReason.POLICY:
        # Tenant policy refuses the job as written: never silently altered, never queued.
        st.enter("Invalid", "PolicyViolation", admission.message, warning=True)
        return ctx.finish()
    _inadmissible_condition(st, admission)
    if not admission.admitted:
        # A broken queue is the tenant's to fix, a job that can never be admitted the
        # user's: the wait is loud (a Warning Event).
        loud = admission.reason in (QUEUE_INVALID, INADMISSIBLE)
        st.wait(admission.reason, admission.message, admission.position, warning=loud)
        return ctx.finish(requeue=5.0)
    try:
        result: Plan | Wait = admission.plan or plan_job(
            ctx.body, ctx.snapshot(), ctx.config, gang_generation=ctx.restarts
        )
    except InvalidJob as exc:
        return ctx.invalid(exc)
    if isinstance(result, Wait):
        st.wait(result.reason, result.message, warning=result.reason == WaitReason.INCOMPATIBLE)
        return ctx.finish(requeue=5.0)
    return _create_gang(ctx, result)


def _inadmissible_condition(st: _Status, admission: Admission) -> None:
    """Condition Inadmissible: True with the numbers while the job can never be admitted
    as written (queueing.inadmissible), False once it can (the queue, the fleet or the job
    changed)."""
    if admission.reason == INADMISSIBLE and not admission.admitted:
        st.cond(INADMISSIBLE, True, INADMISSIBLE, admission.message)
    elif any(
        cd.get("type") == INADMISSIBLE and cd.get("status") == "True" for cd in st.new["conditions"]
    ):
        st.cond(INADMISSIBLE, False, "Admissible", "the job can be admitted as written now")


def _create_gang(ctx: _Ctx, result: Plan) -> Actions:
    if result.gang:  # gangScheduling kubernetes: kube-scheduler places it (trainop.workload)
        return _hand_over_gang(ctx, result)
    st = ctx.st
    ctx.acts.create.extend(_wired(ctx, o) for o in result.objects)
    ctx.acts.needs_ssh_secret = result.secret_name
    ctx.acts.release_created = True
    for pod in result.pods:
        _keep_other_gates(ctx.acts, pod)
    if any(
        cd.get("type") == "Preempted" and cd.get("status") == "True" for cd in st.new["conditions"]
    ):
        st.cond("Preempted", False, "Readmitted", "admitted again after a preemption")
    st.new.pop("checkpointRequest", None)  # answered or expired with the gang it was for
    st.new["image"] = result.image.image
    if result.compatibility:
        st.new["compatibility"] = result.compatibility
    st.new["imageTried"] = list(result.image_tried)
    st.new["placement"] = result.placement_status()
    st.new["startTime"] = st.new.get("startTime") or iso(ctx.now)
    placement = result.placement_status()
    # Events only for news: a job admitted at its first decision gets no Event (the phase,
    # the Admitted condition and status.placement say it); one that waited, restarted or
    # was preempted first does (docs/operator.md#events).
    st.enter(
        "Admitted",
        "GangPlaced",
        f"{len(result.pods)} pods placed in {placement['level']} {placement['domain']} on "
        f"{', '.join(placement['nodes'])}; image {result.image.image}",
        event=bool(st.old.get("phase")),
    )
    return ctx.finish(requeue=1.0)


def _wired(ctx: _Ctx, obj: dict[str, Any]) -> dict[str, Any]:
    """A gang pod with the progress channel and TRAINOP_RESUME_FROM (trainop.progress)."""
    return wire_object(obj, ctx.job_spec, ctx.st.new, ctx.config)


def wire_object(
    obj: dict[str, Any],
    spec: TrainingJobSpec,
    status: Mapping[str, Any],
    config: OperatorConfig,
) -> dict[str, Any]:
    """`obj` as the operator creates it: a gang pod with the progress channel (config's
    URL, token, CA, checkpoint signal) and TRAINOP_RESUME_FROM from `status`; anything else
    as it is. `trainop render` wires its output with this too, so it prints what the
    operator creates."""
    resume = progress.resume_env(status, checkpoint_location(spec))
    url = config.progress_url
    if obj.get("kind") != "Pod" or not (url or resume):
        return obj
    ckpt = spec.checkpoint
    return progress.wire_pod(
        obj,
        url,
        ckpt.to_api() if ckpt is not None else None,
        resume,
        config.progress_interval,
        kubeflow=config.kubeflow_trainer_status,
        ca=config.progress_ca,
    )


def _hand_over_gang(ctx: _Ctx, result: Plan) -> Actions:
    """Create the gang with a PodGroup of its own for kube-scheduler to hold, place and
    bind whole; status names the group (which nodes is kube-scheduler's choice)."""
    st, group = ctx.st, gang_name(ctx.name, ctx.now.timestamp())
    # The progress channel and TRAINOP_RESUME_FROM as in the default mode (_wired).
    ctx.acts.create.extend(_wired(ctx, o) for o in name_gang(result.objects, group))
    ctx.acts.needs_ssh_secret = result.secret_name
    st.new.pop("checkpointRequest", None)
    st.new["image"] = result.image.image
    if result.compatibility:
        st.new["compatibility"] = result.compatibility
    st.new["imageTried"] = list(result.image_tried)
    st.new["startTime"] = st.new.get("startTime") or iso(ctx.now)
    st.enter(
        "Admitted",
        "GangHandedOver",
        f"{len(result.pods)} pods created in PodGroup {group}; kube-scheduler places and "
        f"binds the gang whole; image {result.image.image}",
    )
    return ctx.finish(requeue=2.0)


def rejected_status(
    body: Mapping[str, Any], message: str, now: datetime
) -> tuple[dict[str, Any], list[Event]]:
    """Status of a job whose gang the API server refused for good (e.g. 422 Invalid):
    Invalid with reason Rejected, one Warning Event; no pods (the shell deleted them)."""
    st = _Status(body, now)
    st.enter(
        "Invalid",
        "Rejected",
        f"{message}; fix the spec: the job is tried again when its spec changes",
        warning=True,
    )
    return st.new, st.events


# The condition that says whether spec.runtimeRef merged (trainop.runtimes): False with the
# problem's reason (RuntimeNotFound, RuntimeInvalid, ...) while the job waits for it.
RUNTIME_CONDITION = "RuntimeResolved"


def runtime_wait_status(
    body: Mapping[str, Any], reason: str, message: str, now: datetime, live: bool = False
) -> tuple[dict[str, Any], list[Event]]:
    """Status of a job whose spec.runtimeRef cannot be merged (runtimes.RuntimeProblem):
    condition RuntimeResolved False with the problem's reason and message (the runtime and
    the fix), and Queued with pendingReason Runtime; not Invalid, since the fix may be the
    runtime's. One Warning Event, with the problem's reason, when the problem is new. With
    `live` (a running gang whose merge is not known to this process) only the condition
    and the Event: the gang runs on, nothing is created or deleted."""
    st = _Status(body, now)
    news = not any(
        cd.get("type") == RUNTIME_CONDITION
        and cd.get("status") == "False"
        and cd.get("reason") == reason
        and cd.get("message") == message
        for cd in st.old.get("conditions") or []
    )
    st.cond(RUNTIME_CONDITION, False, reason, message)
    if not live:
        st.wait(WaitReason.RUNTIME.value, message)  # a plain str, as status holds it
    st.events.clear()
    if news:
        st.events.append(("Warning", reason, message))
    return st.new, st.events


def preempted_status(
    body: Mapping[str, Any], reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """Status of a gang the queue evicts: Preempted, back to Queued, restartCount untouched."""
    st = _Status(body, now)
    st.cond("Preempted", True, reason, message)
    st.wait("Preempted", message)
    st.events.clear()  # the shell posts one Preempted event itself
    return st.new
