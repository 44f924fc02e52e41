"""Admission over workloads built with tests/builders.py: a placer over the real placement
engine and a one-call `decide`.

`decide(queues, jobs, nodes)` builds the snapshot (admitted jobs hold their nodes' GPUs) and
runs `admit` with GangPlacer, which packs a job of G GPUs as G/8 pods of 8 (or one pod of G).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tests.builders import small_fleet
from trainop.inventory import Snapshot, build_snapshot
from trainop.placement import GangRequest, GroupRequest, NoFit, place
from trainop.queueing import Decisions, Fit, QueuedJob, QueueState, Unfit, admit


class GangPlacer:
    """A placer over the real placement engine, without the catalog: G GPUs are G/8 pods
    of 8 when G is a multiple of 8, else one pod of G; topology none. Counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(
        self, job: QueuedJob, snapshot: Snapshot, products: tuple[str, ...] | None
    ) -> Fit | Unfit:
        self.calls += 1
        wanted = tuple(
            p for p in (products or job.products) if not job.products or p in job.products
        )
        shape = (job.gpus // 8, 8) if job.gpus % 8 == 0 else (1, job.gpus)
        request = GangRequest(
            job=job.key,
            groups=(GroupRequest("Worker", *shape),),
            topology="none",
            mode="Preferred",
            gpu_products=wanted,
        )
        result = place(snapshot, request)
        if isinstance(result, NoFit):
            return Unfit("NoFit", result.reason)
        product = snapshot.node(result.nodes[0]).gpu.product
        return Fit(result, tuple(sorted(result.gpus_by_node().items())), product, result.nodes)


def snapshot_for(
    node_objs: Sequence[Mapping[str, Any]],
    jobs: Iterable[QueuedJob],
    other_used: Mapping[str, int] | None = None,
) -> Snapshot:
    """The fleet with admitted jobs' GPUs (and `other_used`, e.g. pods of no queue) taken."""
    snap = build_snapshot(node_objs)
    held: dict[str, int] = dict(other_used or {})
    for j in jobs:
        if j.admitted:
            for node, gpus in j.nodes:
                held[node] = held.get(node, 0) + gpus
    return snap.with_reserved(held)


def decide(
    queues: Sequence[QueueState],
    jobs: Sequence[QueuedJob],
    node_objs: Sequence[Mapping[str, Any]] | None = None,
    *,
    now: float = 100.0,
    other_used: Mapping[str, int] | None = None,
    placer: GangPlacer | None = None,
) -> Decisions:
    node_objs = small_fleet() if node_objs is None else node_objs
    snap = snapshot_for(node_objs, jobs, other_used)
    return admit(now, queues, jobs, snap, placer or GangPlacer())
