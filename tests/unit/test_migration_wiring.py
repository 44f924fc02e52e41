"""Migration in the operator (issue 37, part 4): the config block, a running job's body as a
Mover, the destination held by every pass while the gang moves, and the reconcile that marks
the move done with its measured cost. The decision itself: test_queueing_migration.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.builders import NOW, ago, fleet_snapshot, job, pod, queue, small_fleet, workload
from tests.unit.queueing_harness import decide
from trainop.config import ConfigError, operator_config_from_data
from trainop.planner import MigrationPolicy, OperatorConfig
from trainop.queueing.cluster import mover_of
from trainop.queueing.model import Action
from trainop.reconcile import ADMIT_ALL, iso, reconcile


@pytest.mark.parametrize(
    ("data", "want"),
    [
        pytest.param(None, MigrationPolicy(), id="absent-off"),
        pytest.param({"enabled": True}, MigrationPolicy(enabled=True), id="on-with-defaults"),
        pytest.param(
            {
                "enabled": True,
                "gainMultiple": 3,
                "defaultCostSeconds": 60,
                "maxInFlight": 2,
                "windowSeconds": 600,
            },
            MigrationPolicy(True, 3.0, 60.0, 2, 600.0),
            id="every-key",
        ),
        pytest.param(
            {"enabled": True, "maxInFlight": 4, "consolidate": True},
            MigrationPolicy(True, max_in_flight=4, consolidate=True),
            id="consolidate",
        ),
        pytest.param(
            {"consolidate": "yes"}, "migration.consolidate: must be true or false", id="bad-cons"
        ),
        pytest.param(
            {"consolidate": True}, "set migration.maxInFlight to 2 or more", id="cons-one-slot"
        ),
        pytest.param({"enabled": "yes"}, "migration.enabled: must be true or false", id="bad-bool"),
        pytest.param({"enable": True}, "migration.enable: unknown key", id="misspelt-key"),
        pytest.param({"maxInFlight": 0}, "migration.maxInFlight: must be a whole", id="zero-slots"),
        pytest.param(
            {"gainMultiple": -1}, "migration.gainMultiple: must be a number", id="negative"
        ),
        pytest.param([True], "migration: must be a mapping", id="not-a-mapping"),
    ],
)
def test_config(data: Any, want: MigrationPolicy | str) -> None:
    raw = {} if data is None else {"migration": data}
    if isinstance(want, str):
        with pytest.raises(ConfigError, match=want):
            operator_config_from_data(raw)
    else:
        assert operator_config_from_data(raw).migration == want


def _body(**status: Any) -> dict[str, Any]:
    b = job("m", workers=2, gpus=8).checkpoint()
    b.spec["progress"] = {"totalSteps": 10_000}
    return b.with_status(**status).build()


@pytest.mark.parametrize(
    ("body", "field", "want"),
    [
        pytest.param(_body(), "checkpoints", True, id="checkpoints"),
        pytest.param(job("m").build(), "checkpoints", False, id="no-checkpoint"),
        pytest.param(_body(), "steps_left", None, id="no-report-no-steps-left"),
        pytest.param(_body(progress={"step": 2_500}), "steps_left", 7_500, id="steps-left"),
        pytest.param(
            _body(placement={"estimatedAllreduceSeconds": 0.01}), "allreduce", 0.01, id="estimate"
        ),
        pytest.param(
            _body(migration={"phase": "Moving", "requestedAt": iso(NOW)}),
            "moving",
            True,
            id="moving",
        ),
        pytest.param(
            _body(migration={"phase": "Moved", "requestedAt": iso(NOW), "measuredCostSeconds": 42}),
            "measured_cost",
            42.0,
            id="measured-cost",
        ),
    ],
)
def test_mover_of(body: dict[str, Any], field: str, want: Any) -> None:
    queued = workload("default/m", "q", 16).running_on("h0", "h1").build()
    assert getattr(mover_of(body, queued, OperatorConfig()), field) == want


def test_job_opts_out() -> None:
    body = _body()
    body["spec"]["placement"] = {"migratable": False}
    queued = workload("default/m", "q", 16).running_on("h0", "h1").build()
    assert mover_of(body, queued, OperatorConfig()).migratable is False


def test_a_moving_gangs_destination_is_held_from_others() -> None:
    """q/m runs on h0 and moves to h0 + h1 (h1 held); q/x, older and higher priority, needs
    one node and must take h2, not h1."""
    q = queue("q").quota("h100", 64).state()
    m = workload("q/m", "q", 8).running_on("h0").set(moving_to=(("h0", 8), ("h1", 8))).build()
    x = workload("q/x", "q", 8).prio(5).build()
    y = workload("q/y", "q", 8).prio(4).build()
    d = decide([q], [m, x, y], small_fleet(h100=3))
    assert d["q/x"].action == Action.ADMIT and d["q/x"].placement is not None
    assert d["q/x"].placement.nodes == ("h2",)
    assert d["q/y"].action == Action.WAIT  # h1 is held for q/m's move


def test_a_requeued_mover_takes_its_own_destination() -> None:
    """Evicted for its move, q/m is pending; its destination (h1 + h2) is held for it alone:
    q/x, first in line, cannot take it, and q/m is admitted (on the best placement free to
    it, which the move's destination guarantees)."""
    q = queue("q").quota("h100", 64).state()
    m = workload("q/m", "q", 16).created(9).set(moving_to=(("h1", 8), ("h2", 8))).build()
    x = workload("q/x", "q", 16).prio(5).build()
    d = decide([q], [m, x], small_fleet(h100=3))
    assert d["q/x"].action == Action.WAIT
    assert d["q/m"].action == Action.ADMIT and d["q/m"].placement is not None
    assert len(d["q/m"].placement.nodes) == 2


W0, W1 = "bert-worker-0", "bert-worker-1"


def test_running_again_marks_the_move_done_with_its_measured_cost() -> None:
    moving = {
        "phase": "Moving",
        "source": ["a100-01", "h100-b-01"],
        "destination": ["a100-01", "a100-02"],
        "reserved": {"a100-01": 8, "a100-02": 8},
        "estimatedGainSeconds": 900.0,
        "estimatedCostSeconds": 300.0,
        "requestedAt": ago(95),
        "moves": 1,
    }
    body = (
        job()
        .with_status(startTime=ago(600), migration=moving)
        .phase("Admitted", "GangPlaced", "placed", since=5)
        .build()
    )
    # While the gang asked to checkpoint still runs (on its source nodes): Moving.
    old = [pod(W0).bound("a100-01").running().build(), pod(W1).bound("h100-b-01").running().build()]
    waiting = reconcile(body, old, fleet_snapshot, OperatorConfig(), NOW, ADMIT_ALL)
    assert waiting.status["migration"]["phase"] == "Moving"
    assert not [e for e in waiting.events if e[1] == "Migrated"]
    # The new gang runs on other nodes: Moved.
    pods = [pod(W0).bound("a100-01").running().build(), pod(W1).bound("a100-02").running().build()]
    out = reconcile(body, pods, fleet_snapshot, OperatorConfig(), NOW, ADMIT_ALL)
    done = out.status["migration"]
    assert done["phase"] == "Moved" and done["measuredCostSeconds"] == 95.0
    assert done["movedAt"] == iso(NOW) and done["moves"] == 1
    (event,) = [e for e in out.events if e[1] == "Migrated"]
    assert "est. gain 900 s, measured cost 95 s (estimated 300 s)" in event[2]
    # Once Moved, a later reconcile changes nothing of it.
    body2 = dict(body, status=out.status)
    again = reconcile(
        body2, pods, fleet_snapshot, OperatorConfig(), NOW + timedelta(seconds=5), ADMIT_ALL
    )
    assert again.status["migration"] == done
    assert not [e for e in again.events if e[1] == "Migrated"]


# --- a gang whose old pods are still going away (found on two real nodes) --------------------


@pytest.mark.parametrize(
    ("name", "pods", "want"),
    [
        ("no-pods-pending", [], "pending"),
        ("stopped-and-deleting-out-of-line", [pod("mv-worker-0").bound("h100-a-01").gpus(8)
                                              .failed(143).deleting()], None),
        ("running-and-deleting-holds", [pod("mv-worker-0").bound("h100-a-01").gpus(8)
                                        .running().deleting()], "admitted"),
        ("stopped-not-deleted-pending", [pod("mv-worker-0").bound("h100-a-01").gpus(8)
                                         .failed(1)], "pending"),
    ],
)  # fmt: skip
def test_a_job_waits_out_of_line_while_its_old_gang_goes(
    name: str, pods: list[Any], want: str | None
) -> None:
    """A moved (or preempted) gang's trainers stop on SIGTERM well before the kubelet lets
    their pod objects go; the next gang reuses the names, so the job is admitted again only
    once they are gone: readmitted before, its gang could never be created (409), and the
    loop, woken by nothing more, left it Queued."""
    from datetime import datetime

    from trainop.queueing.cluster import cycle_inputs, intake

    body = job("mv", workers=1, gpus=8).build()
    built = [p.build() for p in pods]
    inputs = cycle_inputs([], {}, {}, {})
    queued = intake(
        body, built, inputs, fleet_snapshot(built), OperatorConfig(), datetime(2026, 1, 1)
    )
    got = None if queued is None else ("admitted" if queued.admitted else "pending")
    assert got == want, name


def test_the_last_pod_of_a_job_going_wakes_the_loop() -> None:
    """Its removal holds no GPUs (the pod had stopped), but the job may be in line again."""
    from trainop.handlers.state import ShellState

    state = ShellState()
    woken: list[int] = []
    state.on_change = lambda: woken.append(1)
    state.synced = True
    for i in (0, 1):
        state.upsert_pod(pod(f"mv-worker-{i}").bound("h100-a-01").gpus(8).failed(143).build())
    woken.clear()
    state.remove_pod("team-a", "mv-worker-0")
    assert not woken  # one left: still going away
    state.remove_pod("team-a", "mv-worker-1")
    assert woken == [1]
