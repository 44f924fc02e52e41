"""`make bench-scale`'s gang-modes scenario: the same burst under both values of the operator
config's `gangScheduling`, side by side on one Kubernetes 1.37 cluster (GenericWorkload on;
`trainop cluster up --kubernetes 1.37`, docs/gang-kubernetes.md).

  trainop     trainop places each gang itself (pinned, gated pods released whole);
  kubernetes  trainop hands each gang over as a Workload + PodGroup and kube-scheduler's
              GangScheduling plugin holds, places and binds it.

Measured per mode: creation -> all pods Running per job (p50, p99, whole burst), operator
CPU and peak RSS, and placement quality: of the gangs that span several nodes, the share
that sits in one rack and the mean racks per such gang (trainop packs by topology; the
upstream mode packs a gang into one domain only for a Required topology, which the burst's
jobs do not set). A bare-pod baseline runs on the same cluster. Numbers, never assertions.
`bench.scale`'s command line calls `run` and `report_lines`; the package supplies the
workload, the client, the operator start and the burst's timing (`_scale()`).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.scale import common

MODES = ("trainop", "kubernetes")
RACK = "trainop.dev/rack"


def _scale() -> ModuleType:
    """The package, read at use (its scenarios import this module)."""
    from bench import scale

    return scale


def _cluster(nodes: int, rack: int) -> Any:
    from trainop.cluster.local import LocalCluster

    s = _scale()
    lc = LocalCluster(name="trainop-bench-k137", kubernetes="1.37")
    with tempfile.TemporaryDirectory() as tmp:
        lc.up(str(s.fleet_file(nodes, rack, Path(tmp) / "fleet.yaml")), wait_seconds=600)
    lc.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(s.REPO / "crds"))
    established(lc)
    s._wait_untainted(lc, 900)
    return lc


def established(lc: Any, timeout: float = 60) -> None:
    """Wait for the TrainingJob CRD. Polled: `kubectl wait` fails at once ("accessor error")
    while a new CRD's status.conditions is still null."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = lc.kubectl(
            "wait", "--for", "condition=established", "crd/trainingjobs.trainop.dev", check=False
        )
        if proc.returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"CRD trainingjobs.trainop.dev not Established in {timeout:.0f} s")


def placement_quality(pods: list[Any], rack_of: dict[str, str]) -> dict[str, Any]:
    """Of the jobs whose pods span several nodes: how many sit in one rack, mean racks."""
    nodes: dict[str, set[str]] = {}
    for p in pods:
        job = (p.metadata.labels or {}).get("trainop.dev/job-name")
        if job and p.spec.node_name:
            nodes.setdefault(job, set()).add(p.spec.node_name)
    spans = [len({rack_of.get(n, n) for n in ns}) for ns in nodes.values() if len(ns) > 1]
    if not spans:
        return {"multi_node_gangs": 0}
    return {
        "multi_node_gangs": len(spans),
        "in_one_rack_pct": round(100 * sum(1 for s in spans if s == 1) / len(spans), 1),
        "mean_racks": round(statistics.fmean(spans), 2),
    }


def _burst(
    client: Any, gangs: list[Any], timeout: float, pid: int, rack_of: dict[str, str], mode: str
) -> dict[str, Any]:
    s = _scale()
    ns = f"bench-gang-{mode}"
    client.ensure_namespace(ns)
    proc = s.ProcStat(pid)
    cpu0 = proc.cpu_seconds()
    start = time.monotonic()
    client.create_jobs([s.training_job(g, ns) for g in gangs], ns)
    label: Callable[[Any], str] = lambda p: p.metadata.labels["trainop.dev/job-name"]  # noqa: E731
    done = s.wait_running(client, ns, gangs, label, start, timeout)
    result = s.summarize(f"trainop, gangScheduling {mode}", gangs, done)
    result.operator_cpu_seconds = round(proc.cpu_seconds() - cpu0, 1)
    result.operator_peak_rss_mb = round(proc.peak_rss_mb(), 1)
    out = {**asdict(result), "placement": placement_quality(client.pods(ns), rack_of)}
    client.delete_namespace(ns)
    return out


def run(nodes: int, jobs: int, rack: int, timeout: float) -> dict[str, Any]:
    """The burst of `jobs` mixed gangs on `nodes` nodes: bare pods, then each mode."""
    s = _scale()
    lc = _cluster(nodes, rack)
    client = s.Client(str(lc.kubeconfig))
    rack_of = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(RACK, "")
        for n in lc.get_json("nodes")["items"]
    }
    gangs = s.mixed_gangs(jobs)
    out: dict[str, Any] = {"nodes": nodes, "jobs": jobs, "rack_size": rack}
    out["baseline"] = asdict(s.run_bare(client, gangs, timeout))
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            cfg = Path(tmp) / f"{mode}.yaml"
            cfg.write_text(f"gangScheduling: {mode}\n")
            log = common.RESULTS / f"scale-operator-gang-{mode}.log"
            proc, _metrics = s.start_operator(str(lc.kubeconfig), log, ["--config", str(cfg)])
            try:
                out[mode] = _burst(client, gangs, timeout, proc.pid, rack_of, mode)
            finally:
                proc.terminate()
                proc.wait(30)
    return out


def report_lines(g: dict[str, Any] | None) -> list[str]:
    """The scale.md section of the gang-modes scenario (nothing when it did not run)."""
    if not g:
        return []
    if g.get("error"):
        return ["## Gang modes (Kubernetes 1.37)", "", f"Not run: {g['error']}", ""]
    t, k, b = g["trainop"], g["kubernetes"], g["baseline"]
    pt, pk = t["placement"], k["placement"]
    lines = [
        f"## Gang modes: {g['jobs']} jobs on {g['nodes']} nodes, Kubernetes 1.37 "
        f"(racks of {g['rack_size']})",
        "",
        "| Figure | gangScheduling trainop | gangScheduling kubernetes | bare pods |",
        "|---|---|---|---|",
    ]
    for label, key in (("p50 s to Running", "p50_seconds"), ("p99 s", "p99_seconds")):
        lines.append(f"| {label} | {t[key]} | {k[key]} | {b[key]} |")
    lines += [
        f"| whole burst s | {t['total_seconds']} | {k['total_seconds']} | {b['total_seconds']} |",
        f"| operator CPU s | {t['operator_cpu_seconds']} | {k['operator_cpu_seconds']} | - |",
        f"| operator peak RSS MB | {t['operator_peak_rss_mb']} | {k['operator_peak_rss_mb']} | - |",
        f"| multi-node gangs in one rack % | {pt.get('in_one_rack_pct', '-')} | "
        f"{pk.get('in_one_rack_pct', '-')} | - |",
        f"| racks per multi-node gang | {pt.get('mean_racks', '-')} | "
        f"{pk.get('mean_racks', '-')} | - |",
        "",
    ]
    return lines
