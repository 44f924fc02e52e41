"""trainop.progress: reports checked and folded into status.progress, the write throttle, the
checkpoint-before-eviction wait, lost work, who may report for which job, the pod wiring and
the Degraded rule (issue 24)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.builders import job
from trainop import progress
from trainop.api.progress import PROGRESS_AUDIENCE
from trainop.api.trainingjob import TrainingJobStatus

T0 = datetime(2026, 11, 25, 12, 0, 0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# --- parse_report ---------------------------------------------------------------------------
BAD_REPORTS = [
    ("not-an-object", [1, 2], "JSON object"),
    ("no-step", {"phase": "x"}, "step: required"),
    ("negative-step", {"step": -1}, "step: must be an integer"),
    ("float-step", {"step": 1.5}, "step: must be an integer"),
    ("bool-step", {"step": True}, "step: must be an integer"),
    ("nan-rate", {"step": 1, "samplesPerSecond": float("nan")}, "samplesPerSecond"),
    ("text-rate", {"step": 1, "stepSeconds": "fast"}, "stepSeconds"),
    ("half-checkpoint", {"step": 1, "checkpoint": {"path": "/c"}}, "give both path and step"),
    ("checkpoint-list", {"step": 1, "checkpoint": ["/c", 1]}, "checkpoint: must be an object"),
    ("long-phase", {"step": 1, "phase": "x" * 600}, "phase: must be a string"),
    ("total-text", {"step": 1, "totalSteps": "100"}, "totalSteps: must be an integer"),
    ("metrics-list", {"step": 1, "metrics": [["loss", 1]]}, "metrics: must be an object"),
    (
        "metric-nan",
        {"step": 1, "metrics": {"loss": float("nan")}},
        "metrics.loss: must be a finite",
    ),
    ("metric-text", {"step": 1, "metrics": {"loss": "low"}}, "metrics.loss: must be a finite"),
    ("metric-bool", {"step": 1, "metrics": {"ok": True}}, "metrics.ok: must be a finite"),
    ("metric-long-name", {"step": 1, "metrics": {"x" * 65: 1}}, "metrics: names must be"),
    ("too-many-metrics", {"step": 1, "metrics": {f"m{i}": i for i in range(65)}}, "at most 64"),
]


@pytest.mark.parametrize(("name", "data", "error"), BAD_REPORTS, ids=[c[0] for c in BAD_REPORTS])
def test_bad_reports_name_the_field(name: str, data: Any, error: str) -> None:
    with pytest.raises(progress.ReportError, match=error):
        progress.parse_report(data)


def test_a_full_report_parses() -> None:
    r = progress.parse_report(
        {
            "step": 120,
            "stepSeconds": 0.5,
            "samplesPerSecond": 256,
            "tokensPerSecond": 1e6,
            "checkpoint": {"path": "/ckpt/120.pt", "step": 120},
            "phase": "train",
        }
    )
    assert (r.step, r.checkpoint_path, r.checkpoint_step, r.phase) == (
        120,
        "/ckpt/120.pt",
        120,
        "train",
    )


def test_the_integrations_total_and_metrics_reach_the_status() -> None:
    """trainop.integrations send the trainer's planned total and its loss: the total gives
    the summary and the ETA when the job sets no spec.progress.totalSteps, which wins."""
    r = progress.parse_report(
        {"step": 10, "stepSeconds": 0.5, "totalSteps": 100, "metrics": {"loss": 0.5, "n": 3}}
    )
    assert (r.total_steps, r.metrics) == (100, (("loss", "0.5"), ("n", "3")))
    own = progress.fold(None, r, 0, "n1", at(0), None)
    assert (own["totalSteps"], own["summary"], own["eta"]) == (
        100,
        "10/100 (10%)",
        "2026-11-25T12:00:45Z",
    )
    assert own["metrics"] == [{"name": "loss", "value": "0.5"}, {"name": "n", "value": "3"}]
    spec = progress.fold(None, r, 0, "n1", at(0), 400)
    assert (spec["totalSteps"], spec["summary"]) == (400, "10/400 (2%)")
    other_rank = progress.fold(
        own, progress.Report(step=10, step_seconds=0.6), 1, "n2", at(1), None
    )
    assert (other_rank["totalSteps"], other_rank["metrics"]) == (100, own["metrics"])


# --- fold -------------------------------------------------------------------------------------
def test_rank0_reports_move_step_rate_and_eta() -> None:
    first = progress.fold(None, progress.Report(step=100, step_seconds=0.5), 0, "n1", at(0), 1000)
    assert first["summary"] == "100/1000 (10%)"
    assert first["eta"] == progress.iso(at(0) + timedelta(seconds=900 * 0.5))
    second = progress.fold(
        first, progress.Report(step=300, step_seconds=0.5), 0, "n1", at(100), 1000
    )
    assert second["stepsPerSecond"] == 2.0  # 200 steps in 100 s
    assert second["eta"] == progress.iso(at(100) + timedelta(seconds=350))
    assert second["lastReportTime"] == progress.iso(at(100))
    TrainingJobStatus.model_validate({"progress": second})  # the CRD's schema holds it


def test_other_ranks_add_their_step_time_but_not_the_step() -> None:
    base = progress.fold(None, progress.Report(step=50, step_seconds=1.0), 0, "n1", at(0), None)
    after = progress.fold(base, progress.Report(step=49, step_seconds=3.0), 1, "n2", at(1), None)
    assert after["step"] == 50 and after["summary"] == "step 50"
    assert after["ranks"] == [
        {"rank": 0, "node": "n1", "stepSeconds": 1.0},
        {"rank": 1, "node": "n2", "stepSeconds": 3.0},
    ]


def test_ranks_kept_are_the_slowest_few_and_rank0() -> None:
    p: dict[str, Any] | None = None
    for rank in range(10):
        p = progress.fold(
            p, progress.Report(step=5, step_seconds=1.0 + rank), rank, f"n{rank}", at(rank), None
        )
    assert p is not None
    assert [r["rank"] for r in p["ranks"]] == [0, 7, 8, 9]


def test_a_new_checkpoint_is_stamped_once() -> None:
    report = progress.Report(step=10, checkpoint_path="/c/10", checkpoint_step=10)
    first = progress.fold(None, report, 0, "n1", at(0), None)
    again = progress.fold(first, report, 0, "n1", at(30), None)
    assert first["lastCheckpoint"] == {"path": "/c/10", "step": 10, "time": progress.iso(at(0))}
    assert again["lastCheckpoint"]["time"] == progress.iso(at(0))


THROTTLE = [
    ("first-write", None, 100.0, True),
    ("within-interval", 95.0, 100.0, False),
    ("interval-passed", 90.0, 100.0, True),
]


@pytest.mark.parametrize(("name", "last", "clock", "want"), THROTTLE, ids=[c[0] for c in THROTTLE])
def test_status_writes_are_throttled(
    name: str, last: float | None, clock: float, want: bool
) -> None:
    same = {"step": 3}
    assert progress.should_write(same, {"step": 4}, last, clock, 10.0) is want


def test_a_new_checkpoint_is_written_at_once() -> None:
    new = {"step": 4, "lastCheckpoint": {"path": "/c", "step": 4}}
    assert progress.should_write({"step": 3}, new, 99.0, 100.0, 10.0)


# --- the bounded checkpoint wait ------------------------------------------------------------
def _request(grace: int = 60) -> dict[str, Any]:
    return progress.checkpoint_request({"step": 500}, grace, "Preempted", at(0))


WAITS = [
    ("no-checkpoint-yet", None, 30, False, ""),
    (
        "old-checkpoint-only",
        {"path": "/c/400", "step": 400, "time": progress.iso(at(-50))},
        30,
        False,
        "",
    ),
    (
        "checkpoint-after-request",
        {"path": "/c/510", "step": 510, "time": progress.iso(at(20))},
        20,
        True,
        "checkpointed at step 510",
    ),
    (
        "same-second-older-step",
        {"path": "/c/499", "step": 499, "time": progress.iso(at(0))},
        5,
        False,
        "",
    ),
    ("deadline-reached", None, 60, True, "no checkpoint was reported within the grace period"),
    (
        "deadline-passed-old-checkpoint",
        {"path": "/c/400", "step": 400, "time": progress.iso(at(-50))},
        61,
        True,
        "evicted at the deadline",
    ),
]


@pytest.mark.parametrize(("name", "ckpt", "now", "evict", "note"), WAITS, ids=[c[0] for c in WAITS])
def test_the_wait_ends_at_a_newer_checkpoint_or_the_deadline(
    name: str, ckpt: dict[str, Any] | None, now: float, evict: bool, note: str
) -> None:
    reported = {"step": 520, **({"lastCheckpoint": ckpt} if ckpt else {})}
    done, why = progress.eviction_note(reported, _request(), at(now))
    assert done is evict
    assert note in why


def test_the_request_records_step_and_deadline() -> None:
    assert _request(90) == {
        "requestedAt": progress.iso(at(0)),
        "deadline": progress.iso(at(90)),
        "step": 500,
        "reason": "Preempted",
    }


LOST = [
    ("no-checkpoint-since-start", None, 0, 4, 3600, 4 * 3600.0),
    ("checkpoint-10-min-ago", progress.iso(at(3000)), 0, 4, 3600, 4 * 600.0),
    ("checkpoint-before-restart", progress.iso(at(100)), 1000, 2, 3600, 2 * 2600.0),
    ("never-started", None, None, 8, 3600, 0.0),
]


@pytest.mark.parametrize(
    ("name", "ckpt", "started", "gpus", "now", "want"), LOST, ids=[c[0] for c in LOST]
)
def test_lost_work_is_time_since_checkpoint_times_gpus(
    name: str, ckpt: str | None, started: float | None, gpus: int, now: float, want: float
) -> None:
    reported = {"lastCheckpoint": {"path": "/c", "step": 1, "time": ckpt}} if ckpt else {}
    start = at(started) if started is not None else None
    assert progress.lost_work_gpu_seconds(reported, start, gpus, at(now)) == want


# --- who may report for which job -------------------------------------------------------------
def review(pod: str = "a-worker-0", uid: str = "uid-pod-a", **over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "authenticated": True,
        "audiences": [PROGRESS_AUDIENCE],
        "user": {
            "username": "system:serviceaccount:team:default",
            "extra": {progress.POD_NAME_EXTRA: [pod], progress.POD_UID_EXTRA: [uid]},
        },
    }
    out.update(over)
    return out


BAD_TOKENS = [
    ("not-authenticated", review(authenticated=False, error="token expired"), "token expired"),
    ("apiserver-audience", review(audiences=["https://kubernetes.default.svc"]), "audience"),
    ("a-user-token", review(user={"username": "alice"}), "not a ServiceAccount token"),
    (
        "not-bound-to-a-pod",
        review(user={"username": "system:serviceaccount:team:default", "extra": {}}),
        "not bound to a pod",
    ),
]


@pytest.mark.parametrize(("name", "data", "error"), BAD_TOKENS, ids=[c[0] for c in BAD_TOKENS])
def test_only_pod_bound_tokens_for_trainop_are_taken(name: str, data: Any, error: str) -> None:
    with pytest.raises(progress.ReportError, match=error):
        progress.reporter_of(data, PROGRESS_AUDIENCE)


def _pod(name: str, job_name: str, job_uid: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": uid,
            "labels": {"trainop.dev/job-name": job_name},
            "ownerReferences": [{"kind": "TrainingJob", "name": job_name, "uid": job_uid}],
        }
    }


def test_a_pod_reports_for_its_own_job_only() -> None:
    job_a = job("a", "team").meta(uid="uid-job-a").build()
    job_b = job("b", "team").meta(uid="uid-job-b").build()
    pod_a = _pod("a-worker-0", "a", "uid-job-a", "uid-pod-a")
    who = progress.reporter_of(review(), PROGRESS_AUDIENCE)
    assert (who.namespace, who.pod) == ("team", "a-worker-0")
    assert progress.job_of_pod(pod_a, who, job_a) == "a"
    # The report body names no job: the job comes from the token's pod. A pod that claims
    # job b's label but is owned by job a is still refused for job b.
    forged = _pod("a-worker-0", "b", "uid-job-a", "uid-pod-a")
    with pytest.raises(progress.ReportError, match="not a pod of a TrainingJob"):
        progress.job_of_pod(forged, who, job_b)
    # A token of a pod since deleted (and a new pod of that name) is refused too.
    with pytest.raises(progress.ReportError, match="not a pod trainop knows"):
        progress.job_of_pod(_pod("a-worker-0", "a", "uid-job-a", "uid-new"), who, job_a)


# --- pod wiring --------------------------------------------------------------------------------
def _gang_pod() -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "a-worker-1", "annotations": {"trainop.dev/rank": "1"}},
        "spec": {"containers": [{"name": "trainer", "env": [{"name": "X", "value": "1"}]}]},
    }


def test_wired_pods_get_url_token_rank_and_resume_point() -> None:
    pod = _gang_pod()
    resume = progress.resume_env(
        {"progress": {"lastCheckpoint": {"path": "/c/7", "step": 7}}}, "/c"
    )
    out = progress.wire_pod(pod, "http://op:8082/v1/progress", {"signal": "SIGUSR2"}, resume, 5.0)
    env = {e["name"]: e["value"] for e in out["spec"]["containers"][0]["env"]}
    assert env["TRAINOP_PROGRESS_URL"] == "http://op:8082/v1/progress"
    assert env["TRAINOP_RANK"] == "1" and env["TRAINOP_CHECKPOINT_SIGNAL"] == "SIGUSR2"
    assert (env["TRAINOP_RESUME_FROM"], env["TRAINOP_RESUME_STEP"]) == ("/c/7", "7")
    source = out["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]
    assert source["audience"] == PROGRESS_AUDIENCE
    assert out["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] is True
    assert pod == _gang_pod()  # the planned pod itself is untouched


def test_without_url_or_checkpoint_nothing_is_added() -> None:
    assert progress.wire_pod(_gang_pod(), "", None, {}, 5.0) == _gang_pod()


# --- the Degraded rule --------------------------------------------------------------------------
def reported(seconds: float, step: int = 200, **more: Any) -> dict[str, Any]:
    return {"step": step, "stepSeconds": seconds, "placementStartStep": 100, **more}


RANKS_ONE_SLOW = [
    {"rank": 0, "node": "n1", "stepSeconds": 1.0},
    {"rank": 1, "node": "n2", "stepSeconds": 1.1},
    {"rank": 2, "node": "n3", "stepSeconds": 3.2},
]
DEGRADED = [
    ("warming-up", reported(5.0, step=110), None, False, "WarmingUp", ""),
    ("no-reference-yet", reported(5.0), None, False, "AsExpected", ""),
    ("own-best-as-expected", reported(1.1, bestStepSeconds=1.0), None, False, "AsExpected", ""),
    (
        "own-best-slowed",
        reported(2.0, bestStepSeconds=1.0),
        None,
        True,
        "SlowerThanExpected",
        "no straggler rank",
    ),
    (
        "earlier-placement-faster",
        reported(3.0, baselineStepSeconds=1.0, ranks=RANKS_ONE_SLOW),
        None,
        True,
        "SlowerThanExpected",
        "rank 2 on node n3 is a straggler",
    ),
    (
        "worse-allreduce-explains-it",
        reported(
            3.0,
            baselineStepSeconds=1.0,
            baselineAllreduceSeconds=0.1,
            placementAllreduceSeconds=0.4,
        ),
        None,
        False,
        "AsExpected",
        "",
    ),
    (
        "spans-racks",
        reported(2.0, baselineStepSeconds=1.0),
        {"allreduceBottleneck": "rack"},
        True,
        "SlowerThanExpected",
        "crosses rack links",
    ),
]


@pytest.mark.parametrize(
    ("name", "p", "placement", "degraded", "reason", "why"), DEGRADED, ids=[c[0] for c in DEGRADED]
)
def test_degraded_rule(
    name: str,
    p: dict[str, Any],
    placement: dict[str, Any] | None,
    degraded: bool,
    reason: str,
    why: str,
) -> None:
    verdict = progress.judge_degraded(p, placement, 1.5, 20)
    assert (verdict.degraded, verdict.reason) == (degraded, reason)
    assert why in verdict.message


def test_a_new_placement_makes_the_old_best_the_baseline() -> None:
    first = {"placementNodes": None}
    p = progress.note_placement(
        {"step": 0, **first}, {"nodes": ["n1", "n2"], "estimatedAllreduceSeconds": 0.1}, 10
    )
    for step, seconds in ((5, 9.0), (20, 1.2), (30, 1.0), (40, 1.3)):
        p = progress.note_placement(
            {**p, "step": step, "stepSeconds": seconds}, {"nodes": ["n1", "n2"]}, 10
        )
    assert p["bestStepSeconds"] == 1.0  # the 9 s warm-up step is not counted
    moved = progress.note_placement(
        {**p, "step": 41}, {"nodes": ["n3", "n4"], "estimatedAllreduceSeconds": 0.2}, 10
    )
    assert (moved["baselineStepSeconds"], moved["baselineAllreduceSeconds"]) == (1.0, 0.1)
    assert moved["placementStartStep"] == 41 and "bestStepSeconds" not in moved
    assert progress.expected_step_seconds(moved) == 2.0
