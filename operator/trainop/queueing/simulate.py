"""Discrete-event simulation of the admission core over jobs with submit times and durations.

Neighbours: `trainop simulate` (cli/simulate.py), unit tests and the benchmark call
`simulate(...)`. It runs the real code in-process: queue resolution, tenant policy, `admit`
and the planner (PlannerPlacer), over a snapshot built from the Node objects.

Model. Each TrainingJob carries annotations trainop.dev/sim-submit-seconds (default 0) and
trainop.dev/sim-duration-seconds (required). Events happen at submit and finish times; at
each event time finished jobs release their GPUs first, then submitted jobs join their
queues, then admission passes run until one changes nothing (preemptors are admitted in the
pass that evicts their victims, as if the victims' pods vanished at once). An admitted job
starts `startup_seconds` later and finishes `duration` after it started. A preempted job
goes back to its queue (its place in line keeps its creation time), and when admitted again
runs its full duration again. Jobs the planner refuses (InvalidJob) or the queue refuses
(Policy) never run. Everything is deterministic: ties break on the job key.

Elastic jobs (spec.elastic) do work, not time: the duration annotation is the run at
maxReplicas, and a job at n Workers progresses n/max as fast. It is admitted at the size
admission picks; a Grow adds Workers, a Shrink removes the highest ones (their GPUs free at
once), and each resize costs `startup_seconds` again (torchrun restarts the workers, which
resume from their checkpoint). JobResult.sizes is the (time, Workers) timeline.

Running jobs tell admission their expected end (for topology-aware waiting, the bound being
OperatorConfig.topology_wait_seconds unless the queue sets one). With `comm_share` c > 0 a
job's duration is its duration at its ideal placement: a placement whose estimated allreduce
is r times the ideal (Fit.allreduce / Fit.ideal) runs (1 - c + c * r) times as long. `placer`
replaces the planner-backed placer (the benchmark's baselines plug in here). Queue trees
(spec.parent) work as in the operator; the usage of a parent is its subtree's.

Migration (OperatorConfig.migration enabled; queueing.migration): once the passes at an
instant settle, `plan_moves` looks at every running fixed-size gang with spec.checkpoint, on
the snapshot the last pass left. A gang's steps left are its ideal work left x comm_share /
its ideal allreduce (a step spends comm_share of its ideal time in one allreduce), so the
gain is the time the cost model says the move saves. A move takes its destination at once
and frees its source at once; the gang makes no progress for `move_seconds` (its checkpoint
and restart: the move's cost, also what the rule is told it measured), then runs on at the
new placement's speed. Its run ends with preempt_reason Migration and a new run begins.
Passes then run again (the freed source may admit someone) and moves again, until both
settle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from trainop.api import constants as c
from trainop.api.trainingjob import TrainingJobSpec
from trainop.inventory import Snapshot, build_snapshot
from trainop.planner import InvalidJob, OperatorConfig
from trainop.queueing.admission import admit
from trainop.queueing.cluster import Inputs, intake
from trainop.queueing.hierarchy import build_tree, roll_up, tree_errors
from trainop.queueing.migration import Move, Mover, plan_moves
from trainop.queueing.model import (
    MIGRATION,
    NOFIT,
    POLICY,
    TOPOLOGY,
    Action,
    Decisions,
    Fit,
    Placer,
    QueueConfigError,
    QueuedJob,
    QueueState,
    QueueUsage,
    key_of,
)
from trainop.queueing.planning import PlannerPlacer
from trainop.queueing.preemption import class_min_run
from trainop.validation import checked_spec

_DIGITS = re.compile(r"\d+(\.\d+)?")
INVALID = "Invalid"  # sim-only wait reason: the planner refuses the job (see InvalidJob)
MAX_PASSES = 1000  # admission passes at one instant; more means two decisions undo each other


PlacerFactory = Callable[[Mapping[str, Mapping[str, Any]], OperatorConfig], Placer]


class SimInputError(ValueError):
    """A simulation input is unusable; the message names the object and field."""


@dataclass(frozen=True)
class WaitNote:
    """The job started waiting for `reason` at `time` (recorded when the reason changes)."""

    time: float
    reason: str
    message: str


@dataclass(frozen=True)
class Run:
    """One admission of a job: preempted runs end early with the preemptor's key."""

    admitted: float
    started: float
    ended: float | None
    nodes: tuple[str, ...]
    preempted_by: str | None = None
    preempt_reason: str | None = None
    gpus_by_node: tuple[tuple[str, int], ...] = ()
    allreduce_seconds: float | None = None  # the cost model's 1 GiB estimate of the placement
    ideal_allreduce_seconds: float | None = None  # ... and of the gang alone on an empty fleet
    moved_for: str | None = None  # ended by a move that made room for this gang (consolidation)


@dataclass(frozen=True)
class SimEvent:
    time: float
    kind: str  # submit | admit | start | preempt | migrate | finish
    job: str
    detail: str = ""


@dataclass(frozen=True)
class JobResult:
    key: str
    queue: str
    gpus: int
    priority: int
    submitted: float
    duration: float
    state: str  # Finished | Running | Pending | Invalid | Refused
    admitted: float | None  # admission of the last run
    started: float | None  # start of the last run
    finished: float | None
    nodes: tuple[str, ...]  # of the last run
    preemptions: int
    runs: tuple[Run, ...]
    waits: tuple[WaitNote, ...]
    sizes: tuple[tuple[float, int], ...] = ()  # elastic: (time, Workers) at each change

    @property
    def first_admitted(self) -> float | None:
        return self.runs[0].admitted if self.runs else None

    @property
    def wait_reasons(self) -> tuple[str, ...]:
        """Distinct reasons it waited for, in order of first appearance."""
        return tuple(dict.fromkeys(w.reason for w in self.waits))


@dataclass(frozen=True)
class SimResult:
    jobs: tuple[JobResult, ...]
    events: tuple[SimEvent, ...]
    usage: tuple[tuple[float, Mapping[str, QueueUsage]], ...]  # after each event time
    end: float

    def job(self, key: str) -> JobResult:
        for j in self.jobs:
            if j.key == key or j.key.split("/", 1)[-1] == key:
                return j
        raise KeyError(key)

    def peak_usage(self) -> dict[str, dict[str, tuple[int, int]]]:
        """queue -> group -> (most GPUs used, most borrowed) at any time."""
        out: dict[str, dict[str, tuple[int, int]]] = {}
        for _, usage in self.usage:
            for name, qu in usage.items():
                groups = out.setdefault(name, {})
                for g in qu.groups:
                    used, borrowed = groups.get(g.name, (0, 0))
                    groups[g.name] = (max(used, g.used), max(borrowed, g.borrowed))
        return out


@dataclass
class _Job:
    key: str
    body: Mapping[str, Any]
    submit: float
    duration: float
    queue: str = ""
    gpus: int = 0
    priority: int = 0
    products: tuple[str, ...] = ()
    blocked_reason: str | None = None
    blocked_message: str = ""
    state: str = "Future"  # Future | Pending | Running | Finished | Invalid
    queued_since: float = 0.0
    start_at: float = 0.0
    end_at: float = 0.0
    holding: tuple[tuple[str, int], ...] = ()
    product: str | None = None
    nodes: tuple[str, ...] = ()
    preemptions: int = 0
    runs: list[Run] = field(default_factory=list)
    waits: list[WaitNote] = field(default_factory=list)
    state_changed: bool = True  # a new wait episode starts: record even a repeated reason
    # Elastic (spec.elastic): (min, max) Workers, GPUs per Worker, the current size, each
    # Worker's (node, GPUs) by index, the work left (Worker-seconds), when the current rate
    # began, and the size timeline.
    elastic: tuple[int, int] | None = None
    replica_gpus: int = 0
    size: int = 0
    workers: tuple[tuple[str, int], ...] = ()
    work_left: float = 0.0
    rate_since: float = 0.0
    sizes: list[tuple[float, int]] = field(default_factory=list)
    # Migration (fixed-size gangs): whether it checkpoints, its ideal work left (seconds at
    # its ideal placement) as of rate_since, its current slow-down, its moves.
    checkpoints: bool = False
    ideal_left: float = 0.0
    slowdown: float = 1.0
    moved_at: float | None = None
    moves: int = 0
    priority_class: str = ""  # and its guaranteed minimum run (trainop.dev/min-run-seconds)
    class_min_run: float = 0.0

    def note(self, time: float, reason: str, message: str) -> None:
        # A new note when the reason or the kind of sentence changes (numbers aside), so a
        # hold or a preemption shows up while "uses 48 of 64" -> "uses 56 of 64" does not.
        last = self.waits[-1] if self.waits else None
        if (
            last is None
            or self.state_changed
            or last.reason != reason
            or (
                last.message != message
                and _DIGITS.sub("#", last.message) != _DIGITS.sub("#", message)
            )
        ):
            self.waits.append(WaitNote(time, reason, message))
        self.state_changed = False

    def queued(self) -> QueuedJob:
        running = self.state == "Running"
        sized = running and self.elastic is not None
        return QueuedJob(
            key=self.key,
            queue=self.queue,
            gpus=sum(g for _, g in self.workers) if sized else self.gpus,
            elastic=self.elastic,
            replica_gpus=self.replica_gpus,
            size=self.size if sized else None,
            workers=self.workers if sized else (),
            created=self.submit,
            priority=self.priority,
            products=self.products,
            admitted=running,
            product=self.product if running else None,
            nodes=self.holding if running else (),
            started=self.start_at if running else None,
            expected_end=self.end_at if running else None,
            preemptions=self.preemptions,
            priority_class=self.priority_class,
            class_min_run_seconds=self.class_min_run,
            queued_since=self.queued_since,
            blocked_reason=self.blocked_reason,
            blocked_message=self.blocked_message,
        )


def _annotation(body: Mapping[str, Any], key: str, name: str, default: float | None) -> float:
    meta = body.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(key)
    if raw is None:
        if default is None:
            raise SimInputError(f"TrainingJob {name}: metadata.annotations.{key}: required")
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SimInputError(
            f"TrainingJob {name}: metadata.annotations.{key}: not a number of seconds: {raw!r}"
        ) from None
    if value < 0 or not math.isfinite(value):
        raise SimInputError(f"TrainingJob {name}: metadata.annotations.{key}: must be >= 0")
    return value


def job_key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return key_of(meta.get("namespace") or "default", meta.get("name") or "")


class _Sim:
    def __init__(
        self,
        nodes: Sequence[Mapping[str, Any]],
        queues: Sequence[QueueState],
        jobs: Sequence[Mapping[str, Any]],
        namespaces: Mapping[str, Mapping[str, str]],
        priority_classes: Mapping[str, int],
        default_priority: int,
        config: OperatorConfig,
        startup_seconds: float,
        placer: PlacerFactory | None = None,
        comm_share: float = 0.0,
        move_seconds: float = 300.0,
        min_runs: Mapping[str, float] | None = None,
    ) -> None:
        self.move_seconds = move_seconds
        self.min_runs = dict(min_runs or {})
        self.queues = list(queues)
        self.tree = build_tree(self.queues)  # queue trees: parents report their subtree
        self.config = config
        self.startup = startup_seconds
        self.comm_share = comm_share
        self.snapshot: Snapshot = build_snapshot(nodes, levels=config.topology_levels)
        self.base = self.snapshot
        self.events: list[SimEvent] = []
        self.usage: list[tuple[float, Mapping[str, QueueUsage]]] = []
        self.jobs: dict[str, _Job] = {}
        for body in jobs:
            key = job_key(body)
            if key in self.jobs:
                raise SimInputError(f"TrainingJob {key}: defined twice")
            job = _Job(
                key,
                body,
                submit=_annotation(body, c.ANNOTATION_SIM_SUBMIT, key, 0.0),
                duration=_annotation(body, c.ANNOTATION_SIM_DURATION, key, None),
            )
            self.prepare(job, namespaces, priority_classes, default_priority)
            self.jobs[key] = job
        bodies = {k: j.body for k, j in self.jobs.items()}
        self.placer = (
            placer(bodies, config)
            if placer is not None
            else PlannerPlacer(bodies, config, {q.name: q for q in self.queues})
        )

    def prepare(
        self,
        job: _Job,
        namespaces: Mapping[str, Mapping[str, str]],
        priority_classes: Mapping[str, int],
        default_priority: int,
    ) -> None:
        """Validate as the operator would: planner checks, queue, policy, priority."""
        try:
            spec: TrainingJobSpec = checked_spec(job.body, self.config)
        except InvalidJob as exc:
            job.state, job.blocked_reason = "Invalid", INVALID
            job.blocked_message = f"{exc.field}: {exc.detail}"
            return
        job.gpus = spec.total_gpus
        job.products = tuple(spec.placement.gpu_products)
        job.checkpoints = spec.checkpoint is not None and spec.placement.migratable
        if spec.elastic is not None:
            job.elastic = (spec.elastic.min_replicas, spec.elastic.max_replicas)
            job.replica_gpus = spec.replica_specs["Worker"].gpus
        pc = spec.priority_class_name
        if pc:
            if pc not in priority_classes:
                job.state, job.blocked_reason = "Invalid", INVALID
                job.blocked_message = f"spec.priorityClassName: no PriorityClass {pc!r}"
                return
            job.priority = priority_classes[pc]
        else:
            job.priority = default_priority
        # The operator's own intake decides the queue and what blocks the job (one function
        # for both, so what simulate shows is what the operator does).
        inputs = Inputs(tuple(self.queues), namespaces, priority_classes, min_runs=self.min_runs)
        when = datetime.fromtimestamp(job.submit, UTC).replace(tzinfo=None)
        queued = intake(job.body, (), inputs, self.base, self.config, when)
        if queued is None:  # invalid names and the like: the operator marks it Invalid
            job.state, job.blocked_reason = "Invalid", INVALID
            job.blocked_message = "the operator would mark it Invalid (see trainop render)"
            return
        job.queue = queued.queue
        job.priority_class = queued.priority_class
        job.class_min_run = queued.class_min_run_seconds
        job.blocked_reason, job.blocked_message = queued.blocked_reason, queued.blocked_message

    # --- the event loop ----------------------------------------------------------------------
    def run(self) -> SimResult:
        now = 0.0
        while True:
            upcoming = [j.submit for j in self.jobs.values() if j.state == "Future"]
            upcoming += [j.end_at for j in self.jobs.values() if j.state == "Running"]
            if not upcoming:
                break
            now = min(upcoming)
            for job in sorted(self.jobs.values(), key=lambda j: (j.end_at, j.key)):
                if job.state == "Running" and job.end_at <= now:
                    self.finish(job, now)
            for job in sorted(self.jobs.values(), key=lambda j: (j.submit, j.key)):
                if job.state == "Future" and job.submit <= now:
                    job.state, job.queued_since = "Pending", job.submit
                    self.events.append(SimEvent(now, "submit", job.key))
            self.settle(now)
        return self.result(now)

    def settle(self, now: float) -> None:
        last: Decisions | None = None
        for _ in range(MAX_PASSES):
            last = self.admission_pass(now)
            if last is None:
                return
            if not any(d.action in _CHANGES or d.victims for d in last):
                if self.migrate(now, last):
                    continue  # sources freed: admission may place someone there
                self.usage.append((now, roll_up(last.usage, self.tree)))
                return
        raise RuntimeError(f"admission did not settle at t={now:g}s")

    def migrate(self, now: float, last: Decisions) -> bool:
        """Start the moves queueing.migration picks now (see the module doc)."""
        policy = self.config.migration
        if not policy.enabled or last.snapshot is None:
            return False
        movers: list[Mover] = []
        for job in self.jobs.values():
            if job.state != "Running" or job.elastic is not None or not job.runs:
                continue
            run = job.runs[-1]
            steps = None
            if run.ideal_allreduce_seconds and self.comm_share:
                left = self.ideal_left(job, now)
                steps = int(left * self.comm_share / run.ideal_allreduce_seconds)
            movers.append(
                Mover(
                    job=job.queued(),
                    checkpoints=job.checkpoints,
                    allreduce=run.allreduce_seconds,
                    steps_left=steps,
                    measured_cost=self.move_seconds if job.moves else None,
                    last_moved=job.moved_at,
                    ideal=run.ideal_allreduce_seconds,
                )
            )
        waiting = [
            self.jobs[d.key].queued()
            for d in last
            if d.action == Action.WAIT and d.reason in (NOFIT, TOPOLOGY)
        ]
        plan = plan_moves(
            now,
            movers,
            last.snapshot,
            self.placer,
            {q.name: q for q in self.queues},
            policy,
            waiting,
        )
        for move in plan.moves:
            self.move(self.jobs[move.key], now, move)
        return bool(plan.moves)

    def ideal_left(self, job: _Job, now: float) -> float:
        """Seconds of ideal-placement work the gang still has to do at `now`."""
        done = max(0.0, now - job.rate_since) / max(job.slowdown, 1e-9)
        return max(0.0, job.ideal_left - done)

    def move(self, job: _Job, now: float, move: Move) -> None:
        left = self.ideal_left(job, now)
        run = job.runs[-1]
        job.runs[-1] = replace(
            run, ended=now, preempt_reason=MIGRATION, moved_for=move.makes_room_for
        )
        self.release(job)
        fit = move.to
        self.snapshot = self.snapshot.with_reserved(dict(fit.gpus_by_node))
        job.holding, job.nodes, job.product = fit.gpus_by_node, fit.nodes, fit.product
        job.ideal_left, job.rate_since = left, now + self.move_seconds
        job.slowdown = self.stretch(fit)
        job.end_at = job.rate_since + left * job.slowdown
        job.moved_at, job.moves = now, job.moves + 1
        real = fit.allreduce.seconds if fit.allreduce else None
        ideal = run.ideal_allreduce_seconds
        job.runs.append(
            Run(now, job.rate_since, None, fit.nodes, None, None, fit.gpus_by_node, real, ideal)
        )
        self.events.append(
            SimEvent(now, "migrate", job.key, f"{','.join(fit.nodes)}: {move.message}")
        )

    def admission_pass(self, now: float) -> Decisions | None:
        live = [j for j in self.jobs.values() if j.state in ("Pending", "Running")]
        if not live:
            return None
        live.sort(key=lambda j: j.key)
        decisions = admit(
            now,
            self.queues,
            [j.queued() for j in live],
            self.snapshot,
            self.placer,
            topology_wait_seconds=self.config.topology_wait_seconds,
        )
        self.keep_history(decisions)
        # Releases before reservations: the pass planned on a snapshot where both happened.
        for d in decisions.preempted:
            self.evict(self.jobs[d.key], now, d.preemptor, d.reason)
        for d in decisions.by_action(Action.SHRINK):
            self.resize(self.jobs[d.key], now, d.size or 0, None)
        for d in decisions:
            job = self.jobs[d.key]
            if d.action == Action.ADMIT and d.placement is not None:
                self.start(job, now, d.placement, d.size)
            elif d.action == Action.GROW and d.placement is not None:
                self.resize(job, now, d.size or 0, d.placement)
            elif d.action == Action.WAIT and d.victims and d.placement is not None:
                job.note(now, d.reason, d.message)
                self.start(job, now, d.placement, d.size)
            elif d.action == Action.WAIT and job.state == "Pending":
                job.note(now, d.reason, d.message)
        return decisions

    def keep_history(self, decisions: Decisions) -> None:
        """Fair share over time: each queue's usage history goes where the operator keeps
        it, its status, and from there into the next pass (queueing.fairshare)."""
        if not any(q.half_life for q in self.queues):
            return
        self.queues = [
            replace(q, history=u.history)
            if (u := decisions.usage.get(q.name)) is not None and u.history is not None
            else q
            for q in self.queues
        ]

    def start(self, job: _Job, now: float, fit: Fit, size: int | None = None) -> None:
        self.snapshot = self.snapshot.with_reserved(dict(fit.gpus_by_node))
        job.state = "Running"
        job.holding = fit.gpus_by_node
        job.product = fit.product
        job.nodes = fit.nodes
        job.start_at = now + self.startup
        job.end_at = job.start_at + job.duration * self.stretch(fit)
        job.ideal_left, job.rate_since, job.slowdown = job.duration, job.start_at, self.stretch(fit)
        if job.elastic is not None and size:
            job.size, job.workers = size, _workers_of(fit, job.replica_gpus)
            job.work_left = job.duration * self.stretch(fit) * job.elastic[1]
            job.rate_since = job.start_at
            job.end_at = job.start_at + job.work_left / size
            job.sizes.append((now, size))
        job.state_changed = True
        real = fit.allreduce.seconds if fit.allreduce else None
        ideal = fit.ideal.seconds if fit.ideal else None
        job.runs.append(
            Run(now, job.start_at, None, fit.nodes, None, None, fit.gpus_by_node, real, ideal)
        )
        self.events.append(SimEvent(now, "admit", job.key, ",".join(fit.nodes)))

    def resize(self, job: _Job, now: float, size: int, fit: Fit | None) -> None:
        """An elastic job grows (fit: the new Workers) or shrinks (to `size`): the work done
        at the old size is counted, the Workers restart (startup_seconds) at the new one."""
        if fit is not None:
            self.snapshot = self.snapshot.with_reserved(dict(fit.gpus_by_node))
            job.workers = job.workers + _workers_of(fit, job.replica_gpus)
        else:
            freed: dict[str, int] = {}
            for node, gpus in job.workers[size:]:
                freed[node] = freed.get(node, 0) + gpus
            self.snapshot = self.snapshot.with_released(freed)
            job.workers = job.workers[:size]
        held: dict[str, int] = {}
        for node, gpus in job.workers:
            held[node] = held.get(node, 0) + gpus
        job.holding = tuple(sorted(held.items()))
        job.nodes = tuple(held)
        job.work_left -= max(0.0, now - job.rate_since) * job.size
        job.rate_since = max(now, job.rate_since) + self.startup
        job.size = size
        job.end_at = job.rate_since + max(0.0, job.work_left) / size
        job.sizes.append((now, size))
        kind = "grow" if fit is not None else "shrink"
        self.events.append(SimEvent(now, kind, job.key, f"{size} workers"))

    def stretch(self, fit: Fit) -> float:
        """How much longer than its ideal duration the job runs on this placement."""
        if not self.comm_share or fit.allreduce is None or fit.ideal is None:
            return 1.0
        if fit.ideal.seconds <= 0:
            return 1.0
        ratio = fit.allreduce.seconds / fit.ideal.seconds
        return 1.0 - self.comm_share + self.comm_share * max(1.0, ratio)

    def release(self, job: _Job) -> None:
        self.snapshot = self.snapshot.with_released(dict(job.holding))
        job.holding = ()

    def evict(self, job: _Job, now: float, by: str | None, reason: str) -> None:
        self.release(job)
        job.workers, job.size = (), 0
        job.state, job.queued_since = "Pending", now
        job.preemptions += 1
        job.state_changed = True
        run = job.runs[-1]
        job.runs[-1] = replace(run, ended=now, preempted_by=by, preempt_reason=reason)
        self.events.append(SimEvent(now, "preempt", job.key, f"{reason} by {by}"))

    def finish(self, job: _Job, now: float) -> None:
        self.release(job)
        job.state = "Finished"
        run = job.runs[-1]
        job.runs[-1] = replace(run, ended=job.end_at)
        self.events.append(SimEvent(job.end_at, "finish", job.key))

    def result(self, now: float) -> SimResult:
        out = []
        for job in sorted(self.jobs.values(), key=lambda j: (j.submit, j.key)):
            waits = list(job.waits)
            if job.blocked_reason and not waits:
                waits.append(WaitNote(job.submit, job.blocked_reason, job.blocked_message))
            state = {"Future": "Pending"}.get(job.state, job.state)
            if job.blocked_reason == POLICY:
                state = "Refused"
            last = job.runs[-1] if job.runs else None
            out.append(
                JobResult(
                    key=job.key,
                    queue=job.queue,
                    gpus=job.gpus,
                    priority=job.priority,
                    submitted=job.submit,
                    duration=job.duration,
                    state=state,
                    admitted=last.admitted if last else None,
                    started=last.started if last else None,
                    finished=job.end_at if job.state == "Finished" else None,
                    nodes=last.nodes if last else (),
                    preemptions=job.preemptions,
                    runs=tuple(job.runs),
                    waits=tuple(waits),
                    sizes=tuple(job.sizes),
                )
            )
        events = sorted(self.events, key=lambda e: e.time)  # stable: same-time order kept
        return SimResult(tuple(out), tuple(events), tuple(self.usage), now)


# Decisions after which the pass runs again (the cluster changed).
_CHANGES = (Action.ADMIT, Action.PREEMPT, Action.GROW, Action.SHRINK)


def _workers_of(fit: Fit, per: int) -> tuple[tuple[str, int], ...]:
    """(node, GPUs) of each Worker a Fit places, by index (the planner's assignments; a
    placer without them: its GPUs per node cut into Workers of `per`)."""
    plan = fit.placement
    placement = getattr(plan, "placement", plan)
    found = [a for a in getattr(placement, "assignments", ()) if a.role == "Worker" and a.node]
    if found:
        return tuple((a.node, a.gpus) for a in sorted(found, key=lambda a: a.index))
    out: list[tuple[str, int]] = []
    for node, gpus in fit.gpus_by_node:
        out.extend((node, per) for _ in range(gpus // per if per else 0))
    return tuple(out)


def simulate(
    nodes: Sequence[Mapping[str, Any]],
    queues: Sequence[Mapping[str, Any] | QueueState],
    jobs: Sequence[Mapping[str, Any]],
    *,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    priority_classes: Mapping[str, int] | None = None,
    default_priority: int = 0,
    config: OperatorConfig | None = None,
    startup_seconds: float = 0.0,
    placer: PlacerFactory | None = None,
    comm_share: float = 0.0,
    move_seconds: float = 300.0,
    min_runs: Mapping[str, float] | None = None,
) -> SimResult:
    """Run the simulation. nodes: Node dicts; queues: TrainingQueue dicts (or QueueStates);
    jobs: TrainingJob dicts with the sim annotations; namespaces: name -> labels (for
    namespaceSelector); priority_classes: PriorityClass name -> value; min_runs: PriorityClass
    name -> its guaranteed minimum run (`class_min_runs`); placer: builds the
    placer from (job key -> body, config), default PlannerPlacer; comm_share: see the module
    doc; move_seconds: a migration's checkpoint and restart (config.migration on). SimInputError
    names a bad input."""
    if not 0.0 <= comm_share <= 1.0:
        raise SimInputError(f"comm_share: must be between 0 and 1, got {comm_share!r}")
    states = []
    for q in queues:
        if isinstance(q, QueueState):
            states.append(q)
            continue
        try:
            states.append(QueueState.from_resource(q))
        except QueueConfigError as exc:
            raise SimInputError(str(exc)) from None
    names = [q.name for q in states]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SimInputError(f"TrainingQueue {dupes[0]}: defined twice")
    for err in tree_errors(states).values():  # a cycle, a missing parent, ...
        raise SimInputError(str(err))
    try:
        sim = _Sim(
            nodes,
            states,
            jobs,
            namespaces or {},
            priority_classes or {},
            default_priority,
            config or OperatorConfig(),
            startup_seconds,
            placer,
            comm_share,
            move_seconds,
            min_runs,
        )
    except ValueError as exc:  # e.g. duplicate node names in the inventory
        if isinstance(exc, SimInputError):
            raise
        raise SimInputError(str(exc)) from None
    return sim.run()


def split_documents(
    docs: Sequence[Mapping[str, Any]],
) -> tuple[
    list[Mapping[str, Any]],
    list[Mapping[str, Any]],
    dict[str, dict[str, str]],
    dict[str, int],
    int,
]:
    """(TrainingQueues, TrainingJobs, namespace labels, PriorityClass values, default
    priority) from a mix of documents; other kinds are a SimInputError."""
    queues: list[Mapping[str, Any]] = []
    jobs: list[Mapping[str, Any]] = []
    namespaces: dict[str, dict[str, str]] = {}
    classes: dict[str, int] = {}
    default = 0
    for i, doc in enumerate(docs):
        kind = doc.get("kind")
        meta = doc.get("metadata") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if kind == "TrainingQueue":
            queues.append(doc)
        elif kind == "TrainingJob":
            jobs.append(doc)
        elif kind == "Namespace" and name:
            namespaces[str(name)] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        elif kind == "PriorityClass" and name:
            value = doc.get("value")
            if not isinstance(value, int) or isinstance(value, bool):
                raise SimInputError(f"PriorityClass {name}: value: must be an integer")
            classes[str(name)] = value
            if doc.get("globalDefault"):
                default = value
        else:
            raise SimInputError(
                f"document {i + 1} ({kind or 'no kind'}): expected TrainingQueue, TrainingJob, "
                "Namespace or PriorityClass"
            )
    return queues, jobs, namespaces, classes, default


def class_min_runs(docs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """PriorityClass name -> its guaranteed minimum run (annotation trainop.dev/min-run-seconds)
    for the classes among `docs` that set one; a bad value is a SimInputError naming it."""
    out: dict[str, float] = {}
    for doc in docs:
        meta = doc.get("metadata") or {}
        if doc.get("kind") != "PriorityClass" or not isinstance(meta, Mapping):
            continue
        try:
            seconds = class_min_run(str(meta.get("name")), meta.get("annotations"))
        except ValueError as exc:
            raise SimInputError(str(exc)) from None
        if seconds > 0:
            out[str(meta.get("name"))] = seconds
    return out
