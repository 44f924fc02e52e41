"""The burst's workload: the gangs, the fleet file, a gang as a TrainingJob or as bare pods.

Neighbours: every scenario of `bench.scale` builds its jobs here; `bench.admission` and
`bench.memory` reuse the mix and the fleet.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from bench.scale.common import GPU, H100, SEED


# --- the workload ------------------------------------------------------------------------
@dataclass(frozen=True)
class Gang:
    name: str
    replicas: int
    gpus: int  # per replica


def mixed_gangs(count: int, seed: int = SEED, max_nodes: int = 16) -> list[Gang]:
    """The burst's job mix, fixed seed so both policies get the same list: 25% partial-node
    jobs (1, 2 or 4 GPUs), 63% of 1-2 nodes, 10% of 3-6 nodes, 2% of 9-`max_nodes` nodes
    (8 GPUs per node). On average 1.7 nodes a job: 500 jobs need about 86% of 1,000 nodes,
    so the whole burst fits at once and the time to all-Running measures admission alone."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.25:
            out.append(Gang(f"s{i:04d}", 1, rng.choice((1, 2, 4))))
        elif roll < 0.88:
            out.append(Gang(f"s{i:04d}", rng.randint(1, 2), 8))
        elif roll < 0.98:
            out.append(Gang(f"s{i:04d}", rng.randint(3, min(6, max_nodes)), 8))
        else:
            out.append(Gang(f"s{i:04d}", rng.randint(min(9, max_nodes), max_nodes), 8))
    return out


def fleet_file(nodes: int, rack_size: int, path: Path) -> Path:
    racks = (nodes + rack_size - 1) // rack_size
    groups = []
    for r in range(racks):
        count = min(rack_size, nodes - r * rack_size)
        groups.append(
            {
                "class": "h100",
                "count": count,
                "block": f"block-{r // 8}",
                "rack": f"rack-{r:03d}",
                "prefix": f"r{r:03d}",
            }
        )
    doc = {
        "classes": {
            "h100": {
                "gpu": {
                    "product": H100,
                    "count": 8,
                    "memoryMiB": 81559,
                    "family": "hopper",
                    "computeCapability": "9.0",
                },
                "driver": "580.95.05",
                "cudaRuntime": "13.0",
                "rdma": {"resource": "rdma/rdma_shared_device_a", "count": 63},
                "cpu": "224",
                "memory": "2Ti",
                "gfdLabels": "new",
            }
        },
        "groups": groups,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def training_job(g: Gang, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainop.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": g.name, "namespace": ns},
        "spec": {
            "framework": {"name": "pytorch", "version": "2.4"},
            "cuda": "12.4",
            "replicaSpecs": {"Worker": {"replicas": g.replicas, "gpus": g.gpus}},
        },
    }


def bare_pod(g: Gang, index: int, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{g.name}-{index}", "namespace": ns, "labels": {"gang": g.name}},
        "spec": {
            "schedulingGates": [{"name": "bench.trainop.dev/gang"}],
            "tolerations": [{"operator": "Exists"}],
            "nodeSelector": {"nvidia.com/gpu.product": H100},
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {GPU: str(g.gpus)}}}
            ],
        },
    }
