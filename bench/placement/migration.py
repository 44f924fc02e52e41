"""Migration (issue 37): the synthetic workload with and without moving running gangs.

Both runs are `trainop.queueing.simulate` with trainop's placer (bench/placement/policies.py)
and topology-aware waiting at the operator default (1800 s), on (a)'s synthetic gangs and
H100 grid (bench/placement/workloads.py). In the migration run every job has spec.checkpoint
and the operator config says `migration: {enabled: true}` with the defaults (gain >= 2x cost,
one move in flight, a job at most once an hour); a move costs MOVE_SECONDS (checkpoint and
restart: the gang makes no progress, and the rule is told that cost). Job durations stretch
with the placement's allreduce estimate for COMM_SHARE of a step, as in placement.md; a gang's
steps left are its ideal work left x COMM_SHARE / its ideal allreduce (queueing.simulate).

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
  share_moves_gain_2x_cost  moves whose realised gain was at least 2x their cost.
Writes OUT/placement-migration.json and placement-migration.md.
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

from trainop.inventory import build_snapshot
from trainop.placement import Placement
from trainop.planner import MigrationPolicy, OperatorConfig
from trainop.queueing import SimResult, simulate

LOADS = (0.9, 1.2)
COUNT = 400
SMOKE_COUNT = 16
COMM_SHARE = 0.3
MOVE_SECONDS = 300.0
# The runs compared: off, the operator defaults, and more moves at once (the simulator
# starts every move of an instant together, so maxInFlight caps moves per instant).
VARIANTS = {
    "without": MigrationPolicy(),
    "with": MigrationPolicy(enabled=True),
    "with, 4 at once": MigrationPolicy(enabled=True, max_in_flight=4),
}


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
    }


def compare(smoke: bool, log: Callable[[str], None] = print) -> dict[str, Any]:
    fleet = fleets.h100_grid(2, 2, 4) if smoke else fleets.h100_grid()
    count = SMOKE_COUNT if smoke else COUNT
    report: dict[str, Any] = {
        "meta": {
            "fleet": fleet.name,
            "jobs": count,
            "comm_share": COMM_SHARE,
            "move_seconds": MOVE_SECONDS,
            "policy": "migration: {enabled: true} (defaults: gain >= 2x cost, 1 in flight, 1 h "
            "window), and the same with maxInFlight 4",
        },
        "loads": {},
    }
    for load in LOADS:
        jobs = checkpointing(workloads.synthetic(count, load, fleet))
        lower = lower_bound(jobs, build_snapshot(list(fleet.nodes)), OperatorConfig().cost)
        row: dict[str, Any] = {}
        for name, policy in VARIANTS.items():
            config = OperatorConfig(migration=policy)
            t0 = time.perf_counter()
            result = simulate(
                list(fleet.nodes),
                [],
                jobs,
                config=config,
                placer=factory(place),
                comm_share=COMM_SHARE,
                move_seconds=MOVE_SECONDS,
            )
            row[name] = {
                **measure(result, fleet, lower),
                "wall_s": round(time.perf_counter() - t0, 1),
            }
            log(f"migration {load:.0%} {name:8} {row[name]}")
        report["loads"][f"{load:.0%}"] = row
    return report


def table(report: Mapping[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        "# Migration: the synthetic workload with and without moving running gangs",
        "",
        f"{meta['jobs']} synthetic gangs on {meta['fleet']}, trainop's placer, topology-aware "
        f"waiting 1800 s, comm_share {meta['comm_share']}; a move costs {meta['move_seconds']:.0f} "
        f"s; {meta['policy']}. See bench/placement/migration.py for each metric.",
        "",
        "| load | migration | allreduce / lower bound (last placement) | (time-weighted) "
        "| mean wait | useful util. | moves | moves/h | summed cost | realised gain "
        "| moves with gain >= 2x cost |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for load, row in report["loads"].items():
        for name in VARIANTS:
            m = row[name]
            share = m["share_moves_gain_2x_cost"]
            lines.append(
                f"| {load} | {name} | {m['allreduce_ratio_last']}x | {m['allreduce_ratio_time']}x "
                f"| {m['wait_s_mean']:.0f} s | {m['useful_utilisation']} | {m['moves']} "
                f"| {m['moves_per_hour']} | {m['move_cost_s']:.0f} s | {m['realised_gain_s']:.0f} s "
                f"| {'-' if share is None else f'{share:.0%}'} |"
            )
    return "\n".join(lines) + "\n"


def write(report: Mapping[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "placement-migration.json").write_text(json.dumps(report, indent=2))
    (out / "placement-migration.md").write_text(table(report))
