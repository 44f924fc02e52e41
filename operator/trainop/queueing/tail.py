"""Waiting tails kept from one admission pass to the next (pure): the jobs behind a queue's
head that cannot start are not considered again while nothing they read has changed.

Kueue parks a workload that does not fit until an event that may let it fit
(https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#queueing-strategy and its
`inadmissibleWorkloads`); this module keeps the same idea but gives every job the verdict the
full pass would give it, message and position included.

Why it is exact. In the rest of a line (`admission._Pass.consider_rest`) a job that is not
its queue's head and waits changes nothing the pass carries on: no usage is charged, the
snapshot is not touched, no hold or head moves. Its verdict is therefore a function of the
job and of the pass's state at its turn, the same state for a whole run of such jobs. What
that state is, for such a job: its queue (`QueueState`) and the other queues' specs (its
cohort's or tree's quotas: `TailMemo.epoch` moves when any differs), the fleet's GPU
products (its quota candidates), the ledger's usage (and the queue's running count when it
has a maximum), the holds, and the answers of the placer. Those answers are kept only when the placer marked them
(`model.Unfit.basis`): PlannerPlacer's "needs 16 GPUs; the cluster has 8 free", which follows
from the snapshot's `free_bound()` as long as the job version is known placeable (a "static"
memo key of the snapshot). An answer of the planner itself is never kept: the job breaks the
run and is considered again next pass.

A `Run` records such a run: the state at its start, its jobs (the QueuedJob objects
themselves; the operator hands back an unchanged job's intake as the same object) and their
verdicts. The next pass, at the same job of the same queue, in an equal state, takes the
verdicts of the longest prefix of the same jobs whose placeable keys are still in the memo,
with their positions moved when jobs ahead of them left the line.

Neighbours: `queueing.admission` records and replays runs; `queueing.planning` marks the
Unfits; `queueing.cluster.decide` keeps one `TailMemo` per operator config for its caller
(`handlers.scheduler.AdmissionLoop`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Container, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from trainop.queueing.model import Action, JobDecision, QueuedJob, QueueState


@dataclass
class Run:
    """Consecutive waiting jobs of one line behind its head, decided in one pass state."""

    state: tuple[Any, ...]
    jobs: list[QueuedJob] = field(default_factory=list)
    decisions: list[JobDecision] = field(default_factory=list)
    needs: list[tuple[Hashable, ...]] = field(default_factory=list)  # memo keys per job
    keys: list[str] = field(default_factory=list)  # the jobs' keys (read once, when added)
    # The memo and its drop count when every key of `needs` was last seen in it: while both
    # hold, the keys are all still there (the memo only grows between drops).
    seen_in: tuple[Any, int] | None = None

    def add(self, job: QueuedJob, decision: JobDecision, needs: tuple[Hashable, ...]) -> None:
        self.jobs.append(job)
        self.decisions.append(decision)
        self.needs.append(needs)
        self.keys.append(job.key)


def plain_wait(decision: JobDecision) -> bool:
    """A wait that carries nothing but its reason, message, position and group (no
    placement, victims, borrowing or size): the only kind a run records."""
    return (
        decision.action == Action.WAIT
        and decision.placement is None
        and not decision.victims
        and decision.borrowed == 0
        and decision.size is None
    )


def at_position(decision: JobDecision, position: int) -> JobDecision:
    """A recorded plain wait at another position (jobs ahead of it left the line)."""
    if decision.position == position:
        return decision
    d = decision
    return JobDecision(d.key, d.queue, d.action, d.reason, d.message, position, d.group, d.gpus)


class TailMemo:
    """The runs of the last pass, found by any of their jobs (queue, job key -> the run and
    the job's place in it); one per caller, kept across passes. `token`: what the placer's
    answers also depend on (the operator config); a memo handed another token forgets.

    Runs are indexed by their first job only; a pass almost always takes a run up where the
    last one began it, and the index of every job is built (once per pass) only when it does
    not: at 10,000 waiting jobs that index cost 7-9 ms of a 46 ms cycle (issue 33)."""

    def __init__(self) -> None:
        self.runs: dict[tuple[str, str], tuple[Run, int]] = {}  # by first job
        self._every: dict[tuple[str, str], tuple[Run, int]] | None = None  # lazily built
        self._last: list[tuple[str, Run]] = []  # the last pass's runs
        self._next: list[tuple[str, Run]] = []
        self.token: object = None
        self.replayed = 0  # jobs whose verdict the last pass took from a run
        # Running jobs' Keep decisions, by key with the QueuedJob and group they were made
        # for, and the queues of that pass: the same job in an equal queue keeps the same.
        self.keeps: dict[str, tuple[QueuedJob, str, JobDecision]] = {}
        self.queues: Mapping[str, QueueState] = {}
        self.epoch = 0  # moves whenever the queues differ from the last pass's
        # Each queue's line as the last pass took it in, and in its order.
        self.lines: dict[str, tuple[list[QueuedJob], list[QueuedJob]]] = {}
        self._lines: dict[str, tuple[list[QueuedJob], list[QueuedJob]]] = {}

    def valid_for(self, token: object) -> TailMemo:
        if token is not self.token:
            self.runs, self.keeps, self.queues, self.lines = {}, {}, {}, {}
            self._every, self._last = None, []
            self.token = token
        return self

    def same_queues(self, queues: Mapping[str, QueueState]) -> frozenset[str]:
        """The queues equal to the last pass's (once per queue, not per job). When any
        queue differs, the epoch moves: a run reads its cohort's or tree's quotas too."""
        same = frozenset(n for n, q in queues.items() if self.queues.get(n) == q)
        if len(same) != len(queues) or len(queues) != len(self.queues):
            self.epoch += 1
        return same

    def keep_running(
        self,
        queues: Mapping[str, QueueState],
        keeps: dict[str, tuple[QueuedJob, str, JobDecision]],
    ) -> None:
        self.queues, self.keeps = queues, keeps

    def begin(self) -> None:
        self._next, self._lines = [], {}
        self.replayed = 0

    def line(
        self, queue: str, jobs: list[QueuedJob], order: Callable[[QueuedJob], Any]
    ) -> list[QueuedJob]:
        """`jobs` sorted by `order`: the last pass's order when they are the same jobs."""
        last = self.lines.get(queue)
        if last is not None and len(last[0]) == len(jobs) and all(map(operator.is_, last[0], jobs)):
            ordered = list(last[1])
        else:
            ordered = sorted(jobs, key=order)
        self._lines[queue] = (jobs, ordered)
        return list(ordered)

    def replay(
        self,
        queue: str,
        line: Sequence[QueuedJob],
        start: int,
        state: tuple[Any, ...],
        memo: Container[Any],
    ) -> tuple[list[JobDecision], Run]:
        """The recorded verdicts (positions not yet moved) of the jobs from `line[start]` on
        that a run of the last pass holds, in an equal state; and the run this pass goes on
        recording (those jobs already in it)."""
        found = self.find(queue, line[start].key)
        drops = getattr(memo, "drops", None)  # a memo that counts its drops (StaticMemo)
        run = Run(state, seen_in=None if drops is None else (memo, drops))
        if found is None or found[0].state != state:
            return [], run
        old, first = found
        end = first + _held(old, first, line, start, memo)
        run.jobs, run.needs = old.jobs[first:end], old.needs[first:end]
        run.decisions, run.keys = old.decisions[first:end], old.keys[first:end]
        self.replayed += end - first
        return run.decisions, run

    def keep(self, queue: str, run: Run | None) -> None:
        if run is not None and run.jobs:
            self._next.append((queue, run))

    def find(self, queue: str, key: str) -> tuple[Run, int] | None:
        """The last pass's run holding job `key` of `queue`, and the job's place in it."""
        found = self.runs.get((queue, key))
        if found is not None:
            return found
        if self._every is None:
            self._every = {
                (name, key): (run, i) for name, run in self._last for i, key in enumerate(run.keys)
            }
        return self._every.get((queue, key))

    def finish(self) -> None:
        self.runs = {(queue, run.keys[0]): (run, 0) for queue, run in self._next}
        self._last, self._every, self._next = self._next, None, []
        self.lines, self._lines = self._lines, {}


def _held(old: Run, first: int, line: Sequence[QueuedJob], start: int, memo: Container[Any]) -> int:
    """How many jobs from `line[start]` on are `old`'s from `first` on, with their memo
    keys still there. The whole rest is tried first with C-level loops (the usual case: a
    tail that did not change), then job by job up to the first difference."""
    size = min(len(old.jobs) - first, len(line) - start)
    jobs, needs = old.jobs[first : first + size], old.needs[first : first + size]
    seen = old.seen_in
    same = seen is not None and seen[0] is memo and seen[1] == getattr(memo, "drops", None)
    if all(map(operator.is_, jobs, line[start : start + size])) and (
        same or all(map(memo.__contains__, chain.from_iterable(needs)))
    ):
        return size
    count = 0
    for recorded, job, keys in zip(jobs, line[start:], needs, strict=False):
        if recorded is not job or any(k not in memo for k in keys):
            break
        count += 1
    return count
