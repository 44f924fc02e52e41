"""Migration (issue 37): the synthetic and spot workloads with and without moving running gangs.

Every run is `trainop.queueing.simulate` with trainop's placer (bench/placement/policies.py)
and topology-aware waiting at the operator default (1800 s), on (a)'s synthetic gangs and
H100 grid and (c)'s gangs on the spot fleet's 8-GPU products (bench/placement/workloads.py).
In the migration runs every job has spec.checkpoint and the operator config says `migration:
{enabled: true}` (VARIANTS: the defaults, gain >= 2x cost, one move in flight, a job at most
once an hour; four moves at once; and consolidation, smaller gangs stepping aside for a
spread one, with two or four at once); a move costs MOVE_SECONDS (checkpoint and restart:
the gang makes no progress, and the rule is told that cost). Job durations stretch with the
placement's allreduce estimate for COMM_SHARE of a step, as in placement.md; a gang's steps
left are its ideal work left x COMM_SHARE / its ideal allreduce (queueing.simulate).

Measured per run, over multi-node jobs (lower bound on more than one node):
  allreduce_ratio_last      the estimate of the placement each job last ran on / its lower
                            bound, mean (placement.md's number; a moved job counts its new one);
  allreduce_ratio_time      the same, weighted by the time each job ran on each placement:
                            what the jobs actually ran at;
  wait_s_mean               first admission - submission (all jobs);
  useful_utilisation        ideal work done during the arrival window (each run's time / its
                            slow-down; preempted runs count nothing) / (fleet GPUs x window);
  moves, moves_per_hour     over the makespan; move_cost_s: their summed cost;
  realised_gain_s           per move, COMM_SHARE x (ratio before - ratio after) x the ideal work
                            the gang then did on the new placement, summed: the time the model
                            says the moves saved, after the fact;
  share_moves_gain_2x_cost  moves whose realised gain was at least 2x their cost (a gang
                            that stepped aside gains nothing itself);
  consolidations            decisions that moved more than one gang;
  share_decisions_gain_2x_cost  decisions (one move, or a consolidation's moves together)
                            whose realised gain was at least 2x their cost, both in
                            GPU-seconds (each gang's gain and cost x its GPUs).
Writes OUT/placement-migration.json, placement-migration.md and, with `plot`, the timeline
of the synthetic workload at 90% with consolidation (cli.timeline, as trainop simulate --plot).
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.placement import fleets, workloads
from bench.placement.policies import factory, lower_bound, place

from trainop.cli.timeline import draw
from trainop.inventory import build_snapshot
from trainop.placement import Placement
from trainop.planner import MigrationPolicy, OperatorConfig
from trainop.queueing import SimResult, simulate

LOADS = (0.9, 1.2)
COUNT = 400
SMOKE_COUNT = 16
SPOT_COUNT = 300
COMM_SHARE = 0.3
MOVE_SECONDS = 300.0
# The runs compared: off, the operator defaults, and more moves at once (the simulator
# starts every move of an instant together, so maxInFlight caps moves per instant).
VARIANTS = {
    "without": MigrationPolicy(),
    "with": MigrationPolicy(enabled=True),
    "with, 4 at once": MigrationPolicy(enabled=True, max_in_flight=4),
    "consolidate, 2 at once": MigrationPolicy(enabled=True, max_in_flight=2, consolidate=True),
    "consolidate, 4 at once": MigrationPolicy(enabled=True, max_in_flight=4, consolidate=True),
}
PLOTTED = "consolidate, 4 at once"


def checkpointing(jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The same jobs with spec.checkpoint: a volume mounted by the trainer, as the planner
    requires (docs/progress.md), so each may be moved."""
    out = []
    for body in jobs:
        job = copy.deepcopy(dict(body))
        worker = job["spec"]["replicaSpecs"]["Worker"]
        worker["template"] = {
            "spec": {
                "containers": [
                    {"name": "trainer", "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]}
                ],
                "volumes": [{"name": "ckpt", "emptyDir": {}}],
            }
        }
        job["spec"]["checkpoint"] = {"volume": "ckpt"}
        out.append(job)
    return out


def _slowdown(ratio: float) -> float:
    return 1.0 - COMM_SHARE + COMM_SHARE * max(1.0, ratio)


def measure(
    result: SimResult, fleet: fleets.Fleet, lower: Mapping[str, Placement | None]
) -> dict[str, Any]:
    ran = [j for j in result.jobs if j.runs]
    start = min(j.submitted for j in result.jobs)
    window = max(j.submitted for j in result.jobs)
    end = max((j.finished or result.end) for j in ran) if ran else start
    last, timed = [], []
    useful = 0.0
    moves, gains = 0, []
    # (the gang moved for, when) -> [realised gain, cost (GPU-seconds), gangs moved]: a
    # consolidation's moves are one decision, judged together.
    decisions: dict[tuple[str, float | None], list[float]] = {}
    for j in ran:
        bound = lower.get(j.key)
        multi = bound is not None and bound.allreduce is not None and len(bound.nodes) > 1
        weighted = span = 0.0
        for i, r in enumerate(j.runs):
            ended = r.ended if r.ended is not None else end
            ideal = r.ideal_allreduce_seconds or (bound.allreduce.seconds if multi else None)
            ratio = r.allreduce_seconds / ideal if r.allreduce_seconds and ideal else 1.0
            busy = max(0.0, ended - r.started)
            if multi:
                weighted += ratio * busy
                span += busy
            if r.preempted_by is None:
                inside = max(0.0, min(ended, window) - max(r.started, start))
                useful += j.gpus * inside / _slowdown(ratio)
            if r.preempt_reason == "Migration" and i + 1 < len(j.runs):
                moves += 1
                nxt = j.runs[i + 1]
                after = nxt.allreduce_seconds / ideal if nxt.allreduce_seconds and ideal else ratio
                done_after = max(0.0, (nxt.ended or end) - nxt.started) / _slowdown(after)
                gains.append(COMM_SHARE * (ratio - after) * done_after)
                decision = decisions.setdefault((r.moved_for or j.key, r.ended), [0.0, 0.0, 0])
                decision[0] += gains[-1] * j.gpus
                decision[1] += MOVE_SECONDS * j.gpus
                decision[2] += 1
        if multi and span > 0:
            timed.append(weighted / span)
            final = j.runs[-1]
            if final.allreduce_seconds and bound is not None and bound.allreduce is not None:
                last.append(final.allreduce_seconds / bound.allreduce.seconds)
    hours = max(1.0, end - start) / 3600.0
    waits = [j.runs[0].admitted - j.submitted for j in ran]
    return {
        "jobs": len(result.jobs),
        "allreduce_ratio_last": round(statistics.fmean(last), 3) if last else None,
        "allreduce_ratio_time": round(statistics.fmean(timed), 3) if timed else None,
        "wait_s_mean": round(statistics.fmean(waits), 1) if waits else None,
        "useful_utilisation": round(useful / (fleet.gpus * max(1.0, window - start)), 3),
        "moves": moves,
        "moves_per_hour": round(moves / hours, 2),
        "move_cost_s": round(moves * MOVE_SECONDS, 1),
        "realised_gain_s": round(sum(gains), 1),
        "share_moves_gain_2x_cost": (
            round(sum(1 for g in gains if g >= 2 * MOVE_SECONDS) / len(gains), 3) if gains else None
        ),
        "consolidations": sum(1 for d in decisions.values() if d[2] > 1),
        "share_decisions_gain_2x_cost": (
            round(sum(1 for d in decisions.values() if d[0] >= 2 * d[1]) / len(decisions), 3)
            if decisions
            else None
        ),
    }


def _workloads(smoke: bool) -> list[tuple[str, fleets.Fleet, Callable[[float], list[Any]]]]:
    """(name, fleet, jobs at a load): (a)'s synthetic gangs on the H100 grid and (c)'s gangs
    on the spot fleet's 8-GPU products (bench/placement/workloads.py)."""
    grid = fleets.h100_grid(2, 2, 4) if smoke else fleets.h100_grid()
    spot = fleets.spot(limit=40 if smoke else None)
    count = SMOKE_COUNT if smoke else COUNT
    spot_count = SMOKE_COUNT if smoke else SPOT_COUNT
    return [
        ("synthetic", grid, lambda load: workloads.synthetic(count, load, grid)),
        ("spot", spot, lambda load: workloads.spot_gangs(spot_count, load, spot)),
    ]


def compare(
    smoke: bool, log: Callable[[str], None] = print, plot: Path | None = None
) -> dict[str, Any]:
    """Every workload x load x variant; `plot`: draw the timeline of the synthetic workload
    at 90% with consolidation there (trainop simulate --plot's picture)."""
    report: dict[str, Any] = {
        "meta": {
            "jobs": SMOKE_COUNT if smoke else {"synthetic": COUNT, "spot": SPOT_COUNT},
            "comm_share": COMM_SHARE,
            "move_seconds": MOVE_SECONDS,
            "policy": "migration: {enabled: true} (defaults: gain >= 2x cost, 1 in flight, 1 h "
            "window), the same with maxInFlight 4, and with consolidate: true and maxInFlight 2 or 4",
        },
        "workloads": {},
    }
    for name, fleet, make in _workloads(smoke):
        report["meta"].setdefault("fleets", {})[name] = fleet.name
        loads: dict[str, Any] = {}
        for load in LOADS:
            jobs = checkpointing(make(load))
            lower = lower_bound(jobs, build_snapshot(list(fleet.nodes)), OperatorConfig().cost)
            row, results = _row(fleet, jobs, lower, f"{name} {load:.0%}", log)
            loads[f"{load:.0%}"] = row
            if plot is not None and name == "synthetic" and load == LOADS[0]:
                draw(results[PLOTTED], fleet.nodes, str(plot), "rack")
        report["workloads"][name] = loads
    return report


def _row(
    fleet: fleets.Fleet,
    jobs: list[dict[str, Any]],
    lower: Mapping[str, Placement | None],
    label: str,
    log: Callable[[str], None],
) -> tuple[dict[str, Any], dict[str, SimResult]]:
    row: dict[str, Any] = {}
    results: dict[str, SimResult] = {}
    for variant, policy in VARIANTS.items():
        t0 = time.perf_counter()
        result = simulate(
            list(fleet.nodes),
            [],
            jobs,
            config=OperatorConfig(migration=policy),
            placer=factory(place),
            comm_share=COMM_SHARE,
            move_seconds=MOVE_SECONDS,
        )
        row[variant] = {
            **measure(result, fleet, lower),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        results[variant] = result
        log(f"migration {label} {variant:24} {row[variant]}")
    return row, results


def table(report: Mapping[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        "# Migration: the synthetic and spot workloads with and without moving running gangs",
        "",
        f"Jobs {_each(meta['jobs'])} on {_each(meta['fleets'])}; trainop's placer, "
        "topology-aware waiting "
        f"1800 s, comm_share {meta['comm_share']}; a move costs {meta['move_seconds']:.0f} s; "
        f"{meta['policy']}. See bench/placement/migration.py for each metric. Decisions: a "
        "move, or a consolidation's moves together (the gangs that step aside and the gang "
        "they make room for), judged in GPU-seconds.",
        "",
        "| workload | load | migration | allreduce / lower bound (last placement) "
        "| (time-weighted) | mean wait | useful util. | moves | moves/h | summed cost "
        "| realised gain | moves with gain >= 2x cost | consolidations "
        "| decisions with gain >= 2x cost |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, loads in report["workloads"].items():
        for load, row in loads.items():
            for name in VARIANTS:
                m = row[name]
                lines.append(
                    f"| {workload} | {load} | {name} | {m['allreduce_ratio_last']}x "
                    f"| {m['allreduce_ratio_time']}x | {m['wait_s_mean']:.0f} s "
                    f"| {m['useful_utilisation']} | {m['moves']} | {m['moves_per_hour']} "
                    f"| {m['move_cost_s']:.0f} s | {m['realised_gain_s']:.0f} s "
                    f"| {_share(m['share_moves_gain_2x_cost'])} | {m['consolidations']} "
                    f"| {_share(m['share_decisions_gain_2x_cost'])} |"
                )
    return "\n".join(lines) + "\n"


def _each(value: Any) -> str:
    """{"synthetic": 400, "spot": 300} -> "400 (synthetic), 300 (spot)"."""
    if isinstance(value, Mapping):
        return ", ".join(f"{v} ({k})" for k, v in value.items())
    return str(value)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def plot_path(out: Path) -> Path:
    return out / "placement-migration-timeline.png"


def write(report: Mapping[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "placement-migration.json").write_text(json.dumps(report, indent=2))
    (out / "placement-migration.md").write_text(table(report))
