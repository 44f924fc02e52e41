"""trainop behind the real Kueue (v0.17.0, its webhooks registered; trainop.cluster.kueue):
admission of the gang as one Workload, a wait for quota, preemption by a higher-priority
Workload (the whole gang torn down and requeued), and a job Kueue can never admit.

One cluster of its own, one Kueue and one operator (`externalQueue: kueue`) for the module;
each test gets a namespace with its own ClusterQueue (16 H100 GPUs) and LocalQueue `lq`.
Skipped only when Kueue's binary cannot be built here (`make build-binaries` builds it).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import H100, job, kueue
from tests.integration.conftest import CLUSTER_NAME, Kube, OperatorProcess, repo_root
from trainop.cluster.binaries import KUEUE_VERSION
from trainop.cluster.kueue import KueueError, LocalKueue, cluster_bin_dir
from trainop.cluster.local import LocalCluster

GFD_PRODUCT = "nvidia.com/gpu.product"
JOB_LABEL = "trainop.dev/job-name"


class KueueMode:
    """The module's cluster, Kueue and operator."""

    def __init__(self, kube: Kube, kueue: LocalKueue, operator: OperatorProcess) -> None:
        self.kube, self.kueue, self.operator = kube, kueue, operator

    def logs(self) -> str:
        kueue_log = self.kueue.log_path.read_text(errors="replace").splitlines()[-40:]
        return (
            f"---- operator log ----\n{self.operator.log_tail()}\n"
            "---- kueue log ----\n" + "\n".join(kueue_log)
        )


@pytest.fixture(scope="module")
def mode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KueueMode]:
    """A cluster with Kueue and the operator in Kueue mode; Kueue's flavor and priorities."""
    work = tmp_path_factory.mktemp("kueue")
    try:
        bin_dir = cluster_bin_dir(work)  # Kueue's binary and a version-stamped API server
    except KueueError as exc:
        pytest.skip(f"Kueue {KUEUE_VERSION} cannot be built here: {exc}")
    lc = LocalCluster(name=f"{CLUSTER_NAME}-kueue", bin_dir=str(bin_dir))
    lc.up()
    k = Kube(lc)
    k.run("apply", "--server-side", "--force-conflicts", "-f", str(repo_root() / "crds"))
    local = LocalKueue(str(lc.binaries(build=False)["kubectl"]), str(lc.kubeconfig), work)
    local.wait_established("trainingjobs.trainop.dev")
    took = local.start()
    print(f"Kueue ready in {took:.1f} s")
    k.apply(
        [
            kueue("ResourceFlavor", "h100").set(nodeLabels={GFD_PRODUCT: H100}).build(),
            kueue("WorkloadPriorityClass", "low").value(100).build(),
            kueue("WorkloadPriorityClass", "high").value(1000).build(),
        ]
    )
    config = work / "operator.yaml"
    config.write_text("externalQueue: kueue\n")
    op = OperatorProcess(lc, work, extra=["--config", str(config)])
    op.start()
    yield KueueMode(k, local, op)
    op.stop()
    local.stop()
    if os.environ.get("TRAINOP_KEEP_CLUSTER") != "1":
        lc.down()


@pytest.fixture
def kube(mode: KueueMode, request: pytest.FixtureRequest) -> Iterator[Kube]:
    """The module's cluster; the operator's and Kueue's logs are printed when a test fails."""
    yield mode.kube
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(mode.logs())


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    """A namespace whose LocalQueue `lq` feeds a ClusterQueue of its own: 16 H100 GPUs,
    lower-priority Workloads preemptible."""
    name = f"kq-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    selector = {"matchLabels": {"kubernetes.io/metadata.name": name}}
    kube.apply(
        [
            kueue("ClusterQueue", name)
            .gpu_quota("h100", 16)
            .preempt_lower()
            .set(namespaceSelector=selector)
            .build(),
            kueue("LocalQueue", "lq", namespace=name).set(clusterQueue=name).build(),
        ]
    )
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)
    kube.run("delete", "clusterqueue", name, "--wait=false", check=False)


def _job(ns: str, name: str, workers: int, priority: str | None = None) -> dict[str, Any]:
    b = job(name, namespace=ns, workers=workers, gpus=8).queue("lq")
    if priority:
        b.meta(labels={"kueue.x-k8s.io/priority-class": priority})
    return b.manifest()


def _status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict(kube.get("trainingjob", name, "-n", ns).get("status") or {})


def _running(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    pods = kube.get("pods", "-n", ns, "-l", f"{JOB_LABEL}={name}")["items"]
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def _workload(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    items = kube.get("workloads.kueue.x-k8s.io", "-n", ns, "-l", f"{JOB_LABEL}={name}")["items"]
    return dict(items[0]) if items else None


def _cond(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return dict(cond)
    return {}


def test_admitted_gang_runs_on_the_flavor_nodes_and_releases_its_quota(kube: Kube, ns: str) -> None:
    body = job("bert", namespace=ns, workers=2, gpus=8).queue("lq").fake_run("3s").manifest()
    kube.apply(body)
    wl = kube.wait_for(
        "Workload admitted",
        lambda: (
            _cond(_workload(kube, ns, "bert"), "Admitted").get("status") == "True"
            and _workload(kube, ns, "bert")
        ),
        timeout=60,
    )
    assert [ps["name"] for ps in wl["spec"]["podSets"]] == ["worker"]
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    pods = kube.wait_for(
        "2 pods running", lambda: len(p := _running(kube, ns, "bert")) == 2 and p, timeout=60
    )
    for pod in pods:
        assert pod["spec"]["nodeSelector"][GFD_PRODUCT] == H100  # the flavor's nodeLabels
        assert pod["spec"]["nodeName"].startswith("h100-")
    kube.wait_for(
        "job Succeeded", lambda: _status(kube, ns, "bert").get("phase") == "Succeeded", timeout=60
    )
    kube.wait_for(
        "Workload Finished",
        lambda: _cond(_workload(kube, ns, "bert"), "Finished").get("status") == "True",
        timeout=30,
    )
    kube.run("delete", "trainingjob", "bert", "-n", ns)
    kube.wait_for(
        "Workload garbage collected", lambda: _workload(kube, ns, "bert") is None, timeout=60
    )


def test_a_job_waits_for_quota_then_runs(kube: Kube, ns: str) -> None:
    kube.apply(_job(ns, "big", 2))  # 16 GPUs: the whole ClusterQueue
    kube.wait_for("big running", lambda: len(_running(kube, ns, "big")) == 2, timeout=60)
    kube.apply(_job(ns, "next", 1))
    status = kube.wait_for(
        "next waiting with Kueue's reason",
        lambda: (
            (s := _status(kube, ns, "next")).get("pendingReason") == "WaitingForKueue"
            and "quota" in s.get("pendingMessage", "")
            and s
        ),
        timeout=60,
    )
    assert status["phase"] == "Queued"
    assert not _running(kube, ns, "next")
    kube.run("delete", "trainingjob", "big", "-n", ns)
    kube.wait_for("next running", lambda: len(_running(kube, ns, "next")) == 1, timeout=60)


def test_preemption_by_a_higher_priority_workload_requeues_the_whole_gang(
    kube: Kube, ns: str
) -> None:
    kube.apply(_job(ns, "low", 2, priority="low"))
    kube.wait_for("low running", lambda: len(_running(kube, ns, "low")) == 2, timeout=60)
    kube.apply(_job(ns, "high", 1, priority="high"))
    kube.wait_for("high running", lambda: len(_running(kube, ns, "high")) == 1, timeout=90)
    assert not _running(kube, ns, "low")  # the whole gang went, not one pod
    low = _status(kube, ns, "low")
    preempted = next(c for c in low["conditions"] if c["type"] == "Preempted")
    assert (preempted["status"], preempted["reason"]) == ("True", "EvictedByKueue")
    assert low["phase"] == "Queued"
    wl = _workload(kube, ns, "low")
    assert _cond(wl, "QuotaReserved").get("status") == "False"  # requeued, waiting
    assert _cond(wl, "Requeued").get("status") == "True"
    kube.run("delete", "trainingjob", "high", "-n", ns)
    kube.wait_for("low admitted again", lambda: len(_running(kube, ns, "low")) == 2, timeout=90)


def test_a_job_kueue_can_never_admit_shows_kueues_reason(kube: Kube, ns: str) -> None:
    kube.apply(_job(ns, "huge", 4))  # 32 GPUs; the ClusterQueue holds 16
    wl = kube.wait_for(
        "Kueue's verdict",
        lambda: (
            (w := _workload(kube, ns, "huge")) and _cond(w, "QuotaReserved").get("message") and w
        ),
        timeout=60,
    )
    kueue_says = _cond(wl, "QuotaReserved")["message"]
    status = kube.wait_for(
        "the job shows it",
        lambda: kueue_says in ((s := _status(kube, ns, "huge")).get("pendingMessage") or "") and s,
        timeout=30,
    )
    queued = next(c for c in status["conditions"] if c["type"] == "Queued")
    assert kueue_says in queued["message"]
    assert not _running(kube, ns, "huge")


def _suspend(kube: Kube, ns: str, name: str, flag: bool) -> None:
    patch = json.dumps({"spec": {"runPolicy": {"suspend": flag}}})
    kube.run("patch", "trainingjob", name, "-n", ns, "--type=merge", "-p", patch)


def test_suspending_a_job_gives_kueue_its_quota_back(kube: Kube, ns: str) -> None:
    kube.apply(_job(ns, "first", 2))  # 16 GPUs: the whole ClusterQueue
    kube.wait_for("first running", lambda: len(_running(kube, ns, "first")) == 2, timeout=60)
    kube.apply(_job(ns, "second", 1))
    _suspend(kube, ns, "first", True)
    kube.wait_for("second running", lambda: len(_running(kube, ns, "second")) == 1, timeout=60)
    assert _status(kube, ns, "first")["phase"] == "Suspended"
    assert (_workload(kube, ns, "first") or {})["spec"]["active"] is False
    _suspend(kube, ns, "first", False)  # resumed: queued in Kueue again, behind `second`
    kube.wait_for(
        "first waiting for Kueue",
        lambda: _status(kube, ns, "first").get("pendingReason") == "WaitingForKueue",
        timeout=30,
    )
    kube.run("delete", "trainingjob", "second", "-n", ns)
    kube.wait_for("first running again", lambda: len(_running(kube, ns, "first")) == 2, timeout=60)
