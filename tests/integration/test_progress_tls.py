"""The progress endpoint over TLS, on a real API server (issue 35; docs/progress.md).

The operator runs as the chart runs it (`--progress-tls managed`, an https progress URL): it
makes its CA and serving certificate in a Secret of its namespace, serves HTTPS, and gives
each gang pod the CA bundle as an annotation its projected volume turns into a file beside
the token. A report with the pod's real token, verified against that CA by the Reporter's
own sender, is taken; plain HTTP to the port and a client trusting another CA are not. A
restart of the operator serves the same certificate (read back, not made again).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.builders import job
from tests.integration.conftest import Kube, LocalCluster, OperatorProcess
from trainop.api.progress import PROGRESS_PATH
from trainop.kube import certs
from trainop.launcher.progress import http_send

SECRET, SECRET_NS = "trainop-progress-tls", "default"


@pytest.fixture
def tls_operator(
    local_cluster: LocalCluster, operator: OperatorProcess, kube: Kube, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The session operator restarted with TLS on (its Secret removed afterwards)."""
    operator.stop()
    kube.run("delete", "secret", SECRET, "-n", SECRET_NS, "--ignore-not-found")
    tls = OperatorProcess(local_cluster, tmp_path)
    tls.extra = [
        "--progress-tls=managed",
        "--progress-tls-name=127.0.0.1",
        "--progress-url",
        f"https://127.0.0.1:{tls.progress_port}{PROGRESS_PATH}",
    ]
    tls.start()
    yield tls
    tls.stop()
    kube.run("delete", "secret", SECRET, "-n", SECRET_NS, "--ignore-not-found")
    operator.start()


def _secret(kube: Kube) -> dict[str, str]:
    data = kube.get("secret", SECRET, "-n", SECRET_NS)["data"]
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def test_reports_travel_over_tls_verified_with_the_ca_beside_the_token(
    kube: Kube, namespace: str, tls_operator: OperatorProcess, tmp_path: Path
) -> None:
    secret = _secret(kube)
    assert set(certs.SECRET_KEYS) - {"previous-ca.crt"} <= set(secret)
    assert "127.0.0.1" in certs.names_of(secret["tls.crt"])
    assert certs.signed_by(secret["tls.crt"], secret["ca.crt"])

    builder = job("tls", namespace=namespace, workers=1, gpus=1).fake_run("300s")
    kube.apply(builder.checkpoint(mount="/ckpt").manifest())
    kube.wait_for(
        "tls Running",
        lambda: (
            ((kube.maybe_get("tj", "tls", "-n", namespace) or {}).get("status") or {}).get("phase")
            == "Running"
        ),
        90,
    )
    pod = kube.get("pod", "tls-worker-0", "-n", namespace)
    ca = pod["metadata"]["annotations"]["trainop.dev/progress-ca"]
    assert ca.startswith(secret["ca.crt"])
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["TRAINOP_PROGRESS_URL"].startswith("https://")
    assert env["TRAINOP_PROGRESS_CA_FILE"] == "/var/run/secrets/trainop.dev/progress/ca.crt"
    assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == env["TRAINOP_PROGRESS_CA_FILE"]
    sources = next(v for v in pod["spec"]["volumes"] if v["name"] == "trainop-progress-token")[
        "projected"
    ]["sources"]
    assert [next(iter(s)) for s in sources] == ["serviceAccountToken", "downwardAPI"]

    cafile = tmp_path / "ca.crt"
    cafile.write_text(ca)
    token = kube.pod_token(namespace, pod)
    url = f"https://127.0.0.1:{tls_operator.progress_port}{PROGRESS_PATH}"
    report = {"step": 7, "checkpoint": {"path": "/ckpt/7.pt", "step": 7}}
    assert http_send("POST", url, token, report, cafile=str(cafile)) == {
        "checkpointRequested": False
    }
    kube.wait_for(
        "the report over TLS in status.progress",
        lambda: (
            (
                (kube.get("tj", "tls", "-n", namespace).get("status") or {}).get("progress") or {}
            ).get("step")
            == 7
        ),
        20,
    )

    other = tmp_path / "other.crt"
    other.write_text(certs.new_ca(datetime(2026, 11, 27))[0])
    with pytest.raises(urllib.error.URLError) as err:
        http_send("POST", url, token, report, cafile=str(other))
    assert isinstance(err.value.reason, ssl.SSLCertVerificationError)
    plain = urllib.request.Request(
        url.replace("https://", "http://"), data=json.dumps(report).encode(), method="POST"
    )
    plain.add_header("Authorization", f"Bearer {token}")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain, timeout=5).read()

    # A restart serves the same certificate: read back from the Secret, not made again.
    tls_operator.stop()
    tls_operator.start()
    assert _secret(kube)["tls.crt"] == secret["tls.crt"]
    kube.wait_for(
        "the endpoint back, serving the same certificate",
        lambda: _get(url, token, str(cafile)) == {"checkpointRequested": False},
        30,
    )


def _get(url: str, token: str, cafile: str) -> Any:
    try:
        return http_send("GET", url, token, None, cafile=cafile)
    except OSError:
        return None
