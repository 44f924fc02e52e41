"""Runs the real Kueue (v0.17) next to the local control plane, with its webhooks registered.

Used by the Kueue integration tests (tests/integration/test_kueue.py) and `make bench-scale`
(bench.scale.burst's Kueue column); see docs/kueue.md. Neighbours: `cluster.binaries` builds and caches the `kueue`
controller manager (`KUEUE`, built by `trainop cluster build`); `cluster.local` runs the
API server this manager talks to.

In a real cluster Kueue runs as a pod behind a Service and rotates its own webhook
certificates. Here it is a local process, so:
- a CA and a serving certificate for 127.0.0.1 are generated (Python `cryptography`);
- Kueue's internal certificate management is off in its Configuration
  (https://kueue.sigs.k8s.io/docs/reference/kueue-config.v1beta2/, internalCertManagement);
- the Validating/MutatingWebhookConfigurations are Kueue's own (config/components/webhook/
  manifests.yaml in its module), kept to Kueue's own kinds, with a url-based clientConfig
  `https://127.0.0.1:<port>/<path>` and that CA as caBundle
  (https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/#url).
Kueue's CRDs come from the same module (config/components/crd/bases).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainop.cluster import binaries

MODULE = "sigs.k8s.io/kueue"
NAMESPACE = "kueue-system"
# trainop's TrainingJob as a Kueue external framework (Kind.version.group).
EXTERNAL_FRAMEWORK = "TrainingJob.v1alpha1.trainop.dev"
# Without internal certificate management Kueue's metrics server reads its certificate
# from this fixed directory (cmd/kueue/main.go, v0.17.0); the serving certificate is
# copied there (root only; the directory is not configurable).
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
WEBHOOK_PREFIX = "trainop-kueue"


class KueueError(RuntimeError):
    """Kueue could not be built, installed or started; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_kueue(build: bool = True) -> Path:
    """The `kueue` binary from the build cache, built once (`go install`) when absent, and
    the version-stamped kube-apiserver Kueue needs (`binaries.KUBE_APISERVER_STAMPED`)."""
    try:
        found = binaries.resolve_binaries(
            build=build, components=(binaries.KUEUE, binaries.KUBE_APISERVER_STAMPED)
        )
    except binaries.BuildError as exc:
        raise KueueError(str(exc)) from exc
    return found["kueue"]


def cluster_bin_dir(workdir: Path) -> Path:
    """A `--bin-dir` for a local cluster Kueue can run against: links to the cached control
    plane, with the version-stamped kube-apiserver in place of the plain one."""
    ensure_kueue()
    try:
        found = binaries.resolve_binaries(build=True)
        found.update(
            binaries.resolve_binaries(build=False, components=(binaries.KUBE_APISERVER_STAMPED,))
        )
    except binaries.BuildError as exc:
        raise KueueError(str(exc)) from exc
    out = workdir / "bin"
    out.mkdir(parents=True, exist_ok=True)
    for name, path in found.items():
        link = out / name
        link.unlink(missing_ok=True)
        link.symlink_to(path)
    return out


def module_dir() -> Path:
    """Kueue's module source in GOMODCACHE (CRDs, webhook manifests); downloaded if absent."""
    try:
        out = subprocess.run(
            ["go", "mod", "download", "-json", f"{MODULE}@{binaries.KUEUE_VERSION}"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path.home(),
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise KueueError(
            f"cannot download {MODULE}@{binaries.KUEUE_VERSION} for its CRDs: {exc}"
        ) from exc
    return Path(json.loads(out)["Dir"])


def make_certs(cert_dir: Path) -> bytes:
    """A CA and a serving certificate for 127.0.0.1/localhost in `cert_dir` (tls.crt,
    tls.key, ca.crt); returns the CA certificate (PEM) for the webhooks' caBundle."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainop-kueue-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName(
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(san, critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    cert_dir.mkdir(parents=True, exist_ok=True)
    (cert_dir / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (cert_dir / "tls.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (cert_dir / "ca.crt").write_bytes(ca_pem)
    return ca_pem


def configuration(health: int, metrics: int, webhook: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for a local process: no leader
    election, no internal cert management, TrainingJob as the one external framework
    (batch/job stays on as Kueue's default, its webhook unregistered; no pod integration)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
        "webhook": {"port": webhook, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 100, "burst": 200},
        "integrations": {"externalFrameworks": [EXTERNAL_FRAMEWORK]},
    }


def webhook_configurations(
    manifests: list[dict[str, Any]], port: int, ca_pem: bytes
) -> list[dict[str, Any]]:
    """Kueue's webhook configurations with only Kueue's own kinds (the job integrations'
    webhooks are not served here) and a url clientConfig to the local process."""
    out = []
    bundle = base64.b64encode(ca_pem).decode()
    for doc in manifests:
        kind = doc.get("kind", "")
        if kind not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            path = ((hook.get("clientConfig") or {}).get("service") or {}).get("path", "")
            if "kueue-x-k8s-io" not in path:
                continue
            hooks.append(
                {
                    **hook,
                    "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle},
                }
            )
        suffix = "mutating" if kind.startswith("Mutating") else "validating"
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": f"{WEBHOOK_PREFIX}-{suffix}"},
                "webhooks": hooks,
            }
        )
    return out


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@dataclass
class LocalKueue:
    """Kueue's controller manager as a child process against one local cluster."""

    kubectl: str
    kubeconfig: str
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.workdir / "kueue.log"

    def _kubectl(self, *args: str, input: str | None = None) -> str:
        proc = subprocess.run(
            [self.kubectl, "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise KueueError(f"kubectl {' '.join(args[:3])} failed: {proc.stderr.strip()}")
        return proc.stdout

    def wait_established(self, crd: str, timeout: float = 60.0) -> None:
        """Polled, not `kubectl wait`: that fails at once while a new CRD's
        status.conditions is still null."""
        deadline = time.monotonic() + timeout
        while not _established(json.loads(self._kubectl("get", "crd", crd, "-o", "json"))):
            if time.monotonic() > deadline:
                raise KueueError(f"CRD {crd} not Established after {timeout:.0f} s")
            time.sleep(0.3)

    def install_crds(self, source: Path) -> None:
        bases = source / "config" / "components" / "crd" / "bases"
        self._kubectl("apply", "--server-side", "--force-conflicts", "-f", str(bases))
        for crd in sorted(bases.glob("*.yaml")):
            self.wait_established(yaml.safe_load(crd.read_text())["metadata"]["name"])
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        self._kubectl("apply", "-f", "-", input=json.dumps(ns))

    def start(self, timeout: float = 120.0) -> float:
        """Install CRDs, start the manager, register its webhooks; seconds taken."""
        started = time.monotonic()
        binary = ensure_kueue()
        source = module_dir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.install_crds(source)
        cert_dir = self.workdir / "certs"
        ca_pem = make_certs(cert_dir)
        try:
            METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                (METRICS_CERT_DIR / name).write_bytes((cert_dir / name).read_bytes())
        except OSError as exc:
            raise KueueError(
                f"Kueue reads its metrics certificate from {METRICS_CERT_DIR}, which is not "
                f"writable here ({exc}); run as root"
            ) from exc
        self.ports = {k: free_port() for k in ("health", "metrics", "webhook", "visibility")}
        config = configuration(
            self.ports["health"], self.ports["metrics"], self.ports["webhook"], cert_dir
        )
        config_path = self.workdir / "kueue-config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        args = [
            str(binary),
            f"--config={config_path}",
            # The visibility API server needs the aggregation layer; not used here.
            "--feature-gates=VisibilityOnDemand=false",
            f"--visibility-server-port={self.ports['visibility']}",
        ]
        env = dict(os.environ, KUBECONFIG=self.kubeconfig)
        self.proc = subprocess.Popen(
            args, env=env, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while not _ready(self.ports["health"]):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise KueueError(f"Kueue did not become ready; see {self.log_path}")
            time.sleep(0.3)
        manifests = list(
            yaml.safe_load_all(
                (source / "config" / "components" / "webhook" / "manifests.yaml").read_text()
            )
        )
        for obj in webhook_configurations(manifests, self.ports["webhook"], ca_pem):
            self._kubectl(
                "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(obj)
            )
        return time.monotonic() - started

    def stop(self) -> None:
        """Unregister the webhooks (Kueue's kinds would be refused without the process),
        then stop the manager."""
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            suffix = "mutating" if kind.startswith("mutating") else "validating"
            subprocess.run(
                [
                    self.kubectl,
                    "--kubeconfig",
                    self.kubeconfig,
                    "delete",
                    kind,
                    f"{WEBHOOK_PREFIX}-{suffix}",
                    "--ignore-not-found",
                ],
                capture_output=True,
                check=False,
            )
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
