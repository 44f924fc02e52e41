"""bench.controlplane reads the API server's and etcd's metrics text into the per-request
table of `make bench-scale`: named cases of what a line counts for, and the idle rate
subtracted over a burst's length."""

from __future__ import annotations

from typing import Any

import pytest
from bench.scale.controlplane import Scrape, cost_lines, parse_apiserver, parse_etcd, resource_of

APISERVER = """\
# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 0.5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="trainop.dev",resource="trainingjobs",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 4
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/readyz",verb="GET",version=""} 7
apiserver_response_sizes_sum{component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 2048
apiserver_watch_events_total{group="",resource="pods",version="v1"} 30
apiserver_watch_events_sizes_sum{group="",resource="pods",version="v1"} 9000
"""

ETCD = """\
etcd_mvcc_put_total 100
etcd_mvcc_delete_total 3
etcd_debugging_mvcc_total_put_size_in_bytes 4096
etcd_mvcc_range_total 7
"""


@pytest.mark.parametrize(
    ("key", "want"),
    [
        pytest.param("pods POST", [12.0, 0.5, 0.0], id="codes-summed-one-row"),
        pytest.param("trainingjobs.trainop.dev/status PATCH", [4.0, 0.0, 0.0], id="group-sub"),
        pytest.param("pods LIST", [0.0, 0.0, 2048.0], id="response-bytes"),
        pytest.param(" GET", None, id="no-resource-left-out"),
    ],
)
def test_apiserver_lines_count_for_their_row(key: str, want: list[float] | None) -> None:
    requests, _ = parse_apiserver(APISERVER)
    assert requests.get(key) == want


def test_watch_events_and_etcd_counters() -> None:
    _, watch = parse_apiserver(APISERVER)
    assert watch == {"pods": [30.0, 9000.0]}
    etcd = parse_etcd(ETCD)
    assert (etcd["puts"], etcd["deletes"], etcd["put bytes"], etcd["txns"]) == (100, 3, 4096, 0)


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        pytest.param({"resource": "pods"}, "pods", id="core"),
        pytest.param({"resource": "pods", "subresource": "binding"}, "pods/binding", id="sub"),
        pytest.param(
            {"resource": "leases", "group": "coordination.k8s.io"},
            "leases.coordination.k8s.io",
            id="group",
        ),
    ],
)
def test_resource_names(labels: dict[str, str], want: str) -> None:
    assert resource_of(labels) == want


def test_idle_rate_is_taken_off_over_the_bursts_length() -> None:
    burst = Scrape(20.0, {"leases PUT": [40.0, 2.0, 0.0]}, {}, {"puts": 50.0}, {"etcd": 3.0})
    idle = Scrape(10.0, {"leases PUT": [10.0, 0.5, 0.0]}, {}, {"puts": 10.0}, {"etcd": 1.0})
    net = burst.minus(idle, burst.at / idle.at)
    assert net.requests["leases PUT"] == [20.0, 1.0, 0.0]
    assert (net.etcd["puts"], net.cpu["etcd"]) == (30.0, 1.0)


def test_cost_lines_render_every_table() -> None:
    def cost(pods: float, status: float) -> dict[str, Any]:
        return {
            "seconds": 10.0,
            "cpu": {"kube-apiserver": 2.0 * pods, "operator": status},
            "requests": {
                "pods POST": [pods, 0.1 * pods, 0.0],
                "tj/status PATCH": [status, status, 0],
            },
            "watch": {"pods": [pods * 5, pods * 500]},
            "etcd": {"puts": pods * 3},
        }

    text = "\n".join(cost_lines("Burst", cost(10, 0), cost(10, 20), 10))
    assert "| tj/status PATCH | 0.00 | 2.00 | 0.00 | 2000.00 | +2000.00 | 100% |" in text
    assert "| kube-apiserver | 2000.0 | 2000.0 | +0.0 |" in text
    assert "| puts | 3.0 | 3.0 |" in text


def test_only_the_heartbeats_of_the_idle_sample_are_taken_off() -> None:
    from bench.scale.controlplane import CostMeter

    meter = CostMeter(lambda: "", "/nowhere/x.kubeconfig")
    meter.idle = Scrape(
        10.0,
        {"leases.coordination.k8s.io PUT": [10.0, 1.0, 0.0], "events POST": [5.0, 1.0, 0.0]},
        {"nodes": [4.0, 400.0]},
        {"puts": 10.0},
        {"etcd": 1.0},
    )
    before = Scrape(0.0, {}, {}, {"puts": 0.0}, {"etcd": 0.0})
    after = Scrape(
        20.0,
        {"leases.coordination.k8s.io PUT": [30.0, 2.0, 0.0], "events POST": [7.0, 1.0, 0.0]},
        {"nodes": [8.0, 800.0]},
        {"puts": 50.0},
        {"etcd": 3.0},
    )
    cost = meter.burst_cost(before, after)
    assert cost["requests"]["leases.coordination.k8s.io PUT"] == [10.0, 0.0, 0.0]
    assert cost["requests"]["events POST"] == [7.0, 1.0, 0.0]  # not a steady rate: kept whole
    assert cost["watch"]["nodes"] == [0.0, 0.0]
    assert (cost["etcd"]["puts"], cost["cpu"]["etcd"]) == (30.0, 1.0)
