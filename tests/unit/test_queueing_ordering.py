"""queueing.ordering: the keys that decide who goes first, tested directly."""

from __future__ import annotations

import pytest

from tests.builders import WorkloadBuilder, workload
from trainop.queueing.ordering import (
    Running,
    line_order,
    queue_order,
    same_group_first,
    victim_order,
)


@pytest.mark.parametrize(
    ("jobs", "want"),
    [
        pytest.param(
            [workload("a/old", "q", 8).created(1), workload("a/new", "q", 8).created(2)],
            ["a/old", "a/new"],
            id="older-first",
        ),
        pytest.param(
            [workload("a/low", "q", 8).created(1), workload("a/high", "q", 8).prio(10).created(2)],
            ["a/high", "a/low"],
            id="priority-before-age",
        ),
        pytest.param(
            [workload("a/b", "q", 8), workload("a/a", "q", 8)],
            ["a/a", "a/b"],
            id="tie-broken-by-key",
        ),
    ],
)
def test_line_order(jobs: list[WorkloadBuilder], want: list[str]) -> None:
    assert [j.key for j in sorted((b.build() for b in jobs), key=line_order)] == want


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param(
            (False, 0.9, workload("x/h", "x", 8)),
            (True, 0.1, workload("y/h", "y", 8)),
            id="own-quota-first",
        ),
        pytest.param(
            (False, 0.1, workload("x/h", "x", 8)),
            (False, 0.5, workload("y/h", "y", 8)),
            id="lower-share-first",
        ),
        pytest.param(
            (False, 0.1, workload("x/h", "x", 8).prio(5)),
            (False, 0.1, workload("y/h", "y", 8)),
            id="then-head-priority",
        ),
        pytest.param(
            (False, 0.1, workload("x/h", "x", 8).created(1)),
            (False, 0.1, workload("y/h", "y", 8).created(2)),
            id="then-head-age",
        ),
    ],
)
def test_queue_order_puts_the_first_before_the_second(
    a: tuple[bool, float, WorkloadBuilder], b: tuple[bool, float, WorkloadBuilder]
) -> None:
    first = queue_order(a[0], a[1], a[2].build(), a[2].build().queue)
    second = queue_order(b[0], b[1], b[2].build(), b[2].build().queue)
    assert first < second


def _running(
    key: str,
    prio: int,
    started: float | None,
    group: str = "h100",
    *,
    created: float = 0.0,
    gpus: int = 8,
) -> Running:
    builder = workload(key, "q", gpus).prio(prio).created(created).running_on("h0")
    return Running(builder.set(started=started).build(), group)


@pytest.mark.parametrize(
    ("pool", "want"),
    [
        pytest.param(
            [_running("q/high", 5, 1.0), _running("q/low", 1, 1.0)],
            ["q/low", "q/high"],
            id="lowest-priority-first",
        ),
        pytest.param(
            [_running("q/old", 1, 1.0), _running("q/young", 1, 9.0)],
            ["q/young", "q/old"],
            id="then-youngest-first",
        ),
        pytest.param(
            [_running("q/started", 1, 9.0), _running("q/unknown", 1, None)],
            ["q/unknown", "q/started"],
            id="no-start-time-counts-as-just-started",
        ),
        pytest.param(
            [
                _running("q/a-first", 1, 5.0, created=1.0),
                _running("q/b-later", 1, 5.0, created=2.0),
            ],
            ["q/b-later", "q/a-first"],
            id="same-start-second-the-later-created-first",
        ),
        pytest.param(
            [_running("q/a-big", 1, 5.0, gpus=64), _running("q/b-small", 1, 5.0, gpus=32)],
            ["q/b-small", "q/a-big"],
            id="same-start-and-creation-the-smaller-first",
        ),
    ],
)
def test_victim_order(pool: list[Running], want: list[str]) -> None:
    assert [r.key for r in sorted(pool, key=victim_order)] == want


def test_same_group_first_puts_the_wanted_group_ahead_of_priority() -> None:
    pool = [_running("q/other", 0, 1.0, "a100"), _running("q/mine", 5, 1.0, "h100")]
    assert [r.key for r in sorted(pool, key=same_group_first("h100"))] == ["q/mine", "q/other"]
