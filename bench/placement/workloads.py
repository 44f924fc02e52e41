"""The benchmark's workloads as TrainingJob bodies carrying the simulator's annotations.

(a) synthetic gangs: `nodes` x 8 GPUs with nodes drawn from SIZES_A (1: 30%, 2: 25%, 4: 20%,
    8: 15%, 16: 10%), durations log-normal with median 1 h and sigma 0.7, clipped to
    [10 min, 4 h]; Poisson arrivals whose rate gives the offered load
    (sum of GPUs x duration / (fleet GPUs x arrival window)).
(b) the openb trace as a fill test, the method of the trace's paper: its GPU pods in
    creation order, each one pod of its GPU count (any product: the trace's gpu_spec is
    empty), arriving in batches of BATCH_B every SPACING_B (fewer admission instants: the
    2-core budget) and holding their GPUs for HOLD_B (10 days, past the arrivals). A replay with the trace's own lifetimes cannot load this fleet: the 7,064 GPU
    pods ask for 7,433 whole GPUs over 150 days on 6,212 GPUs, most living minutes (the
    paper's pods share GPUs). All pods together offer 120% of the fleet's GPUs, so the fill
    ends with the fleet as full as each policy's packing lets it be.
(d) gangs on 4 racks of GB200 NVL72 (issue 36): 4..72 GPUs, 1..18 trays of 4 GPUs from
    SIZES_D; durations and arrivals as in (a). A rack is one NVLink clique, so the share of
    multi-node gangs kept in one rack is the share kept in one clique.
(c) gangs on the spot fleet's 8-GPU products (A100, H800, A800, GPU-series-1/-2): each gang
    takes one product, drawn by that product's share of 8-GPU capacity, and 1..64 nodes from
    SIZES_C (capped at half the product's nodes); durations and arrivals as in (a).
"""

from __future__ import annotations

import csv
import gzip
import math
import random
from collections.abc import Sequence
from typing import Any

from bench.placement.fleets import DATA, Fleet

SIZES_A = ((1, 0.30), (2, 0.25), (4, 0.20), (8, 0.15), (16, 0.10))
SIZES_C = ((1, 0.25), (2, 0.20), (4, 0.20), (8, 0.15), (16, 0.10), (32, 0.06), (64, 0.04))
SIZES_D = ((1, 0.20), (2, 0.20), (4, 0.20), (8, 0.15), (12, 0.10), (16, 0.10), (18, 0.05))
SPACING_B = 60.0
BATCH_B = 100
HOLD_B = 10 * 86400.0
LOAD_B = 7433 / 6212


def job(
    i: int, replicas: int, gpus: int, submit: float, duration: float, products: Sequence[str] = ()
) -> dict[str, Any]:
    return {
        "apiVersion": "trainop.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": f"j{i:05d}",
            "namespace": "bench",
            "annotations": {
                "trainop.dev/sim-submit-seconds": f"{submit:.1f}",
                "trainop.dev/sim-duration-seconds": f"{duration:.1f}",
            },
        },
        "spec": {
            "framework": {"name": "pytorch"},
            "replicaSpecs": {"Worker": {"replicas": replicas, "gpus": gpus}},
            "placement": {"topology": "rack", "mode": "Preferred", "gpuProducts": list(products)},
        },
    }


def _duration(rng: random.Random) -> float:
    return min(4 * 3600.0, max(600.0, rng.lognormvariate(math.log(3600), 0.7)))


def _pick(rng: random.Random, table: Sequence[tuple[int, float]]) -> int:
    x, acc = rng.random(), 0.0
    for value, p in table:
        acc += p
        if x < acc:
            return value
    return table[-1][0]


def _arrivals(rng: random.Random, work: Sequence[float], load: float, gpus: int) -> list[float]:
    """Poisson arrival times whose rate makes sum(work) an offered `load` of `gpus`."""
    rate = load * gpus / (sum(work) / len(work))
    t, out = 0.0, []
    for _ in work:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def synthetic(count: int, load: float, fleet: Fleet, seed: int = 11) -> list[dict[str, Any]]:
    """(a): the same gangs (by seed) at any load; only the arrival times change."""
    rng = random.Random(seed)
    shapes = [(_pick(rng, SIZES_A), _duration(rng)) for _ in range(count)]
    times = _arrivals(random.Random(seed + 1), [n * 8 * d for n, d in shapes], load, fleet.gpus)
    return [job(i, n, 8, t, d) for i, ((n, d), t) in enumerate(zip(shapes, times, strict=True))]


def nvl72_gangs(count: int, load: float, fleet: Fleet, seed: int = 17) -> list[dict[str, Any]]:
    """(d): gangs of 1..18 GB200 trays (4 GPUs each); the same gangs at any load."""
    rng = random.Random(seed)
    shapes = [(_pick(rng, SIZES_D), _duration(rng)) for _ in range(count)]
    times = _arrivals(random.Random(seed + 1), [n * 4 * d for n, d in shapes], load, fleet.gpus)
    return [job(i, n, 4, t, d) for i, ((n, d), t) in enumerate(zip(shapes, times, strict=True))]


def spot_gangs(count: int, load: float, fleet: Fleet, seed: int = 13) -> list[dict[str, Any]]:
    """(c): gangs of one 8-GPU product each; load relative to the 8-GPU nodes' GPUs."""
    per_product: dict[str, int] = {}
    for n in fleet.nodes:
        labels = n["metadata"]["labels"]
        if labels["nvidia.com/gpu.count"] == "8":
            product = labels["nvidia.com/gpu.product"]
            per_product[product] = per_product.get(product, 0) + 1
    total = sum(per_product.values())
    weights = sorted(per_product.items())
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        product = rng.choices([p for p, _ in weights], [c for _, c in weights])[0]
        size = min(_pick(rng, SIZES_C), _largest_power(per_product[product] // 2))
        shapes.append((product, size, _duration(rng)))
    work = [s * 8 * d for _, s, d in shapes]
    times = _arrivals(random.Random(seed + 1), work, load, total * 8)
    return [
        job(i, s, 8, t, d, [p]) for i, ((p, s, d), t) in enumerate(zip(shapes, times, strict=True))
    ]


def _largest_power(limit: int) -> int:
    size = 1
    while size * 2 <= limit:
        size *= 2
    return size


def openb_pods(count: int | None, fleet: Fleet) -> list[dict[str, Any]]:
    """(b): the first `count` GPU pods of the openb trace (all: None), as a fill test."""
    rows = []
    with gzip.open(DATA / "openb_gpu_pods.csv.gz", "rt") as f:
        for row in csv.DictReader(f):
            rows.append(int(row["gpus"]))
            if count is not None and len(rows) >= count:
                break
    return [job(i, 1, g, (i // BATCH_B) * SPACING_B, HOLD_B) for i, g in enumerate(rows)]
