"""e2e on kind: the real-node scenarios (tests/real/scenarios.py) on a kind cluster.

Where a Docker engine and `kind` exist: a kind cluster (tests/e2e/kind-config.yaml), the
GFD labels and patched `nvidia.com/gpu` capacity of a Tesla-T4 node on its worker, the
images of `trainop images build` loaded with `kind load image-archive` (OCI archives),
the operator installed with `helm install` of charts/trainop from the local operator
image, and the CPU DDP job run to Succeeded. Skipped with the reason elsewhere.
The real-node tier runs the same scenario code on the local cluster's real nodes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Kube
from tests.real.helm_operator import HelmOperator
from tests.real.scenarios import DDP_LINE, Target, run_ddp
from trainop.cluster import fleet, images
from trainop.cluster.local import LocalCluster

KIND_CLUSTER = os.environ.get("TRAINOP_KIND_CLUSTER", "trainop-e2e")
HERE = Path(__file__).parent


def _docker_engine_running() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (_docker_engine_running() and shutil.which("kind")),
        reason="e2e needs a running Docker engine and `kind` on PATH; this machine has "
        + ("no Docker engine" if not _docker_engine_running() else "no kind binary"),
    ),
]


class KindCluster(LocalCluster):
    """A kind cluster seen through LocalCluster's kubectl helpers (its own kubeconfig)."""

    def __init__(self, name: str, kubeconfig: Path) -> None:
        super().__init__(name=name)
        self._kubeconfig = kubeconfig

    @property
    def kubeconfig(self) -> Path:  # type: ignore[override]
        return self._kubeconfig


def _kind(*args: str) -> None:
    subprocess.run(["kind", *args], check=True, capture_output=True, text=True, timeout=900)


def _label_as_gpu_nodes(kube: Kube) -> None:
    cls = fleet.load_fleet().classes["pcie-t4"]
    labels = {**fleet.gfd_labels(cls), "trainop.dev/block": "kind", "trainop.dev/rack": "kind"}
    for node in kube.get("nodes")["items"]:
        name = node["metadata"]["name"]
        if "node-role.kubernetes.io/control-plane" in node["metadata"].get("labels", {}):
            continue
        kube.run("label", "node", name, "--overwrite", *[f"{k}={v}" for k, v in labels.items()])
        patch = {"status": {"capacity": {"nvidia.com/gpu": "4"}}}
        kube.run(
            "patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
        )


@pytest.fixture(scope="session")
def kind_target() -> Iterator[Target]:
    work = Path(tempfile.mkdtemp(prefix="trainop-kind-"))
    kubeconfig = work / "kubeconfig"
    _kind(
        "create",
        "cluster",
        "--name",
        KIND_CLUSTER,
        "--config",
        str(HERE / "kind-config.yaml"),
        "--kubeconfig",
        str(kubeconfig),
        "--wait",
        "120s",
    )
    try:
        kube = Kube(KindCluster(KIND_CLUSTER, kubeconfig))
        _label_as_gpu_nodes(kube)
        refs = {}
        for name in ("pytorch-cpu", "operator"):
            archive = images.build_image(name, print)
            _kind("load", "image-archive", str(archive), "--name", KIND_CLUSTER)
            refs[name] = images.image_ref(name)
        # The same Helm install as the real-node tier (restricted PSS, local image).
        HelmOperator(kube.cluster, kube, work / "helm").install(
            refs["operator"], no_kube_proxy=False
        )
        yield Target(kube, refs)
    finally:
        if os.environ.get("TRAINOP_KEEP_CLUSTER") != "1":
            subprocess.run(["kind", "delete", "cluster", "--name", KIND_CLUSTER], check=False)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def kind_namespace(kind_target: Target) -> Iterator[str]:
    kube = kind_target.kube
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "e2e-ddp"}})
    kube.wait_for(
        "default SA", lambda: kube.maybe_get("serviceaccount", "default", "-n", "e2e-ddp")
    )
    yield "e2e-ddp"
    kube.run("delete", "namespace", "e2e-ddp", "--wait=false", check=False)


def test_ddp_job_trains_on_kind(kind_target: Target, kind_namespace: str) -> None:
    log = run_ddp(kind_target, kind_namespace)
    assert DDP_LINE.search(log), log[-3000:]
