"""Settings every scenario of `bench.scale` shares: where results go, the bench cluster's
name (both set by `--results` and `--cluster-name`, read as `common.RESULTS` and
`common.CLUSTER` at use), the seed and the GPU the fleet is made of."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
SEED = 11
# The bench cluster's name (TRAINOP_BENCH_CLUSTER, or --cluster-name): several may run apart.
CLUSTER = os.environ.get("TRAINOP_BENCH_CLUSTER", "trainop-bench")
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"


def set_globals(cluster: str, results: Path) -> None:
    global CLUSTER, RESULTS
    CLUSTER, RESULTS = cluster, results.resolve()
