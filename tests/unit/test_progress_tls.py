"""TLS on the progress endpoint (issue 35; docs/progress.md): when the managed CA and
serving certificate are renewed (kube.certs.due, a named-case table), the Secret kept by
one replica and read by another (handlers.tls.TlsKeeper), a real TLS handshake that the
Reporter's sender verifies (and refuses with another CA), the pods' wiring (the CA beside
the token, TRAINOP_PROGRESS_CA_FILE and KUBEFLOW_TRAINER_SERVER_CA_CERT), and the flags."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import urllib.error
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import click
import pytest

from trainop import progress
from trainop.handlers.tls import TlsError, TlsKeeper
from trainop.kube import certs
from trainop.launcher.progress import CA_FILE_ENV, Reporter, http_send, poll_request

T0 = datetime(2026, 11, 27, 3, 0, 0)
NAMES = ["trainop-progress.trainop-system.svc", "127.0.0.1"]
DAY = timedelta(days=1)


def _bundle(at: datetime = T0, names: list[str] = NAMES) -> certs.Bundle:
    return certs.issue(at, names, None, "ca")


FRESH = _bundle()
OTHER = _bundle()
NOT_SIGNED = certs.Bundle(FRESH.ca_crt, FRESH.ca_key, OTHER.tls_crt, OTHER.tls_key)

# name, bundle, names, when, what is renewed
DUE: list[tuple[str, certs.Bundle | None, list[str], datetime, str]] = [
    ("none-yet", None, NAMES, T0, "ca"),
    ("fresh", FRESH, NAMES, T0, ""),
    ("server-half-way", FRESH, NAMES, T0 + 45 * DAY, ""),
    ("server-a-third-left", FRESH, NAMES, T0 + 61 * DAY, "server"),
    ("server-expired", FRESH, NAMES, T0 + 91 * DAY, "server"),
    ("ca-a-third-left", FRESH, NAMES, T0 + 1230 * DAY, "ca"),
    ("another-name", FRESH, [*NAMES, "trainop-progress.other.svc"], T0, "server"),
    ("a-subset-of-names", FRESH, NAMES[:1], T0, ""),
    ("not-signed-by-the-ca", NOT_SIGNED, NAMES, T0, "server"),
    ("garbage", certs.Bundle("junk", "", "junk", ""), NAMES, T0, "ca"),
]


@pytest.mark.parametrize(
    ("name", "bundle", "names", "when", "renew"), DUE, ids=[case[0] for case in DUE]
)
def test_what_is_renewed_when(
    name: str, bundle: certs.Bundle | None, names: list[str], when: datetime, renew: str
) -> None:
    assert certs.due(bundle, names, when) == renew


def test_a_renewed_ca_keeps_the_previous_one_in_the_bundle() -> None:
    later = T0 + 1230 * DAY
    renewed = certs.issue(later, NAMES, FRESH, "ca")
    assert renewed.previous_ca == FRESH.ca_crt and renewed.ca_crt != FRESH.ca_crt
    assert renewed.ca_bundle() == renewed.ca_crt + FRESH.ca_crt
    assert certs.signed_by(renewed.tls_crt, renewed.ca_crt)
    server = certs.issue(later + 10 * DAY, NAMES, renewed, "server")
    assert server.ca_crt == renewed.ca_crt and server.tls_crt != renewed.tls_crt
    gone = certs.issue(T0 + 5 * 366 * DAY, NAMES, renewed, "server")
    assert gone.previous_ca == ""  # the old CA expired: out of the bundle
    assert len(FRESH.ca_crt) < 1000  # small enough for an annotation on every pod


class FakeSecrets:
    """The Secret in an API server's way: versions, 409 on a stale write."""

    def __init__(self) -> None:
        self.data: dict[str, str] | None = None
        self.version = 0
        self.writes = 0

    def read_secret(self, ns: str, name: str) -> tuple[dict[str, str], str] | None:
        return None if self.data is None else (dict(self.data), str(self.version))

    def write_secret(
        self, ns: str, name: str, data: dict[str, str], resource_version: str | None
    ) -> None:
        current = None if self.data is None else str(self.version)
        if resource_version != current:
            raise RuntimeError("409 Conflict")
        self.data, self.version, self.writes = dict(data), self.version + 1, self.writes + 1


def test_one_replica_makes_the_secret_the_others_serve_it() -> None:
    api = FakeSecrets()
    first = TlsKeeper("managed", "trainop-system", "trainop-progress-tls", NAMES)
    second = TlsKeeper("managed", "trainop-system", "trainop-progress-tls", NAMES)
    made = first.ensure(api)  # type: ignore[arg-type]
    assert second.ensure(api) == made and api.writes == 1  # type: ignore[arg-type]
    assert first.context is not None and second.context is not None
    assert set(certs.SECRET_KEYS) <= set(api.data or {})


def test_the_loser_of_a_race_reads_the_winner() -> None:
    api = FakeSecrets()

    class Racing(FakeSecrets):
        def read_secret(self, ns: str, name: str) -> tuple[dict[str, str], str] | None:
            found = api.read_secret(ns, name)
            if found is None:  # another replica writes between our read and our write
                TlsKeeper("managed", "ns", "s", NAMES).ensure(api)  # type: ignore[arg-type]
                return None
            return found

        def write_secret(self, *args: Any) -> None:
            api.write_secret(*args)

    got = TlsKeeper("managed", "ns", "s", NAMES).ensure(Racing())  # type: ignore[arg-type]
    assert api.writes == 1 and got == certs.from_secret_data(api.data)


def test_secret_mode_serves_someone_elses_secret_and_never_writes() -> None:
    api = FakeSecrets()
    keeper = TlsKeeper("secret", "ns", "cm-cert", NAMES)
    with pytest.raises(TlsError, match=r"holds no tls\.crt and tls\.key"):
        keeper.ensure(api)  # type: ignore[arg-type]
    api.data = {"tls.crt": FRESH.tls_crt, "tls.key": FRESH.tls_key, "ca.crt": FRESH.ca_crt}
    assert keeper.ensure(api).tls_crt == FRESH.tls_crt and api.writes == 0  # type: ignore[arg-type]


# --- a real handshake -------------------------------------------------------------------
class _Answer(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"checkpointRequested": True}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def https_server() -> Iterator[tuple[str, TlsKeeper]]:
    api = FakeSecrets()
    keeper = TlsKeeper("managed", "ns", "s", ["127.0.0.1"])
    keeper.ensure(api)  # type: ignore[arg-type]
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    assert keeper.context is not None
    server.socket = keeper.context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}/v1/progress", keeper
    server.shutdown()


def test_the_reporter_verifies_the_server_with_the_ca_beside_its_token(
    https_server: tuple[str, TlsKeeper], tmp_path: Path
) -> None:
    url, keeper = https_server
    assert keeper.bundle is not None
    ca = tmp_path / "ca.crt"
    ca.write_text(keeper.bundle.ca_bundle())
    assert http_send("POST", url, "t", {"step": 1}, cafile=str(ca)) == {"checkpointRequested": True}
    env = {"TRAINOP_PROGRESS_URL": url, CA_FILE_ENV: str(ca)}
    assert poll_request(env) == {"checkpointRequested": True}
    reporter = Reporter(env)
    reporter._deliver({"step": 1})
    assert reporter.sent == 1 and reporter.checkpoint_requested()
    wrong = tmp_path / "other.crt"
    wrong.write_text(OTHER.ca_crt)
    with pytest.raises(urllib.error.URLError) as err:
        http_send("POST", url, "t", {"step": 1}, cafile=str(wrong))
    assert isinstance(err.value.reason, ssl.SSLCertVerificationError)
    with pytest.raises(urllib.error.URLError):  # the system's trust does not know it either
        http_send("POST", url, "t", {"step": 1})
    assert poll_request({"TRAINOP_PROGRESS_URL": url, CA_FILE_ENV: str(wrong)}) == {}


def test_pods_get_the_ca_beside_their_token() -> None:
    pod = {
        "kind": "Pod",
        "metadata": {"name": "a-worker-0", "annotations": {"trainop.dev/rank": "0"}},
        "spec": {"containers": [{"name": "trainer"}]},
    }
    url = "https://trainop-progress.trainop-system.svc:8082/v1/progress"
    out = progress.wire_pod(pod, url, None, {}, 10.0, kubeflow=True, ca=FRESH.ca_bundle())
    assert out["metadata"]["annotations"][progress.CA_ANNOTATION] == FRESH.ca_bundle()
    sources = out["spec"]["volumes"][0]["projected"]["sources"]
    item = sources[1]["downwardAPI"]["items"][0]
    assert item == {
        "path": "ca.crt",
        "fieldRef": {"fieldPath": "metadata.annotations['trainop.dev/progress-ca']"},
    }
    env = {e["name"]: e["value"] for e in out["spec"]["containers"][0]["env"]}
    ca_file = "/var/run/secrets/trainop.dev/progress/ca.crt"
    assert env[CA_FILE_ENV] == ca_file and env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == ca_file
    assert env["KUBEFLOW_TRAINER_SERVER_URL"].startswith("https://")
    plain = progress.wire_pod(pod, url.replace("https", "http"), None, {}, 10.0, kubeflow=True)
    plain_env = {e["name"] for e in plain["spec"]["containers"][0]["env"]}
    assert CA_FILE_ENV not in plain_env and "KUBEFLOW_TRAINER_SERVER_CA_CERT" not in plain_env
    assert len(plain["spec"]["volumes"][0]["projected"]["sources"]) == 1


# name, --progress-tls, --progress-url, refused
FLAGS = [
    ("managed-https", "managed", "https://p.ns.svc:8082/v1/progress", False),
    ("secret-https", "secret", "https://p.ns.svc:8082/v1/progress", False),
    ("off-http", "off", "http://p.ns.svc:8082/v1/progress", False),
    ("managed-but-http", "managed", "http://p.ns.svc:8082/v1/progress", True),
    ("off-but-https", "off", "https://p.ns.svc:8082/v1/progress", True),
    ("no-url", "managed", "", False),
]


@pytest.mark.parametrize(("name", "mode", "url", "refused"), FLAGS, ids=[f[0] for f in FLAGS])
def test_the_url_scheme_must_match_the_tls_mode(
    name: str, mode: str, url: str, refused: bool
) -> None:
    from trainop.cli.run import _tls

    if refused:
        with pytest.raises(click.BadParameter, match="--progress-tls"):
            _tls(mode, "ns", "s", url, ())
        return
    keeper = _tls(mode, "ns", "s", url, ("127.0.0.1",))
    assert (keeper is None) == (mode == "off")
    if keeper is not None and url:
        assert keeper.names == ["p.ns.svc", "127.0.0.1"]


def test_a_forbidden_secret_names_the_grant_and_the_fix() -> None:
    class Forbidden(Exception):
        status = 403

    class Api:
        def read_secret(self, ns: str, name: str) -> None:
            raise Forbidden("secrets is forbidden")

    with pytest.raises(TlsError, match=r"needs get, create and update on it .* --progress-tls off"):
        TlsKeeper("managed", "ns", "s", NAMES).ensure(Api())  # type: ignore[arg-type]
