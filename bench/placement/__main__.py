"""`make bench-placement`: placement policies x workloads through the real admission cycle.

Every run is `trainop.queueing.simulate` (the event loop, `admit` with its topology-aware
waiting, the placement engine and the fabric cost model the operator uses) with the policy's
placer plugged in (bench/placement/policies.py). trainop runs with the operator default
topologyWaitSeconds (1800 s); the baselines run with waiting off. Job durations are their
durations at the ideal placement and stretch with the placement's estimated allreduce time
for COMM_SHARE of a step (see queueing.simulate): an assumption, stated in placement.md.

Workloads (bench/placement/workloads.py): (a) synthetic gangs on a 4 x 4 x 8 H100 grid at
70/90/120% offered load, (b) the openb trace on its 1,213-node fleet, (c) synthetic gangs on
the 4,278-node spot fleet at 70/90/120%, (d) gangs of 4..72 GPUs on 4 racks of GB200
NVL72 at 70/90/120% (`--only d-` runs just those). Event counts are scaled to fit a 2-core machine in
well under 15 minutes (COUNTS). Writes OUT/placement.json (workload -> policy -> metric),
OUT/placement.md (summary and targets) and OUT/placement-*.png. Then the elastic runs
(bench/placement/elastic.py): the synthetic workload with elastic gangs against fixed-size
ones, written to OUT/placement-elastic.{json,md}; `--elastic-only` runs just those. Then migration
(bench/placement/migration.py): the synthetic workload with and without moving running gangs
to a better placement, written to OUT/placement-migration.{json,md}; `--migration-only` runs
just those (about a minute). Then fair share over time (bench/placement/fairness.py): three
teams 2:1:1 on openb pods with and without a usage half-life, written to
OUT/fairness.{json,md,png}; `--fairness-only` runs just those (about 7 minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.placement import elastic, fairness, fleets, migration, workloads
from bench.placement.metrics import measure, measure_lower_bound
from bench.placement.policies import factory, lower_bound, policies
from bench.placement.report import plots, summary

from trainop.api import constants as c
from trainop.api.fabricprofile import FabricProfile, FabricProfileSpec
from trainop.inventory import build_snapshot
from trainop.planner import OperatorConfig
from trainop.queueing import simulate

RESULTS = Path(__file__).resolve().parent.parent / "results"
SEED = 7
COMM_SHARE = 0.3
LOADS = (0.7, 0.9, 1.2)
COUNTS: dict[str, int | None] = {"a": 400, "b": None, "c": 300, "d": 300}
SMOKE_COUNTS: dict[str, int | None] = {"a": 12, "b": 20, "c": 10, "d": 10}

Workload = tuple[str, float | None, fleets.Fleet, list[dict[str, Any]]]


def _workloads(smoke: bool) -> list[Workload]:
    counts = SMOKE_COUNTS if smoke else COUNTS
    grid = fleets.h100_grid(2, 2, 4) if smoke else fleets.h100_grid()
    openb = fleets.openb()
    spot = fleets.spot(limit=40 if smoke else None)
    out: list[Workload] = []
    loads = LOADS[1:2] if smoke else LOADS
    for load in loads:
        jobs = workloads.synthetic(counts["a"] or 0, load, grid)
        out.append((f"a-synthetic@{load:.0%}", load, grid, jobs))
    pods = workloads.openb_pods(counts["b"], openb)
    out.append(("b-openb-fill", workloads.LOAD_B, openb, pods))
    for load in loads:
        jobs = workloads.spot_gangs(counts["c"] or 0, load, spot)
        out.append((f"c-spot@{load:.0%}", load, spot, jobs))
    nvl = fleets.nvl72(2 if smoke else 4)
    for load in loads:
        jobs = workloads.nvl72_gangs(counts["d"] or 0, load, nvl)
        out.append((f"d-nvl72@{load:.0%}", load, nvl, jobs))
    return out


# trainop with other topologyWaitSeconds, on the synthetic and spot workloads: what waiting
# adds to placement alone (0) and what a longer bound buys.
VARIANTS = {"trainop-wait0": 0.0, "trainop-wait3600": 3600.0}


# The NVL72 trays' fabric: each has four 400 Gb/s ConnectX-7 NICs, one per GPU (MLCommons
# inference v6.1, Crusoe GB200-NVL72 system description); as InfiniBand, the cost model's
# 50 GB/s per GPU. Without it they would fall back to TCP (1.9 GB/s per GPU).
NVL72_PROFILES = (
    FabricProfile(
        name="bench-gb200-ib",
        spec=FabricProfileSpec.model_validate(
            {
                "node_selector": {c.GFD_PRODUCT: "NVIDIA-GB200"},
                "fabric": "InfiniBand",
                "rdma_resource": c.DEFAULT_RDMA_RESOURCE,
            }
        ),
    ),
)


def profiles_for(label: str) -> tuple[FabricProfile, ...]:
    return NVL72_PROFILES if label.startswith("d-") else ()


def run_one(
    fleet: fleets.Fleet,
    jobs: list[dict[str, Any]],
    name: str,
    fn: Any,
    profiles: tuple[FabricProfile, ...] = (),
) -> dict[str, Any]:
    wait = VARIANTS.get(name, 0.0)
    if name == "trainop":
        wait = OperatorConfig().topology_wait_seconds
    config = OperatorConfig(topology_wait_seconds=wait, fabric_profiles=profiles)
    t0 = time.perf_counter()
    result = simulate(
        list(fleet.nodes), [], jobs, config=config, placer=factory(fn), comm_share=COMM_SHARE
    )
    return {"wall_s": round(time.perf_counter() - t0, 2), "result": result}


def main(argv: Sequence[str] | None = None, log: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.placement")
    parser.add_argument("--smoke", action="store_true", help="tiny workloads (the test suite)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--elastic-only", action="store_true", help="only the elastic runs")
    parser.add_argument(
        "--migration-only", action="store_true", help="only the migration runs (issue 37)"
    )
    parser.add_argument(
        "--fairness-only", action="store_true", help="only the fair-share runs (issue 37)"
    )
    parser.add_argument(
        "--only", metavar="PREFIX", help="only the workloads whose label starts with it (d-)"
    )
    args = parser.parse_args(argv)
    if args.fairness_only:
        fairness.write(fairness.compare(args.smoke, log), args.out)
        log(f"wrote {args.out / 'fairness.md'}")
        return 0
    if args.migration_only:
        args.out.mkdir(parents=True, exist_ok=True)
        migration.write(migration.compare(args.smoke, log, migration.plot_path(args.out)), args.out)
        log(f"wrote {args.out / 'placement-migration.md'}")
        return 0
    if args.elastic_only:
        elastic.write(elastic.compare(args.smoke, log), args.out)
        log(f"wrote {args.out / 'placement-elastic.md'}")
        return 0
    report: dict[str, Any] = {
        "meta": {
            "seed": SEED,
            "comm_share": COMM_SHARE,
            "topology_wait_seconds": OperatorConfig().topology_wait_seconds,
            "counts": SMOKE_COUNTS if args.smoke else COUNTS,
            "smoke": args.smoke,
        },
        "workloads": {},
    }
    started = time.perf_counter()
    for label, load, fleet, jobs in _workloads(args.smoke):
        if args.only and not label.startswith(args.only):
            continue
        config = OperatorConfig(fabric_profiles=profiles_for(label))
        snapshot = build_snapshot(list(fleet.nodes))
        lower = lower_bound(jobs, snapshot, config.cost)
        row: dict[str, Any] = {"load": load, "fleet": fleet.name, "jobs": len(jobs)}
        runs = policies(config.cost, SEED)
        if not label.startswith("b-"):
            runs.update(dict.fromkeys(VARIANTS, runs["trainop"]))
        for name, fn in runs.items():
            out = run_one(fleet, jobs, name, fn, profiles_for(label))
            row[name] = {**measure(out["result"], fleet, jobs, lower), "wall_s": out["wall_s"]}
            log(f"{label:18} {name:16} {out['wall_s']:7.1f}s  {_brief(row[name])}")
        row["lower-bound"] = measure_lower_bound(fleet, jobs, lower)
        report["workloads"][label] = row
    report["meta"]["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "placement.json").write_text(json.dumps(report, indent=2))
    (args.out / "placement.md").write_text(summary(report))
    written = plots(report, args.out)
    elastic.write(elastic.compare(args.smoke, log), args.out)
    written.append("placement-elastic.md")
    migration.write(migration.compare(args.smoke, log, migration.plot_path(args.out)), args.out)
    written.append("placement-migration.md")
    fairness.write(fairness.compare(args.smoke, log), args.out)
    written.append("fairness.md")
    log(
        f"wrote {args.out / 'placement.json'}, placement.md{', ' + ', '.join(written) if written else ''}"
    )
    return 0


def _brief(m: dict[str, Any]) -> str:
    return (
        f"allreduce x{m['allreduce_ratio_mean']} one-rack {m['one_rack_share']} "
        f"util {m['gpu_utilisation']} wait {m['wait_s_mean']}s"
    )


if __name__ == "__main__":
    sys.exit(main())
