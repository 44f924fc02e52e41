"""Jobs that can never be admitted (queueing.inadmissible): named cases, then the whole
queue in `simulate`: an impossible job holds nothing and moves nobody's start."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import H100, fleet_nodes, queue
from tests.unit.test_queueing_simulate import h100_nodes, times, tj, tq
from trainop.inventory import build_snapshot
from trainop.queueing import simulate
from trainop.queueing.inadmissible import fleet_shortfall, quota_shortfall

FLEET = build_snapshot(fleet_nodes())
H100_NODES = [n for n in FLEET.nodes if n.gpu.product == H100]
H100_GPUS = sum(n.gpus_allocatable for n in H100_NODES)


@pytest.mark.parametrize(
    ("gpus", "largest", "products", "topology", "mode", "says"),
    [
        pytest.param(16, 8, (H100,), "rack", "Preferred", None, id="fits-somewhere"),
        pytest.param(
            H100_GPUS + 8, 8, (H100,), "none", "Preferred", "the whole fleet has", id="beyond-fleet"
        ),
        pytest.param(16, 16, (), "none", "Preferred", "the largest node has", id="replica-too-big"),
        pytest.param(
            H100_GPUS, 8, (H100,), "rack", "Required", "in one rack (Required)", id="beyond-a-rack"
        ),
        pytest.param(H100_GPUS, 8, (H100,), "rack", "Preferred", None, id="preferred-may-spread"),
    ],
)
def test_fleet_shortfall(
    gpus: int, largest: int, products: tuple[str, ...], topology: str, mode: str, says: Any
) -> None:
    got = fleet_shortfall(gpus, largest, products, topology, mode, FLEET)
    if says is None:
        assert got is None
    else:
        assert (
            got is not None
            and says in got
            and str(gpus if says != "the largest node has" else largest) in got
        )


def _q(name: str, gpus: int, cohort: str | None = None, limit: int | None = None) -> Any:
    b = queue(name).serves(f"team-{name}").quota("h100", gpus, H100)
    if cohort:
        b.cohort(cohort)
    state = b.state()
    if limit is not None:
        from dataclasses import replace

        state = replace(state, groups=(replace(state.groups[0], borrowing_limit=limit),))
    return state


@pytest.mark.parametrize(
    ("gpus", "queues", "says"),
    [
        pytest.param(64, [_q("a", 64)], None, id="within-nominal"),
        pytest.param(72, [_q("a", 64)], "never have more than 64", id="no-cohort-no-borrowing"),
        pytest.param(96, [_q("a", 64, "c"), _q("b", 64, "c")], None, id="may-borrow-the-cohort"),
        pytest.param(
            96, [_q("a", 64, "c", limit=16), _q("b", 64, "c")], "64 nominal + 16", id="limit"
        ),
        pytest.param(
            200, [_q("a", 64, "c"), _q("b", 64, "c")], "64 nominal + 64", id="beyond-cohort"
        ),
    ],
)
def test_quota_shortfall(gpus: int, queues: list[Any], says: str | None) -> None:
    got = quota_shortfall(gpus, (H100,), queues[0], queues)
    assert (got is None) if says is None else (got is not None and says in got)


def test_an_impossible_job_moves_nobody_and_never_runs() -> None:
    """The issue's case: 10,000 GPUs asked of a queue of 64 + 32 borrowable."""
    queues = [
        tq("q", 64, cohort="pool"),
        tq("other", 32, cohort="pool", namespaces=["team-other"]),
    ]
    # small and o arrive after backfillWaitSeconds (300 s): a head that held quota would
    # have blocked them, as the issue saw in simulate (a job started 1,740 s late).
    base = [
        tj("team-q/a", 0, 1000, 32),
        tj("team-q/small", 400, 50, 16),
        tj("team-other/o", 500, 50, 32),
    ]
    impossible = tj("team-q/huge", 10, 100, 10_000)
    without = simulate(h100_nodes(8), queues, base)
    with_it = simulate(h100_nodes(8), queues, [*base, impossible])
    for key in ("team-q/a", "team-q/small", "team-other/o"):
        assert times(with_it, key) == times(without, key), key
    assert times(with_it, "team-q/small")[1] == 400  # started on arrival
    huge = with_it.job("team-q/huge")
    assert huge.started is None and huge.wait_reasons == ("Inadmissible",)
