"""How many racks and nodes PyTorch gangs of 2x8, 4x8 and 16x8 GPUs span on the default fleet.

The numbers behind the design notes' closing remark on topology packing: each gang is planned
alone on the empty default fleet (`trainop cluster fleet`) with `placement: {topology: rack,
mode: Preferred}` and the pytorch-ddp example's framework and CUDA, by the same `plan_job`
the operator and `trainop render` call. Run: .venv/bin/python bench/spans.py
"""

from __future__ import annotations

from typing import Any

from trainop.cluster.fleet import load_fleet, node_manifests
from trainop.inventory import build_snapshot
from trainop.planner import OperatorConfig, Plan, plan_job

SHAPES = ((2, 8), (4, 8), (16, 8))


def job(replicas: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainop.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": f"span-{replicas}x{gpus}", "namespace": "bench"},
        "spec": {
            "framework": {"name": "pytorch", "version": "2.4"},
            "cuda": "12.4",
            "replicaSpecs": {"Worker": {"replicas": replicas, "gpus": gpus}},
            "placement": {"topology": "rack", "mode": "Preferred"},
        },
    }


def main() -> None:
    config = OperatorConfig()
    snapshot = build_snapshot(node_manifests(load_fleet()), levels=config.topology_levels)
    print(f"{'JOB':8} {'RACKS':>5} {'NODES':>5} {'BLOCKS':>6}  LEVEL  DOMAIN")
    for replicas, gpus in SHAPES:
        result = plan_job(job(replicas, gpus), snapshot, config)
        shape = f"{replicas}x{gpus}"
        if not isinstance(result, Plan):
            print(f"{shape:8} not placed: {result.reason}: {result.message}")
            continue
        st = result.placement_status()
        span = st["span"]
        print(
            f"{shape:8} {span['rack']:>5} {span['node']:>5} {span['block']:>6}  "
            f"{st['level']:6} {st['domain']}"
        )


if __name__ == "__main__":
    main()
