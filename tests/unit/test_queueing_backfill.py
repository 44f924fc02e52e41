"""queueing.backfill: when a head starts holding, and whom its hold blocks."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tests.builders import queue, workload
from trainop.queueing.backfill import Hold, blocks_for, new_hold, secs


@pytest.mark.parametrize(
    ("waited", "threshold", "others", "holds"),
    [
        pytest.param(30.0, 60.0, [], False, id="not-waited-long-enough"),
        pytest.param(90.0, 60.0, [], True, id="waited-past-threshold"),
        pytest.param(60.0, 60.0, [], False, id="exactly-the-threshold-is-not-past"),
        pytest.param(
            90.0,
            60.0,
            [Hold("nlp", None, frozenset({"h100"}), "nlp/other", 99.0, 60.0)],
            False,
            id="one-hold-per-queue",
        ),
        pytest.param(1e9, math.inf, [], False, id="infinite-threshold-never-holds"),
    ],
)
def test_new_hold(waited: float, threshold: float, others: list[Hold], holds: bool) -> None:
    q = replace(queue("nlp").quota("h100", 16).state(), backfill_wait_seconds=threshold)
    head = workload("nlp/head", "nlp", 16).created(0).build()
    hold = new_hold(head, q, waited, ["h100"], others)
    assert (hold is not None) == holds
    if hold is not None:
        assert (hold.head, hold.groups, hold.waited) == ("nlp/head", frozenset({"h100"}), waited)


def _hold(queue: str, head: str, waited: float, cohort: str | None = "pool") -> Hold:
    return Hold(queue, cohort, frozenset({"h100"}), head, waited, 60.0)


@pytest.mark.parametrize(
    ("job", "queue_name", "holds", "excluded", "no_borrow"),
    [
        pytest.param(
            "nlp/later", "nlp", [_hold("nlp", "nlp/head", 90)], {"h100"}, set(), id="same-queue"
        ),
        pytest.param(
            "cv/x",
            "cv",
            [_hold("nlp", "nlp/head", 90)],
            set(),
            {"h100"},
            id="cohort-may-not-borrow",
        ),
        pytest.param(
            "cv/x",
            "cv",
            [_hold("nlp", "nlp/head", 90, cohort="other")],
            set(),
            set(),
            id="other-cohort-unaffected",
        ),
        pytest.param(
            "nlp/head", "nlp", [_hold("nlp", "nlp/head", 90)], set(), set(), id="own-hold-no-block"
        ),
        pytest.param(
            "cv/head",
            "cv",
            [_hold("nlp", "nlp/head", 90), _hold("cv", "cv/head", 120)],
            set(),
            set(),
            id="longer-wait-wins-between-heads",
        ),
    ],
)
def test_blocks_for(
    job: str, queue_name: str, holds: list[Hold], excluded: set[str], no_borrow: set[str]
) -> None:
    q = queue(queue_name).quota("h100", 16).cohort("pool").state()
    blocks = blocks_for(job, q, holds)
    assert set(blocks.excluded) == excluded
    assert set(blocks.no_borrow) == no_borrow


def test_hold_message_names_the_head_and_the_wait() -> None:
    msg = _hold("nlp", "nlp/head", 90).message("h100")
    assert msg == (
        "h100 GPUs are held for nlp/head, first in queue nlp, which has waited 90s "
        "(more than backfillWaitSeconds 60s)"
    )
    assert secs(math.inf) == "forever"
