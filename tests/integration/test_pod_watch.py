"""The pod watch's HTTP side (kube.client.KubeApi.list_pod_pages / watch_pods) against the
real API server: a watch from a listing's resourceVersion sees what happens after it. The
feed itself runs in every test that runs the operator; how a 410 Gone line of a stream
becomes Expired is in tests/unit/test_podfeed.py (a fresh cluster's etcd has compacted
nothing, so no version is reliably too old here)."""

from __future__ import annotations

import threading

import pytest

from tests.builders import gpu_pod
from tests.integration.conftest import Kube
from trainop.kube.client import KubeApi, load_kube_config


@pytest.fixture
def api(kube: Kube) -> KubeApi:
    load_kube_config(str(kube.cluster.kubeconfig))
    return KubeApi()


def test_a_watch_from_the_listing_sees_later_events(
    kube: Kube, api: KubeApi, namespace: str
) -> None:
    versions: dict[str | None, str] = {}
    listed = [p for page in api.list_pod_pages(namespace, versions) for p in page]
    assert listed == [] and versions[namespace]
    pod = gpu_pod("watched", namespace).gpus(1).build()
    kube.apply(pod)
    kube.run("delete", "pod", "watched", "-n", namespace, "--wait=false")
    stop = threading.Event()
    seen: list[tuple[str, str]] = []
    for kind, obj in api.watch_pods(namespace, versions[namespace], stop):
        seen.append((kind, obj["metadata"]["name"]))
        if kind == "DELETED":
            stop.set()
            break
    assert seen[0] == ("ADDED", "watched") and seen[-1] == ("DELETED", "watched")
