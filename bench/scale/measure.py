"""Measuring a burst: one pod watch that records when each pod first ran, per-gang times,
process CPU and RSS, the summary of a run, the cluster processes' CPU.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.scale import controlplane
from bench.scale.client import Client
from bench.scale.workload import Gang


# --- measuring ---------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


class RunningWatch:
    """Watches the pods of a namespace in a thread and records when each first ran, so the
    measurement is one watch stream, not lists that load the apiserver it measures."""

    def __init__(self, client: Client, ns: str, key: Callable[[Any], str]) -> None:
        import threading

        self.client, self.ns, self.key = client, ns, key
        self.first_running: dict[str, float] = {}  # pod name -> monotonic time
        self.pods_of: dict[str, set[str]] = {}  # key -> running pod names
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _seen(self, pod: Any) -> None:
        if pod.status.phase != "Running":
            return
        self.first_running.setdefault(pod.metadata.name, time.monotonic())
        self.pods_of.setdefault(self.key(pod), set()).add(pod.metadata.name)

    def _run(self) -> None:
        from kubernetes import watch

        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = self.client.core.list_namespaced_pod(self.ns)
                    for pod in listed.items:
                        self._seen(pod)
                    version = listed.metadata.resource_version
                for event in watch.Watch().stream(
                    self.client.core.list_namespaced_pod,
                    self.ns,
                    resource_version=version,
                    timeout_seconds=5,
                ):
                    version = event["object"].metadata.resource_version
                    self._seen(event["object"])
                    if self._stop.is_set():
                        return
            except Exception:  # 410 Gone and the like: list again
                version = None

    def stop(self) -> None:
        self._stop.set()


def wait_running(
    client: Client,
    ns: str,
    gangs: list[Gang],
    key: Callable[[Any], str],
    start: float,
    timeout: float,
) -> dict[str, float]:
    """Gang name -> seconds from `start` until all its pods were Running."""
    watcher = RunningWatch(client, ns, key)
    want = {g.name: g.replicas for g in gangs}
    done: dict[str, float] = {}
    try:
        while len(done) < len(want) and time.monotonic() < start + timeout:
            for g, n in want.items():
                pods = list(watcher.pods_of.get(g, ()))  # a copy: the watch thread adds
                if g not in done and len(pods) >= n:
                    done[g] = max(watcher.first_running[p] for p in pods) - start
            time.sleep(0.2)
    finally:
        watcher.stop()
    return done


@dataclass
class ProcStat:
    pid: int

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")


def metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith(name + "_created"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass
class BurstResult:
    policy: str
    jobs: int
    pods: int
    completed: int
    p50_seconds: float
    p99_seconds: float
    total_seconds: float
    admissions_per_second: float
    api_writes_per_job: float | None = None
    operator_cpu_seconds: float | None = None
    operator_peak_rss_mb: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def summarize(policy: str, gangs: list[Gang], done: dict[str, float]) -> BurstResult:
    times = list(done.values())
    total = max(times) if len(done) == len(gangs) and times else float("nan")
    return BurstResult(
        policy=policy,
        jobs=len(gangs),
        pods=sum(g.replicas for g in gangs),
        completed=len(done),
        p50_seconds=round(pct(times, 0.5), 2),
        p99_seconds=round(pct(times, 0.99), 2),
        total_seconds=round(total, 2),
        admissions_per_second=round(len(done) / total, 1) if total == total and total else 0.0,
    )


_CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kwok")


def control_plane_cpu(kubeconfig: str) -> dict[str, float]:
    """CPU seconds so far of the bench cluster's own processes, by binary (from kwokctl's
    pid files of the cluster the kubeconfig names)."""
    pids = controlplane.cluster_pids(controlplane.cluster_dir(kubeconfig))
    cpu = controlplane.process_cpu(pids)
    return {name.removesuffix("-controller"): v for name, v in cpu.items()}


def _cpu_since(kubeconfig: str, before: dict[str, float]) -> dict[str, float]:
    after = control_plane_cpu(kubeconfig)
    used = {k: round(after.get(k, 0.0) - before.get(k, 0.0), 1) for k in _CONTROL_PLANE}
    used["total"] = round(sum(used.values()), 1)
    return used
