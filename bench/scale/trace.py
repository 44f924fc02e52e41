"""The trace scenario: openb (alibaba/clusterdata cluster-trace-gpu-v2023) GPU pods replayed
on a fleet of its nodes, as bare pods and as one-pod TrainingJobs.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from bench.scale import common
from bench.scale.client import Client
from bench.scale.harness import start_operator
from bench.scale.measure import ProcStat, RunningWatch, pct
from bench.scale.workload import Gang, bare_pod, training_job

# --- a real trace --------------------------------------------------------------------------------
DATA = common.REPO / "bench" / "data"
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

    lc = LocalCluster(name=common.CLUSTER)
    with tempfile.TemporaryDirectory() as tmp:
        lc.up(str(openb_fleet(Path(tmp) / "fleet.yaml")), wait_seconds=600)
    lc.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(common.REPO / "crds"))
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
    proc, _metrics = start_operator(str(lc.kubeconfig), common.RESULTS / "scale-operator-trace.log")
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


def trace_lines(t: dict[str, Any] | None) -> list[str]:
    """The scale.md section of the trace scenario (nothing when it did not run)."""
    if not t:
        return []
    lines: list[str] = []
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
    return lines
