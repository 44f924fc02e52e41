"""A broken TrainingQueue fails closed (issue 12): its jobs wait on it, loudly, and never fall
through to the built-in queue or another one; its status says Active=False with the fix."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.builders import H100, busy, fleet_snapshot, job, queue
from trainop.planner import OperatorConfig
from trainop.queueing import BUILTIN_QUEUE_NAME, QueueConfigError, resolve_queue
from trainop.queueing.cluster import PassResult, admission_pass, load_queues
from trainop.queueing.model import QUEUE_INVALID, broken_queue
from trainop.queueing.status import queue_statuses

NOW = datetime(2025, 6, 1, 12, 0, 0)
CONFIG = OperatorConfig()
TWICE = [{"products": [H100], "gpus": 8}, {"name": "b", "products": [H100], "gpus": 8}]


def queue_doc(name: str, **spec: Any) -> dict[str, Any]:
    """A TrainingQueue with these spec fields, as they are (valid or not)."""
    builder = queue(name)
    for key, value in spec.items():
        builder.set(key, value)
    return builder.build()


def body(name: str, ns: str = "team-a", queue_name: str | None = None, **tmpl: Any) -> dict:
    j = job(name, namespace=ns).workers(1, 8, tmpl or None)
    if queue_name:
        j.set("queue", queue_name)
    return j.meta(creationTimestamp="2025-06-01T11:00:00Z").build()


def run_pass(queues: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> PassResult:
    return admission_pass(NOW, jobs, {}, queues, {}, {}, fleet_snapshot(), CONFIG)


PRIVILEGED = {"spec": {"containers": [{"name": "t", "securityContext": {"privileged": True}}]}}

# (id, queues, job, queue the job resolves to, expected wait reason or None when admitted)
CASES = [
    (
        "broken-default-queue-blocks-its-namespace",
        [queue_doc("nlp", namespaces=["team-a"], default=True, quotas=TWICE)],
        body("j"),
        "nlp",
        QUEUE_INVALID,
    ),
    (
        "named-broken-queue-blocks",
        [queue_doc("nlp", namespaces=["team-a"], quotas=TWICE)],
        body("j", queue_name="nlp"),
        "nlp",
        QUEUE_INVALID,
    ),
    (
        "privileged-pod-does-not-slip-through-to-the-builtin-queue",
        [queue_doc("nlp", namespaces=["team-a"], default=True, quotas=TWICE)],
        body("j", **PRIVILEGED),
        "nlp",
        QUEUE_INVALID,
    ),
    (
        "broken-queue-by-selector-still-claims-its-namespaces",
        [queue_doc("nlp", namespaceSelector={"matchLabels": {}}, default=True, weight=0)],
        body("j"),
        "nlp",
        QUEUE_INVALID,
    ),
    (
        "other-namespaces-unaffected",
        [queue_doc("nlp", namespaces=["team-b"], default=True, quotas=TWICE)],
        body("j"),
        BUILTIN_QUEUE_NAME,
        None,
    ),
    (
        "healthy-queue-admits",
        [queue_doc("nlp", namespaces=["team-a"], default=True, quotas=[{"gpus": 64}])],
        body("j"),
        "nlp",
        None,
    ),
    (
        "queue-of-another-namespace-refused",
        [queue_doc("nlp", namespaces=["team-b"], quotas=[{"gpus": 64}])],
        body("j", queue_name="nlp"),
        "nlp",
        "Policy",
    ),
    (
        "privileged-refused-by-a-healthy-queue",
        [queue_doc("nlp", namespaces=["team-a"], default=True)],
        body("j", **PRIVILEGED),
        "nlp",
        "Policy",
    ),
]


@pytest.mark.parametrize(
    ("queues", "job", "resolved", "reason"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_fail_closed(
    queues: list[dict[str, Any]], job: dict[str, Any], resolved: str, reason: str | None
) -> None:
    result = run_pass(queues, [job])
    decision = result.decisions["team-a/j"]
    assert decision.queue == resolved
    if reason is None:
        assert decision.action == "Admit", decision.message
        return
    assert (decision.action, decision.reason) == ("Wait", reason)
    if reason == QUEUE_INVALID:
        assert decision.message.startswith(f"queue {resolved} is invalid: spec.")
        assert "kubectl edit trainingqueue nlp" in decision.message
        assert resolved in result.broken


def test_running_job_of_a_queue_that_breaks_keeps_running() -> None:

    pod = busy("a100-01", 8, "j-worker-0")
    pod["metadata"].update(
        namespace="team-a",
        labels={"trainop.dev/job-name": "j"},
        ownerReferences=[{"uid": "uid-j"}],
    )
    job = body("j")
    job["status"] = {"phase": "Running", "startTime": "2025-06-01T11:30:00Z"}
    q = [queue_doc("nlp", namespaces=["team-a"], default=True, quotas=TWICE)]
    result = admission_pass(
        NOW, [job], {"team-a/j": [pod]}, q, {}, {}, fleet_snapshot([pod]), CONFIG
    )
    assert result.decisions["team-a/j"].action == "Keep"


def test_broken_queue_serving_part_read_leniently() -> None:
    err = QueueConfigError("nlp", "spec.weight", "bad")
    q = broken_queue(queue_doc("nlp", namespaces=["a", 3], default=True), err)
    assert (q.namespaces, q.default, q.namespace_selector, q.error) == (("a",), True, None, err)
    assert broken_queue({"metadata": {"name": "x"}, "spec": "junk"}, err).namespaces == ()
    assert resolve_queue("a", None, [q]).name == "nlp"


def test_load_queues_keeps_broken_ones_by_name() -> None:
    queues, broken = load_queues([queue_doc("ok"), queue_doc("bad", quotas=TWICE)])
    assert [q.name for q in queues] == ["ok", "bad"]
    assert list(broken) == ["bad"] and broken["bad"].field == "spec.quotas[1].products"


def test_jobs_with_a_missing_priority_class_take_no_admission_slot() -> None:
    job = body("j")
    job["spec"]["priorityClassName"] = "urgent"
    result = admission_pass(NOW, [job], {}, [], {}, {"high": 10}, fleet_snapshot(), CONFIG)
    assert result.decisions.get("team-a/j") is None


def test_queue_statuses_active_condition() -> None:
    stored = {
        "ok": queue_doc("ok", namespaces=["team-a"], default=True),
        "bad": queue_doc("bad", namespaces=["team-b"], default=True, quotas=TWICE),
    }
    jobs = [body("j"), body("k", ns="team-b")]
    result = run_pass(list(stored.values()), jobs)
    got = queue_statuses(result.decisions, result.broken, stored, NOW)
    ok, bad = got["ok"]["conditions"][0], got["bad"]["conditions"][0]
    assert (ok["type"], ok["status"], ok["reason"]) == ("Active", "True", "Valid")
    assert (bad["type"], bad["status"], bad["reason"]) == ("Active", "False", "InvalidSpec")
    assert bad["message"].startswith("spec.quotas[1].products: ")
    assert "never fall through" in bad["message"]
    assert (got["bad"]["admittedJobs"], got["bad"]["pendingJobs"]) == (0, 1)
    assert got["ok"]["admittedJobs"] == 1


def test_queue_condition_keeps_its_transition_time_until_it_flips() -> None:
    stored = {"bad": queue_doc("bad", quotas=TWICE)}
    result = run_pass(list(stored.values()), [])
    first = queue_statuses(result.decisions, result.broken, stored, NOW)["bad"]
    later = datetime(2025, 6, 1, 13, 0, 0)
    stored["bad"]["status"] = first
    again = queue_statuses(result.decisions, result.broken, stored, later)["bad"]
    assert again == first  # nothing to patch
    fixed = {"bad": {**queue_doc("bad"), "status": first}}
    healed = queue_statuses(run_pass([fixed["bad"]], []).decisions, {}, fixed, later)["bad"]
    assert healed["conditions"][0]["status"] == "True"
    assert healed["conditions"][0]["lastTransitionTime"] == "2025-06-01T13:00:00Z"


def test_a_running_gang_whose_priority_class_vanished_stays_charged() -> None:

    pod = busy("a100-01", 8, "j-worker-0")
    pod["metadata"].update(namespace="team-a", ownerReferences=[{"uid": "uid-j"}])
    job = body("j")
    job["spec"]["priorityClassName"] = "gone"
    job["status"] = {"phase": "Running"}
    result = admission_pass(
        NOW, [job], {"team-a/j": [pod]}, [], {}, {}, fleet_snapshot([pod]), CONFIG
    )
    assert result.decisions["team-a/j"].action == "Keep"
