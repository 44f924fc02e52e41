"""The progress report endpoint against a real API server (issue 24; docs/progress.md): a
pod-bound projected token with trainop's audience, checked by a real TokenReview, writes its
own job's status.progress and nothing else; other tokens are refused."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.builders import job
from tests.integration.conftest import Kube, OperatorProcess
from trainop import progress
from trainop.api.progress import PROGRESS_AUDIENCE, TRAINER_STATUS_PATH

pytestmark = pytest.mark.usefixtures("operator")


def _running_job(kube: Kube, ns: str, name: str, checkpoint: bool = False) -> dict[str, Any]:
    builder = job(name, namespace=ns, workers=1, gpus=1).fake_run("300s")
    builder.template(containers=[{"name": "trainer", "command": ["python", "train.py"]}])
    if checkpoint:  # checkpoints live under /ckpt (issue 35)
        builder.checkpoint(mount="/ckpt")
    kube.apply(builder.manifest())
    kube.wait_for(
        f"{ns}/{name} Running",
        lambda: (
            ((kube.maybe_get("tj", name, "-n", ns) or {}).get("status") or {}).get("phase")
            == "Running"
        ),
        60,
    )
    return dict(kube.get("pod", f"{name}-worker-0", "-n", ns))


def _call(
    op: OperatorProcess, token: str, body: dict[str, Any] | None
) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{op.progress_port}/v1/progress"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _progress(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    return ((kube.maybe_get("tj", name, "-n", ns) or {}).get("status") or {}).get("progress")


def test_a_pod_reports_for_its_own_job_only(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    pod_a = _running_job(kube, namespace, "rep-a", checkpoint=True)
    _running_job(kube, namespace, "rep-b")
    token_a = kube.pod_token(namespace, pod_a)
    report = {
        "step": 42,
        "stepSeconds": 0.25,
        "samplesPerSecond": 1024,
        "checkpoint": {"path": "/ckpt/40.pt", "step": 40},
        "phase": "train",
    }
    status, answer = _call(operator, token_a, report)
    assert (status, answer) == (200, {"checkpointRequested": False}), answer
    kube.wait_for(
        "rep-a's status.progress",
        lambda: (_progress(kube, namespace, "rep-a") or {}).get("step") == 42,
        20,
    )
    got = _progress(kube, namespace, "rep-a") or {}
    assert got["lastCheckpoint"]["step"] == 40 and got["samplesPerSecond"] == 1024
    assert "step 42" in kube.run("get", "tj", "rep-a", "-n", namespace).stdout
    # The report names no job: the token's pod decides, so job b is never written.
    assert _progress(kube, namespace, "rep-b") is None
    assert _call(operator, token_a, None) == (200, {"checkpointRequested": False})
    assert "trainop_job_step{" in operator.metrics()


REFUSED = [
    ("apiserver-audience", "https://kubernetes.default.svc", True, 401),
    ("not-bound-to-a-pod", PROGRESS_AUDIENCE, False, 401),
]


def test_other_tokens_are_refused(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    pod = _running_job(kube, namespace, "rep-c")
    for name, audience, bound, code in REFUSED:  # one job for all cases: a namespace per test
        token = kube.pod_token(namespace, pod if bound else None, audience)
        status, answer = _call(operator, token, {"step": 1})
        assert status == code, (name, answer)
    assert _call(operator, "not-a-token", {"step": 1})[0] == 401
    assert _progress(kube, namespace, "rep-c") is None


def test_a_pod_that_is_not_a_trainop_pod_is_refused(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "stranger",
                "namespace": namespace,
                "labels": {"trainop.dev/job-name": "rep-d"},
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
    )
    _running_job(kube, namespace, "rep-d")
    pod = kube.get("pod", "stranger", "-n", namespace)
    # It claims job rep-d by label, but rep-d does not own it: refused, rep-d untouched.
    status, answer = _call(operator, kube.pod_token(namespace, pod), {"step": 7})
    assert status == 403, answer
    assert _progress(kube, namespace, "rep-d") is None


# --- Kubeflow Trainer's trainerStatus, as transformers' KubeflowCallback sends it (issue 39) ---
# The exact bodies transformers 5.17 POSTed from a plain Trainer(...).train() (issue 39).
HF_BEGIN = {
    "trainerStatus": {
        "lastUpdatedTime": "2026-11-27T00:51:54.530279+00:00",
        "progressPercentage": 0,
        "metrics": [{"name": "total_steps", "value": "30"}],
    }
}
HF_END = {
    "trainerStatus": {
        "lastUpdatedTime": "...",
        "progressPercentage": 100,
        "estimatedRemainingSeconds": 0,
        "metrics": [
            {"name": "loss", "value": "6.68"},
            {"name": "grad_norm", "value": "1.40"},
            {"name": "learning_rate", "value": "1.67e-06"},
        ],
    }
}


def _post_status(op: OperatorProcess, token: str, body: Any) -> tuple[int, dict[str, Any]]:
    """As KubeflowCallback._update_status sends it: POST, bearer token, JSON."""
    url = f"http://127.0.0.1:{op.progress_port}{TRAINER_STATUS_PATH}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_transformers_trainer_status_bodies_move_the_progress(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    pod = _running_job(kube, namespace, "rep-hf")
    token = kube.pod_token(namespace, pod)
    assert _post_status(operator, token, HF_BEGIN) == (200, {"checkpointRequested": False})
    kube.wait_for(
        "rep-hf's first trainerStatus",
        lambda: (_progress(kube, namespace, "rep-hf") or {}).get("summary") == "0/30 (0%)",
        20,
    )
    assert _post_status(operator, token, HF_END)[0] == 200  # throttled: written within 10 s
    kube.wait_for(
        "rep-hf's last trainerStatus",
        lambda: (_progress(kube, namespace, "rep-hf") or {}).get("percentage") == 100,
        20,
    )
    got = _progress(kube, namespace, "rep-hf") or {}
    assert (got["step"], got["totalSteps"], got["summary"]) == (30, 30, "30/30 (100%)")
    assert got["source"] == "kubeflow" and got["eta"] and got["lastReportTime"]
    assert got["metrics"] == HF_END["trainerStatus"]["metrics"]
    print(f"status.progress after the issue's bodies: {json.dumps(got, sort_keys=True)}")
    assert "30/30 (100%)" in kube.run("get", "tj", "rep-hf", "-n", namespace).stdout
    scraped = operator.metrics()
    assert (
        f'trainop_job_trainer_metric{{job="rep-hf",name="loss",namespace="{namespace}"}} 6.68'
        in scraped
    )


TRAINER_STATUS_REFUSED = [
    ("no-trainer-status", {"progressPercentage": 5}, 400, "trainerStatus: required"),
    (
        "percentage-over-100",
        {"trainerStatus": {"progressPercentage": 150}},
        400,
        "progressPercentage",
    ),
    (
        "metric-value-a-number",
        {"trainerStatus": {"metrics": [{"name": "loss", "value": 6.68}]}},
        400,
        "trainerStatus.metrics[0].value",
    ),
    ("too-large", {"trainerStatus": {"pad": "x" * 20_000}}, 413, "larger than"),  # issue 35
]


def test_trainer_status_is_refused_like_reports(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    pod = _running_job(kube, namespace, "rep-hf-bad")
    token = kube.pod_token(namespace, pod)
    for name, body, code, words in TRAINER_STATUS_REFUSED:
        status, answer = _post_status(operator, token, body)
        assert status == code and words in answer.get("error", ""), (name, answer)
    for name, audience, bound, code in REFUSED:  # the same tokens are refused
        other = kube.pod_token(namespace, pod if bound else None, audience)
        assert _post_status(operator, other, HF_BEGIN)[0] == code, name
    assert _post_status(operator, "not-a-token", HF_BEGIN)[0] == 401
    assert _progress(kube, namespace, "rep-hf-bad") is None


def test_trainops_own_reporter_wins_over_trainer_status(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    pod = _running_job(kube, namespace, "rep-both")
    token = kube.pod_token(namespace, pod)
    report = {"step": 12, "stepSeconds": 0.5, "metrics": {"loss": 6.9}}
    assert _call(operator, token, report)[0] == 200
    kube.wait_for(
        "rep-both's report",
        lambda: (_progress(kube, namespace, "rep-both") or {}).get("step") == 12,
        20,
    )
    ignored = 'trainop_progress_reports_total{outcome="ignored"}'
    before = _sample(operator.metrics(), ignored)
    # The callback gets its 200 (it would only log a failure), and the body changes nothing.
    assert _post_status(operator, token, HF_END) == (200, {"checkpointRequested": False})
    assert _sample(operator.metrics(), ignored) == before + 1
    time.sleep(2)
    got = _progress(kube, namespace, "rep-both") or {}
    assert (got["source"], got["step"], got["summary"]) == ("trainop", 12, "step 12")
    assert "percentage" not in got and got["metrics"] == [{"name": "loss", "value": "6.9"}]


def _sample(scraped: str, series: str) -> float:
    for line in scraped.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def test_transformers_kubeflow_callback_reports_to_the_endpoint(
    kube: Kube,
    namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """transformers' own KubeflowCallback (not in the dev lock: skipped without it), driven
    through a 30-step run's callbacks as a Trainer calls them, with the variables trainop
    wires and a real pod-bound token in a file: its bodies move status.progress."""
    integrations = pytest.importorskip("transformers.integrations")
    from transformers import TrainerState

    pod = _running_job(kube, namespace, "rep-hf-cb")
    token_file = tmp_path / "token"
    token_file.write_text(kube.pod_token(namespace, pod))
    monkeypatch.setenv(
        "KUBEFLOW_TRAINER_SERVER_URL",
        progress.trainer_status_url(f"http://127.0.0.1:{operator.progress_port}/v1/progress"),
    )
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", str(token_file))
    monkeypatch.delenv("KUBEFLOW_TRAINER_SERVER_CA_CERT", raising=False)
    monkeypatch.delenv("DISABLE_KUBEFLOW_INTEGRATION", raising=False)
    assert integrations.is_kubeflow_available()
    callback = integrations.KubeflowCallback()
    sent: list[int] = []  # the HTTP status of each body the callback POSTed
    urlopen = urllib.request.urlopen

    def recorded(req: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            resp = urlopen(req, *args, **kwargs)
        except urllib.error.HTTPError as err:
            sent.append(err.code)
            raise
        sent.append(resp.status)
        return resp

    monkeypatch.setattr(urllib.request, "urlopen", recorded)
    state = TrainerState(max_steps=30, global_step=0, epoch=0.0)
    seen: list[str] = []

    def column() -> None:
        summary = (_progress(kube, namespace, "rep-hf-cb") or {}).get("summary")
        if summary and (not seen or seen[-1] != summary):
            seen.append(summary)

    callback.on_train_begin(None, state, None)
    for step in range(1, 31):
        state.global_step, state.epoch = step, step / 30
        if step % 5 == 0:
            logs = {"loss": 7.0 - step * 0.01, "grad_norm": 1.4, "learning_rate": 5e-5 / step}
            callback.on_log(None, state, None, logs={**logs, "epoch": state.epoch})
        callback.on_step_end(None, state, None)
        time.sleep(0.4)
        column()
    callback.on_train_end(None, state, None)
    assert len(sent) >= 3 and set(sent) == {200}, sent  # begin, throttled steps, end
    kube.wait_for(
        "rep-hf-cb at 100%",
        lambda: (_progress(kube, namespace, "rep-hf-cb") or {}).get("percentage") == 100,
        20,
    )
    column()
    got = _progress(kube, namespace, "rep-hf-cb") or {}
    print(f"PROGRESS over time: {seen}; bodies sent: {len(sent)}; final: {json.dumps(got)}")
    assert got["summary"] == "30/30 (100%)" and got["source"] == "kubeflow"
    assert {m["name"] for m in got["metrics"]} >= {"loss", "grad_norm", "learning_rate", "epoch"}
