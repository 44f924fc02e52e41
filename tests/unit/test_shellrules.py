"""trainop.shellrules: the shell's decisions, one named-case table each."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from tests.builders import JOB, job, pod
from trainop.api import constants as c
from trainop.api.reasons import WaitReason
from trainop.planner import OperatorConfig
from trainop.reconcile import ADMIT_ALL, RUNTIME_CONDITION, Admission, runtime_wait_status
from trainop.shellrules import (
    Mode,
    admission_for,
    admits,
    checkpoint_first,
    counts_only,
    gang_live,
    mode,
    names_runtime,
    preempted_already,
    runtime_recorded,
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


# --- runtimes: names_runtime, gang_live, runtime_recorded, runtime_wait_status --------------
CLUSTER_PT = ("ClusterTrainingRuntime", "", "pytorch")
LOCAL_PT = ("TrainingRuntime", "team-a", "pytorch")


def _named(ref: Any, namespace: str = "team-a") -> dict[str, Any]:
    body = job(JOB, namespace=namespace).build()
    if ref is not None:
        body["spec"]["runtimeRef"] = ref
    return body


@pytest.mark.parametrize(
    ("body", "key", "expected"),
    [
        pytest.param(_named({"name": "pytorch"}), CLUSTER_PT, True, id="cluster-kind-by-default"),
        pytest.param(
            _named({"kind": "ClusterTrainingRuntime", "name": "pytorch"}),
            CLUSTER_PT,
            True,
            id="cluster-kind-named",
        ),
        pytest.param(_named({"name": "jax"}), CLUSTER_PT, False, id="another-name"),
        pytest.param(
            _named({"kind": "TrainingRuntime", "name": "pytorch"}),
            LOCAL_PT,
            True,
            id="namespaced-in-the-jobs-namespace",
        ),
        pytest.param(
            _named({"kind": "TrainingRuntime", "name": "pytorch"}, namespace="team-b"),
            LOCAL_PT,
            False,
            id="namespaced-in-another-namespace",
        ),
        pytest.param(
            _named({"kind": "TrainingRuntime", "name": "pytorch"}),
            CLUSTER_PT,
            False,
            id="namespaced-ref-not-the-cluster-runtime",
        ),
        pytest.param(_named(None), CLUSTER_PT, False, id="names-no-runtime"),
        pytest.param(_named("pytorch"), CLUSTER_PT, False, id="a-malformed-ref-names-none"),
    ],
)
def test_names_runtime(body: dict[str, Any], key: tuple[str, str, str], expected: bool) -> None:
    assert names_runtime(body, key) is expected


def _gang_pod(name: str, generation: str | None = "0", deleting: bool = False) -> dict[str, Any]:
    built = pod(name).build()
    if generation is not None:
        built["metadata"].setdefault("annotations", {})[c.ANNOTATION_RESTART_COUNT] = generation
    if deleting:
        built["metadata"]["deletionTimestamp"] = "2025-06-01T12:00:00Z"
    return built


RESTARTED = job(JOB).with_status(restartCount=1).build()


@pytest.mark.parametrize(
    ("body", "pods", "expected"),
    [
        pytest.param(job(JOB).build(), [], False, id="no-pods"),
        pytest.param(job(JOB).build(), [_gang_pod("bert-worker-0")], True, id="a-pod-of-the-gang"),
        pytest.param(
            job(JOB).build(),
            [_gang_pod("bert-worker-0", deleting=True)],
            False,
            id="only-pods-going",
        ),
        pytest.param(
            RESTARTED, [_gang_pod("bert-worker-0", "0")], False, id="only-an-earlier-gangs-pod"
        ),
        pytest.param(
            RESTARTED, [_gang_pod("bert-worker-0", "1")], True, id="the-restarted-gangs-pod"
        ),
        pytest.param(
            job(JOB).build(),
            [_gang_pod("bert-worker-0", None)],
            True,
            id="a-pod-without-the-annotation",
        ),
        pytest.param(
            RESTARTED,
            [_gang_pod("bert-worker-0", "0"), _gang_pod("bert-worker-1", "1", deleting=True)],
            False,
            id="old-gang-and-a-new-one-going",
        ),
    ],
)
def test_gang_live(body: dict[str, Any], pods: list[dict[str, Any]], expected: bool) -> None:
    assert gang_live(body, pods) is expected


NOW = datetime(2025, 6, 1, 12, 0, 0)
PT_RUNTIME = {"kind": "ClusterTrainingRuntime", "name": "pytorch", "generation": 3}
WAITED = {
    "phase": "Queued",
    "conditions": [
        {"type": RUNTIME_CONDITION, "status": "False", "reason": "RuntimeNotFound", "message": "x"}
    ],
}
RUNTIME_OK = {"type": RUNTIME_CONDITION, "status": "True", "reason": "Resolved"}


@pytest.mark.parametrize(
    ("status", "runtime", "creates", "recorded", "condition"),
    [
        pytest.param({"phase": "Admitted"}, PT_RUNTIME, True, PT_RUNTIME, None, id="gang-created"),
        pytest.param({"phase": "Running"}, PT_RUNTIME, False, None, None, id="no-create-no-record"),
        pytest.param({"phase": "Admitted"}, None, True, None, None, id="names-no-runtime"),
        pytest.param({}, PT_RUNTIME, True, None, None, id="nothing-to-write-stays-empty"),
        pytest.param(
            WAITED,
            PT_RUNTIME,
            False,
            None,
            {**RUNTIME_OK, "message": "merged with ClusterTrainingRuntime pytorch"},
            id="a-problem-fixed-turns-the-condition-true",
        ),
        pytest.param(
            WAITED,
            None,
            False,
            None,
            {**RUNTIME_OK, "message": "the job names no runtime"},
            id="a-ref-removed-turns-it-true-too",
        ),
    ],
)
def test_runtime_recorded(
    status: dict[str, Any],
    runtime: dict[str, Any] | None,
    creates: bool,
    recorded: dict[str, Any] | None,
    condition: dict[str, Any] | None,
) -> None:
    before = copy.deepcopy(status)
    out = runtime_recorded(status, runtime, creates, NOW, 2)
    assert status == before  # not changed in place
    assert out.get("runtime") == recorded
    got = [cd for cd in out.get("conditions") or [] if cd["type"] == RUNTIME_CONDITION]
    if condition is None:
        assert got == [
            cd for cd in status.get("conditions") or [] if cd["type"] == RUNTIME_CONDITION
        ]
    else:
        assert {k: got[0][k] for k in condition} == condition


MISSING = "spec.runtimeRef.name: ClusterTrainingRuntime pytorch not found: create it"


def _told(reason: str, message: str, live: bool = False, phase: str = "Queued") -> dict[str, Any]:
    return {
        "phase": phase,
        "conditions": [
            {"type": RUNTIME_CONDITION, "status": "False", "reason": reason, "message": message}
        ],
    }


@pytest.mark.parametrize(
    ("status", "reason", "message", "live", "phase", "events"),
    [
        pytest.param(
            {}, "RuntimeNotFound", MISSING, False, "Queued", 1, id="new-job-waits-one-event"
        ),
        pytest.param(
            _told("RuntimeNotFound", MISSING),
            "RuntimeNotFound",
            MISSING,
            False,
            "Queued",
            0,
            id="the-same-problem-again-no-event",
        ),
        pytest.param(
            _told("RuntimeNotFound", MISSING),
            "RuntimeInvalid",
            "spec.cuda: bad",
            False,
            "Queued",
            1,
            id="another-problem-another-event",
        ),
        pytest.param(
            {"phase": "Admitted", "pendingReason": "Quota"},
            "RuntimeNotFound",
            MISSING,
            False,
            "Queued",
            1,
            id="deleted-under-a-queued-job",
        ),
        pytest.param(
            {"phase": "Running"},
            "RuntimeNotFound",
            MISSING,
            True,
            "Running",
            1,
            id="a-live-gang-runs-on-told",
        ),
    ],
)
def test_runtime_wait_status(
    status: dict[str, Any], reason: str, message: str, live: bool, phase: str, events: int
) -> None:
    body = job(JOB).with_status(**status).build() if status else job(JOB).build()
    new, told = runtime_wait_status(body, reason, message, NOW, live)
    assert new["phase"] == phase
    runtime_cond = next(cd for cd in new["conditions"] if cd["type"] == RUNTIME_CONDITION)
    assert (runtime_cond["status"], runtime_cond["reason"]) == ("False", reason)
    assert runtime_cond["message"] == message
    if not live:
        assert (new["pendingReason"], new["pendingMessage"]) == (WaitReason.RUNTIME, message)
        assert not any(
            cd["type"] == "Invalid" and cd["status"] == "True" for cd in new["conditions"]
        )
    assert told == [("Warning", reason, message)] * events
