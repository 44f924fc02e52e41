"""One admission pass over the cluster's TrainingJobs, TrainingQueues and pods (pure).

The operator's admission loop (`handlers.scheduler`) calls `decide` with what its
`ShellState` holds, handing back the intakes it kept from earlier cycles for jobs that did not
change; `decide` turns the other job bodies and their pods into `QueuedJob`s (`intake`: queue
resolved, tenant policy checked, GPUs held by live pods), runs `queueing.admit` with the planner
as placer, and returns the decisions, each queue's usage for its status and every intake
(`PassResult`). `admission_pass` does the same from raw queue objects, for tests and tools.
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from itertools import repeat
from typing import Any, cast

from trainop.api.trainingjob import TERMINAL_PHASES, TrainingJobSpec
from trainop.inventory import Snapshot
from trainop.inventory.pods import is_terminated, pod_binding, pod_request
from trainop.planner import InvalidJob, OperatorConfig
from trainop.queueing.admission import admit
from trainop.queueing.hierarchy import build_tree, roll_up, tree_errors
from trainop.queueing.inadmissible import fleet_shortfall, quota_shortfall
from trainop.queueing.migration import Move, Mover, plan_moves
from trainop.queueing.model import (
    INADMISSIBLE,
    NOFIT,
    POLICY,
    QUEUE_INVALID,
    TOPOLOGY,
    Action,
    Decisions,
    QueueConfigError,
    QueuedJob,
    QueueState,
    broken_queue,
    key_of,
    queue_invalid_message,
)
from trainop.queueing.planning import PlannerPlacer, job_policy
from trainop.queueing.resolve import QueueError, resolve_queue
from trainop.queueing.tail import TailMemo
from trainop.validation import check_priority_class, checked_spec

_OUT_OF_LINE = TERMINAL_PHASES
log = logging.getLogger("trainop.migration")


@dataclass(frozen=True)
class PassResult:
    decisions: Decisions
    jobs: Mapping[str, QueuedJob] = field(default_factory=dict)
    broken: Mapping[str, QueueConfigError] = field(default_factory=dict)  # queue -> error
    # Every body's intake this pass (None: out of line), for the caller to keep and hand
    # back as `known` while the job does not change.
    intakes: Mapping[str, QueuedJob | None] = field(default_factory=dict)
    # Running gangs to move to a better placement now (queueing.migration; config migration).
    moves: tuple[Move, ...] = ()


def load_queues(
    queue_objects: Sequence[Mapping[str, Any]],
) -> tuple[list[QueueState], dict[str, QueueConfigError]]:
    """Every TrainingQueue as a QueueState; a broken one still serves its namespaces
    (`model.broken_queue`) so its jobs wait on it, and its error is returned by name."""
    queues: list[QueueState] = []
    broken: dict[str, QueueConfigError] = {}
    for obj in queue_objects:
        try:
            queues.append(QueueState.from_resource(obj))
        except QueueConfigError as exc:
            broken[exc.queue] = exc
            queues.append(broken_queue(obj, exc))
    in_trees = tree_errors(queues)  # cycles, missing parents, children over their parent
    broken.update(in_trees)
    return [replace(q, error=in_trees[q.name]) if q.name in in_trees else q for q in queues], broken


def in_line(body: Mapping[str, Any], priorities: Mapping[str, int], config: OperatorConfig) -> bool:
    """Whether a job without pods is the admission cycle's to decide: valid, not suspended,
    its PriorityClass present. Any other job is the reconcile's alone (Invalid, Suspended);
    the operator uses this to know which new jobs wait on a verdict."""
    try:
        spec = checked_spec(body, config)
    except InvalidJob:
        return False
    return not spec.run_policy.suspend and not _priority_missing(spec, priorities)


def rejected_for_good(body: Mapping[str, Any]) -> bool:
    """Whether the API server refused this generation's gang (status Invalid, reason
    Rejected, for the current generation): it holds nothing and is not in line until its
    spec changes (otherwise every cycle would admit it again and hold its GPUs)."""
    status = body.get("status") or {}
    generation = (body.get("metadata") or {}).get("generation")
    if status.get("phase") != "Invalid" or status.get("observedGeneration") != generation:
        return False
    return any(
        cd.get("type") == "Invalid"
        and cd.get("status") == "True"
        and cd.get("reason") == "Rejected"
        for cd in status.get("conditions") or []
    )


def _priority_missing(spec: TrainingJobSpec, priorities: Mapping[str, int]) -> bool:
    try:
        check_priority_class(spec, priorities.keys())
    except InvalidJob:
        return True
    return False


def _blocked_by_queue(queue: QueueState | None, inputs: Inputs) -> tuple[str, str] | None:
    if queue is not None and queue.error is not None:
        return QUEUE_INVALID, queue_invalid_message(queue)
    if queue is not None and queue.name in inputs.parents:
        kids = ", ".join(inputs.parents[queue.name])
        return POLICY, (
            f"spec.queue: TrainingQueue {queue.name} is a parent queue (of {kids}): jobs go "
            "to leaf queues; name one of its leaves in spec.queue"
        )
    return None


def _checkpoint_time(status: Mapping[str, Any]) -> str | None:
    return ((status.get("progress") or {}).get("lastCheckpoint") or {}).get("time")


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    return _parsed_ts(text)


@functools.lru_cache(maxsize=16384)
def _parsed_ts(text: str) -> float | None:
    # Kept (pure): a job's timestamps are read again at every intake of it, and strptime
    # was a tenth of a running gang's intake.
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").timestamp()
    except ValueError:
        return None


def job_key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return key_of(meta.get("namespace", "default"), meta.get("name", ""))


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


def _going_away(pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any of the job's pods is being deleted."""
    return any((p.get("metadata") or {}).get("deletionTimestamp") for p in pods)


def _preempted_at(body: Mapping[str, Any]) -> float | None:
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Preempted" and cond.get("status") == "True":
            return _ts(cond.get("lastTransitionTime"))
    return None


@dataclass(frozen=True)
class Inputs:
    """What one admission cycle reads besides the jobs: queues, namespaces, priorities."""

    queues: tuple[QueueState, ...]  # broken ones too: they still serve their namespaces
    namespace_labels: Mapping[str, Mapping[str, str]]
    priorities: Mapping[str, int]
    broken: Mapping[str, QueueConfigError] = field(default_factory=dict)
    # PriorityClass -> its guaranteed minimum run (trainop.dev/min-run-seconds; only classes
    # that set one; queueing.preemption.class_min_run reads the annotation).
    min_runs: Mapping[str, float] = field(default_factory=dict)

    @cached_property
    def parents(self) -> Mapping[str, tuple[str, ...]]:
        """Queues some usable queue names as its parent, with those children: they take
        no jobs themselves (queueing.hierarchy)."""
        return build_tree(q for q in self.queues if q.error is None).children


def cycle_inputs(
    queue_objects: Sequence[Mapping[str, Any]],
    namespace_labels: Mapping[str, Mapping[str, str]],
    priorities: Mapping[str, int],
    min_runs: Mapping[str, float] | None = None,
) -> Inputs:
    queues, broken = load_queues(queue_objects)
    return Inputs(tuple(queues), namespace_labels, priorities, broken, min_runs or {})


def intake(
    body: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    inputs: Inputs,
    snapshot: Snapshot,
    config: OperatorConfig,
    now: datetime,
    assumed: tuple[tuple[str, int], ...] = (),
) -> QueuedJob | None:
    """One TrainingJob as a queued workload (None: not in line: finished, deleting,
    suspended or invalid, which the reconcile reports). `assumed`: GPUs per node the
    admission cycle gave the job whose pods the watch has not shown yet; such a job
    counts as admitted, so it is never admitted twice."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp") or (body.get("status") or {}).get("phase") in _OUT_OF_LINE:
        return None
    if rejected_for_good(body):
        return None
    try:
        spec = checked_spec(body, config)  # with config: no catalog release fits -> Invalid
    except InvalidJob:
        return None  # reconcile marks it Invalid
    if spec.run_policy.suspend:
        return None
    ns = meta.get("namespace", "default")
    held, product = _holding(pods, snapshot)
    if not held and assumed:
        held, product = assumed, _product_of(assumed, snapshot)
    if not held and _going_away(pods):
        # Its last gang's pods are still being deleted (a preemption or a move): they have
        # stopped (hold no GPUs) but their names, which the next gang reuses, are taken
        # until the kubelet lets them go (reconcile waits for that too). Out of line until
        # then; the last one's removal wakes the loop (ShellState.remove_pod).
        return None
    if not held and _priority_missing(spec, inputs.priorities):
        return None  # reconcile marks it Invalid; a running gang keeps its charge
    queue, blocked = _queue_and_block(spec, ns, bool(held), inputs, snapshot, config)
    blocked_reason, blocked_message = blocked or (None, "")
    status = body.get("status") or {}
    elastic = _elastic_fields(spec, meta.get("name", ""), pods, snapshot, held, assumed)
    return QueuedJob(
        key=job_key(body),
        queue=queue.name if queue is not None else (spec.queue or ""),
        gpus=elastic.pop("gpus", spec.total_gpus),
        created=_ts(meta.get("creationTimestamp")) or now.timestamp(),
        priority=inputs.priorities.get(spec.priority_class_name or "", 0),
        priority_class=spec.priority_class_name or "",
        class_min_run_seconds=inputs.min_runs.get(spec.priority_class_name or "", 0.0),
        products=tuple(spec.placement.gpu_products),
        admitted=bool(held),
        product=product if held else None,
        nodes=held,
        started=_ts(status.get("startTime")) if held else None,
        checkpointed=_ts(_checkpoint_time(status)) if held else None,
        expected_end=_expected_end(spec, status) if held else None,
        expected_run=None if held else _expected_run(spec),
        moving_to=_moving_to(status),
        queued_since=_preempted_at(body),
        blocked_reason=blocked_reason,
        blocked_message=blocked_message,
        **elastic,
    )


def _elastic_fields(
    spec: TrainingJobSpec,
    name: str,
    pods: Sequence[Mapping[str, Any]],
    snapshot: Snapshot,
    held: tuple[tuple[str, int], ...],
    assumed: tuple[tuple[str, int], ...],
) -> dict[str, Any]:
    """QueuedJob's elastic fields (queueing.elastic); {} for a fixed-size job. A running
    job's size is its live Workers, its GPUs what they hold; it is `resizing` while a Worker
    is being deleted (a shrink under way) or pods assumed for a growth are not all seen."""
    el = spec.elastic
    if el is None:
        return {}
    per = spec.replica_specs["Worker"].gpus
    out: dict[str, Any] = {"elastic": (el.min_replicas, el.max_replicas), "replica_gpus": per}
    if not held:
        return out
    prefix = f"{name}-worker-"
    workers: dict[int, str] = {}
    deleting = False
    for pod in pods:
        meta = pod.get("metadata") or {}
        suffix = str(meta.get("name", "")).removeprefix(prefix)
        if is_terminated(pod) or not suffix.isdigit():
            continue
        if meta.get("deletionTimestamp"):
            deleting = True
            continue
        binding = pod_binding(pod)
        node = snapshot.get(binding[1]) if binding else None
        workers[int(suffix)] = node.name if node is not None else (binding[1] if binding else "")
    ordered = tuple((workers[i], per) for i in sorted(workers))
    size = len(ordered)
    if not size:  # admitted, pods not seen yet: the size from the GPUs assumed for it
        size = sum(g for _, g in held) // per if per else el.max_replicas
    out.update(
        size=size,
        workers=ordered,
        gpus=spec.worker_gpus_at(size),
        resizing=deleting or bool(assumed) or len(ordered) != size,
    )
    return out


def _queue_and_block(
    spec: TrainingJobSpec,
    ns: str,
    held: bool,
    inputs: Inputs,
    snapshot: Snapshot,
    config: OperatorConfig,
) -> tuple[QueueState | None, tuple[str, str] | None]:
    """The job's queue, and (reason, message) when it waits out of line before admission:
    no queue for it (Policy), a broken queue (QueueInvalid), a tenant-policy violation
    (Policy), or a need that can never be given (Inadmissible). A job that holds GPUs is
    judged by its queue alone: it runs."""
    try:
        queue = resolve_queue(ns, spec.queue, inputs.queues, inputs.namespace_labels.get(ns))
    except QueueError as exc:
        return None, (POLICY, str(exc))
    queue_block = _blocked_by_queue(queue, inputs)
    if queue_block is not None:  # fail closed: its jobs wait on the broken queue
        return queue, queue_block
    if held:
        return queue, None
    try:
        violations = job_policy(spec, queue, snapshot, config)
    except InvalidJob:
        violations = ()  # no image at all: the planner reports it
    if violations:
        return queue, (POLICY, "; ".join(str(v) for v in violations))
    short = _shortfall(spec, queue, inputs, snapshot, config)
    return queue, (INADMISSIBLE, short) if short is not None else None


def _shortfall(
    spec: TrainingJobSpec,
    queue: QueueState | None,
    inputs: Inputs,
    snapshot: Snapshot,
    config: OperatorConfig,
) -> str | None:
    """Why the job can never be admitted (queueing.inadmissible), or None. Not judged for
    GPU sharing or DRA, whose units node allocatable does not count alike."""
    if spec.gpu_sharing is not None or config.dra.enabled:
        return None
    products = tuple(spec.placement.gpu_products)
    largest = max((r.gpus for r in spec.replica_specs.values()), default=0)
    placement = spec.placement
    gpus = least_gpus(spec)
    short = fleet_shortfall(gpus, largest, products, placement.topology, placement.mode, snapshot)
    if short is None and queue is not None:
        short = quota_shortfall(gpus, products, queue, inputs.queues)
    return short


def least_gpus(spec: TrainingJobSpec) -> int:
    """The fewest GPUs the job can run with: an elastic job's at minReplicas (it is
    admissible when that fits), any other job's whole gang."""
    el = spec.elastic
    return spec.total_gpus if el is None else spec.worker_gpus_at(el.min_replicas)


def _expected_end(spec: TrainingJobSpec, status: Mapping[str, Any]) -> float | None:
    """When a running gang will be gone at the latest: start + activeDeadlineSeconds (the
    only end the operator knows; topology-aware waiting treats None as unknown)."""
    started = _ts(status.get("startTime"))
    deadline = spec.run_policy.active_deadline_seconds
    return started + deadline if started is not None and deadline else None


def _expected_run(spec: TrainingJobSpec) -> float | None:
    """How long a pending gang will run once started, as far as the operator knows: its
    activeDeadlineSeconds (migration's waiting-gang gain; None: unknown, worth nothing)."""
    deadline = spec.run_policy.active_deadline_seconds
    return float(deadline) if deadline else None


def _moving_to(status: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The destination a move under way holds (status.migration, phase Moving)."""
    move = status.get("migration")
    if not isinstance(move, Mapping) or move.get("phase") != "Moving":
        return ()
    reserved = move.get("reserved")
    if not isinstance(reserved, Mapping):
        return ()
    return tuple(
        sorted((str(n), int(g)) for n, g in reserved.items() if isinstance(g, int) and g > 0)
    )


def mover_of(body: Mapping[str, Any], job: QueuedJob, config: OperatorConfig) -> Mover:
    """A running gang as queueing.migration sees it, from its spec and status."""
    spec = checked_spec(body, config)
    status = body.get("status") or {}
    placement = status.get("placement") or {}
    allreduce = placement.get("estimatedAllreduceSeconds")
    reported = status.get("progress") or {}
    total = spec.progress.total_steps if spec.progress is not None else None
    step = reported.get("step")
    steps_left = (
        max(0, total - step) if total is not None and isinstance(step, int) and reported else None
    )
    found = status.get("migration")
    move: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    cost = move.get("measuredCostSeconds")
    return Mover(
        job=job,
        checkpoints=spec.checkpoint is not None,
        migratable=spec.placement.migratable,
        allreduce=float(allreduce) if isinstance(allreduce, int | float) else None,
        steps_left=steps_left,
        measured_cost=float(cost) if isinstance(cost, int | float) else None,
        last_moved=_ts(move.get("requestedAt")),
        moving=move.get("phase") == "Moving",
    )


def _product_of(held: tuple[tuple[str, int], ...], snapshot: Snapshot) -> str | None:
    for name, _ in held:
        node = snapshot.get(name)
        if node is not None and node.gpu.product:
            return node.gpu.product
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
    assumed: Mapping[str, tuple[tuple[str, int], ...]] | None = None,
) -> PassResult:
    """One admission cycle over every job (see `intake`) with the planner as placer."""
    inputs = cycle_inputs(queue_objects, namespace_labels, priorities)
    return decide(now, bodies, pods_by_job, inputs, snapshot, config, assumed or {})


def decide(
    now: datetime,
    bodies: Sequence[Mapping[str, Any]],
    pods_by_job: Mapping[str, Sequence[Mapping[str, Any]]],
    inputs: Inputs,
    snapshot: Snapshot,
    config: OperatorConfig,
    assumed: Mapping[str, tuple[tuple[str, int], ...]],
    known: Mapping[str, QueuedJob | None] | None = None,
    tails: TailMemo | None = None,
    keys: Sequence[str] | None = None,
    by_key: Mapping[str, Mapping[str, Any]] | None = None,
) -> PassResult:
    """One admission cycle over `bodies`. `known`: intakes the caller kept from an earlier
    pass for jobs that did not change since (their pods and assumptions need not be given).
    `tails`: the caller's memo of waiting tails (queueing.tail), kept across its passes; it
    is valid for one config (the placer's answers depend on it) and for the QueuedJobs of
    `known`, handed back as the same objects. `keys`: each body's job key, in order, when
    the caller has them (else read from the bodies). `by_key`: the same bodies by key, in
    the same order, when the caller keeps them so (then `bodies` and `keys` are not read)."""
    known = known or {}
    if by_key is None:
        names = list(keys) if keys is not None else [job_key(b) for b in bodies]
        if len(names) != len(bodies):
            raise ValueError(f"{len(names)} keys for {len(bodies)} bodies")
        by_key = dict(zip(names, bodies, strict=True))
        if len(by_key) != len(names):
            raise ValueError("two jobs share a key")
    else:
        names = list(by_key)
    # Every body's intake: the kept ones as handed back (C-level, no loop over the jobs
    # that did not change), then the others, made in place so the order stays the bodies'.
    intakes: dict[str, QueuedJob | None] = dict(zip(names, map(known.get, names), strict=True))
    # (Sorted: the scheduler's keys are, and QueuedJobs made in the order later passes walk
    # them lie together in memory; made in set order, those walks took 1.8x as long.)
    for key in sorted(by_key.keys() - known.keys()):
        pods = pods_by_job.get(key, ())
        body = by_key[key]
        intakes[key] = intake(body, pods, inputs, snapshot, config, now, assumed.get(key, ()))
    if any(map(operator.is_, intakes.values(), repeat(None))):  # (C-level: usually none)
        in_line = {k: j for k, j in intakes.items() if j is not None}
    else:
        in_line = cast(dict[str, QueuedJob], intakes)
    jobs = list(in_line.values())
    usable = [q for q in inputs.queues if q.error is None]  # a broken queue admits nobody
    placer = PlannerPlacer(by_key, config, {q.name: q for q in usable})  # queue policy modes
    decisions = admit(
        now.timestamp(),
        usable,
        jobs,
        snapshot,
        placer,
        topology_wait_seconds=config.topology_wait_seconds,
        tails=tails.valid_for(config) if tails is not None else None,
        keys=list(in_line),
    )
    moves = _moves(now, decisions, jobs, by_key, usable, placer, config)
    tree = build_tree(usable)
    if tree.children:  # a parent's status shows its whole subtree
        decisions = Decisions(decisions.jobs, roll_up(decisions.usage, tree), decisions.snapshot)
    return PassResult(decisions, in_line, inputs.broken, intakes, moves)


def _moves(
    now: datetime,
    decisions: Decisions,
    jobs: Sequence[QueuedJob],
    bodies: Mapping[str, Mapping[str, Any]],
    queues: Sequence[QueueState],
    placer: PlannerPlacer,
    config: OperatorConfig,
) -> tuple[Move, ...]:
    """The moves to start after the pass (queueing.migration), when migration is on."""
    if not config.migration.enabled or decisions.snapshot is None:
        return ()
    movers, waiting = [], []
    for job in jobs:
        d = decisions.get(job.key)
        if d is None:
            continue
        if d.action == Action.KEEP and job.admitted:
            movers.append(mover_of(bodies[job.key], job, config))
        elif d.action == Action.WAIT and d.reason in (NOFIT, TOPOLOGY):
            waiting.append(job)
    if not movers:
        return ()
    plan = plan_moves(
        now.timestamp(),
        movers,
        decisions.snapshot,
        placer,
        {q.name: q for q in queues},
        config.migration,
        waiting,
    )
    for refusal in plan.refusals.values():
        log.debug("migration: %s stays (%s): %s", refusal.key, refusal.rule, refusal.message)
    return plan.moves
