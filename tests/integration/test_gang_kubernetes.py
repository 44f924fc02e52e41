"""gangScheduling: kubernetes against a real Kubernetes 1.37 control plane (GenericWorkload,
scheduling.k8s.io/v1beta1, KEP-5732 on): kube-scheduler's GangScheduling plugin holds, places
and binds each gang trainop hands over as a PodGroup. All or nothing; two gangs that together
do not fit never deadlock; a lost node restarts the gang; a Required rack holds a gang until
one rack has room (KEP-5732); render's objects are accepted.

One 1.37 cluster for the module (four 8-GPU KWOK nodes in two racks) and one operator run
with the mode on. Kubernetes v1.37.2 is not part of `make build-binaries` (its cold compile
is long, see docs/gang-kubernetes.md): the module runs where `trainop cluster build
--kubernetes 1.37` has cached it and is skipped, with that reason, where it has not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import H100, job
from tests.integration.conftest import CLUSTER_NAME, Kube, OperatorProcess, repo_root
from trainop.cluster import binaries
from trainop.cluster.fleet import load_fleet
from trainop.cluster.local import LocalCluster

_BUILT = all(
    (binaries.component_dir(binaries.KUBERNETES_137) / b).is_file()
    for b in binaries.KUBERNETES_137.binaries
)
pytestmark = pytest.mark.skipif(
    not _BUILT,
    reason="Kubernetes v1.37.2 is not built (not part of make build-binaries: a long cold "
    "compile); run `trainop cluster build --kubernetes 1.37` to run these tests",
)

FLEET = """\
classes:
  dgx-h100:
    gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8, memoryMiB: 81559, family: hopper, computeCapability: "9.0"}
    driver: "580.95.05"
    cudaRuntime: "13.0"
    rdma: {resource: rdma/rdma_shared_device_a, count: 63}
    cpu: "224"
    memory: 2Ti
    gfdLabels: both
groups:
  - {class: dgx-h100, count: 2, block: block-a, rack: rack-a, prefix: h100-a}
  - {class: dgx-h100, count: 2, block: block-a, rack: rack-b, prefix: h100-b}
"""


class GangOperator(OperatorProcess):
    """The operator with an operator config file (gangScheduling: kubernetes)."""

    def __init__(self, cluster: LocalCluster, log_dir: Path, config: Path) -> None:
        super().__init__(cluster, log_dir)
        self.config = config

    def start(self) -> None:
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig))
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        cmd = [sys.executable, "-m", "trainop.cli.main", "run", "--config", str(self.config)]
        cmd += ["--restart-backoff-seconds", "1", "--metrics-port", str(self.metrics_port)]
        cmd += ["--health-port", str(self.health_port)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.wait_healthy()


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gang") / "fleet.yaml"
    path.write_text(FLEET)
    return path


@pytest.fixture(scope="module")
def cluster137(fleet_file: Path) -> Iterator[LocalCluster]:
    lc = LocalCluster(name=f"{CLUSTER_NAME}-k137", kubernetes="1.37")
    lc.up(str(fleet_file))
    yield lc
    if os.environ.get("TRAINOP_KEEP_CLUSTER") != "1":
        lc.down()


@pytest.fixture(scope="module")
def kube137(cluster137: LocalCluster) -> Kube:
    kube = Kube(cluster137)
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(repo_root() / "crds"))
    kube.wait_for(
        "CRD trainingjobs.trainop.dev Established",
        lambda: any(
            cd.get("type") == "Established" and cd.get("status") == "True"
            for cd in (kube.get("crd", "trainingjobs.trainop.dev").get("status") or {}).get(
                "conditions"
            )
            or []
        ),
        timeout=30,
    )
    return kube


@pytest.fixture(scope="module")
def gang_operator(
    cluster137: LocalCluster, kube137: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GangOperator]:
    cfg = tmp_path_factory.mktemp("gang-op") / "config.yaml"
    cfg.write_text("gangScheduling: kubernetes\n")
    op = GangOperator(cluster137, cfg.parent, cfg)
    op.start()
    yield op
    op.stop()


_ns = iter(range(1, 1000))


@pytest.fixture
def ns(kube137: Kube, gang_operator: GangOperator, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"g{next(_ns)}-{request.node.name.lower().replace('_', '-')[5:30].strip('-')}"
    kube137.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube137.wait_for(
        "default ServiceAccount", lambda: kube137.maybe_get("serviceaccount", "default", "-n", name)
    )
    yield name
    kube137.run("delete", "namespace", name, "--wait=false", check=False)
    # The next test wants the whole fleet: wait until this test's pods are gone.
    kube137.wait_for(
        "pods of the test gone",
        lambda: not kube137.get("pods", "-n", name)["items"],
        timeout=60,
    )


def _gang(ns: str, name: str, workers: int) -> dict[str, Any]:
    """A gang of `workers` whole 8-GPU H100 pods that runs until deleted."""
    return job(name, namespace=ns, workers=workers).placement("none", "Preferred", [H100]).build()


def _pods(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    items = kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _bound(kube: Kube, ns: str, name: str) -> int:
    return sum(1 for p in _pods(kube, ns, name) if p["spec"].get("nodeName"))


def _running(kube: Kube, ns: str, name: str, count: int) -> bool:
    pods = _pods(kube, ns, name)
    return len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)


def _hold_for(kube: Kube, seconds: float, check: Any, what: str) -> None:
    """`check()` stays true for `seconds` (polled every half second)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what
        time.sleep(0.5)


def test_a_gang_that_does_not_fit_binds_nothing_until_it_fits_whole(kube137: Kube, ns: str) -> None:
    kube137.apply(_gang(ns, "first", 2))
    kube137.wait_for("first running", lambda: _running(kube137, ns, "first", 2), timeout=60)
    kube137.apply(_gang(ns, "second", 3))  # 3 x 8 GPUs; 2 nodes free
    kube137.wait_for("second's 3 pods created", lambda: len(_pods(kube137, ns, "second")) == 3)
    pods = _pods(kube137, ns, "second")
    group = pods[0]["spec"]["schedulingGroup"]["podGroupName"]
    assert all(not p["spec"].get("schedulingGates") for p in pods)
    pg = kube137.get("podgroups.scheduling.k8s.io", group, "-n", ns)
    assert pg["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
    _hold_for(kube137, 8, lambda: _bound(kube137, ns, "second") == 0, "a pod of second bound")
    kube137.run("delete", "trainingjob", "first", "-n", ns)
    kube137.wait_for("second running whole", lambda: _running(kube137, ns, "second", 3), 90)


def test_two_gangs_that_together_do_not_fit_never_deadlock(kube137: Kube, ns: str) -> None:
    kube137.apply([_gang(ns, "left", 3), _gang(ns, "right", 3)])  # 48 GPUs wanted, 32 there

    def one_whole() -> bool:
        counts = sorted((_bound(kube137, ns, "left"), _bound(kube137, ns, "right")))
        return counts == [0, 3]

    kube137.wait_for("one gang bound whole, the other not at all", one_whole, timeout=90)
    _hold_for(kube137, 8, one_whole, "gangs interleaved")
    winner = "left" if _bound(kube137, ns, "left") == 3 else "right"
    kube137.wait_for("the winner running", lambda: _running(kube137, ns, winner, 3), 60)


def test_a_lost_node_restarts_the_gang(
    kube137: Kube, ns: str, cluster137: LocalCluster, fleet_file: Path
) -> None:
    kube137.apply(_gang(ns, "lost", 2))
    kube137.wait_for("lost running", lambda: _running(kube137, ns, "lost", 2), timeout=60)
    before = {p["metadata"]["uid"] for p in _pods(kube137, ns, "lost")}
    node = _pods(kube137, ns, "lost")[0]["spec"]["nodeName"]
    kube137.run("delete", "node", node)
    try:

        def restarted() -> bool:
            pods = _pods(kube137, ns, "lost")
            fresh = {p["metadata"]["uid"] for p in pods}.isdisjoint(before)
            return fresh and _running(kube137, ns, "lost", 2)

        kube137.wait_for("a new gang running", restarted, timeout=120)
        assert node not in {p["spec"]["nodeName"] for p in _pods(kube137, ns, "lost")}
        reasons = {e["reason"] for e in kube137.events_for(ns, "lost")}
        assert reasons & {"NodeLost", "PodMissing"}, reasons
    finally:  # the fleet as it was
        fleet = load_fleet(fleet_file)
        cluster137.apply_fleet(fleet)
        cluster137.wait_ready(fleet, 60)


def test_render_output_is_accepted_by_the_1_37_api_server(
    kube137: Kube, ns: str, cluster137: LocalCluster, tmp_path: Path
) -> None:
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(kube137.get("nodes")))
    # A Required rack: KEP-5732's schedulingConstraints must be accepted too.
    body = job("rendered", namespace=ns, workers=2).placement("rack", "Required", [H100]).build()
    (tmp_path / "job.json").write_text(json.dumps(body))
    cfg = tmp_path / "config.yaml"
    cfg.write_text("gangScheduling: kubernetes\n")
    cmd = [sys.executable, "-m", "trainop.cli.main", "render", str(tmp_path / "job.json")]
    out = subprocess.run(
        [*cmd, "--nodes", str(nodes), "--config", str(cfg)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "kind: PodGroup" in out and "schedulingGroup" in out
    assert "key: trainop.dev/rack" in out
    proc = kube137.run("apply", "--dry-run=server", "-f", "-", input=out, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "podgroup.scheduling.k8s.io/rendered" in proc.stdout


def _blocker(ns: str, name: str, node: str) -> dict[str, Any]:
    """A one-pod job that takes the whole of `node` (its template's nodeSelector)."""
    b = job(name, namespace=ns, workers=1).placement("none", "Preferred", [H100])
    return b.template(nodeSelector={"kubernetes.io/hostname": node}).build()


def test_a_required_rack_gang_waits_for_one_rack_with_room(kube137: Kube, ns: str) -> None:
    # One node taken in each rack: two nodes are free, but never two in one rack.
    kube137.apply([_blocker(ns, "block-a", "h100-a-01"), _blocker(ns, "block-b", "h100-b-01")])
    for name in ("block-a", "block-b"):
        kube137.wait_for(f"{name} running", lambda n=name: _running(kube137, ns, n, 1), 60)
    rack = job("racked", namespace=ns, workers=2).placement("rack", "Required", [H100]).build()
    kube137.apply(rack)
    kube137.wait_for("racked's pods created", lambda: len(_pods(kube137, ns, "racked")) == 2)
    _hold_for(kube137, 8, lambda: _bound(kube137, ns, "racked") == 0, "racked split racks")
    kube137.run("delete", "trainingjob", "block-b", "-n", ns)
    kube137.wait_for("racked running", lambda: _running(kube137, ns, "racked", 2), timeout=90)
    nodes = {p["spec"]["nodeName"] for p in _pods(kube137, ns, "racked")}
    assert nodes == {"h100-b-01", "h100-b-02"}, nodes
