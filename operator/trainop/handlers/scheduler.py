"""The one admission loop: wakes on change, decides every pending gang, hands the verdicts on.

Neighbours: `handlers.state.ShellState` is its input (caches kept current by the watch
handlers) and where its output goes (each job's verdict and assumed gang, in the job's
JobMemory); the pure `queueing.cluster.decide` makes the decisions with the planner as
placer, exactly as `trainop simulate` does; `handlers.operator` gives it two callbacks:
`reconcile(key)`, run for each job whose verdict changed, and `evict(decision)` for
preemption victims, plus `publish(result)` for queue status and `migrate(move)` for each
running gang `queueing.migration` moves (operator config `migration`). Job keys are queueing's own
("namespace/name"), so decisions map to records without conversion.

A cycle:
  1. Waits for a wake-up (any change that can alter a decision; see ShellState.touch) or
     for the next timed event (an assumption's expiry, a restart backoff ending, a
     backfill threshold), then lets a burst of events settle for `debounce` seconds.
  2. Takes the inputs from the state on the event loop (bodies are replaced, never
     mutated, so these references stay valid; a job that names a runtime as merged with it,
     one whose runtime cannot be merged left out; each unchanged job's share kept from the
     last cycle by `GatherMemo`), then runs the pure decision in a worker thread so the
     watches keep flowing.
  3. Records every admitted gang as assumed (its GPUs count as used from then on) and
     stores each job's verdict; jobs whose verdict changed are reconciled.
No decision is made before the state is synced (every watched kind listed in full at start-up).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

from trainop import metrics, shellrules
from trainop.handlers.state import JobKey, JobMemory, ShellState, Verdict
from trainop.inventory.pods import BY_NAME
from trainop.planner import OperatorConfig, Plan
from trainop.queueing.cluster import PassResult, cycle_inputs, decide
from trainop.queueing.migration import Move
from trainop.queueing.model import Action, JobDecision, QueueState
from trainop.queueing.tail import TailMemo
from trainop.reconcile import Admission, backoff_seconds, parse_time
from trainop.runtimes import Resolved

log = logging.getLogger("trainop.scheduler")


# Queue positions (and wait messages) up to this position are written to status as they
# move; further back, they are refreshed only with the job's next status change (a deep
# queue would otherwise rewrite every waiting job's status on every admission).
POSITIONS_TRACKED = 10
# A wait whose only change is its message (NoFit quotes the free GPUs, which move with every
# pod a burst starts) is written at most this often, even at the head of the line: at 500
# jobs, one patch per admission cycle per head job was most of the operator's writes.
MESSAGE_REFRESH_SECONDS = 10.0


def _worth_telling(old: Verdict | None, new: Verdict, now: float) -> bool:
    """Whether a new verdict must reach the job now (a reconcile, maybe a status write)."""
    if old is None or old.uid != new.uid or old.generation != new.generation:
        return True
    a, b = old.admission, new.admission
    if (a.admitted, a.reason, a.plan, a.size) != (b.admitted, b.reason, b.plan, b.size):
        return True
    if (a.message, a.position) == (b.message, b.position):
        return False
    # The same wait with another position or message: written near the head of the line
    # (a new message at most every MESSAGE_REFRESH_SECONDS), else with the job's next
    # real change.
    if min(a.position or 0, b.position or 0) > POSITIONS_TRACKED:
        return False
    return a.position != b.position or now - old.told >= MESSAGE_REFRESH_SECONDS


_ACTION = attrgetter("action")

# Decisions that reach the job: a verdict to carry out (elastic resizes included).
_TOLD = (Action.ADMIT, Action.WAIT, Action.GROW, Action.SHRINK)


def _backoff_left(body: Mapping[str, Any], config: OperatorConfig, now: datetime) -> float:
    """Seconds until a restarting gang may be placed again (0: now)."""
    status = body.get("status") or {}
    if status.get("phase") != "Restarting":
        return 0.0
    last = parse_time(status.get("lastRestartTime"))
    if last is None:
        return 0.0
    restarts = int(status.get("restartCount") or 0)
    return max(0.0, backoff_seconds(config, restarts) - (now - last).total_seconds())


def plan_pods(plan: Plan) -> dict[str, tuple[str, str, int]]:
    """Pod name -> (BY_NAME, node, GPUs) of a plan's pinned pods: what an assumption holds."""
    return {name: (BY_NAME, node, gpus) for name, (node, gpus) in plan.pinned().items()}


def _backfill_moments(
    result: PassResult, queues: tuple[QueueState, ...], now: datetime, mono: float
) -> list[float]:
    """When a waiting job crosses its queue's backfillWaitSeconds: time alone changes the
    decision then (its queue starts holding capacity for it), so the loop wakes up."""
    thresholds = {q.name: q.backfill_wait_seconds for q in queues}
    out: list[float] = []
    if all(limit is None for limit in thresholds.values()):
        return out  # no queue backfills: no job to look at
    for decision in result.decisions.jobs.values():
        job = result.jobs.get(decision.key)
        limit = thresholds.get(decision.queue)
        if decision.action != Action.WAIT or job is None or limit is None:
            continue
        left = job.waiting_since + limit - now.timestamp()
        if left > 0:
            out.append(mono + left + 0.1)
    return out


@dataclass
class Work:
    """What a cycle hands the pure decision: the jobs in line, the pods and assumptions of
    those whose intake must be made again, and the intakes kept for the rest."""

    bodies: list[Mapping[str, Any]] = field(default_factory=list)
    # The pods of each job whose intake is made again (its key is here even with none).
    pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    assumed: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    known: dict[str, Any] = field(default_factory=dict)
    signatures: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    later: list[float] = field(default_factory=list)  # restart backoffs ending (monotonic)
    looked: set[str] = field(default_factory=set)  # the jobs the gather looked at again
    by_key: Mapping[str, Mapping[str, Any]] | None = None  # `bodies` by key, in order


@dataclass
class GatherMemo:
    """Each job's share of the last gather, and the gather's output kept with them, so that
    a job that did not change costs the gather nothing at all (issue 33, part 2).

    A job's share depends on its record, and the record tells when that moves: every
    transition of a `JobMemory` that changes what the gather reads (its body, its own status
    writes, its pods, its assumption, its intake, a refusal, the runtime merge its gang was
    made from) marks its key in `ShellState.marked`, and a record made or dropped marks it
    too. It depends as well on what every job reads (nodes, queues/namespaces/priorities/
    fabrics, runtimes, the config object: the `stamp`); any of that moving makes every
    share again. Shares that depend on the clock (a restart backoff) or are not final (an
    intake still to be made) are `unsettled`: made again every gather until they settle.

    The output (`bodies` and `signatures` in key order, `known`) is kept and changed in
    place; it is laid out again in key order only when jobs come, go, or step into or out
    of line."""

    stamp: tuple[Any, ...] = ()
    keys: list[JobKey] = field(default_factory=list)  # the jobs, sorted
    keyset: set[JobKey] = field(default_factory=set)
    entries: dict[JobKey, tuple[Any, ...]] = field(default_factory=dict)  # settled shares
    unsettled: set[JobKey] = field(default_factory=set)
    # In line, in key order: each job's body and intake signature; and the kept intakes.
    bodies: dict[JobKey, Mapping[str, Any]] = field(default_factory=dict)
    signatures: dict[JobKey, tuple[Any, ...]] = field(default_factory=dict)
    known: dict[JobKey, Any] = field(default_factory=dict)

    def begin(
        self, state: ShellState, config: OperatorConfig, take: bool = True
    ) -> tuple[set[JobKey], bool]:
        """The jobs to gather again, and whether the output must be laid out again. The
        state's marks are taken (`take`): one memo per state, the admission loop's."""
        marked = state.take_marked() if take else set()
        stamp = (state.node_revision, state.inputs_revision, state.runtimes_revision)
        again = marked | self.unsettled
        relayout = False
        if not self.stamp or self.stamp[0] != stamp or self.stamp[1] is not config:
            self.stamp, self.entries, self.unsettled = (stamp, config), {}, set()
            again, relayout = set(state.jobs), True
        jobs = state.jobs
        # A record made or dropped is marked: the job set moved only if a marked key's
        # presence did (the sizes are compared too, for a record put in by other means).
        moved = len(self.keyset) != len(jobs) or any(
            (k in jobs) != (k in self.keyset) for k in marked
        )
        if moved and self.keyset != jobs.keys():
            came = state.jobs.keys() - self.keyset
            gone = self.keyset - state.jobs.keys()
            self.keyset = set(state.jobs)
            self.keys = sorted(self.keyset)
            for key in gone:
                self.entries.pop(key, None)
                self.unsettled.discard(key)
                self.known.pop(key, None)
            again |= came
            relayout = True
        again &= self.keyset
        return again, relayout

    def settle(self, key: JobKey, mem: JobMemory, share: tuple[Any, ...] | None) -> None:
        self.entries[key] = (mem, share)
        self.unsettled.discard(key)
        if share is not None:
            self.known[key] = share[2]  # the kept intake (None: a job the intake leaves out)
        else:
            self.known.pop(key, None)

    def unsettle(self, key: JobKey) -> None:
        self.entries.pop(key, None)
        self.unsettled.add(key)
        self.known.pop(key, None)

    def lay_out(self, slots: Mapping[JobKey, tuple[Any, ...] | None]) -> None:
        """`bodies` and `signatures` in key order, from the settled shares and `slots`."""
        bodies: dict[JobKey, Mapping[str, Any]] = {}
        signatures: dict[JobKey, tuple[Any, ...]] = {}
        entries = self.entries
        for key in self.keys:
            share = slots[key] if key in slots else entries[key][1]
            if share is not None:
                bodies[key], signatures[key] = share[0], share[1]
        self.bodies, self.signatures = bodies, signatures


def gather(
    state: ShellState,
    config: OperatorConfig,
    now: datetime,
    started: float,
    memo: GatherMemo | None = None,
) -> Work:
    """The cycle's inputs from the state, on the event loop (bodies are replaced, never
    mutated, so the references stay valid while the decision runs in a worker thread).
    With `memo` (the loop's, kept across cycles), only the jobs marked since its last
    gather, or not settled then, are looked at."""
    # (Without a memo, every job is gathered, and the marks are left to the loop's memo.)
    fresh = memo is None
    memo = memo if memo is not None else GatherMemo()
    again, relayout = memo.begin(state, config, take=not fresh)
    work = Work(looked=again)
    slots: dict[JobKey, tuple[Any, ...] | None] = {}  # shares made this gather, by job
    bodies, signatures = memo.bodies, memo.signatures
    for key in again:
        mem = state.jobs[key]
        share, final = _share(state, key, mem, config, now, started, work)
        slots[key] = share
        if final:
            memo.settle(key, mem, share)
        else:
            memo.unsettle(key)
        if relayout:
            continue
        if share is None:
            relayout = key in bodies  # steps out of line: the order is made again
        elif key in bodies:
            bodies[key], signatures[key] = share[0], share[1]  # in place: the order holds
        else:
            relayout = True  # steps into line
    if relayout:
        memo.lay_out(slots)
    work.bodies, work.by_key = list(memo.bodies.values()), memo.bodies
    work.signatures = memo.signatures
    work.known = memo.known
    return work


def _share(
    state: ShellState,
    key: JobKey,
    mem: JobMemory,
    config: OperatorConfig,
    now: datetime,
    started: float,
    work: Work,
) -> tuple[tuple[Any, ...] | None, bool]:
    """One job's share of the gather: (body, signature, kept intake or None) when it is in
    line, None when it is out of line; and whether that is final (else it is made again
    next gather: a backoff, or an intake to make, whose pods and assumption go into
    `work`)."""
    body = mem.newest()
    if body is None or state.is_rejected(key, body) or state.going_away(key):
        return None, True
    resolved = state.resolution(key)  # merged with its runtime (spec.runtimeRef)
    if not isinstance(resolved, Resolved):
        return None, True  # its runtime is missing or invalid: it waits out of line
    body = resolved.body
    wait = _backoff_left(body, config, now)
    if wait > 0:
        work.later.append(started + wait)
        return None, False
    signature = (key, state.intake_signature(key), config)
    kept = mem.intake
    if kept is not None and kept[0][1] == signature[1] and kept[0][2] is config:
        return (body, signature, kept[1]), True
    work.pods[key] = state.job_pods(key, body["metadata"].get("uid"))
    if mem.assumed is not None:
        work.assumed[key] = state.assumed_holding(key)
    return (body, signature, None), False


class AdmissionLoop:
    """Owns the wake-up event and the cycle; one instance per operator process."""

    def __init__(
        self,
        state: ShellState,
        config: Callable[[], OperatorConfig],
        reconcile: Callable[[JobKey], Awaitable[None]],
        evict: Callable[[JobDecision, datetime], Awaitable[None]],
        publish: Callable[[PassResult], Awaitable[None]],
        debounce: float = 0.05,
        migrate: Callable[[Move, datetime], Awaitable[None]] | None = None,
    ) -> None:
        self.state = state
        self.config = config
        self.reconcile = reconcile
        self.evict = evict
        self.publish = publish
        self.migrate = migrate
        self.debounce = debounce
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.cycles = 0
        self.last_cycle_seconds = 0.0
        self.tails = TailMemo()  # waiting tails kept across cycles (queueing.tail)
        self.gathered = GatherMemo()  # each job's share of the last gather
        # The decisions of the last cycle, by job: one that comes back as the same object,
        # for a job whose record was not marked since, needs nothing done (see _record).
        self.recorded: Mapping[JobKey, JobDecision] = {}
        state.on_change = self.wake.set

    async def run(self) -> None:
        next_at: float | None = None
        while True:
            timeout = None if next_at is None else max(0.0, next_at - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout)
            await asyncio.sleep(self.debounce)
            self.wake.clear()
            if not (self.state.synced and self.state.leader):
                next_at = None
                continue
            try:
                next_at = await self.cycle()
            except Exception:  # a bug in one cycle must not stop admission for good
                log.exception("admission cycle failed; retrying in 5 s")
                next_at = time.monotonic() + 5.0

    async def cycle(self) -> float | None:
        """One decision round; returns the monotonic time of the next timed wake-up."""
        started = time.monotonic()
        now = datetime.now(UTC).replace(tzinfo=None)
        state, config = self.state, self.config()
        held_by = shellrules.mode(config)
        if held_by == shellrules.Mode.KUEUE:
            state.expire(started)  # assumptions of gangs created on Kueue's word
            return None  # Kueue admits and preempts (handlers.kueue): no verdicts of trainop's
        if held_by == shellrules.Mode.KUBERNETES:
            # kube-scheduler holds, places and preempts gangs (trainop.workload): no
            # verdicts, assumptions or evictions of trainop's own.
            return None
        state.expire(started)
        work = gather(state, config, now, started, self.gathered)
        inputs = cycle_inputs(
            list(state.queues.values()),
            dict(state.namespaces),
            dict(state.priorities),
            dict(state.min_runs),
        )
        snapshot = state.snapshot()
        gathered = time.monotonic()
        result = await asyncio.to_thread(
            decide,
            now,
            work.bodies,
            work.pods,
            inputs,
            snapshot,
            config,
            work.assumed,
            work.known,
            self.tails,
            None,
            work.by_key,  # the same bodies by key, in order (the gather keeps them so)
        )
        decided = time.monotonic()
        for key in work.pods:  # the jobs taken in afresh (the rest were kept)
            mem = state.jobs.get(key)
            if mem is not None and key in result.intakes:  # else gone while it ran
                mem.took_in(work.signatures[key], result.intakes[key])
        changed = self._record(result, started, work.looked | state.marked)
        decisions = result.decisions.jobs.values()
        if Action.PREEMPT in map(_ACTION, decisions):  # (a C-level walk: usually none)
            for decision in decisions:
                if decision.action == Action.PREEMPT:
                    await self.evict(decision, now)
        if self.migrate is not None:
            for move in result.moves:  # queueing.migration: checkpoint, then restart there
                await self.migrate(move, now)
        await self.publish(result)
        self.cycles += 1
        self.last_cycle_seconds = time.monotonic() - started
        self._report(result, (gathered - started, decided - gathered, time.monotonic() - decided))
        for key in changed:
            task = asyncio.ensure_future(self.reconcile(key))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        later = work.later + state.expiries()
        later.extend(_backfill_moments(result, inputs.queues, now, time.monotonic()))
        return min(later) if later else None

    def _report(self, result: PassResult, phases: tuple[float, float, float]) -> None:
        """Metrics, and one line per cycle that decided something (as Kueue logs each
        scheduling cycle): its number, what it decided, and how long each phase took."""
        counted, assumed_gpus = self.state.gpu_usage()
        metrics.COUNTED_GPUS.set(counted)
        metrics.ASSUMED_GPUS.set(assumed_gpus)
        metrics.ADMISSION_CYCLES.inc()
        metrics.ADMISSION_CYCLE_SECONDS.observe(self.last_cycle_seconds)
        actions = Counter(map(_ACTION, result.decisions.jobs.values()))
        pending = sum(actions[a] for a in (Action.ADMIT, Action.WAIT, Action.PREEMPT))
        level = logging.INFO if pending else logging.DEBUG
        log.log(
            level,
            "admission cycle %d: %d pending, %d admitted, %d waiting, %d preempting, "
            "%d running; gather %.3f s, decide %.3f s, record %.3f s",
            self.cycles,
            pending,
            actions[Action.ADMIT],
            actions[Action.WAIT],
            actions[Action.PREEMPT],
            actions[Action.KEEP],
            *phases,
        )

    def _record(self, result: PassResult, now: float, marked: set[JobKey]) -> list[JobKey]:
        """Store verdicts and assume admitted gangs; return the jobs whose verdict changed.
        `marked`: the jobs whose record moved since the last cycle's gather. Any other job
        whose decision is the very object of the last cycle (a kept tail's wait, a kept
        Keep) read the same record and the same decision as then: the same outcome, so it
        is not looked at (at 10,000 waiting jobs, reading every record cost 2-3 ms)."""
        state = self.state
        changed: list[JobKey] = []
        jobs = state.jobs
        last = self.recorded
        for key, decision in result.decisions.jobs.items():
            if last.get(key) is decision and key not in marked:
                continue
            mem = jobs.get(key)
            verdict = mem.verdict if mem is not None else None
            if verdict is not None and verdict.source is decision:
                # A wait of a kept tail (queueing.tail): the very decision this verdict was
                # made from, for the same QueuedJob, so the same job version: it stands.
                continue
            body = mem.newest() if mem is not None else None
            if mem is None or body is None or decision.action not in _TOLD:
                continue
            meta = body["metadata"]
            old = mem.verdict
            if (
                old is not None
                and decision.action == Action.WAIT
                and old.source is not None
                # (positions first: a cheap test, and most waits that differ moved up one)
                and old.source.position == decision.position
                and old.source == decision
                and old.uid == meta.get("uid")
                and old.generation == meta.get("generation")
            ):
                continue  # the same wait for the same job version: the verdict stands
            plan = decision.placement.placement if decision.placement is not None else None
            admitted = decision.action == Action.ADMIT and isinstance(plan, Plan)
            resize = decision.action in (Action.GROW, Action.SHRINK)
            admission = Admission(
                admitted=admitted or resize,
                reason=decision.reason,
                message=decision.message,
                position=decision.position,
                plan=plan if isinstance(plan, Plan) and (admitted or resize) else None,
                queue=decision.queue,
                size=decision.size,
            )
            uid, generation = meta.get("uid"), meta.get("generation")
            verdict = Verdict(admission, uid, generation, now, decision)
            if (admitted or resize) and isinstance(plan, Plan):
                state.assume(key, plan_pods(plan), now)
            if _worth_telling(old, verdict, now):
                changed.append(key)
            elif old is not None:  # built anew, not dataclasses.replace: every waiting job
                # behind an admitted one moves up a position (thousands of verdicts a cycle)
                verdict = Verdict(admission, uid, generation, old.told, decision)
            mem.decided(verdict)
        self.recorded = result.decisions.jobs
        return changed
