"""`make bench`: topology-aware gang placement vs a first-fit baseline, side by side in one run.

Workload: a synthetic fleet (blocks x racks x 8-GPU nodes) is filled by a stream of gangs
(1..16 nodes x 8 GPUs, fixed seed) that arrive and finish; each gang is placed by
  - trainop: `trainop.placement.place` (smallest domain first, best fit), and
  - baseline: first fit over nodes in name order, ignoring topology (what a scheduler that
    only counts free GPUs does).
Measured per policy: placement latency (median, p99), racks spanned per gang (mean), the
share of multi-node gangs kept inside one rack, and gangs rejected while GPUs were free.
Writes bench/results/placement-latency.json and placement-latency.png (`make bench-placement`
writes placement.json). Numbers, not
assertions: nothing here fails a build.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainop.inventory import Snapshot, build_snapshot
from trainop.placement import Assignment, GangRequest, GroupRequest, Placement, place

RESULTS = Path(__file__).resolve().parent / "results"
SEED = 7


def fleet(blocks: int, racks_per_block: int, nodes_per_rack: int) -> list[dict[str, Any]]:
    nodes = []
    for b in range(blocks):
        for r in range(racks_per_block):
            for n in range(nodes_per_rack):
                name = f"b{b}-r{r}-n{n:02d}"
                nodes.append(
                    {
                        "metadata": {
                            "name": name,
                            "labels": {
                                "kubernetes.io/hostname": name,
                                "trainop.dev/rack": f"b{b}-r{r}",
                                "trainop.dev/block": f"b{b}",
                                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                "nvidia.com/gpu.count": "8",
                            },
                        },
                        "status": {
                            "allocatable": {"nvidia.com/gpu": "8"},
                            "conditions": [{"type": "Ready", "status": "True"}],
                        },
                    }
                )
    return nodes


def first_fit(snapshot: Snapshot, request: GangRequest) -> Placement | None:
    """The baseline: fill nodes in name order, no notion of racks."""
    free = {n.name: n.gpus_free for n in snapshot.nodes if n.schedulable}
    out: list[Assignment] = []
    rank = 0
    for group in request.groups:
        for i in range(group.replicas):
            node = next((name for name, f in free.items() if f >= group.gpus), None)
            if node is None:
                return None
            free[node] -= group.gpus
            out.append(
                Assignment(group.role, i, node, rank, snapshot.node(node).topology, group.gpus)
            )
            rank += 1
    return Placement(tuple(out), "cluster", (), {}, 0.0, "first fit")  # type: ignore[arg-type]


Policy = Callable[[Snapshot, GangRequest], Placement | None]


def trainop_policy(snapshot: Snapshot, request: GangRequest) -> Placement | None:
    result = place(snapshot, request)
    return result if isinstance(result, Placement) else None


def run(
    policy: Policy, nodes: list[dict[str, Any]], arrivals: list[tuple[int, int]]
) -> dict[str, Any]:
    snapshot = build_snapshot(nodes)
    racks: dict[str, str] = {
        n["metadata"]["name"]: n["metadata"]["labels"]["trainop.dev/rack"] for n in nodes
    }
    running: list[tuple[int, Placement]] = []
    latencies, spans, rejected_with_room, placed = [], [], 0, 0
    for step, (size, duration) in enumerate(arrivals):
        for done in [r for r in running if r[0] <= step]:
            snapshot = snapshot.with_released(done[1].assignments)
            running.remove(done)
        request = GangRequest(f"j{step}", (GroupRequest("Worker", size, 8),), "rack", "Preferred")
        t0 = time.perf_counter()
        result = policy(snapshot, request)
        latencies.append(time.perf_counter() - t0)
        if result is None:
            rejected_with_room += int(snapshot.gpus_free >= size * 8)
            continue
        placed += 1
        snapshot = snapshot.with_reserved(result.assignments)
        running.append((step + duration, result))
        if size > 1:
            spans.append(len({racks[a.node] for a in result.assignments if a.node}))
    lat = sorted(latencies)
    return {
        "placed": placed,
        "rejected_with_free_gpus": rejected_with_room,
        "latency_ms_median": round(statistics.median(lat) * 1000, 3),
        "latency_ms_p99": round(lat[int(len(lat) * 0.99) - 1] * 1000, 3),
        "racks_per_multinode_gang_mean": round(statistics.mean(spans), 3) if spans else 0,
        "multinode_gangs_in_one_rack": round(sum(1 for s in spans if s == 1) / len(spans), 3)
        if spans
        else 0,
    }


def main() -> int:
    rng = random.Random(SEED)
    sizes = [1, 1, 2, 2, 4, 4, 8, 16]
    arrivals = [(rng.choice(sizes), rng.randint(5, 40)) for _ in range(600)]
    scenarios = {
        "64 nodes (2x4 racks of 8)": fleet(2, 4, 8),
        "256 nodes (4x8 racks of 8)": fleet(4, 8, 8),
    }
    report: dict[str, Any] = {"seed": SEED, "gangs": len(arrivals), "scenarios": {}}
    for label, nodes in scenarios.items():
        report["scenarios"][label] = {
            "trainop": run(trainop_policy, nodes, arrivals),
            "first-fit baseline": run(first_fit, nodes, arrivals),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "placement-latency.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return 0
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    metrics = [
        ("racks_per_multinode_gang_mean", "racks per multi-node gang (lower is better)"),
        ("multinode_gangs_in_one_rack", "multi-node gangs inside one rack (share)"),
        ("latency_ms_median", "placement latency, median ms"),
    ]
    labels = list(scenarios)
    for ax, (key, title) in zip(axes, metrics, strict=True):
        xs = range(len(labels))
        for offset, policy in ((-0.2, "trainop"), (0.2, "first-fit baseline")):
            ax.bar(
                [x + offset for x in xs],
                [report["scenarios"][s][policy][key] for s in labels],
                0.4,
                label=policy,
            )
        ax.set_xticks(list(xs), [s.split(" (")[0] for s in labels])
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "placement-latency.png", dpi=110)
    print(f"wrote {RESULTS / 'placement-latency.json'} and placement-latency.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
