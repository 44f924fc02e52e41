"""Fluent builders of queues and queued jobs, a placement-engine placer, and a one-call admit.

Queues: Q("nlp").quota("h100", 16, H100).cohort("pool").obj(). Jobs: J("nlp/x", "nlp", 16)
.prio(10).created(5).running_on("h0", "h1").obj(). `decide(queues, jobs, nodes)` builds the
snapshot (admitted jobs hold their nodes' GPUs) and runs `admit` with GangPlacer, which packs
a job of G GPUs as G/8 pods of 8 (or one pod of G) with the real placement engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tests.unit.placement_fleet import A100, H100, Node
from trainop.inventory import Snapshot, build_snapshot
from trainop.placement import GangRequest, GroupRequest, NoFit, place
from trainop.queueing import (
    Decisions,
    Fit,
    QueuedJob,
    QueueState,
    QuotaGroup,
    Unfit,
    admit,
)

__all__ = ["A100", "H100", "GangPlacer", "J", "Q", "decide", "nodes", "snapshot_for"]


class Q:
    """Q("nlp").quota("h100", 16, H100, limit=8).cohort("pool").weight(2).obj()"""

    def __init__(self, name: str) -> None:
        self._state = QueueState(name=name, unlimited=True)

    def quota(self, group: str, gpus: int, *products: str, limit: int | None = None) -> Q:
        groups = (*self._state.groups, QuotaGroup(group, tuple(products), gpus, limit))
        self._state = replace(self._state, groups=groups, unlimited=False)
        return self

    def set(self, **fields: Any) -> Q:
        self._state = replace(self._state, **fields)
        return self

    def cohort(self, name: str) -> Q:
        return self.set(cohort=name)

    def weight(self, weight: float) -> Q:
        return self.set(weight=weight)

    def backfill(self, seconds: float) -> Q:
        return self.set(backfill_wait_seconds=seconds)

    def obj(self) -> QueueState:
        return self._state


class J:
    """J("nlp/x", "nlp", 16).prio(10).created(5).running_on("h0", "h1").obj()"""

    def __init__(self, key: str, queue: str, gpus: int) -> None:
        self._job = QueuedJob(key=key, queue=queue, gpus=gpus, created=0.0)

    def set(self, **fields: Any) -> J:
        self._job = replace(self._job, **fields)
        return self

    def prio(self, value: int) -> J:
        return self.set(priority=value)

    def created(self, t: float) -> J:
        return self.set(created=t)

    def products(self, *products: str) -> J:
        return self.set(products=tuple(products))

    def running_on(self, *node_names: str, started: float = 0.0, product: str = H100) -> J:
        """Admitted, its GPUs spread evenly over these nodes."""
        per = self._job.gpus // len(node_names)
        return self.set(
            admitted=True,
            product=product,
            nodes=tuple((n, per) for n in node_names),
            started=started,
        )

    def obj(self) -> QueuedJob:
        return self._job


def nodes(h100: int = 4, a100: int = 0, gpus: int = 8) -> list[dict[str, Any]]:
    """h100 nodes h0..h{n-1} and a100 nodes a0..; one rack each product."""
    out = [
        Node(f"h{i}").gpus(str(gpus)).product(H100).rack("rh").block("b").obj() for i in range(h100)
    ]
    out += [
        Node(f"a{i}").gpus(str(gpus)).product(A100).rack("ra").block("b").obj() for i in range(a100)
    ]
    return out


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
    node_objs = nodes() if node_objs is None else node_objs
    snap = snapshot_for(node_objs, jobs, other_used)
    return admit(now, queues, jobs, snap, placer or GangPlacer())
