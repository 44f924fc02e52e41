"""Guaranteed minimum run before preemption (spec.preemption.minRunSeconds; issue 37).

Named cases: how long a gang is still protected, which plans the guarantee rules out (reclaim,
priority, shrink slices), and the head's wait message that says when a victim becomes one.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import queue, small_fleet, workload
from tests.unit.queueing_harness import decide
from trainop.queueing.groups import Candidate
from trainop.queueing.ledger import Ledger
from trainop.queueing.model import PRIORITY, RECLAIM, Action, Fit, QueueState, QuotaGroup
from trainop.queueing.ordering import Running
from trainop.queueing.preemption import plan_preemption, protected_for

H100 = Candidate(QuotaGroup("h100", (), 16), ())
NOW = 1_000.0


def _run(key: str, queue_name: str, started: float | None, prio: int = 0, **kw: Any) -> Running:
    b = workload(key, queue_name, 16).prio(prio).running_on(f"{key[-1]}0", f"{key[-1]}1")
    job = b.set(started=started).build()
    return Running(job, "h100", at=NOW, **kw)


@pytest.mark.parametrize(
    ("min_run", "started", "want"),
    [
        pytest.param(0, NOW - 1, 0.0, id="no-guarantee"),
        pytest.param(600, NOW - 100, 500.0, id="ran-100-of-600"),
        pytest.param(600, NOW - 600, 0.0, id="ran-exactly-the-minimum"),
        pytest.param(600, NOW - 5000, 0.0, id="long-past-it"),
        pytest.param(600, None, 600.0, id="not-started-counts-as-just-started"),
        pytest.param(600, NOW + 50, 600.0, id="start-in-the-future-counts-as-zero"),
    ],
)
def test_protected_for(min_run: int, started: float | None, want: float) -> None:
    q = queue("q").quota("h100", 16).preemption(minRunSeconds=min_run).state()
    assert protected_for(_run("q/a", "q", started), {"q": q}) == want


def _fits_when_freed(need: int) -> Any:
    def fits(c: Candidate, victims: list[Running], ledger: Ledger) -> tuple[Fit, int] | None:
        return (Fit(None, (), None), 0) if sum(r.job.gpus for r in victims) >= need else None

    return fits


def _plan(running: list[Running], *, q_min: int = 0, lend_min: int = 0) -> list[str] | None:
    q = (
        queue("q")
        .quota("h100", 16)
        .cohort("pool")
        .preemption(withinQueue="LowerPriority", minRunSeconds=q_min)
        .state()
    )
    lend = queue("lend").quota("h100", 0).cohort("pool").preemption(minRunSeconds=lend_min)
    queues: list[QueueState] = [q, lend.state()]
    ledger = Ledger({x.name: x for x in queues}, 64)
    for r in running:
        ledger.charge(r.queue, r.group, r.job.gpus)
    head = workload("q/head", "q", 16).prio(10).build()
    plan = plan_preemption(head, q, (H100,), (), ledger, running, _fits_when_freed(16))
    return None if plan is None else [r.key for r in plan.victims]


@pytest.mark.parametrize(
    ("running", "q_min", "lend_min", "want"),
    [
        pytest.param([_run("q/a", "q", NOW - 60, prio=1)], 0, 0, ["q/a"], id="no-guarantee"),
        pytest.param(
            [_run("q/a", "q", NOW - 60, prio=1)], 600, 0, None, id="priority-victim-too-young"
        ),
        pytest.param(
            [_run("q/a", "q", NOW - 60, prio=1), _run("q/b", "q", NOW - 900, prio=1)],
            600,
            0,
            ["q/b"],
            id="the-one-past-its-minimum-goes-instead",
        ),
        pytest.param(
            [_run("lend/c", "lend", NOW - 60)], 0, 600, None, id="reclaim-waits-for-borrower"
        ),
        pytest.param(
            [_run("lend/c", "lend", NOW - 60)],
            600,
            0,
            ["lend/c"],
            id="the-victims-queue-decides-not-the-claimants",
        ),
        pytest.param(
            [_run("lend/c", "lend", NOW - 700)], 0, 600, ["lend/c"], id="reclaim-after-minimum"
        ),
    ],
)
def test_plan_respects_minimum_run(
    running: list[Running], q_min: int, lend_min: int, want: list[str] | None
) -> None:
    assert _plan(running, q_min=q_min, lend_min=lend_min) == want


def test_elastic_slice_is_protected_too() -> None:
    q = queue("q").quota("h100", 32).preemption(minRunSeconds=600).state()
    grown = (
        workload("q/e", "q", 32)
        .elastic(2, 4)
        .running_workers("h0", "h1", "h2", "h3", started=NOW - 60)
        .build()
    )
    head = workload("q/head", "q", 16).prio(10).build()
    d = decide([q], [grown, head], small_fleet(h100=4), now=NOW)
    assert d["q/e"].action == Action.KEEP
    assert d["q/head"].action == Action.WAIT


@pytest.mark.parametrize(
    ("started", "want_action", "note"),
    [
        pytest.param(NOW - 60, Action.KEEP, "become preemptible in 540 s", id="too-young"),
        pytest.param(NOW - 600, Action.PREEMPT, None, id="old-enough"),
    ],
)
def test_head_is_told_when_a_victim_becomes_one(
    started: float, want_action: Action, note: str | None
) -> None:
    q = queue("q").quota("h100", 16).preemption(minRunSeconds=600).state()
    low = workload("q/low", "q", 16).prio(1).running_on("h0", "h1", started=started).build()
    head = workload("q/head", "q", 16).prio(10).build()
    d = decide([q], [low, head], small_fleet(h100=2), now=NOW)
    assert d["q/low"].action == want_action
    if note is not None:
        assert d["q/head"].action == Action.WAIT
        assert note in d["q/head"].message
        assert "q/low (queue q: minRunSeconds 600)" in d["q/head"].message
        assert f"({PRIORITY})" in d["q/head"].message
    else:
        assert d["q/head"].victims == ("q/low",)
    assert RECLAIM not in d["q/head"].message
