"""Permanent vs transient API failures (kube.errors), as a named-case table."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from trainop.kube.errors import PERMANENT, TRANSIENT, ApplyError, backoff, classify


def api(status: int, message: str = "boom") -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.body = f'{{"message": "{message}"}}'
    return exc


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        pytest.param(api(422, "metadata.name: Invalid value"), PERMANENT, id="422-invalid"),
        pytest.param(api(400), PERMANENT, id="400-bad-request"),
        pytest.param(api(403, "exceeded quota: gpus"), PERMANENT, id="403-quota"),
        pytest.param(api(404, "priorityclass not found"), PERMANENT, id="404"),
        pytest.param(api(409), PERMANENT, id="409-conflict"),
        pytest.param(api(429, "storage is (re)initializing"), TRANSIENT, id="429"),
        pytest.param(
            api(
                403,
                'error looking up service account ns/default: serviceaccount \\"default\\" not found',
            ),
            TRANSIENT,
            id="403-new-namespace-without-its-serviceaccount-yet",
        ),
        pytest.param(api(500), TRANSIENT, id="500"),
        pytest.param(api(503), TRANSIENT, id="503"),
        pytest.param(api(504), TRANSIENT, id="504-timeout"),
        pytest.param(TimeoutError("read timed out"), TRANSIENT, id="client-timeout"),
        pytest.param(ConnectionResetError("reset"), TRANSIENT, id="connection-reset"),
        pytest.param(ApplyError("Pod a-0", api(422)), PERMANENT, id="wrapped-422"),
        pytest.param(ApplyError("Pod a-0", api(503)), TRANSIENT, id="wrapped-503"),
    ],
)
def test_classify(exc: BaseException, kind: str) -> None:
    assert classify(exc).kind == kind


def test_a_wrapped_failure_names_the_object_and_the_servers_words() -> None:
    failure = classify(ApplyError("Pod bert-worker-0", api(422, "spec.containers[0].name: bad")))
    assert failure.message.startswith("Pod bert-worker-0: 422")
    assert "spec.containers[0].name: bad" in failure.message


@pytest.mark.parametrize(
    ("attempt", "seconds"), [(1, 1.0), (2, 2.0), (5, 16.0), (7, 60.0), (30, 60.0)]
)
def test_backoff_is_capped(attempt: int, seconds: float) -> None:
    assert backoff(attempt) == seconds
