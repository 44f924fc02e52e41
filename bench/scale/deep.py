"""The deep-queue scenario: a fleet filled by running gangs, jobs queued behind it, the idle
operator, then a quarter of the gangs end and the admissions that follow are timed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.scale import common
from bench.scale.client import Client
from bench.scale.common import GPU
from bench.scale.harness import cluster_with, start_operator
from bench.scale.measure import ProcStat, pct
from bench.scale.workload import Gang, mixed_gangs, training_job


# --- deep queue --------------------------------------------------------------------------------
@dataclass
class DeepResult:
    nodes: int
    rack_size: int
    running_gangs: int
    running_pods: int
    queued_jobs: int
    fill_seconds: float
    idle_cpu_percent: float
    freed_gangs: int
    freed_gpus: int
    admitted_after_free: int
    admission_p50_seconds: float
    admission_p99_seconds: float
    admission_max_seconds: float
    pods_gone_seconds: float  # the freed gangs' pods all deleted, from the delete request
    admitted_before_pods_gone: int
    after_gone_p50_seconds: float  # latency counted from then (0 for those admitted before)
    after_gone_p99_seconds: float
    nofit_while_a_domain_fits: int
    operator_peak_rss_mb: float
    notes: list[str] = field(default_factory=list)


class PhaseWatch:
    """Watches TrainingJobs in a thread: the first moment each was seen in each phase."""

    def __init__(self, client: Client, ns: str) -> None:
        import threading

        self.client, self.ns = client, ns
        self.first: dict[tuple[str, str], float] = {}  # (job, phase) -> monotonic time
        self.last: dict[str, dict[str, Any]] = {}  # job -> its latest status
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _seen(self, job: dict[str, Any]) -> None:
        status = job.get("status") or {}
        self.last[job["metadata"]["name"]] = status
        if status.get("phase"):
            self.first.setdefault((job["metadata"]["name"], status["phase"]), time.monotonic())

    def _run(self) -> None:
        from kubernetes import watch

        args = ("trainop.dev", "v1alpha1", self.ns, "trainingjobs")
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = self.client.custom.list_namespaced_custom_object(*args)
                    for job in listed["items"]:
                        self._seen(job)
                    version = listed["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(
                    self.client.custom.list_namespaced_custom_object,
                    *args,
                    resource_version=version,
                    timeout_seconds=5,
                ):
                    version = event["object"]["metadata"]["resourceVersion"]
                    self._seen(event["object"])
                    if self._stop.is_set():
                        return
            except Exception:  # 410 Gone and the like: list again
                version = None

    def count(self, names: Iterable[str], phases: tuple[str, ...]) -> int:
        return sum(1 for n in names if (self.last.get(n) or {}).get("phase") in phases)

    def stop(self) -> None:
        self._stop.set()


def _fits_somewhere(g: Gang, free_by_rack: dict[str, list[int]]) -> bool:
    """Whether some rack's free GPUs could host the gang, node by node."""
    return any(sum(f // g.gpus for f in frees) >= g.replicas for frees in free_by_rack.values())


def _free_by_rack(client: Client) -> dict[str, list[int]]:
    """Free GPUs per node, grouped by the node's rack label, from the pods bound to it."""
    used: dict[str, int] = {}
    for pod in client.core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name and pod.status.phase in ("Pending", "Running"):
            limits = pod.spec.containers[0].resources.limits or {}
            used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + int(limits.get(GPU, 0))
    out: dict[str, list[int]] = {}
    for node in client.core.list_node().items:
        rack = (node.metadata.labels or {}).get("trainop.dev/rack", "")
        alloc = int((node.status.allocatable or {}).get(GPU, 0))
        out.setdefault(rack, []).append(alloc - used.get(node.metadata.name, 0))
    return out


def _wait_for(what: str, done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(1)
    print(f"[bench] gave up waiting for {what} after {timeout:.0f} s", file=sys.stderr)
    return False


def _fill_and_queue(
    client: Client, ns: str, watch: PhaseWatch, nodes: int, queued: int, timeout: float
) -> tuple[list[Gang], list[Gang], float, list[str]]:
    """Fill the fleet with 8-node gangs, then queue jobs behind them until all are Queued."""
    notes: list[str] = []
    # 32 x 2-GPU pods fill 8 nodes: 2,000 nodes hold 250 such gangs, 8,000 pods.
    fillers = [Gang(f"fill{i:04d}", 32, 2) for i in range(nodes // 8)]
    t0 = time.monotonic()
    client.create_jobs([training_job(g, ns) for g in fillers], ns)
    names = [g.name for g in fillers]
    if not _wait_for(
        "the fillers", lambda: watch.count(names, ("Running",)) == len(names), timeout
    ):
        notes.append(f"only {watch.count(names, ('Running',))} of {len(names)} fillers ran")
    fill_seconds = time.monotonic() - t0
    waiting = [
        Gang(f"q{i:04d}", g.replicas, g.gpus) for i, g in enumerate(mixed_gangs(queued, 5, 8))
    ]
    client.create_jobs([training_job(g, ns) for g in waiting], ns)
    qnames = [g.name for g in waiting]
    if not _wait_for("the queue", lambda: watch.count(qnames, ("Queued",)) == len(qnames), timeout):
        notes.append(f"only {watch.count(qnames, ('Queued',))} of {len(qnames)} jobs Queued")
    time.sleep(10)  # let the last status writes land
    return fillers, waiting, fill_seconds, notes


def _admitted_since(watch: PhaseWatch, names: list[str], start: float) -> dict[str, float]:
    """Job -> seconds from `start` to its first Admitted (or Running) status after it."""
    out = {}
    for n in names:
        seen = [watch.first.get((n, p)) for p in ("Admitted", "Running")]
        after = [t for t in seen if t is not None and t >= start]
        if after:
            out[n] = min(after) - start
    return out


def _pods_gone_after(
    client: Client, ns: str, jobs: list[str], start: float, timeout: float
) -> float:
    """Seconds from `start` until no pod of `jobs` is left: the moment their capacity is
    really free (kube-scheduler and the operator count a terminating pod as holding its GPUs)."""
    selector = f"trainop.dev/job-name in ({','.join(jobs)})"
    deadline = start + timeout
    while time.monotonic() < deadline:
        left = client.core.list_namespaced_pod(ns, label_selector=selector, limit=1).items
        if not left:
            break
        time.sleep(0.5)
    return time.monotonic() - start


def run_deep(
    client: Client, nodes: int, rack: int, queued: int, operator_pid: int, timeout: float
) -> DeepResult:
    """Fill the fleet (2 gangs per 16-node rack), queue `queued` jobs behind it, measure the
    idle operator, then end a quarter of the fillers and time the admissions that follow."""
    for old in client.core.list_namespace().items:  # an interrupted run's gangs hold GPUs
        if old.metadata.name.startswith("bench-deep-"):
            client.delete_namespace(old.metadata.name, wait=True)
    ns = f"bench-deep-{int(time.time()) % 100000}"  # a fresh one: an old run may still go away
    client.ensure_namespace(ns)
    watch = PhaseWatch(client, ns)
    fillers, waiting, fill_seconds, notes = _fill_and_queue(
        client, ns, watch, nodes, queued, timeout
    )
    qnames = [g.name for g in waiting]
    proc = ProcStat(operator_pid)
    cpu0, t1 = proc.cpu_seconds(), time.monotonic()
    time.sleep(60)  # nothing changes: the operator should sleep
    idle = 100 * (proc.cpu_seconds() - cpu0) / (time.monotonic() - t1)
    freed = fillers[: len(fillers) // 4]
    start = time.monotonic()
    for g in freed:
        client.custom.delete_namespaced_custom_object(
            "trainop.dev", "v1alpha1", ns, "trainingjobs", g.name
        )

    gone = _pods_gone_after(client, ns, [g.name for g in freed], start, timeout)
    settled = time.monotonic() + 300
    while time.monotonic() < settled:  # until nothing new for 20 s
        got = _admitted_since(watch, qnames, start)
        if got and time.monotonic() - start > max(got.values()) + 20:
            break
        time.sleep(1)
    lat = list(_admitted_since(watch, qnames, start).values())
    from_gone = [max(0.0, t - gone) for t in lat]
    free = _free_by_rack(client)
    nofit = [
        g
        for g in waiting
        if (watch.last.get(g.name) or {}).get("pendingReason") == "NoFit"
        and _fits_somewhere(g, free)
    ]
    watch.stop()
    result = DeepResult(
        nodes=nodes,
        rack_size=rack,
        running_gangs=len(fillers),
        running_pods=sum(g.replicas for g in fillers),
        queued_jobs=len(waiting),
        fill_seconds=round(fill_seconds, 1),
        idle_cpu_percent=round(idle, 1),
        freed_gangs=len(freed),
        freed_gpus=sum(g.replicas * g.gpus for g in freed),
        admitted_after_free=len(lat),
        admission_p50_seconds=round(pct(lat, 0.5), 2),
        admission_p99_seconds=round(pct(lat, 0.99), 2),
        admission_max_seconds=round(max(lat), 2) if lat else float("nan"),
        pods_gone_seconds=round(gone, 1),
        admitted_before_pods_gone=sum(1 for t in lat if t < gone),
        after_gone_p50_seconds=round(pct(from_gone, 0.5), 2),
        after_gone_p99_seconds=round(pct(from_gone, 0.99), 2),
        nofit_while_a_domain_fits=len(nofit),
        operator_peak_rss_mb=round(proc.peak_rss_mb(), 1),
        notes=notes + [f"NoFit while a rack fits it: {g.name}" for g in nofit[:5]],
    )
    client.delete_namespace(ns, wait=False)
    return result


def deep(nodes: int, queued: int, rack: int, timeout: float) -> dict[str, Any]:
    lc = cluster_with(nodes, rack)
    client = Client(str(lc.kubeconfig))
    proc, _ = start_operator(str(lc.kubeconfig), common.RESULTS / "scale-operator-deep.log")
    try:
        return asdict(run_deep(client, nodes, rack, queued, proc.pid, timeout))
    finally:
        proc.terminate()
        proc.wait(30)


def _deep_lines(d: dict[str, Any]) -> list[str]:
    return [
        f"## Deep queue: {d['queued_jobs']} jobs behind {d['running_gangs']} running gangs "
        f"({d['running_pods']} pods) on {d['nodes']} nodes (racks of {d['rack_size']})",
        "",
        "No baseline: bare pods have no queue to measure.",
        "",
        "| Figure | trainop | target |",
        "|---|---|---|",
        f"| fleet filled (all fillers Running) s | {d['fill_seconds']} | - |",
        f"| operator CPU while nothing changes, % of a core | {d['idle_cpu_percent']} | ~0 |",
        f"| gangs ended / GPUs freed | {d['freed_gangs']} / {d['freed_gpus']} | - |",
        f"| queued jobs admitted after that | {d['admitted_after_free']} | - |",
        f"| admission latency p50 s | {d['admission_p50_seconds']} | - |",
        f"| admission latency p99 s | {d['admission_p99_seconds']} | <= 2 |",
        f"| admission latency max s | {d['admission_max_seconds']} | - |",
        f"| freed gangs' pods all gone after, s | {d.get('pods_gone_seconds', '-')} | - |",
        f"| admitted before that (as capacity freed) | {d.get('admitted_before_pods_gone', '-')} | - |",
        f"| latency from pods gone, p50 / p99 s | {d.get('after_gone_p50_seconds', '-')} / "
        f"{d.get('after_gone_p99_seconds', '-')} | p99 <= 2 |",
        f"| jobs NoFit while a rack fits them | {d['nofit_while_a_domain_fits']} | 0 |",
        f"| operator peak RSS MB | {d['operator_peak_rss_mb']} | <= 300 |",
        "",
        *[f"- {n}" for n in d.get("notes", [])],
        "",
    ]
