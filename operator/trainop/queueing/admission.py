"""One admission pass: pending gangs in, admit / wait / preempt decisions and queue usage out.

This module runs the pass; each rule lives with its concern, a pure module with its own
table test: `queueing.ordering` (steps 2 and 3), `queueing.ledger` (quota and borrowing,
step 4), `queueing.backfill` (step 5), `queueing.preemption` (step 6) and
`queueing.topowait` (step 7).

Neighbours: the operator (handlers) and the simulator call `admit` with the cluster's queues,
every live TrainingJob as a QueuedJob, the current snapshot and a placer (PlannerPlacer runs
the planner); `queueing.ledger` does the quota arithmetic, `queueing.groups` the product
groups. Pure and deterministic: the clock is the `now` argument, what-ifs are new snapshots
(`with_reserved` / `with_released`), every order has a tie-break on the job key.

The pass, in words:
  1. Admitted jobs are charged to their queue's group (by the product of their nodes).
  2. Pending jobs line up per queue: higher priority first, then older (creation) first.
     Jobs blocked before admission (Policy, Incompatible) wait out of line.
  3. Across queues, the next job comes from the queue whose head fits its own nominal
     quota (or may reclaim it) before queues whose head would borrow (as Kueue does), then
     the lowest weighted dominant-resource share (see queueing.ledger), then the head's
     priority and age. Repeat until every queue's line is consumed.
  4. A job is admitted when its queue's quota (own nominal, or borrowing within the cohort
     and borrowingLimit) and placement (the placer, on the snapshot updated with everything
     admitted so far this pass) both fit, trying groups within nominal before groups that
     would borrow, each in quota order.
  5. Backfill: a job may be admitted past a blocked head of its queue. Once the head has
     waited longer than the queue's backfillWaitSeconds (counted from `queued_since`) it
     holds its groups from the start of the pass: later jobs of its queue may not use them,
     and cohort members may not borrow them (they wait, reason Quota), until it is admitted.
     A hold reserves quota, not nodes: queues outside the cohort (own quota) still place by
     fair share. Only the head holds; an Incompatible head holds nothing. Between two
     holding heads the one that waited longer wins (no mutual blocking).
  6. Preemption, tried only for a queue's head that is blocked on Quota or NoFit:
     (a) Reclaim: when the head fits its queue's nominal quota, admitted gangs of cohort
         members that borrow that group are candidates, as long as their queue still
         borrows; (b) Priority (preemption.withinQueue LowerPriority): admitted gangs of the
         same queue with lower priority. Candidates go lowest priority first, then youngest
         (latest start) first; victims are added one by one until quota and placement fit
         on the snapshot with the victims' GPUs released; then each victim but the last is
         tried back (most valuable first) and kept running when the head still fits. If no
         set of victims makes the head fit, nobody is preempted. The head then reserves the
         placement planned for after the eviction (its decision is Wait with `victims` and
         `placement`), so no later job of the pass takes the freed GPUs. Jobs admitted in
         this pass are never victims.
  7. Topology-aware waiting (queueing.topowait): a Preferred gang whose placement would be
     spread well beyond its ideal domain may wait (reason Topology) a bounded time for a
     better one; while it waits it holds that domain's free GPUs for the rest of the pass,
     holds no quota and preempts nobody, and the next job of its queue counts as the head.
  8. Elastic jobs (queueing.elastic): a pending one is admitted at the largest size in
     [min, max] that fits (steps 4-7 at each size, largest first; only the min size waits
     for a domain or preempts); preemption shrinks elastic victims to min before evicting
     anyone whole; after every line, one running elastic job may grow when no job of the
     pass waits for GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from trainop.inventory import Snapshot
from trainop.queueing import elastic
from trainop.queueing.backfill import Blocks, Hold, blocks_for, new_hold
from trainop.queueing.groups import Candidate, candidates, fleet_products, group_of
from trainop.queueing.ledger import Ledger
from trainop.queueing.model import (
    ANY_GROUP,
    INCOMPATIBLE,
    NOFIT,
    POLICY,
    QUOTA,
    RECLAIM,
    TOPOLOGY,
    Action,
    Bound,
    Decisions,
    Fit,
    GroupUsage,
    JobDecision,
    Placer,
    QueuedJob,
    QueueState,
    QueueUsage,
    QuotaGroup,
    Unfit,
)
from trainop.queueing.ordering import QueueKey, Running, line_order, queue_order
from trainop.queueing.preemption import (
    PreemptPlan,
    plan_preemption,
    protection_note,
    released,
)
from trainop.queueing.resolve import BUILTIN_QUEUE, BUILTIN_QUEUE_NAME
from trainop.queueing.tail import Run, TailMemo, at_position, plain_wait
from trainop.queueing.topowait import TopologyWait, topology_wait


@dataclass
class _Outcome:
    reason: str = ""
    message: str = ""
    fit: Fit | None = None
    candidate: Candidate | None = None
    borrow: int = 0
    held: bool = False
    topology: TopologyWait | None = None


# JobDecision.admitted, as a set to test an action against.
_ADMITTED = frozenset((Action.ADMIT, Action.KEEP, Action.GROW, Action.SHRINK))

# A job's key and queue, read in C over every job of a pass (no Python-level loop).
_KEY, _QUEUE = attrgetter("key"), attrgetter("queue")

# The one candidate of an unlimited queue (frozen: shared by every job of every pass).
_UNLIMITED = Candidate(QuotaGroup(ANY_GROUP, (), 0), ())


class _Pass:
    def __init__(
        self,
        now: float,
        queues: Sequence[QueueState],
        jobs: Sequence[QueuedJob],
        snapshot: Snapshot,
        place: Placer,
        topology_wait_seconds: float = 1800.0,
        tails: TailMemo | None = None,
        keys: Sequence[str] | None = None,
    ) -> None:
        self.now = now
        self.tails = tails
        # The placer's Unfit bases while a job behind the head is considered (queueing.tail).
        self.bases: list[Bound | None] | None = None
        self.topology_wait_seconds = topology_wait_seconds
        self.queues: dict[str, QueueState] = {}
        for q in queues:
            if q.name in self.queues:
                raise ValueError(f"two queues are called {q.name!r}")
            self.queues[q.name] = q
        self.jobs = list(jobs)
        if BUILTIN_QUEUE_NAME in set(map(_QUEUE, self.jobs)):
            self.queues.setdefault(BUILTIN_QUEUE_NAME, BUILTIN_QUEUE)
        if keys is None:
            self.keys = list(map(_KEY, self.jobs))
            if len(set(self.keys)) != len(self.keys):
                raise ValueError("two jobs share a key")
        else:  # the caller's, unique (a dict's keys) and in the jobs' order
            self.keys = list(keys)
        self.snapshot = snapshot
        self.place = place
        self.fleet = fleet_products(snapshot)
        fleet_gpus = snapshot.memo(
            ("static", "schedulable-gpus"),
            lambda: sum(n.gpus_allocatable for n in snapshot.nodes if n.schedulable),
        )
        self.ledger = Ledger(self.queues, fleet_gpus)
        self.running: dict[str, Running] = {}
        self.decisions: dict[str, JobDecision] = {}
        self.holds: list[Hold] = []
        self.heads: dict[str, str] = {}
        self.lines: dict[str, list[QueuedJob]] = defaultdict(list)
        self.waiting: dict[str, int] = defaultdict(int)
        self.version = 0  # bumped whenever usage changes (admission, preemption)
        # Pending jobs moving to a reserved destination (queueing.migration): what the pass
        # holds for each until it is considered.
        self.moving: dict[str, dict[str, int]] = {}
        self._candidates: dict[tuple[str, tuple[str, ...]], tuple[Candidate, ...]] = {}

    # --- setup -------------------------------------------------------------------------
    def charge_admitted(self) -> None:
        tails = self.tails
        kept = tails.keeps if tails is not None else {}
        same = tails.same_queues(self.queues) if tails is not None else frozenset()
        keeps: dict[str, tuple[QueuedJob, str, JobDecision]] = {}
        queues, charge, running, decisions, now = (
            self.queues,
            self.ledger.charge,
            self.running,
            self.decisions,
            self.now,
        )
        for job in self.jobs:
            if not job.admitted:
                continue
            q = queues.get(job.queue)
            if q is None:  # its queue was deleted: it keeps running, charged nowhere
                self.decisions[job.key] = JobDecision(
                    job.key, job.queue, Action.KEEP, gpus=job.gpus
                )
                continue
            prev = kept.get(job.key)
            if prev is not None and prev[0] is job and q.name in same:
                _, group, decision = prev  # the same job in the same queue: the same Keep
            else:
                group = ANY_GROUP if q.unlimited else group_of(q, job.product)
                decision = JobDecision(
                    job.key, q.name, Action.KEEP, group=group, gpus=job.gpus, borrowed=0
                )
            keeps[job.key] = (job, group, decision)
            charge(q.name, group, job.gpus)
            running[job.key] = Running(job, group, at=now)
            decisions[job.key] = decision
        if tails is not None:
            tails.keep_running(self.queues, keeps)
        self.ledger.begin_history(self.now)

    def reserve_moves(self) -> None:
        """Hold every move's destination (QueuedJob.moving_to) for the gang that moves: the
        GPUs beyond those it still holds there, as far as they are free."""
        for job in self.jobs:
            if not job.moving_to:
                continue
            own = dict(job.nodes) if job.admitted else {}
            need: dict[str, int] = {}
            for node, gpus in job.moving_to:
                if node not in self.snapshot:
                    continue
                free = self.snapshot.node(node).gpus_free
                take = min(gpus - own.get(node, 0), free)
                if take > 0:
                    need[node] = take
            if need:
                self.snapshot = self.snapshot.with_reserved(need)
            if not job.admitted:
                self.moving[job.key] = need

    def line_up(self) -> None:
        queues, lines = self.queues, self.lines
        for job in self.jobs:
            if job.admitted:
                continue
            if job.queue in queues and not job.blocked_reason:  # (the usual case first)
                lines[job.queue].append(job)
                continue
            if job.blocked_reason:
                self.decisions[job.key] = JobDecision(
                    job.key,
                    job.queue,
                    Action.WAIT,
                    job.blocked_reason,
                    job.blocked_message,
                    gpus=job.gpus,
                )
                continue
            if job.queue not in self.queues:
                self.decisions[job.key] = JobDecision(
                    job.key,
                    job.queue,
                    Action.WAIT,
                    POLICY,
                    f"spec.queue: TrainingQueue {job.queue} does not exist",
                    gpus=job.gpus,
                )
        for name, line in self.lines.items():
            if self.tails is None:
                line.sort(key=line_order)
            else:  # the same jobs as last pass: the same order
                self.lines[name] = self.tails.line(name, line, line_order)

    # --- the fair-share loop -------------------------------------------------------------
    def run(self) -> None:
        cursor: dict[str, int] = dict.fromkeys(self.lines, 0)
        order_cache: dict[str, tuple[tuple[int, int], QueueKey]] = {}
        for name, line in self.lines.items():
            self.maybe_hold(line[0], self.queues[name])
        while True:
            live = [name for name, line in self.lines.items() if cursor[name] < len(line)]
            if not live:
                return
            if len(live) == 1:  # one line left: no fair-share order to find
                self.consider_rest(live[0], cursor[live[0]])
                return

            def order(name: str) -> QueueKey:
                # Cached until usage changes: most jobs wait, and waiting changes nothing.
                memo = (self.version, cursor[name])
                hit = order_cache.get(name)
                if hit is not None and hit[0] == memo:
                    return hit[1]
                q = self.queues[name]
                head = self.lines[name][cursor[name]]
                shares = self.ledger.share_path(q)  # root first: DRF among siblings per level
                key = queue_order(self.would_borrow(head, q), shares, head, name)
                order_cache[name] = (memo, key)
                return key

            name = min(live, key=order)
            job = self.lines[name][cursor[name]]
            cursor[name] += 1
            self.consider(job, self.queues[name])

    def consider_rest(self, name: str, start: int) -> None:
        """The rest of the last live line, in its order (what the loop would pick anyway).
        With a tail memo, runs of waiting jobs behind the head take the verdicts the last
        pass gave them when nothing they read changed (queueing.tail)."""
        q, line = self.queues[name], self.lines[name]
        tails = self.tails
        run: Run | None = None
        i = start
        while i < len(line):
            job = line[i]
            if tails is None or name not in self.heads or job.elastic is not None:
                self.end_run(name, run)
                run = None
                self.consider(job, q)
                i += 1
                continue
            if run is None:
                run = self.replay(q, line, i, tails)
                i += len(run.jobs)
                if run.jobs:
                    continue
            needs = self.consider_quietly(job, q)
            if needs is None:
                self.end_run(name, run)
                run = None
            else:
                run.add(job, self.decisions[job.key], needs)
            i += 1
        self.end_run(name, run)

    def replay(self, q: QueueState, line: list[QueuedJob], i: int, tails: TailMemo) -> Run:
        """The verdicts a run of the last pass holds for the jobs from `line[i]` on, at
        their positions now; returns the run to go on recording."""
        state = self.tail_state(q)
        kept, run = tails.replay(q.name, line, i, state, self.snapshot.memo_view())
        base = self.waiting[q.name]
        # Positions in a run are consecutive: when its first is right, all are.
        moved = kept if not kept or kept[0].position == base + 1 else _moved(kept, base)
        self.decisions.update(zip(run.keys, moved, strict=True))
        self.waiting[q.name] = base + len(moved)
        run.decisions = moved
        return run

    def end_run(self, name: str, run: Run | None) -> None:
        if self.tails is not None:
            self.tails.keep(name, run)

    def tail_state(self, q: QueueState) -> tuple[Any, ...]:
        """What a waiting job behind the head reads of the pass (see queueing.tail): every
        queue's spec too (its cohort's or tree's quotas), as the memo's epoch."""
        assert self.tails is not None
        ledger = self.ledger
        running = ledger.running.get(q.name, 0) if q.max_running_jobs is not None else None
        used = () if q.unlimited else tuple(sorted((k, v) for k, v in ledger.used.items() if v))
        holds = tuple(
            (h.queue, h.cohort, h.groups, h.head, h.waited, h.threshold, h.reason)
            for h in self.holds
        )
        free = self.snapshot.free_bound()
        return (self.tails.epoch, q, self.fleet, running, used, holds, free)

    def consider_quietly(self, job: QueuedJob, q: QueueState) -> tuple[Any, ...] | None:
        """Consider a job behind the head; the memo keys its verdict rests on when it is a
        plain wait that changed nothing and rests on marked placer answers alone, else None."""
        version, snapshot, holds = self.version, self.snapshot, len(self.holds)
        self.bases = []
        try:
            self.consider(job, q)
            bases = self.bases
        finally:
            self.bases = None
        quiet = (
            version == self.version
            and snapshot is self.snapshot
            and holds == len(self.holds)
            and plain_wait(self.decisions[job.key])
            and all(b is not None for b in bases)
        )
        return tuple(b.needs for b in bases if b is not None) if quiet else None

    def place_job(
        self, job: QueuedJob, snapshot: Snapshot, products: tuple[str, ...] | None
    ) -> Fit | Unfit:
        """The placer, noting whether its answer may be kept (queueing.tail)."""
        result = self.place(job, snapshot, products)
        if self.bases is not None:
            self.bases.append(result.basis if isinstance(result, Unfit) else None)
        return result

    def would_borrow(self, job: QueuedJob, q: QueueState) -> bool:
        """Whether no group can take the job within its nominal quota (reclaim counts as
        within): such jobs go after those that fit their own quota, as in Kueue."""
        if q.unlimited:
            return False
        for c in self.candidates(job, q):
            verdict = self.ledger.quota_fit(q, c.group.name, job.gpus)
            if (verdict.ok and not verdict.borrow) or verdict.reclaimable:
                return False
        return True

    def maybe_hold(self, job: QueuedJob, q: QueueState) -> None:
        """Hold capacity for `job`, its queue's head, once it waited past the threshold."""
        groups = None if q.unlimited else [c.group.name for c in self.candidates(job, q)]
        hold = new_hold(job, q, self.now, groups, self.holds)
        if hold is not None:
            self.holds.append(hold)

    def release_hold(self, job: QueuedJob) -> None:
        if self.holds:
            self.holds = [h for h in self.holds if h.head != job.key]

    def candidates(self, job: QueuedJob, q: QueueState) -> tuple[Candidate, ...]:
        if q.unlimited:
            return (_UNLIMITED,)
        key = (q.name, job.products)
        found = self._candidates.get(key)
        if found is None:
            found = self._candidates[key] = candidates(q, job.products, self.fleet)
        return found

    def blocks(self, job: QueuedJob, q: QueueState) -> Blocks:
        return blocks_for(job.key, q, self.holds) if self.holds else Blocks()

    def consider(self, job: QueuedJob, q: QueueState) -> None:
        held = self.moving.pop(job.key, None)
        if not held:
            self.consider_job(job, q)
            return
        # Its own destination is free to it (and to it alone); held again if it waits.
        self.snapshot = self.snapshot.with_released(held)
        self.consider_job(job, q)
        decision = self.decisions.get(job.key)
        if decision is not None and decision.action == Action.WAIT and not decision.victims:
            again = {n: min(g, self.snapshot.node(n).gpus_free) for n, g in held.items()}
            again = {n: g for n, g in again.items() if g > 0}
            if again:
                self.snapshot = self.snapshot.with_reserved(again)

    def consider_job(self, job: QueuedJob, q: QueueState) -> None:
        is_head = q.name not in self.heads
        cands = self.candidates(job, q)
        blocks = self.blocks(job, q)
        job, outcome = self.attempt_sized(job, q, cands, blocks)
        if outcome.topology is not None:
            self.wait_for_topology(job, q, cands, outcome.topology)
            return
        if outcome.fit is not None and outcome.candidate is not None:
            self.release_hold(job)
            self.admit(job, q, outcome.candidate, outcome.fit, outcome.borrow)
            return
        if is_head and not outcome.held and outcome.reason in (QUOTA, NOFIT):
            plan = plan_preemption(
                job,
                q,
                cands,
                blocks.excluded,
                self.ledger,
                self.running.values(),
                lambda c, victims, ledger: self.fits(job, q, c, victims, ledger, blocks),
            )
            if plan is not None:
                self.release_hold(job)  # it reserved its placement: nothing left to hold
                self.preempt(job, q, plan, outcome)
                self.heads[q.name] = job.key
                return
            note = protection_note(
                job,
                q,
                cands,
                blocks.excluded,
                self.ledger,
                self.running.values(),
                lambda c, victims, ledger: self.fits(job, q, c, victims, ledger, blocks),
            )
            if note:
                outcome.message = f"{outcome.message}; {note}"
        self.decisions[job.key] = JobDecision(
            job.key,
            q.name,
            Action.WAIT,
            outcome.reason,
            outcome.message,
            position=self.next_position(q),
            gpus=job.gpus,
            group=cands[0].group.name if cands else None,
        )
        if outcome.reason == INCOMPATIBLE or not is_head:
            self.release_hold(job)  # an Incompatible head cannot use what it would hold
            return
        self.heads[q.name] = job.key
        self.maybe_hold(job, q)
        for h in self.holds:
            if h.head == job.key:
                h.reason = outcome.reason

    def attempt_sized(
        self, job: QueuedJob, q: QueueState, cands: tuple[Candidate, ...], blocks: Blocks
    ) -> tuple[QueuedJob, _Outcome]:
        """An elastic job at the largest size that fits cleanly (queueing.elastic); only its
        smallest size may wait for a domain or preempt. A fixed-size job: as it is."""
        tries = elastic.sizes(job)
        if not tries:
            return job, self.attempt(job, q, cands, blocks)
        for size in tries[:-1]:
            sized = elastic.at_size(job, size)
            outcome = self.attempt(sized, q, cands, blocks)
            if outcome.fit is not None and outcome.topology is None:
                return sized, outcome
        sized = elastic.at_size(job, tries[-1])
        return sized, self.attempt(sized, q, cands, blocks)

    def attempt(  # noqa: C901, PLR0912 - quota group by group, then placement, each refusal with its reason
        self, job: QueuedJob, q: QueueState, cands: tuple[Candidate, ...], blocks: Blocks
    ) -> _Outcome:
        if blocks.whole_queue is not None:
            h = blocks.whole_queue
            return _Outcome(h.reason, h.message(""), held=True)
        if self.ledger.running_full(q):
            return _Outcome(
                QUOTA,
                f"queue {q.name} runs {self.ledger.running[q.name]} jobs, its maximum "
                "(policy.maxRunningJobs)",
            )
        if not cands:
            wanted = ", ".join(job.products) or "any product"
            return _Outcome(
                QUOTA,
                f"queue {q.name} has no quota for the GPU products the job allows ({wanted})",
            )
        several = len(cands) > 1

        def label(c: Candidate, text: str) -> str:
            return f"{c.group.name}: {text}" if several else text

        quota_msgs: list[str] = []
        held: list[tuple[Hold, str]] = []
        ready: list[tuple[Candidate, int]] = []
        for c in cands:
            k = c.group.name
            if k in blocks.excluded:
                held.append((blocks.excluded[k], k))
                continue
            verdict = self.ledger.quota_fit(q, k, job.gpus)
            if not verdict.ok:
                quota_msgs.append(label(c, verdict.message))
            elif verdict.borrow and k in blocks.no_borrow:
                held.append((blocks.no_borrow[k], k))
            else:
                ready.append((c, verdict.borrow))
        ready.sort(key=lambda item: item[1] > 0)  # stable: within-nominal groups first
        unfit: list[tuple[Candidate, Unfit]] = []
        spread: TopologyWait | None = None
        for c, borrow in ready:
            result = self.place_job(job, self.snapshot, c.products or None)
            if isinstance(result, Fit):
                wait = self.topology_wait(job, q, result)
                if wait is None:
                    return _Outcome(fit=result, candidate=c, borrow=borrow)
                spread = spread or wait
                continue
            unfit.append((c, result))
        if spread is not None:
            return _Outcome(TOPOLOGY, label(cands[0], spread.message), topology=spread)
        nofit = [(c, u) for c, u in unfit if u.reason != INCOMPATIBLE]
        if nofit:
            c, u = nofit[0]
            return _Outcome(NOFIT, label(c, u.message))
        if held:
            h, k = held[0]
            return _Outcome(h.reason if h.queue == q.name else QUOTA, h.message(k), held=True)
        if quota_msgs:
            return _Outcome(QUOTA, "; ".join(quota_msgs))
        c, u = unfit[0]
        return _Outcome(INCOMPATIBLE, "; ".join(label(c, u.message) for c, u in unfit))

    def topology_wait(self, job: QueuedJob, q: QueueState, fit: Fit) -> TopologyWait | None:
        bound = q.topology_wait_seconds
        if bound is None:
            bound = self.topology_wait_seconds
        running = (r.job for r in self.running.values() if not r.fresh)
        return topology_wait(job, fit, self.now, bound, self.snapshot, running)

    def wait_for_topology(
        self, job: QueuedJob, q: QueueState, cands: tuple[Candidate, ...], wait: TopologyWait
    ) -> None:
        """Wait (Topology): hold the awaited domain's free GPUs for the rest of the pass."""
        self.release_hold(job)
        if wait.hold:
            self.snapshot = self.snapshot.with_reserved(dict(wait.hold))
        self.decisions[job.key] = JobDecision(
            job.key,
            q.name,
            Action.WAIT,
            TOPOLOGY,
            wait.message,
            position=self.next_position(q),
            gpus=job.gpus,
            group=cands[0].group.name if cands else None,
        )

    # --- effects on the working state ------------------------------------------------------
    def admit(self, job: QueuedJob, q: QueueState, c: Candidate, fit: Fit, borrow: int) -> None:
        k = c.group.name
        self.version += 1
        self.ledger.charge(q.name, k, job.gpus)
        self.snapshot = self.snapshot.with_reserved(dict(fit.gpus_by_node))
        self.running[job.key] = Running(job, k, fresh=True)
        lend = f", {borrow} of them borrowed from {self.ledger.lender(q)}" if borrow else ""
        where = f" on {', '.join(fit.nodes)}" if fit.nodes else ""
        gpus = f"{job.gpus} GPUs" if q.unlimited else f"{job.gpus} {k} GPUs"
        self.decisions[job.key] = JobDecision(
            job.key,
            q.name,
            Action.ADMIT,
            "Admitted",
            f"admitted by queue {q.name}: {gpus}{lend}{where}{_sized(job)}",
            group=k,
            gpus=job.gpus,
            borrowed=borrow,
            placement=fit,
            size=job.size if job.elastic is not None else None,
        )

    def preempt(self, job: QueuedJob, q: QueueState, plan: PreemptPlan, why: _Outcome) -> None:
        k = plan.candidate.group.name
        self.version += 1
        for r in plan.victims:
            if r.shrink_to is not None:
                self.shrink(r, job, plan.reason)
                continue
            del self.running[r.key]
            self.ledger.uncharge(r.queue, r.group, r.job.gpus)
            if plan.reason == RECLAIM:
                vq = self.queues[r.queue]
                msg = (
                    f"preempted by {job.key} of queue {q.name}, which reclaims {k} GPUs its "
                    f"{self.ledger.lender(q)} lent to queue {r.queue} beyond that queue's quota "
                    f"of {vq.nominal(r.group)}"
                )
            else:
                msg = (
                    f"preempted by {job.key} (priority {job.priority}) of queue {q.name}: "
                    f"lower-priority jobs ({r.job.priority}) give way "
                    "(preemption.withinQueue LowerPriority)"
                )
            self.decisions[r.key] = JobDecision(
                r.key,
                r.queue,
                Action.PREEMPT,
                plan.reason,
                msg,
                group=r.group,
                gpus=r.job.gpus,
                preemptor=job.key,
            )
        self.snapshot = self.snapshot.with_released(released(plan.victims, self.snapshot))
        # The preemptor reserves what it will take once the victims are gone.
        self.ledger.charge(q.name, k, job.gpus)
        self.snapshot = self.snapshot.with_reserved(dict(plan.fit.gpus_by_node))
        names = ", ".join(r.key for r in plan.victims)
        count = len(plan.victims)
        self.decisions[job.key] = JobDecision(
            job.key,
            q.name,
            Action.WAIT,
            why.reason,
            f"{why.message}; preempting {count} job{'s' if count > 1 else ''} ({names}) "
            f"({plan.reason})",
            position=self.next_position(q),
            gpus=job.gpus,
            group=k,
            borrowed=plan.borrow,
            placement=plan.fit,
            victims=tuple(r.key for r in plan.victims),
            size=job.size if job.elastic is not None else None,
        )

    def shrink(self, part: Running, preemptor: QueuedJob, reason: str) -> None:
        """An elastic victim gives back its workers above min and keeps running."""
        whole = self.running[part.key]
        self.ledger.uncharge(part.queue, part.group, part.job.gpus)
        size = part.shrink_to
        assert size is not None
        kept = elastic.after_shrink(whole.job, size)
        self.running[part.key] = Running(kept, whole.group)
        self.decisions[part.key] = JobDecision(
            part.key,
            part.queue,
            Action.SHRINK,
            reason,
            f"shrinks from {elastic.current(whole.job)} to {size} workers (spec.elastic."
            f"minReplicas {size}) to make room for {preemptor.key} ({reason}) instead of being "
            "evicted",
            group=part.group,
            gpus=kept.gpus,
            preemptor=preemptor.key,
            size=size,
        )

    def grow(self) -> None:
        """At most one running elastic job grows per pass, and only while no job of the
        pass waits for GPUs (Quota, NoFit, Topology): waiting jobs have the higher claim."""
        growing = elastic.growth_order(self.running.values())  # (usually none: asked first)
        if not growing or any(
            d.action == Action.WAIT and d.reason in (QUOTA, NOFIT, TOPOLOGY)
            for d in self.decisions.values()
        ):
            return
        for r in growing:
            q = self.queues.get(r.queue)
            if q is None:
                continue
            group = q.group(r.group)
            products = group.products if group is not None and group.products else None
            for size in elastic.growth_sizes(r.job):
                request = elastic.grow_request(r.job, size)
                if not self.ledger.quota_fit(q, r.group, request.gpus).ok:
                    continue
                result = self.place(request, self.snapshot, products)
                if isinstance(result, Fit):
                    self.grow_to(r, q, request, result)
                    return

    def grow_to(self, r: Running, q: QueueState, request: QueuedJob, fit: Fit) -> None:
        self.version += 1
        self.ledger.charge(q.name, r.group, request.gpus)
        self.snapshot = self.snapshot.with_reserved(dict(fit.gpus_by_node))
        size = request.size
        assert size is not None
        before = elastic.current(r.job)
        note = f"; {fit.note}" if fit.note else ""
        self.decisions[r.key] = JobDecision(
            r.key,
            q.name,
            Action.GROW,
            "Grown",
            f"grows from {before} to {size} workers: GPUs freed and no job waits for them; "
            f"new workers on {', '.join(fit.nodes)}{note}",
            group=r.group,
            gpus=r.job.gpus + request.gpus,
            placement=fit,
            size=size,
        )

    def fits(
        self,
        job: QueuedJob,
        q: QueueState,
        c: Candidate,
        victims: list[Running],
        ledger: Ledger,
        blocks: Blocks,
    ) -> tuple[Fit, int] | None:
        """Quota and placement both fit once `victims` are gone (the re-simulation)."""
        if ledger.running_full(q):
            return None
        verdict = ledger.quota_fit(q, c.group.name, job.gpus)
        if not verdict.ok or (verdict.borrow and c.group.name in blocks.no_borrow):
            return None
        snapshot = self.snapshot.with_released(released(victims, self.snapshot))
        result = self.place(job, snapshot, c.products or None)
        if isinstance(result, Fit):
            return result, verdict.borrow
        return None

    # --- results -----------------------------------------------------------------------------
    def next_position(self, q: QueueState) -> int:
        # Each line is consumed in order and a waiting verdict is final for the pass, so the
        # position is the count of waiting jobs of the queue so far.
        self.waiting[q.name] += 1
        return self.waiting[q.name]

    def usage(self) -> dict[str, QueueUsage]:
        """Each queue's GPUs used and pending per group, from one walk over the decisions."""
        used: dict[str, dict[str, int]] = {name: defaultdict(int) for name in self.queues}
        pending: dict[str, dict[str, int]] = {name: defaultdict(int) for name in self.queues}
        counts = {name: [0, 0] for name in self.queues}  # admitted, waiting
        holding, wait = _ADMITTED, Action.WAIT
        for d in self.decisions.values():
            queue = d.queue
            if queue not in counts:
                continue
            action = d.action
            if action == wait:
                counts[queue][1] += 1
                if d.group:
                    pending[queue][d.group] += d.gpus
            elif action in holding:
                counts[queue][0] += 1
                used[queue][d.group or ANY_GROUP] += d.gpus
        out: dict[str, QueueUsage] = {}
        for name in sorted(self.queues):
            q, u, p = self.queues[name], used[name], pending[name]
            names = [g.name for g in q.groups]
            names += sorted(k for k in {*u, *p} if k not in names)
            groups = tuple(
                GroupUsage(
                    k,
                    q.nominal(k),
                    u[k],
                    0 if q.unlimited else max(0, u[k] - q.nominal(k)),
                    p[k],
                )
                for k in names
            )
            admitted, waiting = counts[name]
            out[name] = QueueUsage(
                name,
                groups,
                admitted,
                waiting,
                history=self.ledger.history_to_keep(q),
                half_life=q.half_life,
            )
        return out

    def result(self) -> Decisions:
        ordered = dict(zip(self.keys, map(self.decisions.__getitem__, self.keys), strict=True))
        return Decisions(jobs=ordered, usage=self.usage(), snapshot=self.snapshot)


def _moved(kept: list[JobDecision], base: int) -> list[JobDecision]:
    return [at_position(d, base + n) for n, d in enumerate(kept, 1)]


def _sized(job: QueuedJob) -> str:
    if job.elastic is None or job.size is None:
        return ""
    lo, hi = job.elastic
    return f" ({job.size} workers of {lo}-{hi}: the largest size that fits)"


def admit(
    now: float,
    queues: Sequence[QueueState],
    jobs: Sequence[QueuedJob],
    snapshot: Snapshot,
    try_place: Placer,
    *,
    topology_wait_seconds: float = 1800.0,
    tails: TailMemo | None = None,
    keys: Sequence[str] | None = None,
) -> Decisions:
    """Decide which pending jobs are admitted now, which wait and why, and who is preempted.

    now: seconds on the caller's clock (QueuedJob times use the same clock). queues: every
    TrainingQueue as QueueState (the built-in queue is added when a job names it). jobs:
    every unfinished job, admitted or pending. snapshot: the cluster now, admitted jobs'
    pods holding their GPUs. try_place: the placer (see model.Placer).
    topology_wait_seconds: the bound of topology-aware waiting for queues that set none
    (OperatorConfig.topology_wait_seconds). tails: the waiting tails of the caller's last
    pass (queueing.tail), for the same decisions at a cost that follows what changed.
    keys: the jobs' keys in their order, when the caller has them (unique: read from a
    dict), so the pass does not read them again. See the module doc.
    """
    p = _Pass(now, queues, jobs, snapshot, try_place, topology_wait_seconds, tails, keys)
    if tails is not None:
        tails.begin()
    p.charge_admitted()
    p.reserve_moves()
    p.line_up()
    p.run()
    p.grow()
    if tails is not None:
        tails.finish()
    return p.result()
