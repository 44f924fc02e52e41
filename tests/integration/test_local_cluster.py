"""Proof the local cluster is real: the real scheduler binds GPU pods to fake GPU nodes."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import Kube
from trainop.cluster.fleet import load_fleet, node_manifests
from trainop.cluster.local import LocalCluster


def _pod(
    name: str,
    gpus: int,
    selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "nodeSelector": selector or {},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def test_fleet_nodes_are_ready_with_gfd_and_topology_labels(kube: Kube) -> None:
    nodes = {n["metadata"]["name"]: n for n in kube.get("nodes")["items"]}
    expected = node_manifests(load_fleet())
    assert set(nodes) == {n["metadata"]["name"] for n in expected}
    for want in expected:
        got = nodes[want["metadata"]["name"]]
        ready = [c for c in got["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"
        for key in ("nvidia.com/gpu.product", "trainop.dev/rack", "trainop.dev/block"):
            assert got["metadata"]["labels"][key] == want["metadata"]["labels"][key]
        assert (
            got["status"]["allocatable"]["nvidia.com/gpu"]
            == want["status"]["allocatable"]["nvidia.com/gpu"]
        )
    v100 = nodes["v100-01"]["metadata"]["labels"]
    assert (
        "nvidia.com/cuda.driver.major" in v100
        and "nvidia.com/cuda.driver-version.major" not in v100
    )
    assert nodes["h100-a-01"]["status"]["allocatable"]["rdma/rdma_shared_device_a"] == "63"
    assert "rdma/rdma_shared_device_a" not in nodes["t4-01"]["status"]["allocatable"]


def test_h100_pod_is_bound_by_the_real_scheduler_and_runs(kube: Kube, namespace: str) -> None:
    kube.apply(
        _pod("eight", 8, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}), "-n", namespace
    )
    pod = kube.wait_for(
        "pod Running",
        lambda: (
            (p := kube.get("pod", "eight", "-n", namespace))["status"].get("phase") == "Running"
            and p
        ),
    )
    assert pod["spec"]["nodeName"].startswith("h100-")
    events = kube.events_for(namespace, "eight")
    assert any(
        (
            e["reason"] == "Scheduled"
            and e["source"].get("component", "") in ("default-scheduler", "")
        )
        or e.get("reportingComponent") == "default-scheduler"
        for e in events
    )


def test_nine_gpu_pod_stays_pending_with_failed_scheduling(kube: Kube, namespace: str) -> None:
    kube.apply(_pod("nine", 9), "-n", namespace)
    events = kube.wait_for(
        "FailedScheduling event",
        lambda: [
            e for e in kube.events_for(namespace, "nine") if e["reason"] == "FailedScheduling"
        ],
    )
    assert "Insufficient nvidia.com/gpu" in events[0]["message"]
    assert kube.get("pod", "nine", "-n", namespace)["status"]["phase"] == "Pending"


def test_annotation_makes_a_pod_fail_with_the_given_exit_code(kube: Kube, namespace: str) -> None:
    kube.apply(
        _pod(
            "fails",
            1,
            annotations={
                "trainop.dev/fake-exit-code": "137",
                "trainop.dev/fake-run-duration": "1s",
            },
        ),
        "-n",
        namespace,
    )
    pod = kube.wait_for(
        "pod Failed",
        lambda: (
            (p := kube.get("pod", "fails", "-n", namespace))["status"].get("phase") == "Failed"
            and p
        ),
    )
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


def test_annotation_on_a_running_pod_makes_it_succeed(kube: Kube, namespace: str) -> None:
    kube.apply(_pod("ok", 1), "-n", namespace)
    kube.wait_for(
        "pod Running",
        lambda: kube.get("pod", "ok", "-n", namespace)["status"].get("phase") == "Running",
    )
    kube.run("annotate", "pod", "ok", "-n", namespace, "trainop.dev/fake-exit-code=0")
    kube.wait_for(
        "pod Succeeded",
        lambda: kube.get("pod", "ok", "-n", namespace)["status"].get("phase") == "Succeeded",
    )


def test_up_is_idempotent_and_fast_when_running(local_cluster: LocalCluster) -> None:
    took = local_cluster.up()
    assert local_cluster.status()["readyNodes"] == len(node_manifests(load_fleet()))
    # Not a timing assertion on performance; a second `up` must not recreate the cluster.
    assert took < 60
