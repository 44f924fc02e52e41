"""queueing.migration: when a running gang that checkpoints is moved to a better placement.

The fleet: two racks of two 8-GPU H100 nodes (ra: a0 a1, rb: b0 b1), one block. The gang
q/m holds 16 GPUs across the racks (a0 + b0); its allreduce there crosses the spine. Every
rule of the module doc has a named case: the move itself, the gain/cost test at its bound,
and each refusal.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.builders import H100, node, queue, workload
from trainop.inventory import Snapshot, build_snapshot
from trainop.placement import GangRequest, GroupRequest, NoFit, place
from trainop.queueing.migration import (
    HIGHER_PRIORITY_WAITS,
    IN_FLIGHT,
    MIN_RUN,
    NO_BETTER_PLACEMENT,
    NO_CHECKPOINT,
    NO_ESTIMATE,
    NOT_WORTH_IT,
    OFF,
    OPTED_OUT,
    QUEUE_OPTED_OUT,
    RECENTLY_MOVED,
    SLOTS_FULL,
    MigrationPlan,
    MigrationPolicy,
    Mover,
    plan_moves,
)
from trainop.queueing.model import Fit, QueuedJob, QueueState, Unfit
from trainop.queueing.planning import fit_of

NOW = 100_000.0
ON = MigrationPolicy(enabled=True)


def _fleet() -> list[dict[str, Any]]:
    return [
        node(name).gpus(8).product(H100).rack(rack).block("b").build()
        for name, rack in (("a0", "ra"), ("a1", "ra"), ("b0", "rb"), ("b1", "rb"))
    ]


def rack_placer(
    job: QueuedJob, snapshot: Snapshot, products: tuple[str, ...] | None
) -> Fit | Unfit:
    """The placement engine, a gang of 8-GPU pods packed by rack (Preferred; Required for
    the waiting gangs of namespace w)."""
    request = GangRequest(
        job=job.key,
        groups=(GroupRequest("Worker", job.gpus // 8, 8),),
        topology="rack",
        mode="Required" if job.key.startswith("w/") else "Preferred",
        gpu_products=products or (),
    )
    result = place(snapshot, request)
    if isinstance(result, NoFit):
        return Unfit("NoFit", result.reason)
    return fit_of(result, snapshot)


def _running(key: str, *nodes: str, prio: int = 0, started: float = 0.0) -> QueuedJob:
    return workload(key, "q", 8 * len(nodes)).prio(prio).running_on(*nodes, started=started).build()


def _snapshot(jobs: list[QueuedJob]) -> Snapshot:
    held: dict[str, int] = {}
    for j in jobs:
        for n, g in j.nodes:
            held[n] = held.get(n, 0) + g
    return build_snapshot(_fleet()).with_reserved(held)


def _allreduce(*nodes: str) -> float:
    """The estimate of a 16-GPU gang on exactly these nodes."""
    others = {n["metadata"]["name"]: 8 for n in _fleet() if n["metadata"]["name"] not in nodes}
    fit = rack_placer(_running("x/y", *nodes), build_snapshot(_fleet()).with_reserved(others), None)
    assert isinstance(fit, Fit) and fit.allreduce is not None
    return fit.allreduce.seconds


SPREAD = _allreduce("a0", "b0")
PACKED = _allreduce("a0", "a1")
PER_STEP = SPREAD - PACKED  # seconds a step saves in one rack


def _mover(**kw: Any) -> Mover:
    base = Mover(
        job=_running("q/m", "a0", "b0"),
        checkpoints=True,
        allreduce=SPREAD,
        steps_left=1_000_000,
    )
    return replace(base, **kw)


def _plan(
    movers: list[Mover],
    *,
    others: tuple[QueuedJob, ...] = (),
    policy: MigrationPolicy = ON,
    queues: tuple[QueueState, ...] = (),
    waiting: tuple[QueuedJob, ...] = (),
) -> MigrationPlan:
    qs = {q.name: q for q in (queues or (queue("q").state(),))}
    snap = _snapshot([m.job for m in movers] + list(others))
    return plan_moves(NOW, movers, snap, rack_placer, qs, policy, waiting)


def test_the_fleet_makes_one_rack_faster() -> None:
    assert PACKED < SPREAD


def test_a_spread_gang_moves_into_the_rack_that_freed() -> None:
    plan = _plan([_mover()])
    (move,) = plan.moves
    assert move.key == "q/m"
    assert move.source == ("a0", "b0")
    assert set(move.destination) == {"a0", "a1"}
    assert move.gain == pytest.approx(PER_STEP * 1_000_000)
    assert move.cost == ON.default_cost_seconds and not move.cost_measured
    assert "moved from a0, b0 to" in move.message and "the configured default" in move.message
    # The destination is reserved while the gang checkpoints: a1 is taken on the snapshot
    # the caller keeps (a0 is still the gang's own until it leaves).
    assert plan.snapshot is not None and plan.snapshot.node("a1").gpus_free == 0
    assert plan.refusals == {}


@pytest.mark.parametrize(
    ("mover", "others", "policy", "queues", "waiting", "rule"),
    [
        pytest.param(_mover(), (), MigrationPolicy(), (), (), OFF, id="off-by-default"),
        pytest.param(_mover(checkpoints=False), (), ON, (), (), NO_CHECKPOINT, id="no-checkpoint"),
        pytest.param(_mover(migratable=False), (), ON, (), (), OPTED_OUT, id="job-opts-out"),
        pytest.param(
            _mover(),
            (),
            ON,
            (queue("q").set("migratable", False).state(),),
            (),
            QUEUE_OPTED_OUT,
            id="queue-opts-out",
        ),
        pytest.param(_mover(moving=True), (), ON, (), (), IN_FLIGHT, id="already-moving"),
        pytest.param(
            _mover(last_moved=NOW - 600), (), ON, (), (), RECENTLY_MOVED, id="moved-within-window"
        ),
        pytest.param(
            _mover(job=_running("q/m", "a0", "b0", started=NOW - 60)),
            (),
            ON,
            (queue("q").preemption(minRunSeconds=600).state(),),
            (),
            MIN_RUN,
            id="younger-than-min-run",
        ),
        pytest.param(_mover(steps_left=None), (), ON, (), (), NO_ESTIMATE, id="no-steps-left"),
        pytest.param(
            _mover(),
            (),
            ON,
            (),
            (workload("q/vip", "q", 32).prio(5).build(),),
            HIGHER_PRIORITY_WAITS,
            id="higher-priority-waits",
        ),
        pytest.param(_mover(allreduce=None), (), ON, (), (), NO_ESTIMATE, id="no-estimate-now"),
        pytest.param(
            _mover(),
            (_running("q/x", "a1"), _running("q/y", "b1")),
            ON,
            (),
            (),
            NO_BETTER_PLACEMENT,
            id="no-rack-free",
        ),
        pytest.param(
            _mover(steps_left=10), (), ON, (), (), NOT_WORTH_IT, id="few-steps-left-not-worth-it"
        ),
        pytest.param(
            _mover(measured_cost=1e9), (), ON, (), (), NOT_WORTH_IT, id="own-measured-cost-too-high"
        ),
    ],
)
def test_refusals(
    mover: Mover,
    others: tuple[QueuedJob, ...],
    policy: MigrationPolicy,
    queues: tuple[QueueState, ...],
    waiting: tuple[QueuedJob, ...],
    rule: str,
) -> None:
    plan = _plan([mover], others=others, policy=policy, queues=queues, waiting=waiting)
    assert plan.moves == ()
    assert plan.refusals["q/m"].rule == rule, plan.refusals["q/m"].message


@pytest.mark.parametrize(
    ("mover", "waiting", "moves"),
    [
        pytest.param(
            _mover(last_moved=NOW - ON.window_seconds), (), True, id="window-over-moves-again"
        ),
        pytest.param(
            _mover(), (workload("q/peer", "q", 32).build(),), True, id="equal-priority-waiting-ok"
        ),
        pytest.param(
            _mover(job=_running("q/m", "a0", "b0", started=NOW - 600)),
            (),
            True,
            id="past-min-run",
        ),
    ],
)
def test_moves_allowed(mover: Mover, waiting: tuple[QueuedJob, ...], moves: bool) -> None:
    q = queue("q").preemption(minRunSeconds=600).state()
    plan = _plan([mover], waiting=waiting, queues=(q,))
    assert bool(plan.moves) == moves, plan.refusals


@pytest.mark.parametrize(
    ("cost", "multiple", "moves"),
    [
        pytest.param(PER_STEP * 1000 / 2, 2.0, True, id="gain-exactly-2x-cost-moves"),
        pytest.param(PER_STEP * 1000 / 2 * 1.01, 2.0, False, id="gain-just-under-2x-stays"),
        pytest.param(PER_STEP * 1000 / 3 * 1.01, 3.0, False, id="multiple-3x-configured"),
        pytest.param(PER_STEP * 1000, 1.0, True, id="multiple-1x-break-even-moves"),
    ],
)
def test_gain_against_multiple_of_measured_cost(cost: float, multiple: float, moves: bool) -> None:
    policy = replace(ON, gain_multiple=multiple)
    plan = _plan([_mover(steps_left=1000, measured_cost=cost)], policy=policy)
    assert bool(plan.moves) == moves
    if moves:
        assert plan.moves[0].cost_measured and "measured on its last move" in plan.moves[0].message


def test_slots_bound_moves_in_flight() -> None:
    other = Mover(job=_running("q/o", "b1"), checkpoints=True, moving=True)
    plan = _plan([_mover(), other])
    assert plan.moves == ()
    assert plan.refusals["q/m"].rule == SLOTS_FULL
    assert plan.refusals["q/o"].rule == IN_FLIGHT


def test_one_free_rack_goes_to_the_larger_gain() -> None:
    """Racks ra, rb and a free rc: q/m (a0 + b0) and q/n (a1 + b1) both want rc; q/n has
    more steps left, so it gets rc, and q/m, priced again with rc reserved, stays."""
    third = [node(n).gpus(8).product(H100).rack("rc").block("b").build() for n in ("c0", "c1")]
    m = _mover(steps_left=1_000_000)
    n = Mover(
        job=_running("q/n", "a1", "b1"), checkpoints=True, allreduce=SPREAD, steps_left=2_000_000
    )
    snap = build_snapshot(_fleet() + third).with_reserved({"a0": 8, "b0": 8, "a1": 8, "b1": 8})
    policy = replace(ON, max_in_flight=2)
    plan = plan_moves(NOW, [m, n], snap, rack_placer, {"q": queue("q").state()}, policy)
    (move,) = plan.moves
    assert move.key == "q/n" and set(move.destination) == {"c0", "c1"}
    assert plan.refusals["q/m"].rule == NO_BETTER_PLACEMENT


def test_the_other_rack_when_its_own_is_busy() -> None:
    plan = _plan([_mover(steps_left=500_000)], others=(_running("q/x", "a1"),))
    (move,) = plan.moves
    assert set(move.destination) == {"b0", "b1"}


def _waiter(prio: int = 0, run: float | None = 3600.0) -> QueuedJob:
    """A 16-GPU gang that must have one rack (Required): with q/m across both, none is free."""
    return workload("w/big", "w", 16).prio(prio).set(expected_run=run).build()


@pytest.mark.parametrize(
    ("waiter", "steps_left", "rule"),
    [
        pytest.param(_waiter(), None, None, id="move-lets-waiting-gang-start"),
        pytest.param(_waiter(prio=5), None, None, id="higher-priority-waiter-served"),
        pytest.param(_waiter(prio=-1), None, NO_ESTIMATE, id="lower-priority-waiter-ignored"),
        pytest.param(_waiter(run=None), None, NO_ESTIMATE, id="waiter-run-unknown-counts-nothing"),
        pytest.param(_waiter(run=100.0), None, NOT_WORTH_IT, id="waiter-run-too-short"),
        pytest.param(
            _waiter(prio=5, run=None),
            1_000_000,
            HIGHER_PRIORITY_WAITS,
            id="own-gain-yields-to-higher",
        ),
    ],
)
def test_waiting_gang_gain(waiter: QueuedJob, steps_left: int | None, rule: str | None) -> None:
    plan = _plan([_mover(steps_left=steps_left)], waiting=(waiter,))
    if rule is None:
        (move,) = plan.moves
        assert move.unblocks == "w/big"
        assert move.gain == pytest.approx(3600.0)
        assert "so that w/big can start" in move.message
    else:
        assert plan.moves == ()
        assert plan.refusals["q/m"].rule == rule, plan.refusals["q/m"].message


# --- consolidation: smaller gangs step aside so that a spread gang moves in whole ---------
# A third rack rc (c0, c1). q/m holds a0 + b0; q/s (8 GPUs, movable) holds a1; q/x holds b1
# and q/y c1 (neither checkpoints). No rack is free for q/m; once q/s moves to c0, ra is.
CONSOLIDATE = replace(ON, consolidate=True, max_in_flight=2)


def _consolidation_fleet() -> list[dict[str, Any]]:
    third = [node(n).gpus(8).product(H100).rack("rc").block("b").build() for n in ("c0", "c1")]
    return _fleet() + third


def _small(**kw: Any) -> Mover:
    one_node = rack_placer(_running("q/s", "a1"), build_snapshot(_fleet()), None)
    assert isinstance(one_node, Fit) and one_node.allreduce is not None
    base = Mover(
        job=_running("q/s", "a1"),
        checkpoints=True,
        allreduce=one_node.allreduce.seconds,  # on any one node: it loses nothing by moving
        steps_left=10,
    )
    return replace(base, **kw)


def _consolidate(
    small: Mover | None = None,
    *,
    policy: MigrationPolicy = CONSOLIDATE,
    c0_taken: bool = False,
    queues: tuple[QueueState, ...] = (),
    waiting: tuple[QueuedJob, ...] = (),
    m: Mover | None = None,
) -> MigrationPlan:
    small = small or _small()
    m = m or _mover()
    held = {"a0": 8, "b0": 8, "a1": 8, "b1": 8, "c1": 8, **({"c0": 8} if c0_taken else {})}
    fixed = [
        Mover(job=_running(k, n), checkpoints=False) for k, n in (("q/x", "b1"), ("q/y", "c1"))
    ]
    snap = build_snapshot(_consolidation_fleet()).with_reserved(held)
    qs = {q.name: q for q in (queues or (queue("q").state(),))}
    return plan_moves(NOW, [m, small, *fixed], snap, rack_placer, qs, policy, waiting)


def test_smaller_gang_steps_aside_for_a_spread_one() -> None:
    plan = _consolidate()
    aside, move = plan.moves
    assert (aside.key, aside.destination, aside.makes_room_for) == ("q/s", ("c0",), "q/m")
    assert move.key == "q/m" and set(move.destination) == {"a0", "a1"}
    assert move.room == (aside,)
    assert move.gain == pytest.approx(PER_STEP * 1_000_000)
    # m's own cost plus q/s's, weighed by its GPUs (8 of m's 16)
    assert move.cost == pytest.approx(ON.default_cost_seconds * 1.5)
    assert "once q/s step aside" in move.message and "making room for q/m" in aside.message
    # c0 is taken for q/s; a1 (q/s's until it leaves) is q/m's once it does
    assert plan.snapshot is not None
    assert plan.snapshot.node("c0").gpus_free == 0 and plan.snapshot.node("a1").gpus_free == 0


@pytest.mark.parametrize(
    ("kw", "rule"),
    [
        pytest.param({"policy": ON}, NO_BETTER_PLACEMENT, id="consolidate-off"),
        pytest.param(
            {"policy": replace(ON, consolidate=True)}, NO_BETTER_PLACEMENT, id="one-slot-only"
        ),
        pytest.param(
            {"small": _small(checkpoints=False)}, NO_BETTER_PLACEMENT, id="blocker-cannot-move"
        ),
        pytest.param({"c0_taken": True}, NO_BETTER_PLACEMENT, id="no-room-for-the-blocker"),
        pytest.param({"m": _mover(steps_left=1)}, NO_BETTER_PLACEMENT, id="does-not-pay"),
        pytest.param(
            {
                "small": _small(job=_running("q/s", "a1", started=NOW - 10)),
                "queues": (queue("q").preemption(minRunSeconds=600).state(),),
            },
            NO_BETTER_PLACEMENT,
            id="blocker-within-min-run",
        ),
        pytest.param(
            {"small": _small(job=_running("q/s", "a1", "c0"))},
            NO_BETTER_PLACEMENT,
            id="blocker-not-smaller",
        ),
        pytest.param(
            {"small": _small(allreduce=1e-6)}, NO_BETTER_PLACEMENT, id="blocker-would-be-slower"
        ),
        pytest.param(
            {"waiting": (_waiter(prio=5, run=None),)},
            HIGHER_PRIORITY_WAITS,
            id="higher-priority-waits",
        ),
    ],
)
def test_consolidation_refused(kw: dict[str, Any], rule: str) -> None:
    plan = _consolidate(**kw)
    assert plan.moves == ()
    assert plan.refusals["q/m"].rule == rule
