"""Kubeflow's training-operator as a second baseline for `make bench-scale` (bench.scale).

The scale benchmark compares trainop against bare pods placed by kube-scheduler. The
operator most clusters already run for the same job is Kubeflow's training-operator
(PyTorchJob); this module makes it runnable on trainop's local control plane, which has
no container runtime and no image registry:

- `ensure_training_operator` builds the manager binary once from the Go module proxy into
  trainop's binary cache, next to kube-apiserver and friends.
- `start_training_operator` installs the PyTorchJob CRD and what the manager expects to
  find in the cluster, runs it as a plain process and returns once it reports ready.
- `pytorch_job` builds a PyTorchJob for one gang of the benchmark's mix, with the same
  GPU request, node selector and tolerations as the bare-pod baseline and a `gang` label
  on its pods, so the benchmark's pod watch can time both the same way.

Run outside a pod, the manager never starts its controllers: its cert rotator writes the
webhook certificates to a Secret, waits for the kubelet to mount that Secret as files
(a backoff of 17 to 34 minutes) and then exits. Here the files are copied from the
Secret instead (github.com/open-policy-agent/cert-controller, pkg/rotator, v0.10.1). No webhook configuration is
registered, so the apiserver never calls the webhook (PyTorchJobs are not validated on
admission; the controller's own checks still run).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

# https://github.com/kubeflow/training-operator (v1, PyTorchJob). v1.8.1 builds with Go 1.26.
MODULE = "github.com/kubeflow/training-operator"
VERSION = "v1.8.1"
BINARY = "training-operator.v1"  # cmd/training-operator.v1/main.go
CRD = "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
# The cert rotator looks for Secret <namespace>/<name> (namespace from MY_POD_NAMESPACE)
# and the webhook server reads its certificate from a fixed directory; see
# https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/cert/cert.go
NAMESPACE = "kubeflow"
SECRET = "training-operator-webhook-cert"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
H100 = "NVIDIA-H100-80GB-HBM3"


def _cache_dir() -> Path:
    from trainop.cluster.binaries import cache_root

    return cache_root() / f"training-operator-{VERSION}"


def _kubectl() -> str:
    from trainop.cluster.binaries import resolve_binaries

    return str(resolve_binaries(build=False)["kubectl"])


def ensure_training_operator() -> Path:
    """The manager binary, built once with `go install` (about 2 minutes on 2 cores)."""
    dest = _cache_dir()
    if (dest / BINARY).is_file():
        return dest / BINARY
    staging = dest.with_name(dest.name + ".partial")
    env = dict(os.environ, GOBIN=str(staging), CGO_ENABLED="0")
    pkg = f"{MODULE}/cmd/{BINARY}@{VERSION}"
    subprocess.run(["go", "install", pkg], env=env, check=True, cwd=Path.home())
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)  # a half-built entry is never taken for a whole one
    return dest / BINARY


def _module_dir() -> Path:
    """The module's source in GOMODCACHE (for its CRD manifests)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path.home(),
    ).stdout
    return Path(json.loads(out)["Dir"])


def _install(kubeconfig: str) -> None:
    """The PyTorchJob CRD, plus the namespace and (empty) Secret the cert rotator fills."""
    kubectl = [_kubectl(), "--kubeconfig", kubeconfig]
    crd = _module_dir() / CRD
    subprocess.run([*kubectl, "apply", "--server-side", "-f", str(crd)], check=True)
    prereqs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": NAMESPACE},
        },
    ]
    for obj in prereqs:  # server-side apply never drops the data the rotator wrote
        subprocess.run(
            [*kubectl, "apply", "--server-side", "-f", "-"],
            input=json.dumps(obj),
            text=True,
            check=True,
        )
    subprocess.run(
        [*kubectl, "wait", "--for", "condition=established", "crd/pytorchjobs.kubeflow.org"],
        check=True,
    )


def _mount_certs(kubeconfig: str) -> None:
    """Do the kubelet's job: copy the Secret's tls.crt and tls.key into CERT_DIR."""
    get = ["get", "secret", SECRET, "-n", NAMESPACE, "-o", "jsonpath={.data}"]
    out = subprocess.run(
        [_kubectl(), "--kubeconfig", kubeconfig, *get],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out or "{}")
    if "tls.crt" in data and "tls.key" in data:
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))


def _ready(health_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def free_port() -> int:
    """A TCP port nothing listens on now (the benchmark's processes pick theirs so)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_training_operator(
    kubeconfig: str,
    log: Path,
    *,
    metrics_port: int | None = None,
    health_port: int | None = None,
    webhook_port: int | None = None,
    timeout: float = 120.0,
) -> subprocess.Popen[bytes]:
    """Install the prerequisites, start the manager (PyTorchJob only, upstream defaults
    otherwise: 1 controller thread, client QPS 20) and wait for /readyz. Ports left unset
    are picked free: a fixed one could answer /readyz from another process."""
    binary = ensure_training_operator()
    _install(kubeconfig)
    _mount_certs(kubeconfig)  # certificates a previous run left in the Secret: ready at once
    health = health_port or free_port()
    args = [
        str(binary),
        "--enable-scheme=pytorchjob",
        f"--metrics-bind-address=127.0.0.1:{metrics_port or free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{health}",
        f"--webhook-server-port={webhook_port or free_port()}",
    ]
    env = dict(os.environ, KUBECONFIG=kubeconfig, MY_POD_NAMESPACE=NAMESPACE, TMPDIR="/tmp")
    proc = subprocess.Popen(args, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while proc.poll() is not None or not _ready(health):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(30)
            raise RuntimeError(f"training-operator did not become ready; see {log}")
        _mount_certs(kubeconfig)  # the rotator checks for the files with a backoff
        time.sleep(0.3)
    return proc


def _replica(count: int, gpus: int, gang: str) -> dict[str, Any]:
    # Fields as in the PyTorchJob API: https://www.kubeflow.org/docs/components/training/user-guides/pytorch/
    # The operator configures the container named "pytorch".
    container = {
        "name": "pytorch",
        "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    return {
        "replicas": count,
        "restartPolicy": "OnFailure",
        "template": {
            "metadata": {"labels": {"gang": gang}},
            "spec": {
                "tolerations": [{"operator": "Exists"}],
                "nodeSelector": {"nvidia.com/gpu.product": H100},
                "containers": [container],
            },
        },
    }


def pytorch_job(name: str, ns: str, replicas: int, gpus_per_replica: int) -> dict[str, Any]:
    """One gang as a PyTorchJob: a Master plus `replicas - 1` Workers (1 replica: a Master)."""
    specs = {"Master": _replica(1, gpus_per_replica, name)}
    if replicas > 1:
        specs["Worker"] = _replica(replicas - 1, gpus_per_replica, name)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"pytorchReplicaSpecs": specs},
    }
