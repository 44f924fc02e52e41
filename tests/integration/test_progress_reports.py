"""The progress report endpoint against a real API server (issue 24; docs/progress.md): a
pod-bound projected token with trainop's audience, checked by a real TokenReview, writes its
own job's status.progress and nothing else; other tokens are refused."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.builders import job
from tests.integration.conftest import Kube, OperatorProcess
from trainop.api.progress import PROGRESS_AUDIENCE

pytestmark = pytest.mark.usefixtures("operator")


def _running_job(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    builder = job(name, namespace=ns, workers=1, gpus=1).fake_run("300s")
    builder.template(containers=[{"name": "trainer", "command": ["python", "train.py"]}])
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


def _token(
    kube: Kube, ns: str, pod: dict[str, Any] | None, audience: str = PROGRESS_AUDIENCE
) -> str:
    """A ServiceAccount token as the kubelet projects it: bound to `pod` (TokenRequest)."""
    bound = (
        [
            "--bound-object-kind=Pod",
            f"--bound-object-name={pod['metadata']['name']}",
            f"--bound-object-uid={pod['metadata']['uid']}",
        ]
        if pod is not None
        else []
    )
    return kube.run(
        "create", "token", "default", "-n", ns, f"--audience={audience}", *bound
    ).stdout.strip()


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
    pod_a = _running_job(kube, namespace, "rep-a")
    _running_job(kube, namespace, "rep-b")
    token_a = _token(kube, namespace, pod_a)
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
        token = _token(kube, namespace, pod if bound else None, audience)
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
    status, answer = _call(operator, _token(kube, namespace, pod), {"step": 7})
    assert status == 403, answer
    assert _progress(kube, namespace, "rep-d") is None
