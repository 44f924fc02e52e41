"""One local control plane for the whole integration run, plus helpers to talk to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from trainop.api.progress import PROGRESS_AUDIENCE, PROGRESS_PATH
from trainop.cluster.local import LocalCluster

# Under pytest-xdist (make test: -n), each worker runs its modules on a cluster of its own.
CLUSTER_NAME = os.environ.get("TRAINOP_TEST_CLUSTER", "trainop-it") + (
    f"-{os.environ['PYTEST_XDIST_WORKER']}" if os.environ.get("PYTEST_XDIST_WORKER") else ""
)


class Kube:
    """Thin kubectl wrapper for tests: JSON in and out, and polling with a clear failure."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.kubeconfig = str(cluster.kubeconfig)

    def run(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, input=input, check=check)

    def apply(
        self, obj: dict[str, Any] | list[dict[str, Any]] | str, *extra: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        doc = (
            obj
            if isinstance(obj, str)
            else json.dumps(
                obj if isinstance(obj, dict) else {"apiVersion": "v1", "kind": "List", "items": obj}
            )
        )
        return self.run("apply", "-f", "-", *extra, input=doc, check=check)

    def get(self, *args: str) -> Any:
        return json.loads(self.run("get", *args, "-o", "json").stdout)

    def maybe_get(self, *args: str) -> Any | None:
        proc = self.run("get", *args, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def wait_for(
        self, what: str, probe: Callable[[], Any], timeout: float = 60, interval: float = 0.5
    ) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = probe()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")

    def pod_token(
        self, ns: str, pod: dict[str, Any] | None, audience: str = PROGRESS_AUDIENCE
    ) -> str:
        """A ServiceAccount token as the kubelet projects it into a pod: bound to `pod` (a
        TokenRequest with the pod's name and uid), or to nothing when `pod` is None."""
        bound = []
        if pod is not None:
            meta = pod["metadata"]
            bound = [
                "--bound-object-kind=Pod",
                f"--bound-object-name={meta['name']}",
                f"--bound-object-uid={meta['uid']}",
            ]
        return str(
            self.run(
                "create", "token", "default", "-n", ns, f"--audience={audience}", *bound
            ).stdout.strip()
        )

    def events_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        items = self.get(
            "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
        )["items"]
        return list(items)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    lc = LocalCluster(name=CLUSTER_NAME, bin_dir=os.environ.get("TRAINOP_BIN_DIR"))
    lc.up()
    yield lc
    if os.environ.get("TRAINOP_KEEP_CLUSTER") != "1":
        lc.down()


@pytest.fixture(scope="session")
def kube(local_cluster: LocalCluster) -> Kube:
    return Kube(local_cluster)


_ns_counter = iter(range(1, 10_000))


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    base = request.node.name.lower().replace("_", "-")[:40].strip("-")
    name = f"t{next(_ns_counter)}-{base}".rstrip("-")
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube.wait_for(
        f"default ServiceAccount in {name}",
        lambda: kube.maybe_get("serviceaccount", "default", "-n", name),
    )
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """The real operator (`trainop run`) as a child process against the local cluster."""

    def __init__(self, cluster: LocalCluster, log_dir: Path, extra: Sequence[str] = ()) -> None:
        self.cluster = cluster
        self.extra = list(extra)  # more `trainop run` flags (e.g. --config for Kueue mode)
        self.log_path = log_dir / "operator.log"
        self.metrics_port = _free_port()
        self.health_port = _free_port()
        self.progress_port = _free_port()  # POST/GET /v1/progress (test_progress_reports.py)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig))
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainop.cli.main",
                "run",
                "--restart-backoff-seconds",
                "1",
                "--metrics-port",
                str(self.metrics_port),
                "--health-port",
                str(self.health_port),
                "--progress-port",
                str(self.progress_port),
                # Plain HTTP unless a test asks for TLS (extra flags come last and win):
                # tests/integration/test_progress_tls.py runs the endpoint over TLS.
                "--progress-tls=off",
                *self.extra,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 30) -> None:
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log_tail()
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.health_port}/healthz", timeout=1
                ):
                    return
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"operator not healthy in {timeout} s:\n{self.log_tail()}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no operator log)"

    def report(self, token: str, body: Any, path: str = PROGRESS_PATH) -> tuple[int, Any]:
        """POST `body` to the operator's plain-HTTP progress endpoint as a pod would: the
        status code and the parsed answer (urllib raises HTTPError on a refusal)."""
        import urllib.request

        req = urllib.request.Request(
            f"http://127.0.0.1:{self.progress_port}{path}",
            data=json.dumps(body).encode(),
            method="POST",
        )
        req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status), json.loads(resp.read() or b"null")

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())


@pytest.fixture(scope="session")
def crds_installed(kube: Kube) -> None:
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(repo_root() / "crds"))
    for crd in (
        "trainingjobs",
        "trainingqueues",
        "fabricprofiles",
        "clustertrainingruntimes",  # the operator lists and watches runtimes at start-up
        "trainingruntimes",
    ):
        # Polled, not `kubectl wait`: that fails at once ("accessor error") while a new CRD's
        # status.conditions is still null, a window a cold API server can leave open.
        kube.wait_for(
            f"CRD {crd}.trainop.dev Established",
            lambda crd=crd: any(
                c.get("type") == "Established" and c.get("status") == "True"
                for c in (kube.get("crd", f"{crd}.trainop.dev").get("status") or {}).get(
                    "conditions"
                )
                or []
            ),
            timeout=30,
        )


@pytest.fixture(scope="session")
def operator(
    local_cluster: LocalCluster, crds_installed: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(local_cluster, tmp_path_factory.mktemp("operator"))
    op.start()
    yield op
    op.stop()


@pytest.fixture(autouse=True)
def _operator_log_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and "operator" in request.fixturenames:
        op = request.getfixturevalue("operator")
        print("---- operator log (tail) ----\n" + op.log_tail())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]
    return rep
