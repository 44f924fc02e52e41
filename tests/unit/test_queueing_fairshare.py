"""queueing.fairshare: usage decayed with a half-life, kept in status, read by the DRF order.

Named cases: the average's arithmetic, the order it gives two queues' heads, its round trip
through TrainingQueue status (the operator's memory across restarts), how often status is
rewritten, and a simulated steady demand converging to the configured weights.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from tests.builders import queue, small_fleet, workload
from tests.unit.queueing_harness import decide
from trainop.queueing.fairshare import (
    UsageHistory,
    advance,
    decay_factor,
    effective_used,
    from_status,
    to_status,
)
from trainop.queueing.model import Action

HOUR = 3600.0
T0 = "2026-01-01T00:00:00Z"
T0_S = datetime(2026, 1, 1).timestamp()  # naive, as the pass's clock reads status


def _held(avg: float = 0.0, gpus: int = 0, at: float = 0.0) -> UsageHistory:
    return UsageHistory(at, (("h100", avg),) if avg else (), (("h100", gpus),) if gpus else ())


@pytest.mark.parametrize(
    ("history", "dt", "want"),
    [
        pytest.param(None, HOUR, {}, id="no-history-starts-clean"),
        pytest.param(_held(0, 8), HOUR, {"h100": 4.0}, id="one-half-life-of-8"),
        pytest.param(_held(8, 0), HOUR, {"h100": 4.0}, id="idle-halves-per-half-life"),
        pytest.param(_held(8, 0), 2 * HOUR, {"h100": 2.0}, id="two-half-lives-a-quarter"),
        pytest.param(_held(3, 3), 5 * HOUR, {"h100": 3.0}, id="steady-usage-is-its-own-average"),
        pytest.param(_held(0, 16), 40 * HOUR, {"h100": 16.0}, id="converges-to-usage"),
        pytest.param(_held(0.01, 0), 10 * HOUR, {}, id="negligible-is-dropped"),
        pytest.param(_held(8, 0, at=100), -50, {"h100": 8.0}, id="clock-backwards"),
    ],
)
def test_advance(history: UsageHistory | None, dt: float, want: dict[str, float]) -> None:
    start = history.at if history is not None else 0.0
    got = advance(history, start + dt, HOUR)
    assert got.as_dict() == pytest.approx(want)
    if history is not None:
        assert got.holding == history.holding  # held on until the next change


def test_decay_factor_and_effective_use() -> None:
    assert decay_factor(HOUR, HOUR) == pytest.approx(0.5)
    assert decay_factor(0, HOUR) == 1.0
    history = UsageHistory(0, (("h100", 6.0),))
    assert effective_used(history, "h100", used_now=16, used_at_start=8) == 14.0  # +8 this pass
    assert effective_used(history, "h100", used_now=0, used_at_start=8) == 0.0  # never below 0


def _heads(*, a_avg: float | None, half_life: int | None, updated: str = T0) -> str:
    """Which of two heads, a (older) and b, takes the one free node: the other waits."""
    qa, qb = queue("a").quota("h100", 16), queue("b").quota("h100", 16)
    if half_life is not None:
        qa, qb = qa.half_life(half_life), qb.half_life(half_life)
    if a_avg is not None:
        qa = qa.used_recently(updated, h100=a_avg)
    jobs = [workload("a/x", "a", 8).created(1).build(), workload("b/y", "b", 8).created(2).build()]
    d = decide([qa.state(), qb.state()], jobs, small_fleet(h100=1), now=T0_S + 60)
    (admitted,) = [x.key for x in d if x.action == Action.ADMIT]
    return admitted


@pytest.mark.parametrize(
    ("a_avg", "half_life", "updated", "want"),
    [
        pytest.param(None, None, T0, "a/x", id="plain-drf-older-head-first"),
        pytest.param(12.0, 3600, T0, "b/y", id="heavy-recent-user-yields"),
        pytest.param(12.0, None, T0, "a/x", id="history-ignored-without-half-life"),
        pytest.param(
            12.0, 3600, "2025-12-20T00:00:00Z", "a/x", id="use-long-ago-decayed-to-nothing"
        ),
        pytest.param(0.5, 3600, T0, "b/y", id="any-recent-use-breaks-the-tie"),
    ],
)
def test_order_reads_recent_usage(
    a_avg: float | None, half_life: int | None, updated: str, want: str
) -> None:
    assert _heads(a_avg=a_avg, half_life=half_life, updated=updated) == want


def test_a_pass_charges_what_it_admits() -> None:
    """Within one pass the average moves with each admission, so a queue with no history
    does not take every free node before the other queue's head gets one."""
    qa = queue("a").quota("h100", 32).half_life(3600).state()
    qb = queue("b").quota("h100", 32).half_life(3600).used_recently(T0, h100=4).state()
    jobs = [workload(f"a/x{i}", "a", 8).created(i).build() for i in range(3)]
    jobs += [workload("b/y", "b", 8).created(9).build()]
    d = decide([qa, qb], jobs, small_fleet(h100=2), now=T0_S + 1)
    assert sorted(x.key for x in d if x.action == Action.ADMIT) == ["a/x0", "b/y"]


@pytest.mark.parametrize(
    ("status", "want"),
    [
        pytest.param(None, None, id="no-status"),
        pytest.param({"fairSharing": {"usage": []}}, None, id="no-timestamp"),
        pytest.param({"fairSharing": {"updated": "yesterday"}}, None, id="unreadable-timestamp"),
        pytest.param(
            {
                "fairSharing": {
                    "updated": T0,
                    "usage": [
                        {"name": "h100", "averageGpus": 3.5, "holding": 8},
                        {"name": "a100", "averageGpus": 0, "holding": 4},
                    ],
                }
            },
            UsageHistory(T0_S, (("h100", 3.5),), (("a100", 4), ("h100", 8))),
            id="read-back",
        ),
        pytest.param(
            {"fairSharing": {"updated": T0, "usage": [{"name": "h100", "averageGpus": -1}, "x"]}},
            UsageHistory(T0_S, ()),
            id="bad-rows-skipped",
        ),
    ],
)
def test_from_status(status: dict[str, object] | None, want: UsageHistory | None) -> None:
    assert from_status(status) == want


def test_status_round_trip_survives_a_restart() -> None:
    history = UsageHistory(T0_S, (("h100", 12.345),), (("h100", 16),))
    body = {"fairSharing": to_status(history, 3600)}
    assert body["fairSharing"]["updated"] == T0
    assert from_status(body) == UsageHistory(T0_S, (("h100", 12.35),), (("h100", 16),))
    state = queue("a").quota("h100", 16).half_life(3600).used_recently(T0, h100=2).state()
    assert state.half_life == 3600.0
    assert state.history == UsageHistory(T0_S, (("h100", 2.0),))


@pytest.mark.parametrize(
    ("held_before", "admits", "rewritten", "average"),
    [
        pytest.param(8, False, False, 8.0, id="same-holding-status-kept-as-stored"),
        pytest.param(0, False, True, 8.0 * 0.5, id="job-started-unrecorded-advanced-to-now"),
        pytest.param(8, True, True, 8.0, id="admission-changes-holding"),
    ],
)
def test_status_rewritten_only_when_holding_changes(
    held_before: int, admits: bool, rewritten: bool, average: float
) -> None:
    q = queue("a").quota("h100", 16).half_life(3600).used_recently(T0, held_before, h100=8)
    jobs = [workload("a/x", "a", 8).running_on("h0").build()]
    if admits:
        jobs.append(workload("a/y", "a", 8).build())
    d = decide([q.state()], jobs, small_fleet(h100=2), now=T0_S + 3600)
    status = d.usage["a"].to_status()["fairSharing"]
    assert (status["updated"] != T0) == rewritten
    assert status["usageHalfLifeSeconds"] == 3600
    assert status["usage"][0]["averageGpus"] == pytest.approx(average)
    assert status["usage"][0]["holding"] == (16 if admits else 8)


def test_without_half_life_status_has_no_history() -> None:
    d = decide([queue("a").quota("h100", 16).state()], [], small_fleet(h100=1))
    assert "fairSharing" not in d.usage["a"].to_status()


def _gpu_hours_share(half_life: int | None, hours: int = 48) -> float:
    """Queues a (weight 2) and b (weight 1), each with endless demand for 1-hour gangs of
    8 GPUs on 4 nodes of 8; every hour all gangs end and a pass refills the fleet. Returns
    a's share of the GPU-hours over the last half of the run."""
    qs = {}
    for name, weight in (("a", 2.0), ("b", 1.0)):
        b = queue(name).quota("h100", 32).weight(weight)
        qs[name] = (b.half_life(half_life) if half_life else b).state()
    got = {"a": 0, "b": 0}
    serial = 0
    for hour in range(hours):
        pending = []
        for name in ("a", "b"):
            for _ in range(4):
                serial += 1
                pending.append(workload(f"{name}/j{serial}", name, 8).created(serial).build())
        d = decide(list(qs.values()), pending, small_fleet(h100=4), now=hour * HOUR)
        qs = {
            n: replace(q, history=d.usage[n].history) if q.half_life else q for n, q in qs.items()
        }
        if hour >= hours // 2:
            for x in d.admitted:
                got[x.queue] += x.gpus
    return got["a"] / (got["a"] + got["b"])


@pytest.mark.parametrize(
    ("half_life", "low", "high"),
    [
        # Each hour starts from nothing: a's half-weighted share takes 3 of 4 gangs (0.75).
        pytest.param(None, 0.74, 0.76, id="plain-drf-forgets-each-hour-overshoots"),
        pytest.param(4 * 3600, 0.65, 0.68, id="half-life-4h-converges-to-2-to-1"),
        pytest.param(24 * 3600, 0.65, 0.68, id="half-life-1d-converges-to-2-to-1"),
    ],
)
def test_steady_demand_converges_to_weights(half_life: int | None, low: float, high: float) -> None:
    assert low <= _gpu_hours_share(half_life) <= high
