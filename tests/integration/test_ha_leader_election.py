"""Two operator replicas with --leader-elect: one acts, the other takes over on SIGTERM.

Runs before the session `operator` fixture starts (file order), so only these two
replicas act on the cluster. Measured and asserted loosely (the figures go to the log):
SIGTERM ends the leader within 10 s and the standby leads within 15 s.

The metrics test has a real Prometheus (test_prometheus_scrape.Prometheus) scrape both
replicas, as a ServiceMonitor over the chart's Service would: the sum of trainop_jobs and
trainop_queue_gpus over them counts each job and queue once, before and after a leader change.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import H100, job, queue
from tests.integration.conftest import Kube, _free_port
from tests.integration.test_prometheus_scrape import Prometheus

LEASE = "trainop-ha-test"


class Replica:
    def __init__(self, kubeconfig: str, log: Path, metrics_port: int | None = None) -> None:
        self.log = log
        self.metrics_port = metrics_port or _free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainop.cli.main",
                "run",
                "--leader-elect",
                "--lease-name",
                LEASE,
                "--lease-namespace",
                "default",
                "--metrics-port",
                str(self.metrics_port),
                "--health-port",
                str(_free_port()),
            ],
            env=dict(os.environ, KUBECONFIG=kubeconfig),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def identity_prefix(self) -> str:
        return f"-{self.proc.pid}"

    def metrics(self) -> str:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())

    def writes(self) -> float:
        """API writes this replica's own client made (trainop_api_writes_total)."""
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in self.metrics().splitlines()
            if line.startswith("trainop_api_writes_total{")
        )

    def sample(self, name: str) -> float | None:
        """The sum of this replica's `name` samples; None when it exports none."""
        values = [
            s.value
            for family in text_string_to_metric_families(self.metrics())
            for s in family.samples
            if s.name == name
        ]
        return sum(values) if values else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def replicas(kube: Kube, crds_installed: None, tmp_path: Path) -> Iterator[list[Replica]]:
    kube.run("delete", "lease", LEASE, "-n", "default", "--ignore-not-found")
    reps = [Replica(kube.kubeconfig, tmp_path / f"r{i}.log") for i in range(2)]
    yield reps
    for r in reps:
        r.stop()
    kube.run("delete", "lease", LEASE, "-n", "default", "--ignore-not-found")


def _holder(kube: Kube) -> str:
    lease = kube.maybe_get("lease", LEASE, "-n", "default") or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def _job(namespace: str, name: str) -> dict[str, object]:
    return job(name, namespace=namespace, workers=1).manifest()


def _phase(kube: Kube, namespace: str, name: str) -> str:
    return str((kube.get("trainingjob", name, "-n", namespace).get("status") or {}).get("phase"))


def test_only_the_leader_acts_and_the_standby_takes_over(
    kube: Kube, replicas: list[Replica], namespace: str
) -> None:
    holder = kube.wait_for("a leader", lambda: _holder(kube), timeout=30)
    leader = next(r for r in replicas if holder.endswith(r.identity_prefix()))
    standby = next(r for r in replicas if r is not leader)
    kube.apply(_job(namespace, "ha-one"))
    kube.wait_for("ha-one Running", lambda: _phase(kube, namespace, "ha-one") == "Running", 60)
    # One replica acted: every pod once, and only the leader's log shows the job.
    pods = kube.get("pods", "-n", namespace, "-l", "trainop.dev/job-name=ha-one")["items"]
    assert len(pods) == 1
    assert leader.writes() > 0
    log = standby.log.read_text(errors="replace")
    assert standby.writes() == 0, [ln for ln in log.splitlines() if "trainop" in ln][-40:]

    started = time.monotonic()
    leader.proc.send_signal(signal.SIGTERM)
    leader.proc.wait(30)
    exit_seconds = time.monotonic() - started
    kube.wait_for(
        "the standby to lead",
        lambda: _holder(kube).endswith(standby.identity_prefix()),
        timeout=30,
    )
    failover_seconds = time.monotonic() - started
    print(
        f"SIGTERM -> exit {exit_seconds:.1f} s; SIGTERM -> standby leads {failover_seconds:.1f} s"
    )
    assert exit_seconds < 10, exit_seconds
    assert failover_seconds < 15, failover_seconds
    kube.apply(_job(namespace, "ha-two"))
    kube.wait_for("ha-two Running", lambda: _phase(kube, namespace, "ha-two") == "Running", 60)


# --- metrics of an HA pair, scraped by a real Prometheus ---------------------------------------


@pytest.fixture
def prometheus_of(replicas: list[Replica], tmp_path: Path) -> Iterator[Prometheus]:
    """A Prometheus scraping both replicas' /metrics every second (job "trainop")."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip(
            "the `prometheus` binary is not on PATH (Debian: apt-get install prometheus; "
            ".ci/run installs it)"
        )
    rules = tmp_path / "rules.yaml"
    rules.write_text("groups: []\n")
    targets = [f"127.0.0.1:{r.metrics_port}" for r in replicas]
    prom = Prometheus(binary, tmp_path, 0, rules, scrape={"static_configs": [{"targets": targets}]})
    try:
        prom.wait_ready()
        yield prom
    finally:
        prom.stop()


@pytest.fixture
def ha_queue(kube: Kube, namespace: str) -> Iterator[str]:
    """A TrainingQueue serving `namespace` by default: its jobs carry queue=<this name>."""
    name = f"{namespace}-q"[:63]
    kube.apply(queue(name).serves(namespace, default=True).quota("h100", 64, H100).build())
    yield name
    kube.run("delete", "trainingqueue", name, "--ignore-not-found", "--wait=false")


def _counted(prom: Prometheus, name: str, jobs: int) -> bool:
    """Prometheus, summing both replicas, sees `jobs` jobs and one leader, and exactly one
    replica exports the queue's gauges (its 64 GPU quota, not 128)."""
    return (
        prom.value(f'sum(trainop_jobs{{queue="{name}"}})') == jobs
        and prom.value("sum(trainop_leader)") == 1
        and prom.value(f'sum(trainop_queue_gpus{{queue="{name}", kind="quota"}})') == 64
        and prom.value(f'count(count by (instance) (trainop_jobs{{queue="{name}"}}))') == 1
    )


def test_summed_over_replicas_each_job_counts_once(
    kube: Kube,
    replicas: list[Replica],
    namespace: str,
    ha_queue: str,
    prometheus_of: Prometheus,
    tmp_path: Path,
) -> None:
    prom = prometheus_of
    holder = kube.wait_for("a leader", lambda: _holder(kube), timeout=30)
    leader = next(r for r in replicas if holder.endswith(r.identity_prefix()))
    standby = next(r for r in replicas if r is not leader)
    for i in range(3):
        kube.apply(_job(namespace, f"m{i}"))
    kube.wait_for(
        "both replicas scraped, 3 jobs counted once",
        lambda: prom.value('count(up{job="trainop"} == 1)') == 2 and _counted(prom, ha_queue, 3),
        timeout=60,
    )
    # The standby holds the same jobs in its cache but exports neither gauge.
    assert standby.sample("trainop_jobs") is None and standby.sample("trainop_leader") == 0
    assert leader.sample("trainop_leader") == 1

    leader.proc.send_signal(signal.SIGTERM)
    leader.proc.wait(30)
    kube.wait_for(
        "the standby to lead",
        lambda: _holder(kube).endswith(standby.identity_prefix()),
        timeout=30,
    )
    kube.apply(_job(namespace, "m3"))
    kube.wait_for(
        "4 jobs counted once by the new leader",
        lambda: _counted(prom, ha_queue, 4),
        timeout=60,
    )
    # A new replica where the old leader was (same scrape target) stands by: still once.
    replicas.append(Replica(kube.kubeconfig, tmp_path / "r2.log", leader.metrics_port))
    kube.wait_for(
        "the new replica scraped as a standby, 4 jobs counted once",
        lambda: (
            prom.value('count(up{job="trainop"} == 1)') == 2
            and prom.value("count(trainop_leader)") == 2
            and _counted(prom, ha_queue, 4)
        ),
        timeout=60,
    )
    # At no scrape in the whole run did the sum count a job twice. The subquery's steps fall
    # on whole seconds, so a scrape from the last second may not be in it yet: wait until
    # the newest count (4) is, then a peak above it would be a job counted twice.
    query = f'max_over_time(sum(trainop_jobs{{queue="{ha_queue}"}})[5m:1s])'
    peak = kube.wait_for(
        "the 5-minute peak to include the newest scrape",
        lambda: (p := prom.value(query)) is not None and p >= 4 and p,
        timeout=15,
    )
    assert peak == 4, peak
