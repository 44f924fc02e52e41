"""Faults on the real local cluster: the operator killed mid-burst, API errors injected into
its client, a node deleted under a running gang. Short variants run in `make test`; the long
ones (`TRAINOP_FAULTS_LONG=1`, run by `make test-faults`) use bursts of 200 jobs.

Every scenario ends with the same audit: each job has exactly its own pods (no duplicates,
no orphans of an older gang or of a job that is gone) and the phase it should have.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.builders import A100, H100, job
from tests.integration.conftest import Kube, LocalCluster, OperatorProcess
from trainop.cluster.fleet import load_fleet

pytestmark = pytest.mark.usefixtures("operator")
LONG = os.environ.get("TRAINOP_FAULTS_LONG") == "1"


def _job(ns: str, name: str, gpus: int = 1, run: str | None = "3s") -> dict[str, Any]:
    """One worker on an H100 or A100; on the fake fleet it runs `run` (None: until deleted)."""
    builder = job(name, namespace=ns, workers=1, gpus=gpus).products(H100, A100)
    builder.template(containers=[{"name": "trainer", "image": "busybox"}])
    return (builder if run is None else builder.fake_run(run)).manifest()


def _apply_all(kube: Kube, jobs: list[dict[str, Any]]) -> None:
    for start in range(0, len(jobs), 50):
        kube.apply(jobs[start : start + 50])


def _audit(kube: Kube, ns: str, names: list[str], phases: tuple[str, ...]) -> None:
    """Every job in one of `phases`, with exactly its own pods (checked once all are)."""

    def settled() -> bool:
        tjs = kube.get("trainingjobs", "-n", ns)["items"]
        got = {t["metadata"]["name"]: (t.get("status") or {}).get("phase") for t in tjs}
        return sorted(got) == sorted(names) and all(got[n] in phases for n in names)

    kube.wait_for(f"{len(names)} jobs in {phases}", settled, timeout=240 if LONG else 120)
    tjs = {t["metadata"]["name"]: t for t in kube.get("trainingjobs", "-n", ns)["items"]}
    pods = kube.get("pods", "-n", ns)["items"]
    per_job: dict[str, int] = {}
    for p in pods:
        if p["metadata"].get("deletionTimestamp"):
            continue
        job = p["metadata"]["labels"].get("trainop.dev/job-name")
        owner = {o["uid"] for o in p["metadata"].get("ownerReferences") or []}
        assert job in tjs and tjs[job]["metadata"]["uid"] in owner, (
            f"orphan pod {p['metadata']['name']}"
        )
        per_job[job] = per_job.get(job, 0) + 1
    assert all(n <= 1 for n in per_job.values()), per_job  # one replica each: never two


def test_operator_killed_during_a_burst_converges(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    count = 200 if LONG else 24
    jobs = [_job(namespace, f"burst-{i:03d}") for i in range(count)]
    _apply_all(kube, jobs)
    time.sleep(1.5)  # mid-burst: some gangs created, some half-way, most not yet decided
    operator.kill()
    time.sleep(1.0)
    operator.start()
    _audit(kube, namespace, [j["metadata"]["name"] for j in jobs], ("Succeeded",))
    restarts = [
        t
        for t in kube.get("trainingjobs", "-n", namespace)["items"]
        if int((t.get("status") or {}).get("restartCount") or 0) > 0
    ]
    assert not restarts, "a kill of the operator is not a failure of the job"


@pytest.fixture
def faulty_operator(local_cluster: LocalCluster, operator: OperatorProcess, tmp_path: Path):
    """The session operator restarted with 20% of its writes failing (429 or 503)."""
    operator.stop()
    faulty = OperatorProcess(local_cluster, tmp_path)
    os.environ["TRAINOP_FAULTS"] = "rate=0.2,codes=429:503"
    try:
        faulty.start()
    finally:
        del os.environ["TRAINOP_FAULTS"]
    yield faulty
    faulty.stop()
    operator.start()


def test_injected_api_errors_are_retried_and_no_job_is_lost(
    kube: Kube, namespace: str, faulty_operator: OperatorProcess
) -> None:
    count = 60 if LONG else 12
    jobs = [_job(namespace, f"flaky-{i:03d}") for i in range(count)]
    _apply_all(kube, jobs)
    _audit(kube, namespace, [j["metadata"]["name"] for j in jobs], ("Succeeded",))
    text = faulty_operator.metrics()
    injected = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("trainop_api_faults_injected_total ")
    )
    assert injected > 0, "the fault injector did not fire"
    assert faulty_operator.proc is not None and faulty_operator.proc.poll() is None


def test_a_node_deleted_under_a_running_gang_restarts_it_elsewhere(
    kube: Kube, namespace: str, local_cluster: LocalCluster
) -> None:
    job = _job(namespace, "stranded", gpus=8, run=None)
    kube.apply(job)

    def running_on() -> str | None:
        pods = kube.get("pods", "-n", namespace, "-l", "trainop.dev/job-name=stranded")["items"]
        ok = pods and all(p["status"].get("phase") == "Running" for p in pods)
        return pods[0]["spec"].get("nodeName") if ok else None

    node = kube.wait_for("stranded running", running_on, timeout=60)
    kube.run("delete", "node", node)
    try:

        def moved() -> bool:
            now = running_on()
            return bool(now) and now != node

        kube.wait_for("the gang running on another node", moved, timeout=90)
        tj = kube.get("trainingjob", "stranded", "-n", namespace)
        assert int(tj["status"].get("restartCount") or 0) == 0
        reasons = {e["reason"] for e in kube.events_for(namespace, "stranded")}
        assert reasons & {"NodeLost", "PodMissing"}, reasons
    finally:  # the fleet as the other tests expect it
        fleet = load_fleet()
        local_cluster.apply_fleet(fleet)
        local_cluster.wait_ready(fleet, 60)


@pytest.mark.skipif(
    not LONG,
    reason="make test-faults only: a control-plane restart can stop kube-scheduler (it exits "
    "when its lease lapses), which later tests of the same cluster then miss",
)
@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_restart_mid_run_loses_no_job(
    kube: Kube,
    namespace: str,
    local_cluster: LocalCluster,
    operator: OperatorProcess,
    component: str,
) -> None:
    """kill -9 the apiserver (or etcd) while jobs run, bring it back: the operator rides it
    out (kopf's watches reconnect), nothing is lost or duplicated, and new jobs still run."""
    before = [_job(namespace, f"{component[:4]}-a{i}", run="5s") for i in range(4)]
    _apply_all(kube, before)
    time.sleep(2)
    pid = local_cluster._pids()[component]
    os.kill(pid, 9)
    time.sleep(2)
    local_cluster.up()  # starts what is down, as `trainop cluster up` does
    after = [_job(namespace, f"{component[:4]}-b{i}", run="3s") for i in range(2)]
    _apply_all(kube, after)
    names = [j["metadata"]["name"] for j in before + after]
    _audit(kube, namespace, names, ("Succeeded",))
    assert operator.proc is not None and operator.proc.poll() is None, operator.log_tail()
