"""The waiting tails kept across admission passes (queueing.tail): the same decisions as a
full pass, at the cost of what changed.

The property test drives `queueing.cluster.decide` (the operator's pass, the planner as
placer) over random event sequences, twice side by side: once with a `TailMemo` kept across
passes, once without, each on its own snapshot lineage derived the way the operator derives
it (`Snapshot.with_usage`), each handing back the intakes of unchanged jobs. After every
event the two must decide the same (admits, preemptions, waits with reason, message and
position, queue usage). The named cases check that the memo is used at all, and dropped
where it must be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import H100, job, node, queue
from trainop.inventory import Snapshot, build_snapshot
from trainop.planner import OperatorConfig, Plan
from trainop.queueing.cluster import Inputs, PassResult, cycle_inputs, decide
from trainop.queueing.model import Action, JobDecision, QueuedJob
from trainop.queueing.tail import Run, TailMemo, _held

NODES = [  # 6 DGX H100 nodes in 2 racks of 3
    node(f"n{r}-{k}").gpus(8).gfd(H100, "550.54.14", ("9", "0")).rack(f"r{r}").block("b").build()
    for r in range(2)
    for k in range(3)
]
START = datetime(2026, 1, 1)
PRIORITIES = {"low": 0, "high": 100}
# (workers, GPUs each): partial nodes, whole nodes, gangs across a rack
SHAPES = ((1, 1), (1, 4), (1, 8), (2, 8), (3, 8), (4, 8))


def queues(
    backfill: int | None, max_running: int | None, qb: int = 16, tree: bool = False
) -> list[dict[str, Any]]:
    """qa (32 GPUs, preempts lower priorities) and qb (`qb` GPUs) lending to each other:
    in cohort "pool", or as the two leaves of queue "org" (48 GPUs) when `tree`."""
    a = queue("qa").quota("h100", 32).serves("ns-a")
    a.preemption(withinQueue="LowerPriority")
    if backfill is not None:
        a.backfill(backfill)
    b = queue("qb").quota("h100", qb).serves("ns-b")
    if max_running is not None:
        b.policy(maxRunningJobs=max_running)
    if not tree:
        return [a.cohort("pool").build(), b.cohort("pool").build()]
    org = queue("org").quota("h100", 48)
    return [a.parent("org").build(), b.parent("org").build(), org.build()]


@dataclass
class Side:
    """One of the two runs: its snapshot lineage, its intakes, its memo (or none)."""

    tails: TailMemo | None
    snapshot: Snapshot = field(default_factory=lambda: build_snapshot(NODES))
    intakes: dict[str, QueuedJob | None] = field(default_factory=dict)

    def decide(self, world: World, inputs: Inputs, config: OperatorConfig) -> PassResult:
        used = {n.name: 0 for n in self.snapshot.nodes}
        for held in world.holding.values():
            for node_name, gpus in held:
                used[node_name] += gpus
        self.snapshot = self.snapshot.with_usage(used)
        known = {k: v for k, v in self.intakes.items() if k not in world.changed}
        result = decide(
            world.now,
            list(world.bodies.values()),
            {},
            inputs,
            self.snapshot,
            config,
            dict(world.holding),
            known,
            self.tails,
        )
        self.intakes = dict(result.intakes)
        return result


@dataclass
class World:
    """The jobs, what each admitted one holds (as an assumption: no pods), the clock."""

    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    holding: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    now: datetime = START

    def arrive(self, n: int, shape: int, team: str, prio: str, elastic: bool) -> None:
        workers, gpus = SHAPES[shape]
        b = job(f"j{n:03d}", namespace=f"ns-{team}", workers=workers, gpus=gpus)
        b.placement(topology="rack", mode="Preferred").priority(prio).queue(f"q{team}")
        if elastic and gpus == 8:
            b.elastic(1, workers + 1)
        b.meta(creationTimestamp=(self.now).strftime("%Y-%m-%dT%H:%M:%SZ"))
        key = f"ns-{team}/j{n:03d}"
        self.bodies[key] = b.build()
        self.changed.add(key)

    def finish(self, pick: int) -> None:
        running = sorted(self.holding)
        if running:
            key = running[pick % len(running)]
            del self.holding[key], self.bodies[key]
            self.changed.add(key)

    def apply(self, result: PassResult) -> None:
        self.changed = set()
        for d in result.decisions.jobs.values():
            plan = d.placement.placement if d.placement is not None else None
            if d.action == Action.ADMIT and isinstance(plan, Plan):
                self.holding[d.key] = tuple(
                    sorted((node, gpus) for node, gpus in plan.pinned().values())
                )
                self.changed.add(d.key)
            elif d.action == Action.PREEMPT:
                self.holding.pop(d.key, None)
                self.changed.add(d.key)


ARRIVE = st.tuples(
    st.just("arrive"),
    st.integers(0, len(SHAPES) - 1),
    st.sampled_from(("a", "a", "a", "b")),
    st.sampled_from(("low", "low", "high")),
    st.booleans(),
)
# Arrivals and idle passes weigh most: the memo is used from the third quiet pass on.
EVENTS = st.one_of(
    ARRIVE,
    ARRIVE,
    st.tuples(st.just("finish"), st.integers(0, 50)),
    st.tuples(st.just("tick"), st.integers(1, 900)),
    st.tuples(st.just("quota"), st.sampled_from((8, 16, 24))),  # qb's quota, lent in cohort
    st.tuples(st.just("idle")),
    st.tuples(st.just("idle")),
    st.tuples(st.just("idle")),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    backlog=st.lists(ARRIVE, min_size=6, max_size=16),
    events=st.lists(EVENTS, min_size=3, max_size=30),
    backfill=st.one_of(st.none(), st.integers(0, 600)),
    max_running=st.one_of(st.none(), st.integers(1, 3)),
    tree=st.booleans(),
)
def test_the_memo_decides_as_a_full_pass(
    backlog: list[tuple[Any, ...]],
    events: list[tuple[Any, ...]],
    backfill: int | None,
    max_running: int | None,
    tree: bool,
) -> None:
    config = OperatorConfig(topology_wait_seconds=600.0)
    inputs = cycle_inputs(queues(backfill, max_running, tree=tree), {}, PRIORITIES)
    world, full, fast = World(), Side(None), Side(TailMemo())
    for n, event in enumerate(backlog):  # a backlog first: the fleet holds 48 GPUs
        world.arrive(100 + n, *event[1:])
    for n, event in enumerate(events):
        if event[0] == "arrive":
            world.arrive(n, *event[1:])
        elif event[0] == "finish":
            world.finish(event[1])
        elif event[0] == "tick":
            world.now += timedelta(seconds=event[1])
        elif event[0] == "quota":
            layout = queues(backfill, max_running, qb=event[1], tree=tree)
            inputs = cycle_inputs(layout, {}, PRIORITIES)
        expected = full.decide(world, inputs, config)
        got = fast.decide(world, inputs, config)
        assert got.decisions == expected.decisions, f"after event {n}: {event}"
        world.apply(expected)


# --- named cases -------------------------------------------------------------------------


def _deep(world: World, count: int) -> None:
    """The fleet full of 8-GPU jobs, then `count` 2 x 8 gangs waiting behind them."""
    for n in range(6):
        world.arrive(n, 2, "a", "low", False)
    for n in range(6, 6 + count):
        world.arrive(n, 3, "a", "low", False)


def _passes(world: World, side: Side, config: OperatorConfig, inputs: Inputs) -> PassResult:
    result = side.decide(world, inputs, config)
    world.apply(result)
    return result


@dataclass(frozen=True)
class Case:
    name: str
    change: str  # what happens between the second and the third pass
    replayed: int  # jobs the third pass took from the memo


CASES = [
    Case("nothing changed: every job behind the head replays", "none", 9),
    Case("capacity grew (a job ended): the tail is considered again", "finish", 0),
    Case("a new job at the end: the tail before it replays", "arrive", 9),
    Case("another config: the memo is forgotten", "config", 0),
    Case("a cohort member's quota changed: the tail is considered again", "quota", 0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_what_the_memo_replays(case: Case) -> None:
    config = OperatorConfig()
    inputs = cycle_inputs(queues(None, None), {}, PRIORITIES)
    world, side = World(), Side(TailMemo())
    _deep(world, 10)
    _passes(world, side, config, inputs)  # admits the fleet's fill
    _passes(world, side, config, inputs)  # the planner finds the 10 gangs placeable
    _passes(world, side, config, inputs)  # their waits rest on the free bound: recorded
    assert side.tails is not None
    if case.change == "finish":
        world.finish(0)
    elif case.change == "arrive":
        world.arrive(99, 3, "a", "low", False)
    elif case.change == "config":
        config = OperatorConfig()
    elif case.change == "quota":  # the cohort lends qa more: the quota messages change
        inputs = cycle_inputs(queues(None, None, qb=24), {}, PRIORITIES)
    kept = side.decide(world, inputs, config)
    assert side.tails.replayed == case.replayed
    again = Side(None, snapshot=side.snapshot).decide(world, inputs, config)
    assert kept.decisions == again.decisions


def test_positions_move_when_a_job_ahead_leaves() -> None:
    """The waiting head deleted: the next job is the head, and the verdicts behind it
    are replayed one place further up."""
    config = OperatorConfig()
    inputs = cycle_inputs(queues(None, None), {}, PRIORITIES)
    world, side = World(), Side(TailMemo())
    _deep(world, 4)
    for _ in range(3):
        before = _passes(world, side, config, inputs)
    del world.bodies["ns-a/j006"]
    world.changed.add("ns-a/j006")
    after = side.decide(world, inputs, config)
    waits = _positions(before.decisions.jobs)
    del waits["ns-a/j006"]
    assert _positions(after.decisions.jobs) == {k: p - 1 for k, p in waits.items()}
    assert side.tails is not None and side.tails.replayed == 2  # j008, j009; j007 is the head


def _positions(decisions: Mapping[str, Any]) -> dict[str, int]:
    return {k: d.position for k, d in decisions.items() if d.action == Action.WAIT}


def test_memo_keys_are_looked_up_again_only_after_a_drop() -> None:
    """A run's memo keys were all there when it was recorded; while the same memo has only
    grown since (no `forget_static` drop), they are not looked up again. After a drop, the
    run holds only up to the first job whose key is gone."""
    snapshot = build_snapshot(NODES)
    memo = snapshot.memo_view()
    jobs = [_queued(f"ns-a/j{n}") for n in range(3)]
    for n in range(3):
        memo[("static", "placeable", n)] = True
    run = Run(("state",), seen_in=(memo, memo.drops))
    for n, j in enumerate(jobs):
        wait = JobDecision(j.key, "qa", Action.WAIT, "NoFit", "", n + 1)
        run.add(j, wait, (("static", "placeable", n),))
    assert _held(run, 0, jobs, 0, memo) == 3
    snapshot.forget_static(lambda key: key == ("static", "placeable", 1))
    assert memo.drops == 1
    assert _held(run, 0, jobs, 0, memo) == 1  # j0's key is there, j1's is not
    assert _held(run, 0, jobs, 0, dict(memo)) == 1  # a plain dict: always looked up


def _queued(key: str) -> QueuedJob:
    return QueuedJob(key=key, queue="qa", gpus=8, created=0.0)
