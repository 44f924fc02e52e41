"""`make bench-scale`: the operator against bare pods on a large fake fleet, in one run.

Scenarios (each on the local control plane: real kube-apiserver, kube-scheduler, etcd and
KWOK fake nodes; the real operator process with its own metrics):
  burst  A generated fleet (default 1,000 8-GPU H100 nodes, racks of 25) and N TrainingJobs
         of mixed sizes (1-16 x 8 GPUs plus partial-node jobs of 1, 2 or 4 GPUs) created at
         once. Measured: creation -> all pods Running per job (p50, p99) and for the whole
         burst, admissions per second, API writes per job (trainop's client counts its own;
         kopf's finalizer patches and Events are read from the apiserver's request counters),
         operator CPU seconds and peak RSS. Baseline: the same gangs as bare pods, created
         gated by the same client, each gang ungated as soon as its pods exist, and placed
         by kube-scheduler. The ratio operator/baseline is reported. Further columns: the
         same jobs with trainop behind the real Kueue (`externalQueue: kueue`, one Workload
         per job; docs/kueue.md; `--skip-kueue` leaves it out) and as Kubeflow PyTorchJobs.
  gang modes  The same burst on a Kubernetes 1.37 cluster under `gangScheduling: trainop` and
         `gangScheduling: kubernetes` (Workload/PodGroup, kube-scheduler places the gang),
         with placement quality (bench/gang_modes.py; `--skip-gang-modes` leaves it out).
  deep   A fleet filled by running gangs, then M jobs queued behind it; the operator's CPU
         while nothing changes; then a quarter of the running gangs finish and the admission
         latency (capacity freed -> job Admitted, p50/p99) of the jobs that then fit.
Writes bench/results/scale.json, scale.md and scale.png. Numbers, never assertions.
`--smoke` runs a tiny burst against an already running cluster (the integration tier).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

try:  # `python bench/scale.py` puts bench/ on the path; the tests import bench.scale
    import controlplane
    import gang_modes
    import kubeflow_baseline
except ImportError:
    from bench import controlplane, gang_modes, kubeflow_baseline

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SEED = 11
# The bench cluster's name (TRAINOP_BENCH_CLUSTER, or --cluster-name): several may run apart.
CLUSTER = os.environ.get("TRAINOP_BENCH_CLUSTER", "trainop-bench")
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"


# --- the workload ------------------------------------------------------------------------
@dataclass(frozen=True)
class Gang:
    name: str
    replicas: int
    gpus: int  # per replica


def mixed_gangs(count: int, seed: int = SEED, max_nodes: int = 16) -> list[Gang]:
    """The burst's job mix, fixed seed so both policies get the same list: 25% partial-node
    jobs (1, 2 or 4 GPUs), 63% of 1-2 nodes, 10% of 3-6 nodes, 2% of 9-`max_nodes` nodes
    (8 GPUs per node). On average 1.7 nodes a job: 500 jobs need about 86% of 1,000 nodes,
    so the whole burst fits at once and the time to all-Running measures admission alone."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.25:
            out.append(Gang(f"s{i:04d}", 1, rng.choice((1, 2, 4))))
        elif roll < 0.88:
            out.append(Gang(f"s{i:04d}", rng.randint(1, 2), 8))
        elif roll < 0.98:
            out.append(Gang(f"s{i:04d}", rng.randint(3, min(6, max_nodes)), 8))
        else:
            out.append(Gang(f"s{i:04d}", rng.randint(min(9, max_nodes), max_nodes), 8))
    return out


def fleet_file(nodes: int, rack_size: int, path: Path) -> Path:
    racks = (nodes + rack_size - 1) // rack_size
    groups = []
    for r in range(racks):
        count = min(rack_size, nodes - r * rack_size)
        groups.append(
            {
                "class": "h100",
                "count": count,
                "block": f"block-{r // 8}",
                "rack": f"rack-{r:03d}",
                "prefix": f"r{r:03d}",
            }
        )
    doc = {
        "classes": {
            "h100": {
                "gpu": {
                    "product": H100,
                    "count": 8,
                    "memoryMiB": 81559,
                    "family": "hopper",
                    "computeCapability": "9.0",
                },
                "driver": "580.95.05",
                "cudaRuntime": "13.0",
                "rdma": {"resource": "rdma/rdma_shared_device_a", "count": 63},
                "cpu": "224",
                "memory": "2Ti",
                "gfdLabels": "new",
            }
        },
        "groups": groups,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def training_job(g: Gang, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainop.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": g.name, "namespace": ns},
        "spec": {
            "framework": {"name": "pytorch", "version": "2.4"},
            "cuda": "12.4",
            "replicaSpecs": {"Worker": {"replicas": g.replicas, "gpus": g.gpus}},
        },
    }


def bare_pod(g: Gang, index: int, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{g.name}-{index}", "namespace": ns, "labels": {"gang": g.name}},
        "spec": {
            "schedulingGates": [{"name": "bench.trainop.dev/gang"}],
            "tolerations": [{"operator": "Exists"}],
            "nodeSelector": {"nvidia.com/gpu.product": H100},
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {GPU: str(g.gpus)}}}
            ],
        },
    }


# --- a small client --------------------------------------------------------------------------
class Client:
    """kubernetes' Python client with a thread pool: the same for both policies."""

    def __init__(self, kubeconfig: str, workers: int = 16) -> None:
        from kubernetes import client, config

        config.load_kube_config(kubeconfig)
        cfg = client.Configuration.get_default_copy()
        cfg.connection_pool_maxsize = workers
        api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.pool = ThreadPoolExecutor(workers)
        self.kubeconfig = kubeconfig

    def ensure_namespace(self, ns: str) -> None:
        """A fresh, empty namespace: one left by an earlier run is deleted first."""
        from kubernetes.client.rest import ApiException

        self.delete_namespace(ns, wait=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.core.create_namespace({"metadata": {"name": ns}})
                break
            except ApiException as exc:
                if exc.status != 409 or time.monotonic() > deadline:
                    raise
                time.sleep(1)  # still terminating
        while time.monotonic() < deadline:  # the ServiceAccount admission needs it
            if self.core.list_namespaced_service_account(ns).items:
                return
            time.sleep(0.2)

    def delete_namespace(self, ns: str, wait: bool = True) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.core.delete_namespace(ns)
        except ApiException as exc:
            if exc.status != 404:
                raise
        while wait:
            try:
                self.core.read_namespace(ns)
            except ApiException:
                return
            time.sleep(1)

    def pods(self, ns: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(ns).items)

    def jobs(self, ns: str) -> list[dict[str, Any]]:
        out = self.custom.list_namespaced_custom_object(
            "trainop.dev", "v1alpha1", ns, "trainingjobs"
        )
        return list(out["items"])

    def create_jobs(self, bodies: Iterable[dict[str, Any]], ns: str) -> None:
        def one(body: dict[str, Any]) -> None:
            self.custom.create_namespaced_custom_object(
                "trainop.dev", "v1alpha1", ns, "trainingjobs", body
            )

        list(self.pool.map(one, bodies))

    def create_pytorchjobs(self, gangs: list[Gang], ns: str) -> None:
        def one(g: Gang) -> None:
            body = kubeflow_baseline.pytorch_job(g.name, ns, g.replicas, g.gpus)
            self._retry(
                lambda: self.custom.create_namespaced_custom_object(
                    "kubeflow.org", "v1", ns, "pytorchjobs", body
                )
            )

        list(self.pool.map(one, gangs))

    def create_bare_gangs(self, gangs: list[Gang], ns: str) -> None:
        def one(g: Gang) -> None:
            for i in range(g.replicas):
                self._retry(lambda i=i: self.core.create_namespaced_pod(ns, bare_pod(g, i, ns)))
            for i in range(g.replicas):  # the whole gang exists: release it
                self.core.patch_namespaced_pod(
                    f"{g.name}-{i}",
                    ns,
                    [{"op": "replace", "path": "/spec/schedulingGates", "value": []}],
                )

        list(self.pool.map(one, gangs))

    @staticmethod
    def _retry(call: Callable[[], Any], seconds: float = 30.0) -> Any:
        """A new namespace refuses pods until its default ServiceAccount exists."""
        from kubernetes.client.rest import ApiException

        deadline = time.monotonic() + seconds
        while True:
            try:
                return call()
            except ApiException as exc:
                if exc.status != 403 or "service account" not in str(exc.body):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def apiserver_metrics(self) -> str:
        """The API server's /metrics text."""
        api = self.core.api_client
        method, url, headers, _, _ = api.param_serialize(
            "GET", "/metrics", auth_settings=["BearerToken"]
        )
        resp = api.call_api(method, url, headers, _request_timeout=60)
        resp.read()
        return str(resp.data.decode())

    def cost_meter(self, operator_pid: int | None = None) -> controlplane.CostMeter:
        return controlplane.CostMeter(self.apiserver_metrics, self.kubeconfig, operator_pid)

    def apiserver_counts(self) -> dict[str, float]:
        """Requests the apiserver served that only trainop's process makes (kopf's part)."""
        raw = self.apiserver_metrics()
        out = {"trainingjob_patch": 0.0, "event_post": 0.0}
        for line in raw.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels, value = line.rsplit(" ", 1)
            if (
                'resource="trainingjobs"' in labels
                and 'subresource=""' in labels
                and 'verb="PATCH"' in labels
            ):
                out["trainingjob_patch"] += float(value)
            if 'resource="events"' in labels and 'group=""' in labels and 'verb="POST"' in labels:
                out["event_post"] += float(value)
        return out


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
    log = RESULTS / "scale-operator-killed.log"
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
    proc = kubeflow_baseline.start_training_operator(kubeconfig, RESULTS / "scale-kubeflow.log")
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
    log = RESULTS / "scale-operator-kueue.log"
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


# --- a real trace --------------------------------------------------------------------------------
DATA = REPO / "bench" / "data"
# openb GPU models -> GFD product, compute capability, family. G2 and G3 are models the trace
# does not name: they are labelled as Ampere-class data-center GPUs (an assumption, stated in
# the results); the rest are the public models the names say.
OPENB_MODELS = {
    "P100": ("Tesla-P100-PCIE-16GB", "6.0", "pascal", 16384),
    "T4": ("Tesla-T4", "7.5", "turing", 15360),
    "V100M16": ("Tesla-V100-SXM2-16GB", "7.0", "volta", 16384),
    "V100M32": ("Tesla-V100-SXM2-32GB", "7.0", "volta", 32768),
    "A10": ("NVIDIA-A10", "8.6", "ampere", 23028),
    "G2": ("openb-G2", "8.0", "ampere", 40960),
    "G3": ("openb-G3", "8.0", "ampere", 81920),
}


@dataclass(frozen=True)
class TracePod:
    name: str
    gpus: int
    fractional: bool
    model: str
    start: float  # seconds into the replay
    end: float | None


def openb_fleet(path: Path, rack_size: int = 32) -> Path:
    import csv
    import gzip

    with gzip.open(DATA / "openb_nodes.csv.gz", "rt") as f:
        rows = list(csv.DictReader(f))
    classes: dict[str, Any] = {}
    groups = []
    by_class: dict[str, int] = {}
    for row in rows:
        cls = f"{row['model'].lower()}-x{row['gpu']}"
        by_class[cls] = by_class.get(cls, 0) + 1
        product, cc, family, mem = OPENB_MODELS[row["model"]]
        classes[cls] = {
            "gpu": {
                "product": product,
                "count": int(row["gpu"]),
                "memoryMiB": mem,
                "family": family,
                "computeCapability": cc,
            },
            "driver": "550.127.08",
            "cudaRuntime": "12.4",
            "cpu": "96",
            "memory": "512Gi",
            "gfdLabels": "new",
        }
    for cls, count in sorted(by_class.items()):
        for r in range(0, count, rack_size):
            groups.append(
                {
                    "class": cls,
                    "count": min(rack_size, count - r),
                    "block": f"b-{cls}",
                    "rack": f"{cls}-r{r // rack_size}",
                    "prefix": f"{cls}-r{r // rack_size}",
                }
            )
    path.write_text(yaml.safe_dump({"classes": classes, "groups": groups}))
    return path


def openb_pods(limit: int, hours_per_second: float) -> list[TracePod]:
    """The first `limit` GPU pods in arrival order, time compressed (1 s = `hours_per_second` h).
    CPU-only pods are left out; a pod asking for a fraction of a GPU runs as 1 GPU."""
    import csv
    import gzip

    with gzip.open(DATA / "openb_pods.csv.gz", "rt") as f:
        rows = [r for r in csv.DictReader(f) if int(r["num_gpu"]) > 0]
    rows.sort(key=lambda r: int(r["creation_time"]))
    rows = rows[:limit]
    t0 = int(rows[0]["creation_time"])
    scale = 3600.0 * hours_per_second
    out = []
    for r in rows:
        end = (int(r["deletion_time"]) - t0) / scale if r["deletion_time"] else None
        out.append(
            TracePod(
                name=r["name"].replace("openb-pod-", "ob"),
                gpus=int(r["num_gpu"]),
                fractional=int(r["gpu_milli"]) < 1000,
                model=r["gpu_spec"],
                start=(int(r["creation_time"]) - t0) / scale,
                end=end,
            )
        )
    return out


def _trace_job(p: TracePod, ns: str) -> dict[str, Any]:
    body = training_job(Gang(p.name, 1, p.gpus), ns)
    body["spec"].pop("cuda")  # any CUDA: the catalog picks what each GPU model runs
    return body


def replay(
    client: Client,
    pods: list[TracePod],
    ns: str,
    make: Callable[[TracePod], None],
    drop: Callable[[TracePod], None],
    key: Callable[[Any], str],
    tail: float,
) -> dict[str, float]:
    """Create and delete on the trace's clock; returns pod -> seconds from its creation to
    Running (pods deleted before they ran are not in it)."""
    events = sorted(
        [(p.start, 0, p) for p in pods] + [(p.end, 1, p) for p in pods if p.end is not None],
        key=lambda e: (e[0], e[1]),
    )
    created: dict[str, float] = {}
    watcher = RunningWatch(client, ns, key)
    start = time.monotonic()
    try:
        for at, kind, p in events:
            delay = start + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if kind == 0:
                created[p.name] = time.monotonic()
                client.pool.submit(make, p)
            else:
                client.pool.submit(drop, p)
        time.sleep(tail)
    finally:
        watcher.stop()
    out = {}
    # The watch thread may still be delivering: read copies.
    for name, pods_running in list(watcher.pods_of.items()):
        if name in created:
            out[name] = min(watcher.first_running[q] for q in list(pods_running)) - created[name]
    return out


def _trace_summary(policy: str, pods: list[TracePod], lat: dict[str, float]) -> dict[str, Any]:
    values = list(lat.values())
    frac = [lat[p.name] for p in pods if p.fractional and p.name in lat]
    return {
        "policy": policy,
        "pods": len(pods),
        "ran": len(values),
        "fractional_pods": sum(1 for p in pods if p.fractional),
        "p50_seconds": round(pct(values, 0.5), 2),
        "p99_seconds": round(pct(values, 0.99), 2),
        "fractional_p50_seconds": round(pct(frac, 0.5), 2),
    }


def trace(limit: int, hours_per_second: float, timeout: float) -> dict[str, Any]:
    from trainop.cluster.local import LocalCluster

    lc = LocalCluster(name=CLUSTER)
    with tempfile.TemporaryDirectory() as tmp:
        lc.up(str(openb_fleet(Path(tmp) / "fleet.yaml")), wait_seconds=600)
    lc.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    client = Client(str(lc.kubeconfig))
    pods = openb_pods(limit, hours_per_second)
    duration = max((p.end or p.start) for p in pods)
    products = {m: v[0] for m, v in OPENB_MODELS.items()}

    ns = "bench-trace-bare"
    client.ensure_namespace(ns)

    def make_bare(p: TracePod) -> None:
        body = bare_pod(Gang(p.name, 1, p.gpus), 0, ns)
        body["spec"]["nodeSelector"] = (
            {"nvidia.com/gpu.product": products[p.model]} if p.model in products else {}
        )
        with contextlib.suppress(Exception):
            client.core.create_namespaced_pod(ns, body)
            client.core.patch_namespaced_pod(
                f"{p.name}-0", ns, [{"op": "replace", "path": "/spec/schedulingGates", "value": []}]
            )

    def drop_bare(p: TracePod) -> None:
        with contextlib.suppress(Exception):
            client.core.delete_namespaced_pod(f"{p.name}-0", ns, grace_period_seconds=0)

    bare = replay(client, pods, ns, make_bare, drop_bare, lambda q: q.metadata.labels["gang"], 20)
    client.delete_namespace(ns)

    ns = "bench-trace-operator"
    client.ensure_namespace(ns)
    proc, _metrics = start_operator(str(lc.kubeconfig), RESULTS / "scale-operator-trace.log")
    stat = ProcStat(proc.pid)
    cpu0 = stat.cpu_seconds()

    def make_job(p: TracePod) -> None:
        with contextlib.suppress(Exception):
            client.custom.create_namespaced_custom_object(
                "trainop.dev", "v1alpha1", ns, "trainingjobs", _trace_job(p, ns)
            )

    def drop_job(p: TracePod) -> None:
        with contextlib.suppress(Exception):
            client.custom.delete_namespaced_custom_object(
                "trainop.dev", "v1alpha1", ns, "trainingjobs", p.name
            )

    try:
        ours = replay(
            client,
            pods,
            ns,
            make_job,
            drop_job,
            lambda q: q.metadata.labels["trainop.dev/job-name"],
            20,
        )
        cpu, rss = stat.cpu_seconds() - cpu0, stat.peak_rss_mb()
    finally:
        proc.terminate()
        proc.wait(30)
    client.delete_namespace(ns, wait=False)
    return {
        "source": "openb (alibaba/clusterdata cluster-trace-gpu-v2023), CC BY 4.0",
        "nodes": 1213,
        "replay_seconds": round(duration, 1),
        "hours_per_second": hours_per_second,
        "baseline": _trace_summary("bare pods + kube-scheduler", pods, bare),
        "trainop": {
            **_trace_summary("trainop operator", pods, ours),
            "operator_cpu_seconds": round(cpu, 1),
            "operator_peak_rss_mb": round(rss, 1),
        },
    }


# --- the run --------------------------------------------------------------------------------------
def start_operator(
    kubeconfig: str, log: Path, extra: Iterable[str] = ()
) -> tuple[subprocess.Popen[bytes], Callable[[], str]]:
    import urllib.request

    mport, hport = kubeflow_baseline.free_port(), kubeflow_baseline.free_port()
    # TRAINOP_BENCH_PROFILE=DIR: the operator runs under py-spy, which writes its sampled
    # stacks (collapsed, flamegraph.pl's input) there, one file per operator start.
    profile = os.environ.get("TRAINOP_BENCH_PROFILE")
    spy: list[str] = []
    if profile:
        Path(profile).mkdir(parents=True, exist_ok=True)
        out = Path(profile) / f"{log.stem}-{int(time.time())}.txt"
        spy = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw"]
        spy += ["--rate", "100", "--nonblocking", "-o", str(out), "--"]
    # TRAINOP_BENCH_MEMRAY=DIR: the operator runs under memray (aggregated capture; `memray
    # flamegraph` on it shows what was allocated at the peak of its memory).
    memray = os.environ.get("TRAINOP_BENCH_MEMRAY")
    python = [sys.executable]
    if memray:
        Path(memray).mkdir(parents=True, exist_ok=True)
        out = Path(memray) / f"{log.stem}-{int(time.time())}.bin"
        python += ["-m", "memray", "run", "--aggregate", "--force", "-o", str(out)]
    proc = subprocess.Popen(
        [
            *spy,
            *python,
            "-m",
            "trainop.cli.main",
            "run",
            "--metrics-port",
            str(mport),
            "--health-port",
            str(hport),
            *extra,
        ],
        env=dict(os.environ, KUBECONFIG=kubeconfig),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    if spy:  # stop the operator, not py-spy: py-spy writes its file when its target exits
        proc.terminate = lambda: _signal_children(proc.pid, signal.SIGTERM)  # type: ignore[method-assign]
        proc.kill = lambda: _signal_children(proc.pid, signal.SIGKILL)  # type: ignore[method-assign]

    def metrics() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
            return str(r.read().decode())

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            metrics()
            return proc, metrics
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"operator did not start; see {log}")


def _signal_children(pid: int, sig: int) -> None:
    """Signal the processes `pid` started (py-spy's target, the operator)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    for child in children.read_text().split() if children.exists() else ():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(child), sig)


def cluster_with(nodes: int, rack: int, kueue: bool = False) -> Any:
    """The bench cluster; with `kueue`, on the version-stamped API server Kueue needs (a
    separate cluster name, so a plain one is never reused for it)."""
    from trainop.cluster.kueue import cluster_bin_dir
    from trainop.cluster.local import LocalCluster

    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = str(cluster_bin_dir(Path(tmp))) if kueue else None
        lc = LocalCluster(name=f"{CLUSTER}-kueue" if kueue else CLUSTER, bin_dir=bin_dir)
        lc.up(str(fleet_file(nodes, rack, Path(tmp) / "fleet.yaml")), wait_seconds=600)
    lc.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    _wait_established(lc, "crd/trainingjobs.trainop.dev")
    _wait_untainted(lc, 900)
    return lc


def _wait_established(lc: Any, crd: str, tries: int = 10) -> None:
    """kubectl wait on a CRD created a moment ago can fail before the API server has written
    any condition ("<nil> is of the type <nil>"): ask again for a few seconds."""
    for attempt in range(tries):
        try:
            lc.kubectl("wait", "--for", "condition=established", crd)
            return
        except Exception:
            if attempt == tries - 1:
                raise
            time.sleep(1.0)


_STARTUP_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


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


def _wait_untainted(lc: Any, timeout: float) -> None:
    """Wait until the node lifecycle controller has lifted the start-up taints from every
    node. Ready comes first; on a busy machine the taint of a thousand new nodes lingers
    for minutes, and the bare-pod baseline (which tolerates every taint) would get nodes
    that a TrainingJob, rightly, may not use yet."""
    deadline = time.monotonic() + timeout
    tainted = -1
    while time.monotonic() < deadline:
        out = lc.kubectl(
            "get", "nodes", "-o", "jsonpath={range .items[*]}{.spec.taints}{'\\n'}{end}"
        )
        tainted = sum(any(t in line for t in _STARTUP_TAINTS) for line in out.stdout.splitlines())
        if tainted == 0:
            return
        time.sleep(5)
    print(f"bench: {tainted} nodes still carry a start-up taint after {timeout:.0f} s", flush=True)


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
    proc, metrics = start_operator(str(lc.kubeconfig), RESULTS / "scale-operator.log")
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


def deep(nodes: int, queued: int, rack: int, timeout: float) -> dict[str, Any]:
    lc = cluster_with(nodes, rack)
    client = Client(str(lc.kubeconfig))
    proc, _ = start_operator(str(lc.kubeconfig), RESULTS / "scale-operator-deep.log")
    try:
        return asdict(run_deep(client, nodes, rack, queued, proc.pid, timeout))
    finally:
        proc.terminate()
        proc.wait(30)


KUBEFLOW_NOTE = (
    "The burst runs a second baseline: Kubeflow's training-operator v1.8.1, built from the "
    "Go module proxy (bench/kubeflow_baseline.py) and run as a plain process with its upstream "
    "defaults (one controller thread, client QPS 20), the same gangs as PyTorchJobs (a "
    "Master plus Workers) placed by kube-scheduler with no gang scheduler. Outside a pod "
    "its webhook certificates are copied from their Secret into the directory the "
    "kubelet would mount; no webhook configuration is registered, so PyTorchJobs skip "
    "admission validation. Trainer v2 (github.com/kubeflow/trainer/v2 v2.0.0) needs its "
    "JobSet controller as well and was not tried."
)


def write_report(results: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["# make bench-scale", "", f"Machine: {os.cpu_count()} cores. Seed {SEED}.", ""]
    for key in ("burst", "burst_2000"):
        if results.get(key):
            lines += _burst_lines(results[key])
    t = results.get("trace")
    if t:
        lines += [
            f"## Trace replay: openb, {t['trainop']['pods']} GPU pods on {t['nodes']} nodes "
            f"(1 s = {t['hours_per_second']} h, {t['replay_seconds']} s)",
            "",
            f"Source: {t['source']}. Fractional-GPU pods run as 1 GPU and are counted apart "
            f"({t['trainop']['fractional_pods']}). G2/G3 are labelled as Ampere-class GPUs.",
            "",
            "| Figure | trainop | bare pods + kube-scheduler |",
            "|---|---|---|",
        ]
        for label, k in (
            ("pods that ran", "ran"),
            ("p50 s to Running", "p50_seconds"),
            ("p99 s to Running", "p99_seconds"),
            ("fractional pods p50 s", "fractional_p50_seconds"),
        ):
            lines.append(f"| {label} | {t['trainop'][k]} | {t['baseline'][k]} |")
        lines += [
            f"| operator CPU s | {t['trainop']['operator_cpu_seconds']} | - |",
            f"| operator peak RSS MB | {t['trainop']['operator_peak_rss_mb']} | - |",
            "",
        ]
    d = results.get("deep")
    if d:
        lines += _deep_lines(d)
    lines += gang_modes.report_lines(results.get("gang_modes"))
    lines += [
        "## Kubeflow baseline",
        "",
        KUBEFLOW_NOTE,
        "",
    ]
    (RESULTS / "scale.md").write_text("\n".join(lines))
    _plot(results)
    write_costs(results)


def write_costs(results: dict[str, Any]) -> None:
    """bench/results/controlplane.{md,json}: where each burst's control-plane time went."""
    sections = {}
    for key in ("burst", "burst_2000", "burst_5000"):
        b = results.get(key) or {}
        bare = (b.get("baseline") or {}).get("detail", {}).get("cost")
        ours = (b.get("trainop") or {}).get("detail", {}).get("cost")
        if bare and ours:
            title = f"Burst: {b['jobs']} jobs ({b['pods']} pods) on {b['nodes']} nodes"
            sections[title] = {"jobs": b["jobs"], "bare": bare, "trainop": ours}
    if sections:
        controlplane.write(RESULTS / "controlplane.md", sections)


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
        f"Ratio of total time, trainop / bare pods: **{b['ratio_total']}** (target <= 1.5); "
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


def _plot(results: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    b = results.get("burst")
    if not b:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    keys = ["p50_seconds", "p99_seconds", "total_seconds"]
    x = range(len(keys))
    ax.bar([i - 0.2 for i in x], [b["trainop"][k] for k in keys], 0.4, label="trainop")
    ax.bar([i + 0.2 for i in x], [b["baseline"][k] for k in keys], 0.4, label="bare pods")
    ax.set_xticks(list(x), ["p50", "p99", "all Running"])
    ax.set_ylabel("seconds from creation")
    ax.set_title(f"Burst: {b['jobs']} jobs on {b['nodes']} nodes")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "scale.png", dpi=110)


def _set_globals(cluster: str, results: Path) -> None:
    global CLUSTER, RESULTS
    CLUSTER, RESULTS = cluster, results.resolve()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--rack-size", type=int, default=25)
    ap.add_argument("--deep-nodes", type=int, default=2000)
    ap.add_argument("--deep-jobs", type=int, default=1000)
    ap.add_argument("--deep-rack-size", type=int, default=16, help="2 filler gangs per rack")
    ap.add_argument("--skip-deep", action="store_true")
    ap.add_argument("--skip-burst", action="store_true")
    ap.add_argument("--skip-trace", action="store_true")
    ap.add_argument("--skip-kubeflow", action="store_true", help="burst without that baseline")
    ap.add_argument(
        "--skip-gang-modes",
        action="store_true",
        help="no burst on Kubernetes 1.37 with gangScheduling trainop vs kubernetes",
    )
    ap.add_argument(
        "--skip-kueue", action="store_true", help="burst without the trainop-behind-Kueue column"
    )
    ap.add_argument(
        "--burst2-nodes", type=int, default=2000, help="a second burst on this many nodes (0: none)"
    )
    ap.add_argument(
        "--kill-after",
        type=float,
        default=20.0,
        help="in the second burst, SIGKILL the operator this many seconds in, then audit",
    )
    ap.add_argument("--trace-pods", type=int, default=2000)
    ap.add_argument("--trace-hours-per-second", type=float, default=24.0)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--cluster-name", default=CLUSTER, help="the bench cluster's name")
    ap.add_argument("--results", type=Path, default=RESULTS, help="where results go")
    args = ap.parse_args(argv)
    _set_globals(args.cluster_name, args.results)
    RESULTS.mkdir(parents=True, exist_ok=True)  # operator logs go there from the start
    results: dict[str, Any] = {"seed": SEED, "kubeflow": KUBEFLOW_NOTE}
    if (RESULTS / "scale.json").is_file():  # keep the scenarios this run skips
        results.update(json.loads((RESULTS / "scale.json").read_text()))
    if not args.skip_burst:
        results["burst"] = burst(
            args.nodes,
            args.jobs,
            args.rack_size,
            args.timeout,
            kubeflow=not args.skip_kubeflow,
            kueue=not args.skip_kueue,
        )
        write_report(results)
    if not args.skip_gang_modes:
        try:
            results["gang_modes"] = gang_modes.run(
                args.nodes, args.jobs, args.rack_size, args.timeout
            )
        except Exception as exc:  # 1.37 not built or not buildable here: the result says so
            results["gang_modes"] = {"error": f"{type(exc).__name__}: {exc}"}
        write_report(results)
    if args.burst2_nodes:
        results["burst_2000"] = burst(
            args.burst2_nodes,
            args.jobs,
            args.rack_size,
            args.timeout,
            kubeflow=not args.skip_kubeflow,
            kill_after=args.kill_after,
        )
        write_report(results)
    if not args.skip_trace:
        results["trace"] = trace(args.trace_pods, args.trace_hours_per_second, args.timeout)
        write_report(results)
    if not args.skip_deep:
        results["deep"] = deep(args.deep_nodes, args.deep_jobs, args.deep_rack_size, args.timeout)
        write_report(results)
    print((RESULTS / "scale.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
