"""trainop.shellrules: the shell's decisions, one named-case table each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.builders import JOB, job, pod
from trainop.api.reasons import WaitReason
from trainop.planner import OperatorConfig
from trainop.reconcile import ADMIT_ALL, Admission
from trainop.shellrules import (
    Mode,
    admission_for,
    admits,
    checkpoint_first,
    counts_only,
    mode,
    preempted_already,
    taken_by_another,
)

TRAINOP = OperatorConfig()
KUEUE = OperatorConfig(external_queue="kueue")
KUBERNETES = OperatorConfig(gang_scheduling="kubernetes")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(TRAINOP, Mode.TRAINOP, id="trainops-loop-by-default"),
        pytest.param(KUEUE, Mode.KUEUE, id="external-queue-kueue"),
        pytest.param(KUBERNETES, Mode.KUBERNETES, id="gang-scheduling-kubernetes"),
    ],
)
def test_mode(config: OperatorConfig, expected: Mode) -> None:
    assert mode(config) == expected


# --- admission_for ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    admission: Admission
    uid: str | None = "uid-bert"
    generation: int | None = 1


QUOTA = Admission(False, WaitReason.QUOTA, "queue q is full", position=3)
ADMIT = Admission(True, queue="q")
GROW = Admission(True, size=4)
QUEUED = (
    job(JOB)
    .phase("Queued")
    .with_status(pendingReason="NoFit", pendingMessage="no room", queuePosition=2)
)
NOFIT_WAIT = Admission(False, "NoFit", "no room", position=2)
PENDING = Admission(False, WaitReason.PENDING, "waiting for the admission cycle")

# (id, verdict, job, live pods, config, expected admission, stale)
ADMISSION_CASES: list[tuple[str, Verdict | None, Any, bool, OperatorConfig, Any, bool]] = [
    (
        "an-elastic-resize-reaches-its-live-gang",
        Verdict(GROW),
        job(JOB),
        True,
        TRAINOP,
        GROW,
        False,
    ),
    ("a-live-gang-runs-on", None, job(JOB), True, TRAINOP, ADMIT_ALL, False),
    ("a-live-gang-ignores-a-wait", Verdict(QUOTA), job(JOB), True, TRAINOP, ADMIT_ALL, False),
    ("kueue-holds-the-gang", Verdict(QUOTA), job(JOB), False, KUEUE, ADMIT_ALL, False),
    ("kube-scheduler-holds-the-gang", None, job(JOB), False, KUBERNETES, ADMIT_ALL, False),
    ("a-wait-verdict-stands", Verdict(QUOTA), QUEUED, False, TRAINOP, QUOTA, False),
    ("an-admission-of-this-generation", Verdict(ADMIT), QUEUED, False, TRAINOP, ADMIT, False),
    (
        "an-admission-of-an-older-spec-is-stale",
        Verdict(ADMIT, generation=0),
        QUEUED,
        False,
        TRAINOP,
        NOFIT_WAIT,
        True,
    ),
    (
        "a-wait-of-an-older-spec-still-stands",
        Verdict(QUOTA, generation=0),
        QUEUED,
        False,
        TRAINOP,
        QUOTA,
        False,
    ),
    (
        "a-predecessors-verdict-is-not-this-jobs",
        Verdict(ADMIT, uid="uid-old"),
        QUEUED,
        False,
        TRAINOP,
        NOFIT_WAIT,
        False,
    ),
    ("a-new-job-waits-for-the-first-verdict", None, job(JOB), False, TRAINOP, None, False),
    (
        "a-new-suspended-job-is-the-reconciles",
        None,
        job(JOB).suspend(),
        False,
        TRAINOP,
        PENDING,
        False,
    ),
    ("its-status-wait-until-the-loop-speaks", None, QUEUED, False, TRAINOP, NOFIT_WAIT, False),
    ("no-reason-yet-is-pending", None, job(JOB).phase("Queued"), False, TRAINOP, PENDING, False),
]


@pytest.mark.parametrize(
    ("verdict", "body", "live", "config", "expected", "stale"),
    [pytest.param(*c[1:], id=c[0]) for c in ADMISSION_CASES],
)
def test_admission_for(
    verdict: Verdict | None,
    body: Any,
    live: bool,
    config: OperatorConfig,
    expected: Admission | None,
    stale: bool,
) -> None:
    assert admission_for(verdict, body.build(), live, config, {}) == (expected, stale)


# --- status writes ---------------------------------------------------------------------------
COUNTS = {"replicaStatuses": {"Worker": {"active": 1}}}
MORE = {"replicaStatuses": {"Worker": {"active": 2}}}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            {"phase": "Admitted", **COUNTS},
            {"phase": "Admitted", **MORE},
            True,
            id="counts-of-a-starting-gang",
        ),
        pytest.param({"phase": "Admitted"}, {"phase": "Running", **MORE}, False, id="a-new-phase"),
        pytest.param(
            {"phase": "Running", **COUNTS},
            {"phase": "Running", **MORE},
            False,
            id="counts-of-a-running-gang",
        ),
        pytest.param(
            {"phase": "Admitted", "gpus": 8},
            {"phase": "Admitted", "gpus": 16, **MORE},
            False,
            id="another-field-too",
        ),
    ],
)
def test_counts_only(old: dict[str, Any], new: dict[str, Any], expected: bool) -> None:
    assert counts_only(old, new) is expected


@pytest.mark.parametrize(
    ("before", "status", "creates", "expected"),
    [
        pytest.param("Queued", "Admitted", True, True, id="admission-is-written-first"),
        pytest.param(None, "Admitted", True, True, id="a-new-job-admitted-at-once"),
        pytest.param("Admitted", "Admitted", True, False, id="already-admitted"),
        pytest.param("Queued", "Admitted", False, False, id="nothing-to-create"),
        pytest.param("Restarting", "Restarting", True, False, id="not-entering-admitted"),
    ],
)
def test_admits(before: str | None, status: str, creates: bool, expected: bool) -> None:
    body = job(JOB).phase(before).build() if before else job(JOB).build()
    assert admits(body, {"phase": status}, creates) is expected


# --- a 409 that no retry fixes ---------------------------------------------------------------
W0 = f"{JOB}-worker-0"


def _earlier_job() -> dict[str, Any]:
    """A pod of an earlier job of the same name (another uid), on its way out by GC."""
    there = pod(W0).build()
    there["metadata"]["ownerReferences"][0]["uid"] = "uid-earlier"
    return there


def _someone_elses() -> dict[str, Any]:
    there = pod(W0).build()
    there["metadata"]["ownerReferences"] = [{"kind": "Deployment", "name": "web", "uid": "u"}]
    return there


@pytest.mark.parametrize(
    ("there", "taken"),
    [
        pytest.param(None, False, id="gone-since"),
        pytest.param(pod(W0).build(), False, id="this-jobs-own"),
        pytest.param(_earlier_job(), False, id="an-earlier-job-of-its-name"),
        pytest.param(pod(W0).deleting().build(), False, id="being-deleted"),
        pytest.param(_someone_elses(), True, id="someone-elses-fails-for-good"),
    ],
)
def test_taken_by_another(there: dict[str, Any] | None, taken: bool) -> None:
    message = taken_by_another(pod(W0).build(), there)
    assert (message is not None) is taken
    if taken:
        assert message == (
            f'pods "{W0}" already exists and is not this job\'s: delete it, or rename the job'
        )


# --- the checkpoint-first eviction rule ------------------------------------------------------
ASKS = job(JOB).set("checkpoint", {"gracePeriodSeconds": 60})
PREEMPTED = job(JOB).set("checkpoint", {}).condition("Preempted", True, "Priority")


@pytest.mark.parametrize(
    ("victim", "live", "note", "can_ask", "grace"),
    [
        pytest.param(ASKS, True, "", True, 60, id="asks-and-can-be-told"),
        pytest.param(job(JOB).set("checkpoint", {"x": 1}), True, "", True, 120, id="default-grace"),
        pytest.param(job(JOB), True, "", True, None, id="no-checkpoint-asked"),
        pytest.param(
            job(JOB).set("checkpoint", {"gracePeriodSeconds": 0}),
            True,
            "",
            True,
            None,
            id="zero-grace",
        ),
        pytest.param(ASKS, True, "", False, None, id="no-report-endpoint"),
        pytest.param(ASKS, False, "", True, None, id="no-live-pods"),
        pytest.param(
            ASKS, True, "checkpointed at step 5", True, None, id="the-waiters-own-eviction"
        ),
        pytest.param(PREEMPTED, True, "", True, None, id="already-preempted"),
    ],
)
def test_checkpoint_first(
    victim: Any, live: bool, note: str, can_ask: bool, grace: int | None
) -> None:
    assert checkpoint_first(victim.build(), live, note, can_ask) == grace


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(job(JOB).condition("Preempted", True, "Priority"), True, id="preempted"),
        pytest.param(job(JOB).condition("Preempted", False, "Resumed"), False, id="was-once"),
        pytest.param(job(JOB), False, id="never"),
    ],
)
def test_preempted_already(body: Any, expected: bool) -> None:
    assert preempted_already(body.build()) is expected
