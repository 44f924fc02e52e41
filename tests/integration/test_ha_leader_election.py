"""Two operator replicas with --leader-elect: one acts, the other takes over on SIGTERM.

Runs before the session `operator` fixture starts (file order), so only these two
replicas act on the cluster. Measured and asserted loosely (the figures go to the log):
SIGTERM ends the leader within 10 s and the standby leads within 15 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import job
from tests.integration.conftest import Kube, _free_port

LEASE = "trainop-ha-test"


class Replica:
    def __init__(self, kubeconfig: str, log: Path) -> None:
        self.log = log
        self.metrics_port = _free_port()
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

    def writes(self) -> float:
        """API writes this replica's own client made (trainop_api_writes_total)."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            text = r.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("trainop_api_writes_total{")
        )

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
