"""trainop.trainerstatus: Kubeflow Trainer's trainerStatus body (transformers'
KubeflowCallback) checked and folded into status.progress; trainop's own Reporter wins; the
pod wiring of KUBEFLOW_TRAINER_SERVER_* (issue 39)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

from trainop import metrics, progress, trainerstatus
from trainop.api.trainingjob import TrainingJobStatus
from trainop.config import ConfigError, operator_config_from_data
from trainop.explain import _progress_lines
from trainop.trainerstatus import TrainerStatus, fold_trainer_status, parse_trainer_status

T0 = datetime(2026, 11, 27, 0, 51, 54)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# The bodies transformers 5.17's KubeflowCallback sent (issue 39): on_train_begin, a step
# (on_step_end adds current_step, total_steps and current_epoch), on_train_end.
BEGIN = {
    "trainerStatus": {
        "lastUpdatedTime": "2026-11-27T00:51:54.530279+00:00",
        "progressPercentage": 0,
        "metrics": [{"name": "total_steps", "value": "30"}],
    }
}
STEP = {
    "trainerStatus": {
        "lastUpdatedTime": "2026-11-27T00:51:59.530279+00:00",
        "progressPercentage": 50,
        "estimatedRemainingSeconds": 5,
        "metrics": [
            {"name": "loss", "value": "7.12"},
            {"name": "current_step", "value": "15"},
            {"name": "total_steps", "value": "30"},
            {"name": "current_epoch", "value": "0.5"},
        ],
    }
}
END = {
    "trainerStatus": {
        "lastUpdatedTime": "2026-11-27T00:52:04.101010+00:00",
        "progressPercentage": 100,
        "estimatedRemainingSeconds": 0,
        "metrics": [
            {"name": "loss", "value": "6.68"},
            {"name": "grad_norm", "value": "1.40"},
            {"name": "learning_rate", "value": "1.67e-06"},
        ],
    }
}


# --- parse_trainer_status: every field -----------------------------------------------------
def _ts(**fields: Any) -> dict[str, Any]:
    return {"trainerStatus": fields}


PARSED = [
    ("empty-status", _ts(), TrainerStatus()),
    ("percentage", _ts(progressPercentage=45), TrainerStatus(percentage=45)),
    ("percentage-bounds", _ts(progressPercentage=100), TrainerStatus(percentage=100)),
    ("remaining", _ts(estimatedRemainingSeconds=795649), TrainerStatus(remaining_seconds=795649)),
    ("time-dropped", _ts(lastUpdatedTime="2025-01-23T10:30:45Z"), TrainerStatus()),
    (
        "metrics-kept-in-order",
        _ts(metrics=[{"name": "loss", "value": "0.23"}, {"name": "eval_loss", "value": "0.25"}]),
        TrainerStatus(metrics=(("loss", "0.23"), ("eval_loss", "0.25"))),
    ),
    (
        "last-value-of-a-name-wins",
        _ts(metrics=[{"name": "loss", "value": "1"}, {"name": "loss", "value": "2"}]),
        TrainerStatus(metrics=(("loss", "2"),)),
    ),
    (
        "nan-loss-is-kept-as-sent",
        _ts(metrics=[{"name": "loss", "value": "nan"}]),
        TrainerStatus(metrics=(("loss", "nan"),)),
    ),
    (
        "transformers-steps",
        _ts(
            metrics=[
                {"name": "current_step", "value": "15"},
                {"name": "total_steps", "value": "30"},
            ]
        ),
        TrainerStatus(step=15, total_steps=30),
    ),
    (
        "camel-case-steps",
        _ts(
            metrics=[{"name": "currentStep", "value": "7.0"}, {"name": "totalSteps", "value": "9"}]
        ),
        TrainerStatus(step=7, total_steps=9),
    ),
    (
        "global-step-and-max-steps",
        _ts(metrics=[{"name": "global_step", "value": "3"}, {"name": "max_steps", "value": "0"}]),
        TrainerStatus(step=3),
    ),
    (
        "epochs-stay-metrics",
        _ts(
            metrics=[{"name": "currentEpoch", "value": "2"}, {"name": "totalEpochs", "value": "5"}]
        ),
        TrainerStatus(metrics=(("currentEpoch", "2"), ("totalEpochs", "5"))),
    ),
    (
        "unknown-keys-ignored",
        {"trainerStatus": {"foo": 1}, "dataInitializerStatus": {}},
        TrainerStatus(),
    ),
    ("null-metrics", _ts(metrics=None), TrainerStatus()),
]


@pytest.mark.parametrize(("name", "data", "want"), PARSED, ids=[c[0] for c in PARSED])
def test_every_field_parses(name: str, data: Any, want: TrainerStatus) -> None:
    assert parse_trainer_status(data) == want


def test_the_issue_bodies_parse() -> None:
    assert parse_trainer_status(BEGIN) == TrainerStatus(percentage=0, total_steps=30)
    assert parse_trainer_status(END) == TrainerStatus(
        percentage=100,
        remaining_seconds=0,
        metrics=(("loss", "6.68"), ("grad_norm", "1.40"), ("learning_rate", "1.67e-06")),
    )


# --- malformed bodies: refused, the message names the field ----------------------------------
def _metric(name: Any = "loss", value: Any = "1.0") -> dict[str, Any]:
    return {"name": name, "value": value}


BAD = [
    ("not-an-object", [1], "JSON object"),
    ("no-trainer-status", {"progressPercentage": 5}, "trainerStatus: required"),
    ("trainer-status-a-list", {"trainerStatus": [1]}, "trainerStatus: required"),
    ("percentage-over-100", _ts(progressPercentage=101), "trainerStatus.progressPercentage"),
    ("percentage-negative", _ts(progressPercentage=-1), "trainerStatus.progressPercentage"),
    ("percentage-float", _ts(progressPercentage=45.5), "trainerStatus.progressPercentage"),
    ("percentage-text", _ts(progressPercentage="45"), "trainerStatus.progressPercentage"),
    ("percentage-bool", _ts(progressPercentage=True), "trainerStatus.progressPercentage"),
    ("remaining-negative", _ts(estimatedRemainingSeconds=-5), "estimatedRemainingSeconds"),
    ("remaining-over-int32", _ts(estimatedRemainingSeconds=2**31), "estimatedRemainingSeconds"),
    ("remaining-float", _ts(estimatedRemainingSeconds=1.5), "estimatedRemainingSeconds"),
    ("time-not-text", _ts(lastUpdatedTime=12), "trainerStatus.lastUpdatedTime"),
    ("time-too-long", _ts(lastUpdatedTime="x" * 65), "trainerStatus.lastUpdatedTime"),
    ("metrics-an-object", _ts(metrics={"loss": "1"}), "trainerStatus.metrics: must be a list"),
    ("too-many-metrics", _ts(metrics=[_metric(f"m{i}") for i in range(65)]), "at most 64"),
    ("metric-not-an-object", _ts(metrics=["loss"]), r"trainerStatus.metrics\[0\]: must be"),
    ("metric-no-name", _ts(metrics=[{"value": "1"}]), r"metrics\[0\].name"),
    ("metric-empty-name", _ts(metrics=[_metric("")]), r"metrics\[0\].name"),
    ("metric-long-name", _ts(metrics=[_metric("n" * 65)]), r"metrics\[0\].name.*64"),
    ("metric-control-name", _ts(metrics=[_metric("lo\nss")]), r"metrics\[0\].name"),
    ("metric-number-value", _ts(metrics=[_metric(value=1.5)]), r"metrics\[0\].value"),
    ("metric-empty-value", _ts(metrics=[_metric(value="")]), r"metrics\[0\].value"),
    ("metric-long-value", _ts(metrics=[_metric(value="9" * 65)]), r"metrics\[0\].value"),
    (
        "step-not-a-count",
        _ts(metrics=[_metric("loss"), _metric("current_step", "abc")]),
        r"metrics\[1\].value \(current_step\): must be a whole number",
    ),
    ("step-fraction", _ts(metrics=[_metric("current_step", "1.5")]), "current_step"),
    ("total-negative", _ts(metrics=[_metric("total_steps", "-3")]), "total_steps"),
    ("total-inf", _ts(metrics=[_metric("total_steps", "inf")]), "total_steps"),
]


@pytest.mark.parametrize(("name", "data", "error"), BAD, ids=[c[0] for c in BAD])
def test_malformed_bodies_name_the_field(name: str, data: Any, error: str) -> None:
    with pytest.raises(progress.ReportError, match=error):
        parse_trainer_status(data)


# --- the mapping into status.progress ---------------------------------------------------------
def fold(old: Any, body: Any, seconds: float, total: int | None = None) -> dict[str, Any]:
    return fold_trainer_status(old, parse_trainer_status(body), at(seconds), total)


def test_the_issue_bodies_move_status_progress() -> None:
    first = fold(None, BEGIN, 0)
    assert first == {
        "source": "kubeflow",
        "metrics": [],
        "totalSteps": 30,
        "step": 0,
        "percentage": 0,
        "summary": "0/30 (0%)",
        "lastReportTime": progress.iso(at(0)),
    }
    mid = fold(first, STEP, 5)
    assert (mid["step"], mid["summary"], mid["percentage"]) == (15, "15/30 (50%)", 50)
    assert mid["stepsPerSecond"] == 3.0  # 15 steps in 5 s
    assert mid["eta"] == progress.iso(at(10))  # estimatedRemainingSeconds, not the rate
    assert mid["metrics"] == [
        {"name": "loss", "value": "7.12"},
        {"name": "current_epoch", "value": "0.5"},
    ]
    last = fold(mid, END, 10)
    # No step sent: as far as the percentage says, with the total from earlier reports.
    assert (last["step"], last["summary"], last["totalSteps"]) == (30, "30/30 (100%)", 30)
    assert last["eta"] == progress.iso(at(10)) and "stepsPerSecond" not in last
    assert last["metrics"] == [
        {"name": "loss", "value": "6.68"},
        {"name": "grad_norm", "value": "1.40"},
        {"name": "learning_rate", "value": "1.67e-06"},
    ]
    for p in (first, mid, last):
        TrainingJobStatus.model_validate({"progress": p})  # the CRD's schema holds it


MAPPED = [
    # name, old, body, spec total, the keys of status.progress that must follow
    ("percentage-alone", None, _ts(progressPercentage=45), None, {"summary": "45%", "step": 0}),
    (
        "step-without-total",
        None,
        _ts(progressPercentage=45, metrics=[_metric("current_step", "120")]),
        None,
        {"summary": "step 120 (45%)", "step": 120},
    ),
    (
        "no-percentage-uses-steps",
        None,
        _ts(metrics=[_metric("current_step", "10"), _metric("total_steps", "40")]),
        None,
        {"summary": "10/40 (25%)"},
    ),
    (
        "spec-total-wins",
        None,
        _ts(metrics=[_metric("current_step", "10"), _metric("total_steps", "40")]),
        100,
        {"totalSteps": 100, "summary": "10/100 (10%)"},
    ),
    (
        "remaining-is-the-eta",
        None,
        _ts(estimatedRemainingSeconds=795649),
        None,
        {"eta": progress.iso(at(795649))},
    ),
    (
        "eta-from-the-rate-without-remaining",
        {"step": 10, "lastReportTime": progress.iso(at(-10)), "totalSteps": 30},
        _ts(metrics=[_metric("current_step", "20")]),
        None,
        {"stepsPerSecond": 1.0, "eta": progress.iso(at(10))},
    ),
    (
        "metrics-are-replaced",
        {"metrics": [{"name": "eval_loss", "value": "1"}], "source": "kubeflow"},
        _ts(metrics=[_metric("loss", "2")]),
        None,
        {"metrics": [{"name": "loss", "value": "2"}]},
    ),
    (
        "a-step-going-back-is-taken",  # a restart from a checkpoint
        {"step": 50, "totalSteps": 100, "source": "kubeflow"},
        _ts(metrics=[_metric("current_step", "20")]),
        None,
        {"step": 20, "summary": "20/100 (20%)"},
    ),
]


@pytest.mark.parametrize(
    ("name", "old", "body", "total", "want"), MAPPED, ids=[c[0] for c in MAPPED]
)
def test_the_mapping(name: str, old: Any, body: Any, total: int | None, want: Any) -> None:
    got = fold(old, body, 0, total)
    assert {k: got.get(k) for k in want} == want
    assert got["source"] == "kubeflow" and got["lastReportTime"] == progress.iso(at(0))


def test_missing_fields_drop_what_they_said_before() -> None:
    first = fold(None, _ts(progressPercentage=10, estimatedRemainingSeconds=60), 0)
    again = fold(first, _ts(), 5)
    assert "percentage" not in again and "eta" not in again and again["summary"] == "step 0"


# --- precedence: trainop's own Reporter wins ---------------------------------------------------
def test_trainops_reporter_wins_over_trainer_status() -> None:
    ours = progress.fold(None, progress.Report(step=12, step_seconds=0.5), 0, "n1", at(0), 30)
    assert ours["source"] == "trainop"
    assert trainerstatus.overruled(ours) and not trainerstatus.overruled(fold(None, STEP, 0))
    assert fold(ours, STEP, 1) == ours  # ignored: the progress has one author


def test_trainops_reporter_takes_over_from_trainer_status() -> None:
    theirs = fold(None, STEP, 0)
    ours = progress.fold(theirs, progress.Report(step=16, step_seconds=0.5), 0, "n1", at(1), None)
    assert ours["source"] == "trainop" and "percentage" not in ours and "metrics" not in ours
    assert (ours["step"], ours["summary"]) == (16, "step 16")
    assert fold(ours, END, 2) == ours  # and from then on it stays the Reporter's
    loss = progress.Report(step=17, metrics=(("loss", "6.9"),))
    with_metrics = progress.fold(ours, loss, 0, "n1", at(3), None)
    assert fold(with_metrics, END, 4)["metrics"] == [{"name": "loss", "value": "6.9"}]


# --- pod wiring ---------------------------------------------------------------------------------
URL = "http://trainop-progress.trainop-system.svc:8082/v1/progress"


def _pod(env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    ctr: dict[str, Any] = {"name": "trainer", "image": "x"}
    if env is not None:
        ctr["env"] = env
    return {
        "kind": "Pod",
        "metadata": {"name": "j-worker-0", "annotations": {"trainop.dev/rank": "0"}},
        "spec": {"containers": [ctr, {"name": "sidecar", "image": "y"}]},
    }


def _env(pod: dict[str, Any], i: int = 0) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][i]["env"]}


WIRING_URLS = [
    ("chart-url", URL, "http://trainop-progress.trainop-system.svc:8082/v1/trainer-status"),
    (
        "prefixed",
        "https://gw.example/trainop/v1/progress",
        "https://gw.example/trainop/v1/trainer-status",
    ),
    ("other-path", "http://op:9000/reports", "http://op:9000/v1/trainer-status"),
]


@pytest.mark.parametrize(("name", "url", "want"), WIRING_URLS, ids=[c[0] for c in WIRING_URLS])
def test_the_trainer_status_url_sits_beside_the_report_url(name: str, url: str, want: str) -> None:
    assert progress.trainer_status_url(url) == want


def test_wired_pods_get_the_kubeflow_variables() -> None:
    out = progress.wire_pod(_pod(), URL, None, {}, 10.0, kubeflow=True)
    for i in (0, 1):
        env = _env(out, i)
        assert env["KUBEFLOW_TRAINER_SERVER_URL"].endswith(":8082/v1/trainer-status")
        # A path, like Kubeflow's (transformers opens it): the same token trainop reports with.
        assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == env["TRAINOP_PROGRESS_TOKEN_FILE"]
        assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == f"{progress.TOKEN_DIR}/token"
        assert "KUBEFLOW_TRAINER_SERVER_CA_CERT" not in env  # plain HTTP: no CA
    assert [v["name"] for v in out["spec"]["volumes"]] == [progress.TOKEN_VOLUME]


OWN = [
    ("own-url", [{"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "https://kf/status"}]),
    ("own-token", [{"name": "KUBEFLOW_TRAINER_SERVER_TOKEN", "value": "/my/token"}]),
    ("own-ca", [{"name": "KUBEFLOW_TRAINER_SERVER_CA_CERT", "value": "/my/ca.crt"}]),
]


@pytest.mark.parametrize(("name", "env"), OWN, ids=[c[0] for c in OWN])
def test_a_template_that_sets_them_keeps_its_own(name: str, env: list[dict[str, str]]) -> None:
    out = progress.wire_pod(_pod(env), URL, None, {}, 10.0, kubeflow=True)
    got = _env(out)
    assert {k: v for k, v in got.items() if k.startswith("KUBEFLOW_")} == {
        e["name"]: e["value"] for e in env
    }
    assert "TRAINOP_PROGRESS_URL" in got  # trainop's own channel is wired all the same
    assert "KUBEFLOW_TRAINER_SERVER_URL" in _env(out, 1)  # the other container gets them


def test_switched_off_or_unwired_pods_get_none() -> None:
    off = progress.wire_pod(_pod(), URL, None, {}, 10.0, kubeflow=False)
    assert not any(k.startswith("KUBEFLOW_") for k in _env(off))
    resume = {"TRAINOP_RESUME_FROM": "/c/7"}
    unwired = progress.wire_pod(_pod(), "", None, resume, 10.0, kubeflow=True)
    assert not any(k.startswith("KUBEFLOW_") for k in _env(unwired))


CONFIG = [
    ("default-on", {}, True),
    ("off", {"kubeflowTrainerStatus": False}, False),
]


@pytest.mark.parametrize(("name", "data", "want"), CONFIG, ids=[c[0] for c in CONFIG])
def test_the_operator_config_switches_it(name: str, data: dict[str, Any], want: bool) -> None:
    assert operator_config_from_data(data).kubeflow_trainer_status is want


def test_the_config_switch_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="kubeflowTrainerStatus: must be true or false"):
        operator_config_from_data({"kubeflowTrainerStatus": "no"})


# --- shown by explain and the metrics endpoint ---------------------------------------------------
def test_explain_shows_the_metrics_and_the_protocol() -> None:
    p = fold(fold(None, BEGIN, 0), END, 10)
    lines = _progress_lines({"progress": p})
    assert lines[0].startswith("Progress:   30/30 (100%)")
    assert "by Kubeflow trainerStatus" in lines[0]
    assert lines[1] == "  metrics: loss 6.68, grad_norm 1.40, learning_rate 1.67e-06"


def _sample(name: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "trainop_job_trainer_metric", {"namespace": "ns", "job": "hf", "name": name}
    )


def test_numeric_metrics_are_exported_and_removed_with_the_job() -> None:
    p = fold(None, STEP, 0)
    p["metrics"].append({"name": "note", "value": "warming up"})
    metrics.observe_progress("ns", "hf", p)
    assert (_sample("loss"), _sample("current_epoch"), _sample("note")) == (7.12, 0.5, None)
    metrics.observe_progress("ns", "hf", fold(p, END, 5))
    assert _sample("current_epoch") is None and _sample("grad_norm") == 1.4
    metrics.forget_job("ns", "hf")
    assert _sample("loss") is None and _sample("grad_norm") is None


# --- the endpoint's service: what it writes ------------------------------------------------------
class _Recorder:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def patch_job_status(
        self, ns: str, name: str, status: dict[str, Any], old: dict[str, Any]
    ) -> None:
        self.bodies.append(status)


def test_the_write_nulls_only_the_report_keys_a_body_dropped() -> None:
    from tests.builders import job
    from trainop.handlers.progress import ProgressService
    from trainop.handlers.state import ShellState

    state, api = ShellState(), _Recorder()
    stored = {"step": 3, "eta": "2026-11-27T00:00:00Z", "percentage": 9, "replacedAt": "x"}
    body = job("hf", namespace="ns", workers=1, gpus=1).meta(resourceVersion="1").build()
    body["status"] = {"phase": "Running", "progress": stored}
    state.upsert_job(body)
    service = ProgressService(lambda: api, lambda: state, 10.0)  # type: ignore[arg-type, return-value]
    outcome = asyncio.run(service.accept_trainer_status("ns/hf", parse_trainer_status(STEP)))
    assert outcome == "accepted"
    written = api.bodies[0]["progress"]
    assert written["step"] == 15 and written["percentage"] == 50 and written["source"] == "kubeflow"
    assert written["replacedAt"] == "x"  # the reconcile's key is carried, never nulled
    asyncio.run(service._write("ns/hf", written, {k: v for k, v in written.items() if k != "eta"}))
    assert api.bodies[1]["progress"]["eta"] is None  # dropped by the new progress: nulled
    dropped = {k: v for k, v in written.items() if k != "replacedAt"}
    asyncio.run(service._write("ns/hf", written, dropped))
    assert "replacedAt" not in api.bodies[2]["progress"]  # absent from the patch: kept
    state.jobs["ns/hf"].progress = {"step": 40, "source": "trainop"}  # the Reporter reported
    outcome = asyncio.run(service.accept_trainer_status("ns/hf", parse_trainer_status(END)))
    assert outcome == "ignored" and len(api.bodies) == 3  # no write


# --- through the reconcile: the operator config's switch ------------------------------------------
@pytest.mark.parametrize(("name", "on"), [("on", True), ("off", False)], ids=["on", "off"])
def test_the_reconcile_wires_the_gang_as_the_config_says(name: str, on: bool) -> None:
    import dataclasses

    from tests.builders import NOW, fleet_snapshot, job
    from trainop.planner import OperatorConfig
    from trainop.reconcile import ADMIT_ALL, reconcile

    config = dataclasses.replace(OperatorConfig(), progress_url=URL, kubeflow_trainer_status=on)
    acts = reconcile(job().build(), [], fleet_snapshot, config, NOW, ADMIT_ALL)
    pods = [o for o in acts.create if o["kind"] == "Pod"]
    assert pods
    for p in pods:
        env = _env(p)
        assert env["TRAINOP_PROGRESS_URL"] == URL
        want = progress.trainer_status_url(URL) if on else None
        assert env.get("KUBEFLOW_TRAINER_SERVER_URL") == want
