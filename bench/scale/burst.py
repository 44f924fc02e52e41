"""The burst scenario: the same gangs as bare pods placed by kube-scheduler, as TrainingJobs,
behind Kueue and as Kubeflow PyTorchJobs; the operator killed mid-burst and the audit; the
control-plane cost of the bare and trainop runs (`controlplane`).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import kubeflow_baseline
from bench.scale import common, controlplane
from bench.scale.client import Client
from bench.scale.common import GPU, H100
from bench.scale.harness import cluster_with, start_operator
from bench.scale.measure import (
    BurstResult,
    ProcStat,
    _cpu_since,
    control_plane_cpu,
    metric_sum,
    summarize,
    wait_running,
)
from bench.scale.workload import Gang, mixed_gangs, training_job


def run_bare(client: Client, gangs: list[Gang], timeout: float) -> BurstResult:
    ns = "bench-bare"
    client.ensure_namespace(ns)
    meter = client.cost_meter()
    meter.sample_idle(controlplane.IDLE_SECONDS)
    cpu0, scrape0 = control_plane_cpu(client.kubeconfig), meter.scrape()
    start = time.monotonic()
    client.create_bare_gangs(gangs, ns)
    done = wait_running(client, ns, gangs, lambda p: p.metadata.labels["gang"], start, timeout)
    result = summarize("bare pods + kube-scheduler", gangs, done)
    result.detail["control_plane_cpu_seconds"] = _cpu_since(client.kubeconfig, cpu0)
    result.detail["cost"] = meter.burst_cost(scrape0, meter.settle())
    client.delete_namespace(ns)
    return result


def run_operator(
    client: Client, gangs: list[Gang], timeout: float, operator_pid: int, metrics: Callable[[], str]
) -> BurstResult:
    ns = "bench-operator"
    client.ensure_namespace(ns)
    proc = ProcStat(operator_pid)
    meter = client.cost_meter(operator_pid)
    meter.sample_idle(controlplane.IDLE_SECONDS)
    cpu0, writes0, server0 = (
        proc.cpu_seconds(),
        metric_sum(metrics(), "trainop_api_writes_total"),
        client.apiserver_counts(),
    )
    cp0, scrape0 = control_plane_cpu(client.kubeconfig), meter.scrape()
    start = time.monotonic()
    client.create_jobs([training_job(g, ns) for g in gangs], ns)
    done = wait_running(
        client, ns, gangs, lambda p: p.metadata.labels["trainop.dev/job-name"], start, timeout
    )
    result = summarize("trainop operator", gangs, done)
    control_plane = _cpu_since(client.kubeconfig, cp0)
    cost = meter.burst_cost(scrape0, meter.settle())
    after = metrics()
    writes = metric_sum(after, "trainop_api_writes_total") - writes0
    server = client.apiserver_counts()
    # Only kopf patches TrainingJobs outside status; trainop's own Events are in `writes`.
    kopf_writes = server["trainingjob_patch"] - server0["trainingjob_patch"]
    result.api_writes_per_job = round((writes + kopf_writes) / len(gangs), 2)
    result.operator_cpu_seconds = round(proc.cpu_seconds() - cpu0, 1)
    result.operator_peak_rss_mb = round(proc.peak_rss_mb(), 1)
    pods = sum(g.replicas for g in gangs)
    result.detail = {
        "trainop_client_writes": writes,
        "kopf_writes (TrainingJob finalizer/annotation patches)": kopf_writes,
        "pods": pods,
        "writes_per_job_minus_pods": round((writes + kopf_writes - pods) / len(gangs), 2),
        "admission_cycles": metric_sum(after, "trainop_admission_cycles_total"),
        "control_plane_cpu_seconds": control_plane,
        "cost": cost,
        "writes_by_kind": {
            line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in after.splitlines()
            if line.startswith("trainop_api_writes_total{")
        },
    }
    client.delete_namespace(ns)
    return result


def run_killed(
    client: Client, kubeconfig: str, gangs: list[Gang], timeout: float, kill_after: float
) -> dict[str, Any]:
    """The burst with the operator killed (SIGKILL) `kill_after` seconds in and started
    again at once; then the audit: every job Running with exactly its own pods (none
    lost, none duplicated, none orphaned, every gang whole)."""
    ns = "bench-killed"
    client.ensure_namespace(ns)
    log = common.RESULTS / "scale-operator-killed.log"
    proc, _ = start_operator(kubeconfig, log)
    start = time.monotonic()
    client.create_jobs([training_job(g, ns) for g in gangs], ns)
    time.sleep(max(0.0, start + kill_after - time.monotonic()))
    proc.kill()
    proc.wait(30)
    killed_at = time.monotonic() - start
    running_at_kill = sum(1 for p in client.pods(ns) if (p.status.phase or "") == "Running")
    proc, _ = start_operator(kubeconfig, log)
    try:
        done = wait_running(
            client, ns, gangs, lambda p: p.metadata.labels["trainop.dev/job-name"], start, timeout
        )
        audit = audit_gangs(client, ns, gangs)
    finally:
        proc.terminate()
        proc.wait(30)
    client.delete_namespace(ns)
    result = summarize("trainop, operator killed mid-burst", gangs, done)
    return {
        "killed_at_seconds": round(killed_at, 1),
        "pods_running_at_kill": running_at_kill,
        **asdict(result),
        "audit": audit,
    }


def audit_gangs(client: Client, ns: str, gangs: list[Gang]) -> dict[str, Any]:
    """Pods per job against the gang: duplicates (more pods than replicas), lost jobs (no
    TrainingJob or no pods), broken gangs (fewer), orphans (no owning job of that uid)."""
    jobs = {j["metadata"]["name"]: j for j in client.jobs(ns)}
    pods: dict[str, list[str]] = {}
    orphans = 0
    for p in client.pods(ns):
        if p.metadata.deletion_timestamp:
            continue
        job = (p.metadata.labels or {}).get("trainop.dev/job-name", "")
        owners = {o.uid for o in p.metadata.owner_references or []}
        if job not in jobs or jobs[job]["metadata"]["uid"] not in owners:
            orphans += 1
            continue
        pods.setdefault(job, []).append(p.metadata.name)
    want = {g.name: g.replicas for g in gangs}
    return {
        "jobs": len(want),
        "lost_jobs": sum(1 for g in want if g not in jobs or g not in pods),
        "duplicate_pods": sum(max(0, len(pods.get(g, [])) - n) for g, n in want.items()),
        "broken_gangs": sum(1 for g, n in want.items() if 0 < len(pods.get(g, [])) < n),
        "orphan_pods": orphans,
    }


def run_kubeflow(client: Client, kubeconfig: str, gangs: list[Gang], timeout: float) -> BurstResult:
    """The same gangs as PyTorchJobs (a Master plus Workers) for Kubeflow's training-operator,
    placed by kube-scheduler (no gang scheduler): the operator most clusters run for this."""
    ns = "bench-kubeflow"
    client.ensure_namespace(ns)
    proc = kubeflow_baseline.start_training_operator(
        kubeconfig, common.RESULTS / "scale-kubeflow.log"
    )
    try:
        stat = ProcStat(proc.pid)
        cpu0, start = stat.cpu_seconds(), time.monotonic()
        client.create_pytorchjobs(gangs, ns)
        done = wait_running(client, ns, gangs, lambda p: p.metadata.labels["gang"], start, timeout)
        policy = f"Kubeflow training-operator {kubeflow_baseline.VERSION} (PyTorchJob)"
        result = summarize(policy, gangs, done)
        result.operator_cpu_seconds = round(stat.cpu_seconds() - cpu0, 1)
        result.operator_peak_rss_mb = round(stat.peak_rss_mb(), 1)
    finally:
        proc.terminate()
        proc.wait(30)
    client.delete_namespace(ns)
    return result


def _kueue_objects(ns: str, gpus: int) -> list[dict[str, Any]]:
    """One flavor (the H100 nodes), one ClusterQueue holding every GPU of the fleet, one
    LocalQueue `lq` in `ns`: Kueue's quota never holds a job the fleet could run."""
    api = "kueue.x-k8s.io/v1beta2"
    quota = [{"name": GPU, "nominalQuota": gpus}]
    return [
        {
            "apiVersion": api,
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100"},
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": H100}},
        },
        {
            "apiVersion": api,
            "kind": "ClusterQueue",
            "metadata": {"name": "bench"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {"coveredResources": [GPU], "flavors": [{"name": "h100", "resources": quota}]}
                ],
            },
        },
        {
            "apiVersion": api,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": ns},
            "spec": {"clusterQueue": "bench"},
        },
    ]


def run_kueue(
    client: Client, lc: Any, gangs: list[Gang], nodes: int, timeout: float
) -> BurstResult:
    """The same TrainingJobs with trainop behind the real Kueue: each job's Workload admitted
    by Kueue's quota, then placed and wired by trainop (docs/kueue.md). Kueue runs against
    the same API server (its CRDs and webhooks installed at this point)."""
    from trainop.cluster.kueue import LocalKueue

    ns = "bench-kueue"
    client.ensure_namespace(ns)
    work = Path(tempfile.mkdtemp(prefix="trainop-bench-kueue-"))
    kubectl = str(lc.binaries(build=False)["kubectl"])
    kueue = LocalKueue(kubectl, str(lc.kubeconfig), work)
    kueue.start()
    lc.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {"kind": "List", "apiVersion": "v1", "items": _kueue_objects(ns, nodes * 8)}
        ),
    )
    config = work / "operator.yaml"
    config.write_text("externalQueue: kueue\n")
    log = common.RESULTS / "scale-operator-kueue.log"
    proc, _metrics = start_operator(str(lc.kubeconfig), log, ["--config", str(config)])
    try:
        assert kueue.proc is not None
        ours, theirs = ProcStat(proc.pid), ProcStat(kueue.proc.pid)
        cpu0, kcpu0, start = ours.cpu_seconds(), theirs.cpu_seconds(), time.monotonic()
        bodies = [training_job(g, ns) for g in gangs]
        for body in bodies:
            body["spec"]["queue"] = "lq"
        client.create_jobs(bodies, ns)
        done = wait_running(
            client, ns, gangs, lambda p: p.metadata.labels["trainop.dev/job-name"], start, timeout
        )
        result = summarize(f"trainop behind Kueue {_kueue_version()}", gangs, done)
        result.operator_cpu_seconds = round(ours.cpu_seconds() - cpu0, 1)
        result.operator_peak_rss_mb = round(ours.peak_rss_mb(), 1)
        result.detail = {
            "kueue_cpu_seconds": round(theirs.cpu_seconds() - kcpu0, 1),
            "kueue_peak_rss_mb": round(theirs.peak_rss_mb(), 1),
        }
    finally:
        proc.terminate()
        proc.wait(30)
        kueue.stop()
    client.delete_namespace(ns)
    return result


def _kueue_version() -> str:
    from trainop.cluster.binaries import KUEUE_VERSION

    return KUEUE_VERSION


def _control_plane_rows(ours: dict[str, Any], bare: dict[str, Any]) -> list[str]:
    """The cluster's own CPU seconds during each run: on a 2-core machine the burst is
    bound by the CPU all of them share with the operator."""
    a = (ours.get("detail") or {}).get("control_plane_cpu_seconds")
    b = (bare.get("detail") or {}).get("control_plane_cpu_seconds")
    if not a or not b:
        return []
    return [
        f"| API server CPU s | {a['kube-apiserver']} | {b['kube-apiserver']} | - | - |",
        f"| control plane CPU s (API server, etcd, scheduler, controller-manager, KWOK) "
        f"| {a['total']} | {b['total']} | - | - |",
    ]


def burst(
    nodes: int,
    jobs: int,
    rack: int,
    timeout: float,
    kubeflow: bool = True,
    kill_after: float | None = None,
    kueue: bool = False,
) -> dict[str, Any]:
    lc = cluster_with(nodes, rack, kueue=kueue)
    client = Client(str(lc.kubeconfig))
    gangs = mixed_gangs(jobs)
    bare = run_bare(client, gangs, timeout)
    proc, metrics = start_operator(str(lc.kubeconfig), common.RESULTS / "scale-operator.log")
    try:
        ours = run_operator(client, gangs, timeout, proc.pid, metrics)
    finally:
        proc.terminate()
        proc.wait(30)
    ratio = ours.total_seconds / bare.total_seconds if bare.total_seconds else float("nan")
    killed: dict[str, Any] = {}
    if kill_after is not None:
        _killed(killed, lc, client, gangs, timeout, kill_after)
    out: dict[str, Any] = {
        "nodes": nodes,
        "rack_size": rack,
        "jobs": jobs,
        "pods": ours.pods,
        "baseline": asdict(bare),
        "trainop": asdict(ours),
        "ratio_total": round(ratio, 2),
        **killed,
    }
    if kueue:
        try:
            kq = run_kueue(client, lc, gangs, nodes, timeout)
            out["kueue"] = asdict(kq)
            out["ratio_kueue_total"] = round(kq.total_seconds / bare.total_seconds, 2)
        except Exception as exc:  # no Go toolchain, a failed build: the result says so
            out["kueue_error"] = f"{type(exc).__name__}: {exc}"
    if not kubeflow:
        return out
    try:
        kf = run_kubeflow(client, str(lc.kubeconfig), gangs, timeout)
    except Exception as exc:  # no Go toolchain, a failed build: the result says so
        out["kubeflow_error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["kubeflow"] = asdict(kf)
    out["ratio_kubeflow_total"] = round(kf.total_seconds / bare.total_seconds, 2)
    return out


def _killed(
    out: dict[str, Any], lc: Any, client: Client, gangs: list[Gang], timeout: float, after: float
) -> None:
    try:
        out["killed"] = run_killed(client, str(lc.kubeconfig), gangs, timeout, after)
    except Exception as exc:  # the scenario's own failure is a result, not a crash
        out["killed_error"] = f"{type(exc).__name__}: {exc}"


def _burst_lines(b: dict[str, Any]) -> list[str]:
    lines = [
        f"## Burst: {b['jobs']} TrainingJobs ({b['pods']} pods) on {b['nodes']} nodes",
        "",
        "| Figure | trainop | bare pods + kube-scheduler | Kubeflow training-operator "
        "| trainop behind Kueue |",
        "|---|---|---|---|---|",
    ]
    kf = b.get("kubeflow") or {}
    kq = b.get("kueue") or {}
    for label, k in (
        ("jobs all Running", "completed"),
        ("p50 s", "p50_seconds"),
        ("p99 s", "p99_seconds"),
        ("total s", "total_seconds"),
        ("admissions/s", "admissions_per_second"),
    ):
        lines.append(
            f"| {label} | {b['trainop'][k]} | {b['baseline'][k]} | {kf.get(k, '-')} "
            f"| {kq.get(k, '-')} |"
        )
    t = b["trainop"]
    lines += [
        f"| API writes per job | {t['api_writes_per_job']} | - | - | - |",
        f"| operator CPU s | {t['operator_cpu_seconds']} | - | "
        f"{kf.get('operator_cpu_seconds', '-')} | {kq.get('operator_cpu_seconds', '-')} "
        f"(Kueue {(kq.get('detail') or {}).get('kueue_cpu_seconds', '-')}) |",
        f"| operator peak RSS MB | {t['operator_peak_rss_mb']} | - | "
        f"{kf.get('operator_peak_rss_mb', '-')} | {kq.get('operator_peak_rss_mb', '-')} "
        f"(Kueue {(kq.get('detail') or {}).get('kueue_peak_rss_mb', '-')}) |",
        *_control_plane_rows(t, b["baseline"]),
        "",
        f"Ratio of total time, trainop / bare pods: **{b['ratio_total']}** (target <= 1.5"
        f"{'; operator peak RSS <= 600 MB' if b['nodes'] >= 5000 else ''}); "
        f"Kubeflow / bare pods: **{b.get('ratio_kubeflow_total', '-')}**. API writes per job "
        f"target: <= pods + 5 = {round(b['pods'] / b['jobs'] + 5, 2)}.",
        "",
    ]
    if b.get("kubeflow_error"):
        lines += [f"Kubeflow baseline failed: {b['kubeflow_error']}", ""]
    if kq:
        lines += [f"trainop behind Kueue / bare pods: **{b.get('ratio_kueue_total', '-')}**.", ""]
    if b.get("kueue_error"):
        lines += [f"Kueue column failed: {b['kueue_error']}", ""]
    k = b.get("killed")
    if k:
        a = k["audit"]
        lines += [
            f"Operator killed (SIGKILL) {k['killed_at_seconds']} s into the same burst "
            f"({k['pods_running_at_kill']} pods Running then) and started again: "
            f"{k['completed']} of {k['jobs']} jobs Running after {k['total_seconds']} s "
            f"(p50 {k['p50_seconds']} s); audit: {a['lost_jobs']} lost jobs, "
            f"{a['duplicate_pods']} duplicate pods, {a['broken_gangs']} broken gangs, "
            f"{a['orphan_pods']} orphan pods.",
            "",
        ]
    if b.get("killed_error"):
        lines += [f"Kill scenario failed: {b['killed_error']}", ""]
    return lines
