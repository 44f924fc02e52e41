"""`make bench-memory`: what the operator's state costs in memory at 2,000 nodes / 8,000 pods.

No API server: the operator's own shell state (`handlers.state.ShellState`) is fed the way
the watches and the reconciles feed it, with bodies shaped as the API server serves them,
in the deep-queue shape of `make bench-scale` (bench.scale.deep `run_deep`):

  nodes   2,000 DGX H100 nodes from the fleet generator the benches use (racks of 16),
          with what a real Node carries besides (managedFields, nodeInfo, addresses,
          images, heartbeating conditions);
  fill    250 gangs of 32 pods x 2 GPUs: the operator's admission cycle admits them, the
          pure reconcile renders their pods (the operator's own manifests), the pods are
          recorded as created (in flight) and then shown by the "watch" as the API server
          returns them (defaults, status, managedFields), 8,000 pods;
  queue   1,000 mixed gangs pending behind them, decided by a few more cycles.

Besides ShellState, it keeps per object what kopf keeps for every object its event
handlers see (a `ResourceMemory` per uid, kopf's own class), so the figure covers both.
Pods are not kopf's any more (handlers.podfeed slims them as they arrive), so from the
run labelled "pod feed" on they have no ResourceMemory.

Three processes, so no run's memory shows in another's RSS: one feeds the state and reports
RSS (now and peak, from /proc and getrusage); one does the same under tracemalloc for its
top 10 allocating lines and the deep size of each part of the state; one times nothing but
traces the start-up listing of every pod into a fresh state, all bodies parsed at once (as
it was) against a page of 500 at a time (KubeApi.list_pages).
Writes bench/results/memory.{json,md} (`--label` names the run: `before` / `after`).
Numbers, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import re
import resource
import subprocess
import sys
import tempfile
import tracemalloc
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.admission import Bench
from bench.scale import RESULTS, Gang, fleet_file, mixed_gangs

from trainop.cluster.fleet import load_fleet, node_manifests
from trainop.handlers.state import ShellState
from trainop.inventory.pods import pod_binding
from trainop.reconcile import reconcile

NS = "bench-deep"
STAMP = "2026-01-01T00:00:00Z"


def fleet(nodes: int, rack: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        return node_manifests(load_fleet(fleet_file(nodes, rack, Path(tmp) / "f.yaml")))


def _managed(manager: str, operation: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": STAMP,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }


def _fields_of(obj: Any) -> Any:
    """A managedFields fieldsV1 tree shaped like `obj` (as the API server writes one)."""
    if isinstance(obj, dict):
        return {f"f:{k}": _fields_of(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return {f'k:{{"name":"{i}"}}': _fields_of(v) for i, v in enumerate(obj)}
    return {}


def served_node(body: dict[str, Any], i: int) -> dict[str, Any]:
    """A fleet node as the API server serves a real kubelet's Node."""
    out = json.loads(json.dumps(body))
    meta, status = out["metadata"], out["status"]
    meta.update(uid=str(uuid.uuid4()), resourceVersion=str(1000 + i), creationTimestamp=STAMP)
    meta["managedFields"] = [_managed("kubelet", "Update", _fields_of(status))]
    status["conditions"] = [
        {
            "type": t,
            "status": "False" if t != "Ready" else "True",
            "reason": f"Kubelet{t}",
            "message": f"kubelet reports {t}",
            "lastHeartbeatTime": STAMP,
            "lastTransitionTime": STAMP,
        }
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    ]
    status["addresses"] = [
        {"type": "InternalIP", "address": f"10.{i // 250}.{i % 250}.1"},
        {"type": "Hostname", "address": meta["name"]},
    ]
    status["nodeInfo"] = {
        "machineID": uuid.uuid4().hex,
        "systemUUID": str(uuid.uuid4()),
        "bootID": str(uuid.uuid4()),
        "kernelVersion": "6.8.0-1015-nvidia",
        "osImage": "Ubuntu 24.04.1 LTS",
        "containerRuntimeVersion": "containerd://2.1.4",
        "kubeletVersion": "v1.36.3",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
    status["images"] = [
        {
            "names": [f"nvcr.io/nvidia/pytorch@sha256:{uuid.uuid4().hex}", f"nvcr.io/img{k}:1"],
            "sizeBytes": 10_000_000_000,
        }
        for k in range(12)
    ]
    return out


def served_pod(rendered: dict[str, Any], uid: str) -> dict[str, Any]:
    """A pod trainop created, as the watch shows it once it runs: the API server's
    defaults, the kubelet's status, managedFields of both writers."""
    pod = json.loads(json.dumps(rendered))
    meta, spec = pod["metadata"], pod["spec"]
    meta.update(uid=uid, resourceVersion="5000", creationTimestamp=STAMP)
    spec.pop("schedulingGates", None)
    binding = pod_binding(rendered)
    if binding is not None:  # kube-scheduler bound it where trainop pinned it
        spec["nodeName"] = binding[1]
    spec.setdefault("restartPolicy", "Never")
    spec.update(
        dnsPolicy="ClusterFirst",
        schedulerName="default-scheduler",
        securityContext=spec.get("securityContext") or {},
        serviceAccountName="default",
        terminationGracePeriodSeconds=30,
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
        priority=0,
    )
    spec.setdefault("tolerations", []).extend(
        {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    )
    spec.setdefault("volumes", []).append(
        {
            "name": "kube-api-access-abcde",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace"}]}},
                ],
            },
        }
    )
    for ctr in spec.get("containers") or []:
        ctr.setdefault("imagePullPolicy", "IfNotPresent")
        ctr.update(terminationMessagePath="/dev/termination-log")
        ctr.setdefault("volumeMounts", []).append(
            {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io"}
        )
    pod["status"] = {
        "phase": "Running",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": STAMP}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
        ]
        + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": STAMP}],
        "hostIP": "10.0.0.1",
        "hostIPs": [{"ip": "10.0.0.1"}],
        "podIP": "10.244.0.7",
        "podIPs": [{"ip": "10.244.0.7"}],
        "startTime": STAMP,
        "qosClass": "Burstable",
        "containerStatuses": [
            {
                "name": ctr["name"],
                "state": {"running": {"startedAt": STAMP}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": ctr.get("image", ""),
                "imageID": f"nvcr.io/nvidia/pytorch@sha256:{uuid.uuid4().hex}",
                "containerID": f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}",
                "started": True,
            }
            for ctr in spec.get("containers") or []
        ],
    }
    meta["managedFields"] = [
        _managed("trainop", "Update", _fields_of({"metadata": meta, "spec": spec})),
        _managed("kubelet", "Update", _fields_of(pod["status"])),
    ]
    return pod


def job_body(g: Gang) -> dict[str, Any]:
    body = {
        "apiVersion": "trainop.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": g.name,
            "namespace": NS,
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": STAMP,
        },
        "spec": {
            "framework": {"name": "pytorch", "version": "2.4"},
            "cuda": "12.4",
            "replicaSpecs": {"Worker": {"replicas": g.replicas, "gpus": g.gpus}},
            "placement": {"topology": "rack", "mode": "Preferred"},
        },
    }
    body["metadata"]["managedFields"] = [_managed("kubectl-create", "Update", _fields_of(body))]
    return body


class KopfMemory:
    """What kopf keeps per object its event handlers saw: a ResourceMemory per uid."""

    def __init__(self) -> None:
        from kopf._core.reactor.inventory import ResourceMemories

        self.memories = ResourceMemories()

    def saw(self, body: dict[str, Any]) -> None:
        asyncio.run(self.memories.recall(body))


def rss_now_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def rss_peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of `obj` and everything it refers to (each object counted once)."""
    seen = set() if seen is None else seen
    stack, total = [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list | tuple | set | frozenset):
            stack.extend(o)
        elif hasattr(o, "__dict__"):
            stack.append(vars(o))
        elif hasattr(o, "__slots__"):
            stack.extend(getattr(o, s) for s in o.__slots__ if hasattr(o, s))
    return total


def _carry_out(
    bench: Bench, kopf_memory: KopfMemory, now: datetime, listed: list[str] | None = None
) -> int:
    """Reconcile each admitted job as the operator does: its status is written, its pods
    are created (in flight), then the watch shows the job and the running pods (and
    `listed` gets each pod's JSON as a listing would send it)."""
    state = bench.state
    pods = 0
    for key, mem in list(state.jobs.items()):
        verdict = mem.verdict
        if verdict is None or not verdict.admission.admitted:
            continue
        body = state.job(key)
        assert body is not None
        acts = reconcile(
            body, [], state.snapshot, bench.config, now, verdict.admission, state.priorities
        )
        written = dict(body, status=acts.status)
        written["metadata"] = dict(body["metadata"], resourceVersion="2")
        state.record_written(key, written)
        created = [o for o in acts.create if o["kind"] == "Pod"]
        for pod in created:
            state.created(pod)
        mem.undecided()
        state.upsert_job(written)
        kopf_memory.saw(written)
        for pod in created:
            served = served_pod(pod, str(uuid.uuid4()))
            state.upsert_pod(served)  # pods reach the state through the pod feed, not kopf
            if listed is not None:
                listed.append(json.dumps(served))
        pods += len(created)
    return pods


def run(nodes: int, fill_gangs: int, queued: int, rack: int, trace: bool) -> dict[str, Any]:
    """Feed the state; with `trace`, tracemalloc follows every allocation (its own records
    inflate RSS several-fold, so RSS is measured by a run without it)."""
    base_rss = rss_now_mb()
    if trace:
        tracemalloc.start(1)
    bodies = [served_node(n, i) for i, n in enumerate(fleet(nodes, rack))]
    kopf_memory = KopfMemory()
    bench = Bench([])
    for body in bodies:
        bench.state.upsert_node(body)
        kopf_memory.saw(body)
    del bodies
    now = datetime.now(UTC).replace(tzinfo=None)
    fillers = [job_body(Gang(f"fill{i:04d}", 32, 2)) for i in range(fill_gangs)]
    for body in fillers:
        bench.state.upsert_job(body)
        kopf_memory.saw(body)
    pods = 0
    for _ in range(20):
        asyncio.run(bench.loop.cycle())
        done = _carry_out(bench, kopf_memory, now)
        pods += done
        if not done:
            break
    waiting = [
        job_body(Gang(f"q{i:04d}", g.replicas, g.gpus))
        for i, g in enumerate(mixed_gangs(queued, 5, 8))
    ]
    for body in waiting:
        bench.state.upsert_job(body)
        kopf_memory.saw(body)
    for _ in range(3):
        asyncio.run(bench.loop.cycle())
    del fillers, waiting  # the bench's own copies: only what the operator keeps is measured
    gc.collect()
    out: dict[str, Any] = {
        "nodes": nodes,
        "pods": len(bench.state.pods),
        "jobs": len(bench.state.jobs),
        "rss_after_imports_mb": base_rss,
        "rss_now_mb": rss_now_mb(),
        "rss_peak_mb": rss_peak_mb(),
    }
    if not trace:
        return out
    traced_now, traced_peak = tracemalloc.get_traced_memory()
    top = tracemalloc.take_snapshot().statistics("lineno")[:10]
    out["traced_now_mb"] = round(traced_now / 2**20, 1)
    out["traced_peak_mb"] = round(traced_peak / 2**20, 1)
    out["top"] = [
        {"where": f"{s.traceback[0].filename}:{s.traceback[0].lineno}", "mb": s.size / 2**20}
        for s in top
    ]
    out["parts_mb"] = _parts(bench.state, kopf_memory, bench.config)
    tracemalloc.stop()
    return out


def listing(nodes: int, fill_gangs: int, rack: int) -> dict[str, float]:
    """The start-up listing of every pod into a fresh state, traced: the pods' JSON is made
    first (untraced, as the API server would send it), then loaded both ways."""
    listed: list[str] = []
    bench = Bench([])
    for i, n in enumerate(fleet(nodes, rack)):
        bench.state.upsert_node(served_node(n, i))
    for i in range(fill_gangs):
        bench.state.upsert_job(job_body(Gang(f"fill{i:04d}", 32, 2)))
    now = datetime.now(UTC).replace(tzinfo=None)
    for _ in range(20):
        asyncio.run(bench.loop.cycle())
        if not _carry_out(bench, KopfMemory(), now, listed):
            break
    del bench
    tracemalloc.start(1)
    out = {how: _listing_peak(listed, how) for how in ("at once", "paged")}
    tracemalloc.stop()
    return out


def _listing_peak(listed: list[str], how: str) -> float:
    """MB allocated at the peak of a fresh state's start-up listing of every pod: all
    bodies parsed before the state takes them (the listing as it was), or a page of 500
    at a time (KubeApi.list_pages)."""
    state = ShellState()
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    if how == "at once":
        state.load("pods", [json.loads(text) for text in listed])
    else:
        for i in range(0, len(listed), 500):
            state.load("pods", [json.loads(text) for text in listed[i : i + 500]])
    return round((tracemalloc.get_traced_memory()[1] - base) / 2**20, 1)


def _parts(state: ShellState, kopf_memory: KopfMemory, config: Any) -> dict[str, float]:
    """Deep size of each part of the state (shared objects counted in the first part)."""
    seen: set[int] = set()
    parts = {
        "nodes (NodeInfo)": state.nodes,
        "node bodies": state.node_bodies,
        "pods": state.pods,
        "in flight": state.inflight,
        "job records": state.jobs,
        "snapshot": state._snapshot,
        "planner memo": getattr(config, "memo", None),
        "kopf memories": kopf_memory.memories,
        "the rest of ShellState": state,
    }
    return {k: round(deep_size(v, seen) / 2**20, 1) for k, v in parts.items()}


def _where(path: str) -> str:
    """A traced file name without the machine's prefixes."""
    for cut in ("/site-packages/", "/operator/", "/bench/"):
        if cut in path:
            return path.split(cut, 1)[1]
    return re.sub(r"^.*/lib/(python3\.\d+)/", r"\1/", path)


def report(label: str, r: dict[str, Any]) -> str:
    rss, traced = r["rss"], r["traced"]
    lines = [
        f"## {label}: {rss['nodes']:,} nodes, {rss['pods']:,} pods, {rss['jobs']:,} TrainingJobs",
        "",
        *([r["note"], ""] if r.get("note") else []),
        f"- RSS (run without tracemalloc): after imports {rss['rss_after_imports_mb']} MB, "
        f"after feeding {rss['rss_now_mb']} MB, peak {rss['rss_peak_mb']} MB",
        f"- tracemalloc (second run): {traced['traced_now_mb']} MB held at the end, "
        f"peak {traced['traced_peak_mb']} MB",
        "",
        "| part of the state | MB (deep size) |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in traced["parts_mb"].items()),
        "",
        *_listing_lines(rss["pods"], r.get("listing")),
        "| tracemalloc top 10 (held at the end) | MB |",
        "|---|---|",
        *(f"| `{_where(t['where'])}` | {t['mb']:.1f} |" for t in traced["top"]),
    ]
    return "\n".join(lines) + "\n"


def _listing_lines(pods: int, peak: dict[str, float] | None) -> list[str]:
    if not peak:
        return []
    return [
        f"Start-up listing of the {pods:,} pods into a fresh state, traced peak: "
        f"{peak['at once']} MB with every body parsed first, {peak['paged']} MB a page "
        "(500) at a time.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--fill-gangs", type=int, default=250, help="gangs of 32 x 2 GPUs")
    ap.add_argument("--queued", type=int, default=1000)
    ap.add_argument("--rack-size", type=int, default=16)
    ap.add_argument("--label", default="after", help="the run's name in memory.md")
    ap.add_argument("--trace", action="store_true", help="this process: the tracemalloc run")
    ap.add_argument("--listing", action="store_true", help="this process: the listing run")
    ap.add_argument("--note", help="what the run measures, shown under its heading")
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    ap.add_argument("--out", default=str(RESULTS / "memory"))
    args = ap.parse_args(argv)
    sizes = (args.nodes, args.fill_gangs, args.queued, args.rack_size)
    if args.trace:
        print(json.dumps(run(*sizes, trace=True)))
        return 0
    if args.listing:
        print(json.dumps(listing(args.nodes, args.fill_gangs, args.rack_size)))
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    saved = out.with_suffix(".json")
    runs = json.loads(saved.read_text()) if saved.exists() else {}
    if not args.report_only:
        rss = run(*sizes, trace=False)
        # The traced run in a fresh process: neither run's memory shows in the other's RSS.
        child = [sys.executable, "-m", "bench.memory", "--trace", *_size_args(args)]
        traced = json.loads(subprocess.run(child, check=True, capture_output=True).stdout)
        child[3] = "--listing"
        listed = json.loads(subprocess.run(child, check=True, capture_output=True).stdout)
        runs[args.label] = {"rss": rss, "traced": traced, "listing": listed}
    if args.note and args.label in runs:
        runs[args.label]["note"] = args.note
    saved.write_text(json.dumps(runs, indent=1) + "\n")
    text = "# bench-memory: the operator's state at the deep-queue size, no API server\n\n"
    text += "Made by `make bench-memory` (bench/memory.py, whose docstring says what it feeds).\n\n"
    text += "\n".join(report(label, r) for label, r in runs.items())
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


def _size_args(args: argparse.Namespace) -> list[str]:
    return [
        f"--nodes={args.nodes}",
        f"--fill-gangs={args.fill_gangs}",
        f"--queued={args.queued}",
        f"--rack-size={args.rack_size}",
    ]


if __name__ == "__main__":
    sys.exit(main())
