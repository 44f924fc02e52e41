"""High availability without a cluster: which replica exports the cluster gauges, the leader
election timing rule, and the kube client's token bucket (trainop.metrics, kube.lease,
kube.client). tests/integration/test_ha_leader_election.py proves the same with two replicas
and a real Prometheus."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.rest import ApiException
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import job
from trainop import metrics
from trainop.kube.client import RateLimiter, set_rate_limit
from trainop.kube.lease import Elector, timing_error


@pytest.fixture
def leading() -> Iterator[list[bool]]:
    """Drive metrics.LEADERSHIP from the test; restore the process-wide wiring afterwards."""
    flag = [True]
    metrics.LEADERSHIP.probe = lambda: flag[0]
    metrics.JOBS.source = lambda: [
        job("a").phase("Running").with_status(queue="q").build(),
        job("b").phase("Queued").build(),
    ]
    try:
        yield flag
    finally:
        metrics.LEADERSHIP.probe = None
        metrics.JOBS.source = None
        metrics.QUEUE_GPUS.clear()


def _scrape() -> dict[str, float]:
    """sample name -> sum over its series, as Prometheus would read the default registry."""
    from prometheus_client import generate_latest

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        for sample in family.samples:
            if sample.name in ("trainop_jobs", "trainop_queue_gpus", "trainop_leader"):
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def test_only_the_acting_replica_exports_job_and_queue_gauges(leading: list[bool]) -> None:
    metrics.QUEUE_GPUS.labels("q", "H100", "used").set(8)
    assert _scrape() == {"trainop_jobs": 2, "trainop_queue_gpus": 8, "trainop_leader": 1}
    leading[0] = False
    assert _scrape() == {"trainop_leader": 0}
    # What it set while leading is gone for good, not shown again when it leads once more.
    leading[0] = True
    assert _scrape() == {"trainop_jobs": 2, "trainop_leader": 1}


def test_without_wiring_a_process_exports_everything() -> None:
    assert metrics.LEADERSHIP.probe is None and metrics.LEADERSHIP.leading()


@pytest.mark.parametrize(
    ("duration", "deadline", "retry", "error"),
    [
        pytest.param(15, 10, 2, None, id="client-go-defaults"),
        pytest.param(60, 40, 5, None, id="slow-apiserver"),
        pytest.param(15, 10, 0, "retry period must be > 0", id="no-retry"),
        pytest.param(15, 2, 2, "greater than 1.2 x the retry period", id="deadline-vs-retry"),
        pytest.param(10, 10, 2, "renew deadline plus 2 retry periods (14 s)", id="duration"),
        pytest.param(14, 10, 2, "must be greater than the renew deadline", id="no-margin"),
    ],
)
def test_leader_election_timings(
    duration: float, deadline: float, retry: float, error: str | None
) -> None:
    why = timing_error(duration, deadline, retry)
    if error is None:
        assert why is None
    else:
        assert why is not None and error in why, why


class UnreachableLeaseApi:
    """Stands in for an API server that does not answer (or, with `holder`, one whose Lease
    another replica holds and renewed just now): the failures the renew deadline is for."""

    def __init__(self, holder: str | None = None) -> None:
        self.holder = holder

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> dict[str, Any]:
        if self.holder is None:
            raise ApiException(status=503, reason="ServiceUnavailable")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": self.holder, "renewTime": now, "leaseDurationSeconds": 15}
        return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}

    def replace_namespaced_lease(self, *_: Any, **__: Any) -> None:
        raise ConnectionError("connection refused")


@pytest.mark.parametrize(
    ("renewed_ago", "api", "leads"),
    [
        pytest.param(1.0, UnreachableLeaseApi(), True, id="inside-the-deadline"),
        pytest.param(7.9, UnreachableLeaseApi(), True, id="next-try-still-inside"),
        pytest.param(8.5, UnreachableLeaseApi(), False, id="next-try-past-the-deadline"),
        pytest.param(None, UnreachableLeaseApi(), False, id="a-standby-stays-standby"),
        pytest.param(1.0, UnreachableLeaseApi(holder="other"), False, id="another-holder"),
    ],
)
def test_a_leader_that_cannot_renew_leads_until_its_deadline(
    renewed_ago: float | None, api: UnreachableLeaseApi, leads: bool
) -> None:
    elector = Elector("l", "ns", "me", 15, renew_deadline_seconds=10, retry_period_seconds=2)
    elector.api = api  # type: ignore[assignment]
    if renewed_ago is not None:
        elector.renewed_at = time.monotonic() - renewed_ago
    assert elector.step() is leads
    assert (elector.renewed_at is not None) is leads


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def test_rate_limiter_lets_a_burst_through_then_paces_at_qps() -> None:
    clock = FakeClock()
    limiter = RateLimiter(qps=10, burst=3, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        limiter.acquire()
    assert clock.slept == [0.1, 0.1]  # 3 at once, then one every 1/qps s
    clock.now += 10  # idle: the bucket refills, but never beyond the burst
    for _ in range(4):
        limiter.acquire()
    assert clock.slept == [0.1, 0.1, 0.1]
    assert limiter.waited == pytest.approx(0.3)


def test_rate_limiter_off_at_zero_qps() -> None:
    clock = FakeClock()
    limiter = RateLimiter(qps=0, burst=1, clock=clock, sleep=clock.sleep)
    for _ in range(1000):
        limiter.acquire()
    assert clock.slept == []


def test_rate_limit_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="qps -1"):
        set_rate_limit(-1, 10)
    with pytest.raises(ValueError, match="burst 0"):
        RateLimiter(5, 0)
