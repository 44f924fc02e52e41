"""The benchmark's fleets as Node dicts: a 128-node H100 grid, the two trace fleets and 4 racks
of GB200 NVL72 (each rack one NVLink clique of 18 trays x 4 GPUs, issue 36).

The traces have no network topology, so each GPU model's nodes are grouped, in order, into
racks of RACK_NODES and blocks of BLOCK_RACKS racks (models never share a rack).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "data"
RACK_NODES = 16
BLOCK_RACKS = 4


@dataclass(frozen=True)
class Fleet:
    name: str
    nodes: tuple[dict[str, Any], ...]
    racks: dict[str, str]  # node -> rack path

    @property
    def gpus(self) -> int:
        return sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in self.nodes)


def node(
    name: str, product: str, gpus: int, rack: str, block: str, clique: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "trainop.dev/rack": rack,
                "trainop.dev/block": block,
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
            },
        },
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    if clique is not None:
        out["metadata"]["labels"]["nvidia.com/gpu.clique"] = clique
    return out


def _fleet(name: str, nodes: list[dict[str, Any]]) -> Fleet:
    racks = {
        n["metadata"]["name"]: "{}/{}".format(
            n["metadata"]["labels"]["trainop.dev/block"],
            n["metadata"]["labels"]["trainop.dev/rack"],
        )
        for n in nodes
    }
    return Fleet(name, tuple(nodes), racks)


def h100_grid(blocks: int = 4, racks: int = 4, per_rack: int = 8) -> Fleet:
    """blocks x racks x per_rack DGX H100 nodes (8 GPUs each)."""
    nodes = [
        node(f"b{b}-r{r}-n{i:02d}", "NVIDIA-H100-80GB-HBM3", 8, f"b{b}-r{r}", f"b{b}")
        for b in range(blocks)
        for r in range(racks)
        for i in range(per_rack)
    ]
    return _fleet(f"{len(nodes)} x 8 H100", nodes)


def from_counts(name: str, path: Path, limit: int | None = None) -> Fleet:
    """A fleet from a (model, gpus, nodes) CSV of bench/data, racked per model."""
    nodes = []
    with path.open() as f:
        for row in csv.DictReader(f):
            model, gpus, count = row["model"], int(row["gpus"]), int(row["nodes"])
            slug = f"{model.lower()}-{gpus}g"
            for i in range(count if limit is None else min(count, limit)):
                rack = i // RACK_NODES
                block = rack // BLOCK_RACKS
                nodes.append(
                    node(f"{slug}-{i:04d}", model, gpus, f"{slug}-r{rack}", f"{slug}-b{block}")
                )
    return _fleet(name, nodes)


def openb() -> Fleet:
    return from_counts("openb 1,213 nodes", DATA / "openb_nodes.csv")


def spot(limit: int | None = None) -> Fleet:
    return from_counts("spot 4,278 nodes", DATA / "spot_nodes.csv", limit)


def nvl72(racks: int = 4) -> Fleet:
    """`racks` GB200 NVL72 racks: 18 compute trays of 4 GPUs each, the rack one NVLink
    clique (nvidia.com/gpu.clique), all racks in one block. The CPU architecture (arm64) is
    left out: the benchmark measures placement, not image choice."""
    nodes = [
        node(f"nvl{r}-t{t:02d}", "NVIDIA-GB200", 4, f"nvl{r}", "b0", clique=f"nvl{r}.0")
        for r in range(racks)
        for t in range(18)
    ]
    return _fleet(f"{racks} x GB200 NVL72 ({len(nodes)} trays)", nodes)
