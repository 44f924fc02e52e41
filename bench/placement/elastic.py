"""Elastic against fixed-size gangs (issue 25): the same synthetic workload run twice.

Both runs are `trainop.queueing.simulate` with the planner-backed placer the operator uses
(PlannerPlacer: only it plans an elastic job at a size and places a growth's new workers).
The workload is (a)'s synthetic gangs (bench/placement/workloads.py) on an H100 grid. In the
elastic run every multi-node gang becomes elastic with minReplicas half its size (at least 1)
and maxReplicas its size; its duration is its run at maxReplicas, and at n of max workers it
progresses n/max as fast (perfect scaling, an assumption stated in the table). Each resize
costs RESIZE_SECONDS (torchrun restarts the workers from their checkpoint).

Measured per run: mean queue wait (first admission - submit), mean completion time (finish -
submit), makespan, and GPU utilisation (GPU-seconds held / (fleet GPUs x makespan)). Writes
OUT/placement-elastic.json and placement-elastic.md.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench.placement import fleets, workloads

from trainop.queueing import SimResult, simulate

RESIZE_SECONDS = 60.0
LOADS = (0.9, 1.2)
COUNT = 120
SMOKE_COUNT = 24
# The labels GPU Feature Discovery puts on a DGX H100 that the planner's image choice reads
# (https://github.com/NVIDIA/k8s-device-plugin/tree/main/docs/gpu-feature-discovery).
GFD_H100 = {
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/cuda.driver.major": "580",
    "nvidia.com/cuda.driver.minor": "95",
    "nvidia.com/cuda.driver.rev": "05",
    "nvidia.com/cuda.runtime.major": "13",
    "nvidia.com/cuda.runtime.minor": "0",
}


def grid(smoke: bool) -> fleets.Fleet:
    """The H100 grid with the GFD labels the planner needs."""
    fleet = fleets.h100_grid(2, 2, 4) if smoke else fleets.h100_grid(2, 4, 8)
    for n in fleet.nodes:
        n["metadata"]["labels"].update(GFD_H100)
    return fleet


def elastic_jobs(jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The same jobs, every multi-node gang elastic in [max(1, size // 2), size]."""
    out = []
    for body in jobs:
        job = copy.deepcopy(dict(body))
        size = job["spec"]["replicaSpecs"]["Worker"]["replicas"]
        if size > 1:
            job["spec"]["elastic"] = {"minReplicas": max(1, size // 2), "maxReplicas": size}
        out.append(job)
    return out


def measure(result: SimResult, fleet_gpus: int, per: int = 8) -> dict[str, Any]:
    ran = [j for j in result.jobs if j.runs]
    done = [j for j in ran if j.finished is not None]
    start = min(j.submitted for j in result.jobs)
    end = max((j.finished or result.end) for j in ran) if ran else start
    makespan = max(1.0, end - start)
    held = 0.0
    for j in ran:
        finish = j.finished if j.finished is not None else end
        if j.sizes:
            marks = [*j.sizes, (finish, 0)]
            held += sum(n * per * (t2 - t1) for (t1, n), (t2, _) in pairwise(marks))
        else:
            held += sum(j.gpus * ((r.ended or finish) - r.admitted) for r in j.runs)
    waits = [j.runs[0].admitted - j.submitted for j in ran]
    return {
        "jobs": len(result.jobs),
        "finished": len(done),
        "wait_s_mean": round(sum(waits) / len(waits), 1) if waits else None,
        "completion_s_mean": (
            round(sum(j.finished - j.submitted for j in done if j.finished) / len(done), 1)
            if done
            else None
        ),
        "makespan_s": round(makespan, 1),
        "gpu_utilisation": round(held / (fleet_gpus * makespan), 3),
        "resizes": sum(max(0, len(j.sizes) - 1) for j in ran),
    }


def compare(smoke: bool, log: Callable[[str], None] = print) -> dict[str, Any]:
    fleet = grid(smoke)
    count = SMOKE_COUNT if smoke else COUNT
    report: dict[str, Any] = {
        "meta": {"fleet": fleet.name, "jobs": count, "resize_seconds": RESIZE_SECONDS},
        "loads": {},
    }
    for load in LOADS:
        fixed = workloads.synthetic(count, load, fleet)
        row: dict[str, Any] = {}
        for name, jobs in (("fixed", fixed), ("elastic", elastic_jobs(fixed))):
            t0 = time.perf_counter()
            result = simulate(list(fleet.nodes), [], jobs, startup_seconds=RESIZE_SECONDS)
            row[name] = {
                **measure(result, fleet.gpus),
                "wall_s": round(time.perf_counter() - t0, 1),
            }
            log(f"elastic@{load:.0%} {name:8} {row[name]}")
        report["loads"][f"{load:.0%}"] = row
    return report


def table(report: Mapping[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        "# Elastic vs fixed-size gangs (`make bench-placement`, bench/placement/elastic.py)",
        "",
        f"Fleet {meta['fleet']}; {meta['jobs']} synthetic gangs (workload a) per run; in the "
        "elastic run every multi-node gang runs at any size from half its size to its size "
        "(perfect scaling assumed), each resize costing "
        f"{meta['resize_seconds']:.0f} s of restart.",
        "",
        "| load | run | mean queue wait (s) | mean completion (s) | makespan (s) | GPU "
        "utilisation | resizes | finished |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for load, row in report["loads"].items():
        for name in ("fixed", "elastic"):
            m = row[name]
            lines.append(
                f"| {load} | {name} | {m['wait_s_mean']} | {m['completion_s_mean']} | "
                f"{m['makespan_s']} | {m['gpu_utilisation']} | {m['resizes']} | "
                f"{m['finished']}/{m['jobs']} |"
            )
    return "\n".join(lines) + "\n"


def write(report: Mapping[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "placement-elastic.json").write_text(json.dumps(report, indent=2))
    (out / "placement-elastic.md").write_text(table(report))
