"""Drains that wait for the checkpoint (issue 35; docs/progress.md): when a job with
spec.checkpoint keeps its PodDisruptionBudget (trainop.progress.budget_stands, a named-case
table) and what the budget is (trainop.manifests.build_disruption_budget). The reconcile's
use of it is in tests/unit/test_reconcile.py; the Eviction API refusing while it stands, on
a real API server, in tests/integration/test_drain_budget.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from trainop import progress
from trainop.api import constants as c
from trainop.manifests import JobRef, build_disruption_budget

T0 = datetime(2026, 11, 27, 3, 0, 0)
ASKED = progress.checkpoint_request({"step": 100}, 60, "NodeDrain", T0)
NEWER = {
    "step": 105,
    "lastCheckpoint": {"path": "/c/105", "step": 105, "time": "2026-11-27T03:00:05Z"},
}
OLDER = {
    "step": 100,
    "lastCheckpoint": {"path": "/c/90", "step": 90, "time": "2026-11-27T02:59:00Z"},
}

# name, phase, gang running, checkpoint request, progress, seconds after T0, stands
CASES: list[tuple[str, str | None, bool, Any, Any, float, bool]] = [
    ("running", "Running", True, None, None, 0, True),
    ("running-an-old-checkpoint", "Running", True, None, OLDER, 0, True),
    ("asked-waiting", "Running", True, ASKED, OLDER, 30, True),
    ("asked-checkpoint-in", "Running", True, ASKED, NEWER, 6, False),
    ("asked-grace-over", "Running", True, ASKED, OLDER, 60, False),
    ("pods-being-deleted", "Running", False, None, None, 0, False),
    ("admitted-not-running-yet", "Admitted", True, None, None, 0, False),
    ("restarting", "Restarting", False, None, None, 0, False),
    ("queued", "Queued", False, None, None, 0, False),
    ("succeeded", "Succeeded", False, None, None, 0, False),
    ("invalid", "Invalid", False, None, None, 0, False),
]


@pytest.mark.parametrize(
    ("name", "phase", "running", "asked", "reported", "after", "stands"),
    CASES,
    ids=[case[0] for case in CASES],
)
def test_when_the_budget_stands(
    name: str,
    phase: str | None,
    running: bool,
    asked: Any,
    reported: Any,
    after: float,
    stands: bool,
) -> None:
    now = T0 + timedelta(seconds=after)
    assert progress.budget_stands(phase, running, asked, reported, now) is stands


def test_the_budget_blocks_every_voluntary_eviction_of_ready_gang_pods() -> None:
    pdb = build_disruption_budget(JobRef("bert", "team-a", "uid-1"), 4)
    assert (pdb["apiVersion"], pdb["kind"]) == ("policy/v1", "PodDisruptionBudget")
    assert pdb["metadata"]["name"] == "bert-checkpoint"
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # goes with the job
    assert pdb["spec"]["minAvailable"] == 4  # the whole gang: an integer, no scale needed
    assert pdb["spec"]["selector"]["matchLabels"][c.LABEL_JOB_NAME] == "bert"
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"  # a hung pod may go
