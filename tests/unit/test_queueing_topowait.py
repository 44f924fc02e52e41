"""Topology-aware waiting: the rule on its own (named cases) and inside `admit`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import H100, grid, snap
from trainop.placement import AllreduceEstimate, GangRequest, GroupRequest, Placement, place
from trainop.queueing import TOPOLOGY, Fit, QueuedJob, QueueState, Unfit, admit, fit_of
from trainop.queueing.topowait import topology_wait

NOW = 1000.0
BOUND = 600.0
# 1 block x 2 racks x 2 nodes of 8 H100: racks r0-0 and r0-1.
NODES = grid(blocks=1, racks=2, nodes=2)
BUSY = {"n-b0-r0-0": 8, "n-b0-r1-0": 8}
SNAP = snap(NODES, used=BUSY)


def est(seconds: float, level: str) -> AllreduceEstimate:
    return AllreduceEstimate(seconds, seconds, seconds, level, 16, 2)


def spread_fit(real: float = 0.02, ideal: float | None = 0.01) -> Fit:
    return Fit(
        placement=None,
        gpus_by_node=(("n-b0-r0-1", 8), ("n-b0-r1-1", 8)),
        product=H100,
        nodes=("n-b0-r0-1", "n-b0-r1-1"),
        allreduce=est(real, "block"),
        ideal=None if ideal is None else est(ideal, "rack"),
    )


def running(key: str, node: str, end: float | None) -> QueuedJob:
    return QueuedJob(
        key, "q", 8, 0.0, admitted=True, product=H100, nodes=((node, 8),), expected_end=end
    )


GANG = QueuedJob("ns/gang", "q", 16, created=NOW - 100)


@pytest.mark.parametrize(
    "fit, ends, bound, waited, expected",
    [
        pytest.param(
            spread_fit(ideal=None), (NOW + 60, None), BOUND, 0, None, id="no-ideal-never-waits"
        ),
        pytest.param(
            spread_fit(real=0.0105), (NOW + 60, None), BOUND, 0, None, id="within-10pct-of-ideal"
        ),
        pytest.param(spread_fit(), (NOW + 60, None), 0, 0, None, id="bound-zero-disables"),
        pytest.param(
            spread_fit(),
            (NOW + 60, None),
            BOUND,
            BOUND,
            None,
            id="waited-past-bound-takes-best-available",
        ),
        # ratio 1.3: the bound shrinks to 0.3 x 600 = 180 s; 200 s waited is past it.
        pytest.param(
            spread_fit(real=0.013), (NOW + 60, None), BOUND, 200, None, id="bound-scaled-by-cost"
        ),
        pytest.param(
            spread_fit(real=0.013),
            (NOW + 60, None),
            BOUND,
            100,
            NOW + 60,
            id="scaled-bound-not-yet-reached",
        ),
        pytest.param(
            spread_fit(), (NOW + 60, NOW + 5000), BOUND, 0, NOW + 60, id="rack-frees-soon-wait"
        ),
        pytest.param(
            spread_fit(),
            (NOW + 5000, NOW + 5000),
            BOUND,
            0,
            None,
            id="nothing-frees-in-time-admit-now",
        ),
        pytest.param(
            spread_fit(), (None, NOW + 5000), BOUND, 0, None, id="unknown-end-is-no-reason-to-wait"
        ),
    ],
)
def test_topology_wait(
    fit: Fit, ends: tuple[float | None, float | None], bound: float, waited: float, expected: Any
) -> None:
    job = QueuedJob("ns/gang", "q", 16, created=NOW - waited)
    jobs = [running("ns/a", "n-b0-r0-0", ends[0]), running("ns/b", "n-b0-r1-0", ends[1])]
    verdict = topology_wait(job, fit, NOW, bound, SNAP, jobs)
    if expected is None:
        assert verdict is None
        return
    assert verdict is not None
    assert verdict.expected == (None if expected == "unknown" else expected)
    assert verdict.domain == "b0/r0-0"
    assert verdict.hold == {"n-b0-r0-1": 8}  # the awaited rack's free GPUs
    assert "ideal" in verdict.message and "at most" in verdict.message


class Placer:
    """Places G-GPU jobs as G/8 pods of 8 with the real engine (rack Preferred, or block
    Required); Preferred gangs get their ideal (alone on the empty fleet), Required ones
    none, as PlannerPlacer does."""

    def __init__(self, mode: str = "Preferred") -> None:
        self.mode = mode

    def __call__(self, job: QueuedJob, snapshot: Any, products: Any) -> Fit | Unfit:
        # Required gangs ask for one block, which they get across two racks.
        topology = "block" if self.mode == "Required" else "rack"
        request = GangRequest(job.key, (GroupRequest("W", job.gpus // 8, 8),), topology, self.mode)  # type: ignore[arg-type]
        result = place(snapshot, request)
        if not isinstance(result, Placement):
            return Unfit("NoFit", result.reason)
        ideal = None
        if self.mode == "Preferred" and len(result.nodes) > 1:
            empty = snapshot.with_released({n.name: n.gpus_used for n in snapshot.nodes})
            found = place(empty, request)
            ideal = found if isinstance(found, Placement) else None
        return fit_of(result, snapshot, ideal)


def _admit(mode: str, ends: tuple[float | None, float | None], **kw: Any) -> Any:
    q = QueueState("q", unlimited=True, **kw)
    small = QueuedJob("ns/small", "q", 8, created=NOW - 50)
    jobs = [running("ns/a", "n-b0-r0-0", ends[0]), running("ns/b", "n-b0-r1-0", ends[1])]
    return admit(NOW, [q], [*jobs, GANG, small], SNAP, Placer(mode))


def test_preferred_gang_waits_and_holds_its_rack() -> None:
    d = _admit("Preferred", (NOW + 60, None))
    assert d["ns/gang"].action == "Wait" and d["ns/gang"].reason == TOPOLOGY
    # The small job may not take the held node of rack r0-0: it goes to rack r0-1.
    assert d["ns/small"].action == "Admit"
    assert d["ns/small"].placement is not None
    assert d["ns/small"].placement.nodes == ("n-b0-r1-1",)


@pytest.mark.parametrize(
    "mode, ends, queue, action",
    [
        pytest.param("Required", (NOW + 60, None), {}, "Admit", id="required-never-waits"),
        pytest.param(
            "Preferred", (NOW + 5000, NOW + 5000), {}, "Admit", id="no-rack-frees-in-time"
        ),
        pytest.param(
            "Preferred",
            (NOW + 60, None),
            {"topology_wait_seconds": 0.0},
            "Admit",
            id="queue-disables-waiting",
        ),
        pytest.param(
            "Preferred",
            (NOW + 60, None),
            {"topology_wait_seconds": 50.0},
            "Admit",
            id="queue-bound-already-passed",
        ),
    ],
)
def test_admits_spread_gang(mode: str, ends: Any, queue: dict[str, Any], action: str) -> None:
    d = _admit(mode, ends, **queue)
    assert d["ns/gang"].action == action, d["ns/gang"].message


def test_operator_default_bound_applies_without_queue_setting() -> None:
    q = QueueState("q", unlimited=True)
    jobs = [running("ns/a", "n-b0-r0-0", NOW + 60), running("ns/b", "n-b0-r1-0", None), GANG]
    d = admit(NOW, [q], jobs, SNAP, Placer(), topology_wait_seconds=0.0)
    assert d["ns/gang"].action == "Admit"


@pytest.mark.parametrize(
    "spec, expected",
    [
        pytest.param({}, None, id="unset-operator-default"),
        pytest.param({"topologyWaitSeconds": 0}, 0.0, id="zero-disables"),
        pytest.param({"topologyWaitSeconds": 900}, 900.0, id="set"),
    ],
)
def test_queue_spec_field(spec: dict[str, Any], expected: float | None) -> None:
    q = QueueState.from_resource({"metadata": {"name": "q"}, "spec": spec})
    assert q.topology_wait_seconds == expected


def test_queue_spec_field_refuses_negative() -> None:
    with pytest.raises(ValueError, match=r"spec\.topologyWaitSeconds"):
        QueueState.from_resource({"metadata": {"name": "q"}, "spec": {"topologyWaitSeconds": -1}})
