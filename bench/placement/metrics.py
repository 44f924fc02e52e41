"""Metrics of one simulated run (and of the lower bound), as plain numbers for placement.json.

Multi-node jobs are those whose lower-bound placement (alone on the empty fleet) uses more
than one node, so every policy is judged on the same set. Per policy:
  allreduce_ms_mean/p95     estimated 1 GiB allreduce of the placement each job last ran on;
  allreduce_ratio_mean/p95  per job, that estimate / the job's lower bound;
  one_rack_share            multi-node jobs whose nodes share one rack;
  gpu_utilisation           GPU-seconds held during the arrival window (first to last
                            submission, the loaded period) / (GPUs of the nodes jobs can use:
                            their products, with room for the smallest pod x that window);
  useful_utilisation        the same counting each job at its ideal-placement duration (a
                            stretched run holds GPUs without doing more work);
  fragmentation             time-weighted share of free GPUs on nodes with fewer free GPUs
                            than the median job's pod needs (free but unusable by it);
  fragmentation_largest     the same for the largest pod of the workload (8 GPUs);
  wait_s_mean/p95           first admission - submission;
  makespan_s                last finish - first submission;
  allocated_at_last_submit  share of those GPUs held at the last submission (the fill
                            test's allocation rate), pending_at_last_submit: jobs waiting then.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bench.placement.fleets import Fleet

from trainop.placement import Placement
from trainop.queueing import SimResult


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _capacity(fleet: Fleet, bodies: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], int, int]:
    """GPUs per node of the nodes some job may use (its product, room for the smallest pod),
    and the median and largest job's pod size."""
    wanted: set[str] = set()
    sizes = []
    for body in bodies:
        spec = body["spec"]
        wanted.update(spec["placement"].get("gpuProducts") or ())
        sizes.append(spec["replicaSpecs"]["Worker"]["gpus"])
    nodes = {}
    smallest = min(sizes)
    for n in fleet.nodes:
        product = n["metadata"]["labels"]["nvidia.com/gpu.product"]
        gpus = int(n["status"]["allocatable"]["nvidia.com/gpu"])
        if (not wanted or product in wanted) and gpus >= smallest:
            nodes[n["metadata"]["name"]] = gpus
    return nodes, int(statistics.median_low(sizes)), max(sizes)


def _fragmentation(
    result: SimResult, nodes: Mapping[str, int], need: int, start: float, end: float
) -> float | None:
    changes: list[tuple[float, str, int]] = []
    for job in result.jobs:
        for run in job.runs:
            for node, gpus in run.gpus_by_node:
                changes.append((run.admitted, node, gpus))
                changes.append((run.ended if run.ended is not None else end, node, -gpus))
    changes.sort(key=lambda c: (c[0], c[2]))
    free = dict(nodes)
    unusable = sum(f for f in free.values() if f < need)
    total_free = sum(free.values())
    area_unusable = area_free = 0.0
    last = start
    for t, node, delta in changes:
        if node not in free:
            continue
        t = min(max(t, start), end)
        area_unusable += unusable * (t - last)
        area_free += total_free * (t - last)
        last = t
        before = free[node]
        free[node] = before - delta
        total_free -= delta
        unusable += (free[node] if free[node] < need else 0) - (before if before < need else 0)
    area_unusable += unusable * (end - last)
    area_free += total_free * (end - last)
    return area_unusable / area_free if area_free > 0 else None


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


def measure(
    result: SimResult,
    fleet: Fleet,
    bodies: Sequence[Mapping[str, Any]],
    lower: Mapping[str, Placement | None],
) -> dict[str, Any]:
    nodes, need, largest = _capacity(fleet, bodies)
    ran = [j for j in result.jobs if j.runs]
    start = min(j.submitted for j in result.jobs)
    end = max((j.finished or result.end) for j in ran) if ran else start
    makespan = max(1.0, end - start)
    ratios, estimates, one_rack = [], [], []
    for j in ran:
        bound = lower.get(j.key)
        run = j.runs[-1]
        if bound is None or bound.allreduce is None or len(bound.nodes) <= 1:
            continue
        if run.allreduce_seconds is None:
            continue
        estimates.append(run.allreduce_seconds)
        ratios.append(run.allreduce_seconds / bound.allreduce.seconds)
        one_rack.append(len({fleet.racks[n] for n in run.nodes}) == 1)
    window = max(j.submitted for j in result.jobs)
    held = useful = 0.0
    for j in ran:
        for r in j.runs:
            ended = r.ended if r.ended is not None else end
            inside = _overlap(r.admitted, ended, start, window)
            held += j.gpus * inside
            if r.preempted_by is None and ended > r.admitted:
                useful += j.gpus * inside * j.duration / (ended - r.started)
    waits = [j.runs[0].admitted - j.submitted for j in ran]
    capacity = sum(nodes.values()) * max(1.0, window - start)
    return {
        "jobs": len(result.jobs),
        "multi_node_jobs": len(estimates),
        "unfinished_jobs": sum(1 for j in result.jobs if j.state != "Finished"),
        "allreduce_ms_mean": _r(statistics.fmean(estimates) * 1000, 3) if estimates else None,
        "allreduce_ms_p95": _r(p95(estimates) * 1000, 3) if estimates else None,
        "allreduce_ratio_mean": _r(_mean(ratios)),
        "allreduce_ratio_p95": _r(p95(ratios)) if ratios else None,
        "one_rack_share": _r(_mean([float(x) for x in one_rack])),
        "gpu_utilisation": _r(held / capacity),
        "useful_utilisation": _r(useful / capacity),
        "fragmentation": _r(_fragmentation(result, nodes, need, start, end)),
        "fragmentation_largest": _r(_fragmentation(result, nodes, largest, start, end)),
        "wait_s_mean": _r(_mean(waits), 1),
        "wait_s_p95": _r(p95(waits), 1) if waits else None,
        "makespan_s": round(makespan, 1),
        "topology_waits": sum(1 for j in ran if "Topology" in j.wait_reasons),
        **_at(result, nodes, window),
    }


def _at(result: SimResult, nodes: Mapping[str, int], t: float) -> dict[str, Any]:
    """Share of usable GPUs held, and jobs submitted but not yet admitted, at time t (the
    last submission: for the fill test, the end of the fill)."""
    held = pending = 0
    for j in result.jobs:
        if j.submitted > t:
            continue
        running = [r for r in j.runs if r.admitted <= t and (r.ended is None or r.ended > t)]
        if running:
            held += sum(g for n, g in running[0].gpus_by_node if n in nodes)
        elif not any(r.admitted <= t for r in j.runs):
            pending += 1
    total = sum(nodes.values())
    return {
        "allocated_at_last_submit": _r(held / total) if total else None,
        "pending_at_last_submit": pending,
    }


def measure_lower_bound(
    fleet: Fleet, bodies: Sequence[Mapping[str, Any]], lower: Mapping[str, Placement | None]
) -> dict[str, Any]:
    """Each job alone on an empty fleet: no wait, ideal placement, ideal duration."""
    nodes, _, _ = _capacity(fleet, bodies)
    estimates, one_rack = [], []
    start, end = float("inf"), 0.0
    for body in bodies:
        meta = body["metadata"]
        ann = meta["annotations"]
        submit = float(ann["trainop.dev/sim-submit-seconds"])
        duration = float(ann["trainop.dev/sim-duration-seconds"])
        start, end = min(start, submit), max(end, submit + duration)
        bound = lower.get(f"{meta['namespace']}/{meta['name']}")
        if bound is not None and bound.allreduce is not None and len(bound.nodes) > 1:
            estimates.append(bound.allreduce.seconds)
            one_rack.append(len({fleet.racks[n] for n in bound.nodes}) == 1)
    makespan = max(1.0, end - start)
    window = max(
        float(b["metadata"]["annotations"]["trainop.dev/sim-submit-seconds"]) for b in bodies
    )
    held = 0.0
    for body in bodies:
        ann = body["metadata"]["annotations"]
        submit = float(ann["trainop.dev/sim-submit-seconds"])
        duration = float(ann["trainop.dev/sim-duration-seconds"])
        spec = body["spec"]["replicaSpecs"]["Worker"]
        held += spec["replicas"] * spec["gpus"] * _overlap(submit, submit + duration, start, window)
    util = held / (sum(nodes.values()) * max(1.0, window - start))
    return {
        "jobs": len(bodies),
        "multi_node_jobs": len(estimates),
        "allreduce_ms_mean": _r(statistics.fmean(estimates) * 1000, 3) if estimates else None,
        "allreduce_ms_p95": _r(p95(estimates) * 1000, 3) if estimates else None,
        "allreduce_ratio_mean": 1.0 if estimates else None,
        "allreduce_ratio_p95": 1.0 if estimates else None,
        "one_rack_share": _r(_mean([float(x) for x in one_rack])),
        "gpu_utilisation": _r(util),
        "useful_utilisation": _r(util),
        "fragmentation": None,
        "fragmentation_largest": None,
        "wait_s_mean": 0.0,
        "wait_s_p95": 0.0,
        "makespan_s": round(makespan, 1),
        "topology_waits": 0,
    }
