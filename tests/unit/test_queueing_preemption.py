"""queueing.preemption: who may be evicted, and the fewest victims that make a head fit.

The `fits` callable stands in for the pass's re-simulation: the head fits once the victims
free at least `need` GPUs, quota aside (the ledger is what the quota rules read)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import queue, small_fleet, workload
from tests.unit.queueing_harness import snapshot_for
from trainop.queueing.groups import Candidate
from trainop.queueing.ledger import Ledger
from trainop.queueing.model import PRIORITY, RECLAIM, Fit, QueueState, QuotaGroup
from trainop.queueing.ordering import Running
from trainop.queueing.preemption import plan_preemption, released, search

H100 = Candidate(QuotaGroup("h100", (), 16), ())


def _run(
    key: str, queue: str, gpus: int, prio: int = 0, started: float = 1.0, **kw: Any
) -> Running:
    nodes = [f"{key.split('/')[1]}-{i}" for i in range(max(1, gpus // 8))]
    job = workload(key, queue, gpus).prio(prio).running_on(*nodes, started=started).build()
    return Running(job, "h100", **kw)


def _fits_when_freed(need: int) -> Any:
    def fits(c: Candidate, victims: list[Running], ledger: Ledger) -> tuple[Fit, int] | None:
        freed = sum(r.job.gpus for r in victims)
        return (Fit(None, (), None), 0) if freed >= need else None

    return fits


def _ledger(queues: list[QueueState], running: list[Running]) -> Ledger:
    ledger = Ledger({q.name: q for q in queues}, 64)
    for r in running:
        ledger.charge(r.queue, r.group, r.job.gpus)
    return ledger


@pytest.mark.parametrize(
    ("pool", "need", "want"),
    [
        pytest.param([_run("q/a", "q", 8), _run("q/b", "q", 8)], 8, ["q/a"], id="one-is-enough"),
        pytest.param(
            [_run("q/a", "q", 8), _run("q/b", "q", 16)],
            16,
            ["q/b"],
            id="first-victim-tried-back-and-spared",
        ),
        pytest.param([_run("q/a", "q", 8)], 16, None, id="not-enough-nobody-preempted"),
    ],
)
def test_search_takes_the_fewest_victims(
    pool: list[Running], need: int, want: list[str] | None
) -> None:
    q = queue("q").quota("h100", 16).state()
    plan = search(H100, pool, PRIORITY, _ledger([q], pool), _fits_when_freed(need))
    assert (None if plan is None else [r.key for r in plan.victims]) == want


@pytest.mark.parametrize(
    ("head_prio", "running", "want", "reason"),
    [
        pytest.param(
            10,
            [_run("q/low", "q", 16, prio=1), _run("q/high", "q", 16, prio=20)],
            ["q/low"],
            PRIORITY,
            id="lower-priority-of-own-queue",
        ),
        pytest.param(
            10, [_run("q/peer", "q", 16, prio=10)], None, None, id="equal-priority-is-safe"
        ),
        pytest.param(
            10,
            [_run("q/fresh", "q", 16, prio=1, fresh=True)],
            None,
            None,
            id="admitted-this-pass-is-safe",
        ),
        pytest.param(
            0,
            [_run("lend/borrower", "lend", 16)],
            ["lend/borrower"],
            RECLAIM,
            id="reclaim-from-a-borrowing-cohort-member",
        ),
    ],
)
def test_plan_preemption(
    head_prio: int, running: list[Running], want: list[str] | None, reason: str | None
) -> None:
    q = queue("q").quota("h100", 16).cohort("pool").preemption(withinQueue="LowerPriority").state()
    lend = queue("lend").quota("h100", 0).cohort("pool").state()  # all it runs is borrowed
    head = workload("q/head", "q", 16).prio(head_prio).build()
    ledger = _ledger([q, lend], running)
    plan = plan_preemption(head, q, (H100,), (), ledger, running, _fits_when_freed(16))
    assert (None if plan is None else [r.key for r in plan.victims]) == want
    assert (None if plan is None else plan.reason) == reason


def test_a_held_group_is_never_preempted_for() -> None:
    q = queue("q").quota("h100", 16).preemption(withinQueue="LowerPriority").state()
    running = [_run("q/low", "q", 16, prio=1)]
    head = workload("q/head", "q", 16).prio(10).build()
    plan = plan_preemption(
        head, q, (H100,), {"h100"}, _ledger([q], running), running, _fits_when_freed(16)
    )
    assert plan is None


def test_released_counts_only_nodes_the_snapshot_has() -> None:
    r = _run("q/a", "q", 16)  # on nodes a-0 and a-1, 8 GPUs each
    fleet = [n for n in small_fleet(h100=2) if n]
    for i, n in enumerate(fleet):
        n["metadata"]["name"] = f"a-{i}"
    snapshot = snapshot_for(fleet[:1], [])  # a-1 is gone from the inventory
    assert released([r], snapshot) == {"a-0": 8}
