"""Guaranteed minimum run per PriorityClass (annotation trainop.dev/min-run-seconds; issue 37).

The stricter of the job's queue (spec.preemption.minRunSeconds) and its PriorityClass
applies, and what protects it says which: queueing.preemption.protection (named cases), the
annotation's reading, the head's wait message, migration's refusal, `trainop explain`'s line,
the intake and `trainop simulate`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.builders import fleet_snapshot, job, queue, small_fleet, workload
from tests.unit.queueing_harness import decide
from trainop.api.constants import ANNOTATION_MIN_RUN
from trainop.explain import explain_text
from trainop.handlers.state import ShellState
from trainop.planner import MigrationPolicy, OperatorConfig
from trainop.queueing.cluster import cycle_inputs, intake
from trainop.queueing.migration import MIN_RUN, Mover, eligibility
from trainop.queueing.model import Action
from trainop.queueing.ordering import Running
from trainop.queueing.preemption import class_min_run, protection
from trainop.queueing.simulate import SimInputError, class_min_runs

NOW = 1_000.0


def _running(started: float | None, class_min: float = 0.0, pc: str = "gold") -> Any:
    b = workload("q/a", "q", 16).running_on("h0", "h1", started=started)
    return b.set(priority_class=pc, class_min_run_seconds=class_min).build()


@pytest.mark.parametrize(
    ("queue_min", "class_min", "started", "left", "says"),
    [
        pytest.param(0, 0, NOW - 10, 0.0, "", id="neither"),
        pytest.param(600, 0, NOW - 100, 500.0, "queue q: minRunSeconds 600", id="queue-only"),
        pytest.param(
            0,
            1800,
            NOW - 100,
            1700.0,
            f"PriorityClass gold: {ANNOTATION_MIN_RUN} 1800",
            id="class-only",
        ),
        pytest.param(600, 1800, NOW - 100, 1700.0, "PriorityClass gold", id="class-stricter"),
        pytest.param(
            1800, 600, NOW - 100, 1700.0, "queue q: minRunSeconds 1800", id="queue-stricter"
        ),
        pytest.param(600, 600, NOW - 100, 500.0, "queue q", id="tie-names-the-queue"),
        pytest.param(600, 1800, NOW - 1800, 0.0, "", id="ran-past-both"),
        pytest.param(0, 1800, None, 1800.0, "PriorityClass gold", id="not-started-yet"),
    ],
)
def test_protection(
    queue_min: int, class_min: float, started: float | None, left: float, says: str
) -> None:
    q = queue("q").quota("h100", 16).preemption(minRunSeconds=queue_min).state()
    got_left, rule = protection(Running(_running(started, class_min), "h100", at=NOW), {"q": q})
    assert got_left == left
    assert says in rule if says else rule == ""


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        pytest.param(None, 0.0, id="no-annotations"),
        pytest.param({"other": "1"}, 0.0, id="not-set"),
        pytest.param({ANNOTATION_MIN_RUN: "1800"}, 1800.0, id="seconds"),
        pytest.param({ANNOTATION_MIN_RUN: "0"}, 0.0, id="zero"),
        pytest.param({ANNOTATION_MIN_RUN: "30m"}, "must be a number of seconds >= 0", id="unit"),
        pytest.param({ANNOTATION_MIN_RUN: "-5"}, "must be a number of seconds >= 0", id="neg"),
        pytest.param({ANNOTATION_MIN_RUN: "nan"}, "must be a number of seconds >= 0", id="nan"),
    ],
)
def test_class_min_run_reads_the_annotation(
    annotations: dict[str, str] | None, want: float | str
) -> None:
    if isinstance(want, str):
        with pytest.raises(ValueError, match=want) as err:
            class_min_run("gold", annotations)
        assert f"PriorityClass gold: metadata.annotations.{ANNOTATION_MIN_RUN}" in str(err.value)
    else:
        assert class_min_run("gold", annotations) == want


def test_head_is_told_the_class_protects_the_victim() -> None:
    q = queue("q").quota("h100", 16).preemption(minRunSeconds=60).state()
    low = (
        workload("q/low", "q", 16)
        .prio(1)
        .running_on("h0", "h1", started=NOW - 100)
        .set(priority_class="gold", class_min_run_seconds=600)
        .build()
    )
    head = workload("q/head", "q", 16).prio(10).build()
    d = decide([q], [low, head], small_fleet(h100=2), now=NOW)
    assert d["q/low"].action == Action.KEEP
    assert f"q/low (PriorityClass gold: {ANNOTATION_MIN_RUN} 600)" in d["q/head"].message
    assert "become preemptible in 500 s" in d["q/head"].message


def test_migration_refuses_a_gang_within_its_class_minimum() -> None:
    m = Mover(job=_running(NOW - 100, 1800), checkpoints=True, allreduce=1.0, steps_left=10)
    q = queue("q").quota("h100", 16).state()
    why = eligibility(m, NOW, MigrationPolicy(enabled=True), {"q": q}, ())
    assert why is not None and why.rule == MIN_RUN
    assert "PriorityClass gold" in why.message and "1700 s more" in why.message


def _pc(annotations: dict[str, str]) -> dict[str, Any]:
    return {"kind": "PriorityClass", "metadata": {"name": "gold", "annotations": annotations}}


@pytest.mark.parametrize(
    ("queue_min", "annotations", "line"),
    [
        pytest.param(
            600,
            {ANNOTATION_MIN_RUN: "1800"},
            f"before 2026-01-01T00:30:00Z (PriorityClass gold {ANNOTATION_MIN_RUN} 1800",
            id="class-stricter",
        ),
        pytest.param(
            3600,
            {ANNOTATION_MIN_RUN: "1800"},
            "before 2026-01-01T01:00:00Z (queue minRunSeconds 3600",
            id="queue-stricter",
        ),
        pytest.param(
            0,
            {ANNOTATION_MIN_RUN: "soon"},
            "none from its PriorityClass: PriorityClass gold",
            id="bad-annotation",
        ),
    ],
)
def test_explain_says_which(queue_min: int, annotations: dict[str, str], line: str) -> None:
    body = job("team/a").build()
    body["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    q = queue("q").preemption(minRunSeconds=queue_min).build()
    text = explain_text(body, [], [], q, (), _pc(annotations))
    assert line in text


def test_simulate_reads_the_class_annotation() -> None:
    docs = [_pc({ANNOTATION_MIN_RUN: "900"}), {"kind": "TrainingQueue", "metadata": {}}]
    assert class_min_runs(docs) == {"gold": 900.0}
    with pytest.raises(SimInputError, match="must be a number of seconds"):
        class_min_runs([_pc({ANNOTATION_MIN_RUN: "x"})])


@pytest.mark.parametrize(
    ("pc", "want"),
    [
        pytest.param("gold", ("gold", 900.0), id="class-with-a-minimum"),
        pytest.param("bronze", ("bronze", 0.0), id="class-without"),
        pytest.param(None, ("", 0.0), id="no-class"),
    ],
)
def test_intake_gives_the_job_its_class_minimum(pc: str | None, want: tuple[str, float]) -> None:
    body = job("a").build() if pc is None else job("a").priority(pc).build()
    inputs = cycle_inputs([], {}, {"gold": 5, "bronze": 1}, {"gold": 900.0})
    queued = intake(body, (), inputs, fleet_snapshot(), OperatorConfig(), datetime(2026, 1, 1))
    assert queued is not None
    assert (queued.priority_class, queued.class_min_run_seconds) == want


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        pytest.param({ANNOTATION_MIN_RUN: "1800"}, {"gold": 1800.0}, id="kept"),
        pytest.param({}, {}, id="none"),
        pytest.param({ANNOTATION_MIN_RUN: "soon"}, {}, id="unreadable-counts-as-none"),
    ],
)
def test_the_shell_keeps_each_class_minimum(
    annotations: dict[str, str], want: dict[str, float]
) -> None:
    state = ShellState()
    state.upsert_priority_class({**_pc(annotations), "value": 100})
    assert (state.priorities, state.min_runs) == ({"gold": 100}, want)
    state.remove_priority("gold")
    assert (state.priorities, state.min_runs) == ({}, {})
