"""`python -m bench.scale` (`make bench-scale`): the command line; runs the chosen scenarios
in turn and writes the report after each."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.scale import common, gang_modes
from bench.scale.burst import burst
from bench.scale.deep import deep
from bench.scale.report import KUBEFLOW_NOTE, write_report
from bench.scale.trace import trace


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="make bench-scale: trainop against bare pods")
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
        "--burst3-nodes",
        type=int,
        default=5000,
        help="a third burst on this many nodes (0: none), of --burst3-jobs jobs",
    )
    ap.add_argument("--burst3-jobs", type=int, default=1250)
    ap.add_argument(
        "--kill-after",
        type=float,
        default=20.0,
        help="in the second burst, SIGKILL the operator this many seconds in, then audit",
    )
    ap.add_argument("--trace-pods", type=int, default=2000)
    ap.add_argument("--trace-hours-per-second", type=float, default=24.0)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--cluster-name", default=common.CLUSTER, help="the bench cluster's name")
    ap.add_argument("--results", type=Path, default=common.RESULTS, help="where results go")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    common.set_globals(args.cluster_name, args.results)
    common.RESULTS.mkdir(parents=True, exist_ok=True)  # operator logs go there from the start
    results: dict[str, Any] = {"seed": common.SEED, "kubeflow": KUBEFLOW_NOTE}
    if (common.RESULTS / "scale.json").is_file():  # keep the scenarios this run skips
        results.update(json.loads((common.RESULTS / "scale.json").read_text()))
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
    if args.burst3_nodes:  # the largest fleet: the same mix, 1,250 jobs on 5,000 nodes
        results["burst_5000"] = burst(
            args.burst3_nodes,
            args.burst3_jobs,
            args.rack_size,
            args.timeout,
            kubeflow=False,
        )
        write_report(results)
    if not args.skip_trace:
        results["trace"] = trace(args.trace_pods, args.trace_hours_per_second, args.timeout)
        write_report(results)
    if not args.skip_deep:
        results["deep"] = deep(args.deep_nodes, args.deep_jobs, args.deep_rack_size, args.timeout)
        write_report(results)
    print((common.RESULTS / "scale.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
