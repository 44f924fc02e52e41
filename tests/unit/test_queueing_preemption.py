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


# --- lost work (issue 24): GPU-seconds since the last checkpoint are part of a victim's cost ---
NOW = 10_000.0


def _ckpt(
    key: str, gpus: int, started: float, checkpointed: float | None = None, prio: int = 0
) -> Running:
    job = (
        workload(key, "q", gpus)
        .prio(prio)
        .running_on(*[f"{key[2:]}-{i}" for i in range(max(1, gpus // 8))], started=started)
        .set(checkpointed=checkpointed)
        .build()
    )
    return Running(job, "h100", at=NOW)


LOST_WORK = [
    # (name, running, GPUs the head needs, victims)
    (
        "a-fresh-checkpoint-makes-the-older-job-cheaper",
        [_ckpt("q/old", 8, started=0, checkpointed=9_900), _ckpt("q/young", 8, started=5_000)],
        8,
        ["q/old"],  # 100 s x 8 GPUs lost, not 5,000 s x 8
    ),
    (
        "without-checkpoints-the-youngest-goes",
        [_ckpt("q/old", 8, started=0), _ckpt("q/young", 8, started=5_000)],
        8,
        ["q/young"],
    ),
    (
        "gpus-weigh-the-time",
        [_ckpt("q/wide", 16, started=9_000), _ckpt("q/narrow", 8, started=7_000)],
        8,
        ["q/wide"],  # 1,000 s x 16 = 16,000 < 3,000 s x 8 = 24,000
    ),
    (
        "priority-still-comes-first",
        [_ckpt("q/low", 8, started=0, prio=0), _ckpt("q/mid", 8, started=9_999, prio=5)],
        8,
        ["q/low"],
    ),
    (
        "a-checkpoint-before-the-start-counts-from-the-start",
        [
            _ckpt("q/a", 8, started=9_000, checkpointed=100),
            _ckpt("q/b", 8, started=8_000, checkpointed=9_500),
        ],
        8,
        ["q/b"],  # a lost 1,000 s (since its restart), b 500 s
    ),
]


@pytest.mark.parametrize(
    ("name", "running", "need", "want"), LOST_WORK, ids=[c[0] for c in LOST_WORK]
)
def test_victims_that_lose_less_work_go_first(
    name: str, running: list[Running], need: int, want: list[str]
) -> None:
    q = queue("q").quota("h100", 16).preemption(withinQueue="LowerPriority").state()
    head = workload("q/head", "q", need).prio(10).build()
    plan = plan_preemption(
        head, q, (H100,), (), _ledger([q], running), running, _fits_when_freed(need)
    )
    assert plan is not None and [r.key for r in plan.victims] == want
