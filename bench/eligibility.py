"""`make bench-eligibility`: gang-aware image choice on a 1,024-node mixed fleet, vs a per-node baseline.

Workload: 4 blocks x 16 racks x 16 nodes (`--nodes N`: N // 256 blocks, e.g. 5,120 for
issue #36's 5,000); each rack is one kind of node (H100 R580, A100 R550, A100 R535, V100
R535, T4 R470, L40S R570, and the 2025-2026 catalog's B200 and B300 on R580 and arm64
GH200 on R580; every sixth rack time-sliced), half of the GPUs busy. A fixed list of jobs (PyTorch / TensorFlow / MXNet, with and without a CUDA
floor, 1..48 nodes; some too large to fit, which makes the chooser try every release) is
planned by
  - trainop: `planner.plan_job`, i.e. `eligibility.choose_and_place` (verdicts once per node
    class and release, releases no class runs skipped, identical eligible sets placed once);
  - baseline: the same search order with a per-node `check_node` for every node, release
    and mode, and a placement attempt for every (release, mode).
Both must pick the same image and nodes (checked). Measured per policy: planning latency
(median, p99, max), `check_node` calls and placement attempts per job. Writes
bench/results/eligibility.json and eligibility.png. Numbers, not assertions.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trainop.eligibility as elig
from trainop.catalog import check_node
from trainop.catalog.compat import MODES
from trainop.inventory import Snapshot, build_snapshot
from trainop.placement import Placement, place
from trainop.planner import (
    OperatorConfig,
    Plan,
    Wait,
    candidates,
    gang_request,
    parse_spec,
    plan_job,
)

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = [
    ("NVIDIA-H100-80GB-HBM3", "9", "0", "580.65.06"),
    ("NVIDIA-A100-SXM4-80GB", "8", "0", "550.54.15"),
    ("NVIDIA-A100-SXM4-80GB", "8", "0", "535.104.05"),
    ("Tesla-V100-SXM2-32GB", "7", "0", "535.104.05"),
    ("Tesla-T4", "7", "5", "470.57.02"),
    ("NVIDIA-L40S", "8", "9", "570.86.10"),
    ("NVIDIA-B200", "10", "0", "580.95.05"),
    ("NVIDIA-B300-SXM6-AC", "10", "3", "580.126.20"),
    ("NVIDIA-GH200-480GB", "9", "0", "580.95.05"),  # arm64: no NGC image until confirmed
]
ARM64 = {"NVIDIA-GH200-480GB"}
CONFIG = OperatorConfig()


def fleet(blocks: int = 4) -> list[dict[str, Any]]:
    nodes = []
    for b in range(blocks):
        for r in range(16):
            product, cmaj, cmin, driver = KINDS[(b * 16 + r) % len(KINDS)]
            shared = (b * 16 + r) % 6 == 5
            for n in range(16):
                name = f"b{b}-r{r:02d}-n{n:02d}"
                labels = {
                    "kubernetes.io/hostname": name,
                    "trainop.dev/rack": f"b{b}-r{r:02d}",
                    "trainop.dev/block": f"b{b}",
                    "nvidia.com/gpu.product": product + ("-SHARED" if shared else ""),
                    "nvidia.com/gpu.compute.major": cmaj,
                    "nvidia.com/gpu.compute.minor": cmin,
                    "nvidia.com/cuda.driver-version.full": driver,
                    "nvidia.com/cuda.driver-version.major": driver.split(".")[0],
                    "kubernetes.io/arch": "arm64" if product in ARM64 else "amd64",
                }
                if shared:
                    labels["nvidia.com/gpu.replicas"] = "4"
                nodes.append(
                    {
                        "metadata": {"name": name, "labels": labels},
                        "status": {
                            "allocatable": {"nvidia.com/gpu": "32" if shared else "8"},
                            "conditions": [{"type": "Ready", "status": "True"}],
                        },
                    }
                )
    return nodes


def busy(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Half the nodes fully used (every other node), so big gangs must span racks."""
    pods = []
    for i, n in enumerate(nodes):
        if i % 2:
            continue
        pods.append(
            {
                "metadata": {"name": f"p{i}", "namespace": "x"},
                "spec": {
                    "nodeName": n["metadata"]["name"],
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                },
                "status": {"phase": "Running"},
            }
        )
    return pods


def jobs() -> list[dict[str, Any]]:
    shapes = [
        ("pytorch", None, 2, "rack"),
        ("pytorch", "12.4", 4, "rack"),
        ("pytorch", "13.0", 8, "rack"),
        ("pytorch", None, 16, "block"),
        ("pytorch", "12.1", 48, "block"),
        ("tensorflow", None, 2, "rack"),
        ("tensorflow", "12.4", 8, "block"),
        ("pytorch", "12.8", 1, "node"),
        ("jax", None, 4, "rack"),
        ("pytorch", None, 200, "block"),
        ("pytorch", "13.0", 40, "rack"),
        ("tensorflow", None, 64, "block"),
    ]
    out = []
    for i, (fw, cuda, workers, topo) in enumerate(shapes):
        spec: dict[str, Any] = {
            "framework": {"name": fw},
            "replicaSpecs": {"Worker": {"replicas": workers, "gpus": 8}},
            "placement": {"topology": topo, "mode": "Required"},
        }
        if cuda:
            spec["cuda"] = cuda
        out.append(
            {
                "apiVersion": "trainop.dev/v1alpha1",
                "kind": "TrainingJob",
                "metadata": {"name": f"j{i}", "namespace": "ns", "uid": f"u{i}"},
                "spec": spec,
            }
        )
    return out


def baseline(body: dict[str, Any], snapshot: Snapshot) -> tuple[str, tuple[str, ...]] | None:
    """Same search order, no node classes, no early cut, no memo."""
    spec = parse_spec(body)
    cands = candidates(spec, CONFIG)
    images = elig._ordered(cands)
    shared = frozenset(n.name for n in snapshot.nodes if n.gpu.shared)
    for tier in range(len(MODES)):
        for image in images:
            verdicts = {
                n.name: check_node(
                    CONFIG.catalog, n.gpu, image.cuda, image.release, archs=image.archs
                ).rank
                for n in snapshot.nodes
            }

            def ok(node: Any, v: dict[str, int] = verdicts, t: int = tier) -> str | None:
                return None if v[node.name] <= t and node.name not in shared else "no"

            result = place(snapshot, gang_request(spec, "j", ok, image.image))
            if isinstance(result, Placement):
                return image.image, result.nodes
    return None


def trainop(body: dict[str, Any], snapshot: Snapshot) -> tuple[str, tuple[str, ...]] | None:
    result = plan_job(body, snapshot, CONFIG)
    if isinstance(result, Plan):
        return result.image.image, result.placement.nodes
    assert isinstance(result, Wait)
    return None


Policy = Callable[[dict[str, Any], Snapshot], tuple[str, tuple[str, ...]] | None]


def measure(policy: Policy, snapshot: Snapshot, reps: int = 3) -> dict[str, Any]:
    counts = {"check_node": 0, "place": 0}
    real_check, real_place = elig.check_node, elig.place
    glob = sys.modules[__name__].__dict__

    def counting(fn: Callable[..., Any], key: str) -> Callable[..., Any]:
        def wrapped(*a: Any, **k: Any) -> Any:
            counts[key] += 1
            return fn(*a, **k)

        return wrapped

    elig.check_node, elig.place = counting(real_check, "check_node"), counting(real_place, "place")
    glob["check_node"], glob["place"] = elig.check_node, elig.place
    try:
        latencies, outcomes = [], []
        for body in jobs():
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                out = policy(body, snapshot)
                best = min(best, time.perf_counter() - t0)
            latencies.append(best)
            outcomes.append(out)
    finally:
        elig.check_node, elig.place = real_check, real_place
        glob["check_node"], glob["place"] = real_check, real_place
    lat = sorted(latencies)
    n = len(lat) * reps
    return {
        "latency_ms_median": round(statistics.median(lat) * 1000, 2),
        "latency_ms_max": round(lat[-1] * 1000, 2),
        "check_node_calls_per_job": round(counts["check_node"] / n, 1),
        "placement_attempts_per_job": round(counts["place"] / n, 1),
        "placed": sum(o is not None for o in outcomes),
        "_outcomes": outcomes,
    }


def main() -> int:
    blocks = 4
    if "--nodes" in sys.argv:
        blocks = max(1, int(sys.argv[sys.argv.index("--nodes") + 1]) // 256)
    nodes = fleet(blocks)
    snapshot = build_snapshot(nodes, busy(nodes), levels=CONFIG.topology_levels)
    report: dict[str, Any] = {"nodes": len(nodes), "jobs": len(jobs()), "policies": {}}
    for name, policy in (("trainop", trainop), ("per-node baseline", baseline)):
        report["policies"][name] = measure(policy, snapshot)
    a = report["policies"]["trainop"].pop("_outcomes")
    b = report["policies"]["per-node baseline"].pop("_outcomes")
    report["same_decisions"] = a == b
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "eligibility.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return 0
    keys = [
        ("latency_ms_median", "planning latency, median ms"),
        ("check_node_calls_per_job", "check_node calls per job"),
        ("placement_attempts_per_job", "placement attempts per job"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    names = list(report["policies"])
    for ax, (key, title) in zip(axes, keys, strict=True):
        ax.bar(names, [report["policies"][p][key] for p in names], color=["C0", "C1"])
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"{len(nodes)} nodes, {report['jobs']} jobs", fontsize=9)
    fig.tight_layout()
    fig.savefig(RESULTS / "eligibility.png", dpi=110)
    print(f"wrote {RESULTS / 'eligibility.json'} and eligibility.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
