"""GPU product -> quota group of a queue: which group a job is charged to and where it may land.

Rule: a GPU is charged to the group whose `products` list its nvidia.com/gpu.product; the
group with empty `products` ("any") takes every product no other group of the queue names.
A job is tried group by group in the queue's quota order, placed only on its group's products
(intersected with the job's spec.placement.gpuProducts), so the group it is charged to is
always the group of the nodes it landed on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trainop.inventory import Snapshot
from trainop.queueing.model import UNGROUPED, QueueState, QuotaGroup


@dataclass(frozen=True)
class Candidate:
    """A group a job may be charged to, and the GPU products it is placed on for it."""

    group: QuotaGroup
    products: tuple[str, ...]


def fleet_products(snapshot: Snapshot) -> tuple[str, ...]:
    """GPU products present in the snapshot (nodes with GPUs and a product label), sorted;
    a "static" memo (it does not depend on free GPUs)."""
    found: tuple[str, ...] = snapshot.memo(
        ("static", "fleet-products"),
        lambda: tuple(
            sorted({n.gpu.product for n in snapshot.nodes if n.gpus_allocatable and n.gpu.product})
        ),
    )
    return found


def group_of(queue: QueueState, product: str | None) -> str:
    """The group of `queue` GPUs of `product` are charged to (UNGROUPED when none covers it)."""
    any_group = None
    for g in queue.groups:
        if g.is_any:
            any_group = g.name
        elif product in g.products:
            return g.name
    return any_group or UNGROUPED


def candidates(
    queue: QueueState, job_products: Iterable[str], fleet: Iterable[str]
) -> tuple[Candidate, ...]:
    """Groups of `queue`, in quota order, on which a job allowing `job_products` (empty: any)
    could run, each with the products it would be placed on. Empty for unlimited queues."""
    wanted = tuple(job_products)
    named = {p for g in queue.groups for p in g.products}
    out = []
    for g in queue.groups:
        pool = g.products if g.products else tuple(p for p in fleet if p not in named)
        allowed = tuple(p for p in pool if not wanted or p in wanted)
        if allowed:
            out.append(Candidate(g, allowed))
    return tuple(out)
