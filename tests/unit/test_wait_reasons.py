"""Every WaitReason, one named case each, from where it is made to what `trainop explain` shows.

Each case builds TrainingJobs (tests/builders.py) that wait for one reason, runs the admission
cycle the operator runs (`queueing.cluster.admission_pass`, the planner as placer; the
simulator for a wait that needs time to pass; the shell's reading of status before the first
cycle, for Pending), and checks that the reason comes out as the
`WaitReason` member, then that the reconcile writes it to status as the plain string and that
`explain` prints it. (Policy is the one reason that is not a wait: the tenant's policy refuses
the job as written, so it is Invalid, with reason PolicyViolation and the queue's message.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from tests.builders import H100, busy, fleet_nodes, fleet_snapshot, job, queue, small_fleet
from trainop.api import constants as c
from trainop.api.reasons import WaitReason
from trainop.explain import explain_text
from trainop.inventory import Snapshot, build_snapshot
from trainop.planner import OperatorConfig
from trainop.queueing import simulate
from trainop.queueing.cluster import admission_pass
from trainop.reconcile import Admission, reconcile, runtime_wait_status
from trainop.runtimes import RuntimeProblem, resolve
from trainop.shellrules import admission_for

NOW = datetime(2025, 6, 1, 12, 0, 0)
CONFIG = OperatorConfig()
KEY = "team-a/j"


def body(name: str, replicas: int = 1, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    builder = job(name, namespace="team-a").workers(replicas, gpus)
    for key, value in spec.items():
        builder.set(key, value)
    return builder.meta(creationTimestamp="2025-06-01T11:00:00Z").build()


def cycle(
    jobs: list[dict[str, Any]],
    queues: list[dict[str, Any]] | None = None,
    snapshot: Snapshot | None = None,
) -> tuple[str, str]:
    """The (reason, message) of job `j` after one admission cycle; it must wait."""
    result = admission_pass(
        NOW, jobs, {}, queues or [], {}, {}, snapshot or fleet_snapshot(), CONFIG
    )
    decision = result.decisions[KEY]
    assert decision.action == "Wait", decision
    return decision.reason, decision.message


def over_time(
    jobs: list[dict[str, Any]], nodes: list[dict[str, Any]], key: str, reason: str
) -> tuple[str, str]:
    """The wait of job `key` for `reason` in a simulated run (one that needs time to pass:
    it waited for room first)."""
    waits = [w for w in simulate(nodes, [], jobs).job(key).waits if w.reason == reason]
    assert waits, f"the job never waited for {reason}"
    return waits[0].reason, waits[0].message


def sim_job(name: str, submit: float, duration: float, gpus: int) -> dict[str, Any]:
    built = job(name, namespace="ns").workers(gpus // 8, 8).placement("rack", "Preferred", [H100])
    out = built.build()
    out["metadata"]["annotations"] = {
        c.ANNOTATION_SIM_SUBMIT: str(submit),
        c.ANNOTATION_SIM_DURATION: str(duration),
    }
    return out


def _quota() -> tuple[str, str]:
    q = queue("nlp").serves("team-a", default=True).quota("h100", 8, H100).build()
    return cycle([body("a"), body("j")], [q])


def _nofit() -> tuple[str, str]:
    half_full = [busy(n["metadata"]["name"], 4, f"p-{i}") for i, n in enumerate(fleet_nodes())]
    return cycle([body("j", placement={"gpuProducts": [H100]})], snapshot=fleet_snapshot(half_full))


def _policy() -> tuple[str, str]:
    other = queue("nlp").serves("team-b").quota("any", 64).build()
    return cycle([body("j", queue="nlp")], [other])


def _incompatible() -> tuple[str, str]:
    # Nodes without NVIDIA GPU Feature Discovery's compute-capability labels run no image.
    return cycle([body("j")], snapshot=build_snapshot(small_fleet(2)))


def _queue_invalid() -> tuple[str, str]:
    broken = queue("nlp").serves("team-a", default=True).set("parent", "gone").build()
    return cycle([body("j")], [broken])


def _topology() -> tuple[str, str]:
    # a and b fill rack h100-a, c holds half of h100-b until t=200: d fits across both racks
    # once a ends, but waits for the one rack (test_queueing_simulate has the whole story).
    jobs = [
        sim_job("a", 0, 100, 32),
        sim_job("b", 0, 1000, 32),
        sim_job("c", 0, 200, 16),
        sim_job("d", 10, 50, 64),
    ]
    h100 = [n for n in fleet_nodes() if n["metadata"]["name"].startswith("h100-")]
    return over_time(jobs, h100, "ns/d", WaitReason.TOPOLOGY)


def _inadmissible() -> tuple[str, str]:
    return cycle([body("j", replicas=100)])


def _pending() -> tuple[str, str]:
    # Queued before, with no reason kept, and no verdict since the operator started: the
    # reconcile carries out the wait the shell reads from status (trainop.shellrules).
    queued = job("j", namespace="team-a").phase("Queued").build()
    admission, _ = admission_for(None, queued, False, CONFIG, {})
    assert admission is not None
    return admission.reason, admission.message


def _runtime() -> tuple[str, str]:
    # Its spec.runtimeRef names no runtime the cluster has: the shell writes the wait
    # (handlers.operator._runtime_wait over reconcile.runtime_wait_status), out of line.
    named = job("j", namespace="team-a").runtime_ref("pytorch").build()
    problem = resolve(named, {})
    assert isinstance(problem, RuntimeProblem)
    status, events = runtime_wait_status(named, problem.reason, str(problem), NOW)
    assert events == [("Warning", "RuntimeNotFound", str(problem))]
    return WaitReason(status["pendingReason"]), status["pendingMessage"]


# (the reason, how a job comes to wait for it, the phase and the line `explain` shows)
CASES: list[tuple[WaitReason, Callable[[], tuple[str, str]], str, str]] = [
    (WaitReason.QUOTA, _quota, "Queued", "Waiting:    Quota"),
    (WaitReason.NOFIT, _nofit, "Queued", "Waiting:    NoFit"),
    (WaitReason.POLICY, _policy, "Invalid", "PolicyViolation"),
    (WaitReason.INCOMPATIBLE, _incompatible, "Queued", "Waiting:    Incompatible"),
    (WaitReason.QUEUE_INVALID, _queue_invalid, "Queued", "Waiting:    QueueInvalid"),
    (WaitReason.TOPOLOGY, _topology, "Queued", "Waiting:    Topology"),
    (WaitReason.INADMISSIBLE, _inadmissible, "Queued", "Waiting:    Inadmissible"),
    (WaitReason.PENDING, _pending, "Queued", "Waiting:    Pending"),
    (WaitReason.RUNTIME, _runtime, "Queued", "Waiting:    Runtime"),
]


def test_every_reason_has_its_case() -> None:
    assert [case[0] for case in CASES] == list(WaitReason)


@pytest.mark.parametrize(
    ("reason", "make", "phase", "shown"), [pytest.param(*c, id=c[0].value) for c in CASES]
)
def test_a_wait_reason_from_the_cycle_to_explain(
    reason: WaitReason, make: Callable[[], tuple[str, str]], phase: str, shown: str
) -> None:
    got, message = make()
    assert isinstance(got, WaitReason), (got, message)
    assert got == reason, message
    waiting = body("j")
    acts = reconcile(
        waiting, [], fleet_snapshot(), CONFIG, NOW, Admission(False, got, message, position=1)
    )
    status = json.loads(json.dumps(acts.status))  # as the API server stores it
    assert status["phase"] == phase
    if phase == "Queued":
        assert status["pendingReason"] == reason.value
        assert status["pendingMessage"] == message
    text = explain_text({**waiting, "status": status}, [], [], None)
    assert shown in text and message in text, text
