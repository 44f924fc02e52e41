"""Placement policies the benchmark compares, and the placer that plugs them into `simulate`.

trainop is `trainop.placement.place` itself (with the operator's fabric cost model), and its
queue waits by `queueing.topowait` inside the real `admit`; the baselines share the same
admission cycle with topology-aware waiting off:
  spread     kube-scheduler-like LeastAllocated: each pod on the node with the largest free
             share of its GPUs, ties broken at random (as kube-scheduler's selectHost does);
  first-fit  each pod on the first node, by name, with enough free GPUs;
  random     each pod on a random node with enough free GPUs.
All are gang (all-or-nothing) placers that honour gpuProducts, like a co-scheduling plugin.

BenchPlacer differs from the operator's PlannerPlacer only in skipping image resolution and
pod building (the planner's part, which does not change where pods go and is too slow to run
hundreds of thousands of times on 2 cores); it memoises results per (snapshot, gang shape),
which is exact because placement is a pure function of the two.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from trainop.inventory import FrozenMap, NodeInfo, Snapshot
from trainop.placement import (
    Assignment,
    FabricCost,
    GangRequest,
    GroupRequest,
    NoFit,
    Placement,
    level_names,
    place,
)
from trainop.placement.cost import common_level
from trainop.planner import OperatorConfig
from trainop.queueing import NOFIT, Fit, QueuedJob, Unfit, fit_of

PlaceFn = Callable[[Snapshot, GangRequest], Placement | NoFit]
Chooser = Callable[[list[NodeInfo], dict[str, int], int], NodeInfo]


def _first(nodes: list[NodeInfo], free: dict[str, int], gpus: int) -> NodeInfo:
    return next(n for n in nodes if free[n.name] >= gpus)


def _least_allocated(rng: random.Random) -> Chooser:
    def choose(nodes: list[NodeInfo], free: dict[str, int], gpus: int) -> NodeInfo:
        best: list[NodeInfo] = []
        top = -1.0
        for n in nodes:
            if free[n.name] < gpus:
                continue
            share = free[n.name] / n.gpus_allocatable
            if share > top:
                best, top = [n], share
            elif share == top:
                best.append(n)
        return rng.choice(best)

    return choose


def _random(rng: random.Random) -> Chooser:
    def choose(nodes: list[NodeInfo], free: dict[str, int], gpus: int) -> NodeInfo:
        return rng.choice([n for n in nodes if free[n.name] >= gpus])

    return choose


def greedy(name: str, choose: Chooser, cost: FabricCost) -> PlaceFn:
    """A gang placer that puts pods one by one where `choose` says (largest pods first)."""

    def place_gang(snapshot: Snapshot, request: GangRequest) -> Placement | NoFit:
        products = set(request.gpu_products)
        nodes = [
            n
            for n in snapshot.nodes
            if n.schedulable and n.gpus_free > 0 and (not products or n.gpu.product in products)
        ]
        free = {n.name: n.gpus_free for n in nodes}
        reps = sorted(
            ((g.role, g.gpus) for g in request.groups for _ in range(g.replicas) if g.gpus),
            key=lambda r: -r[1],
        )
        if sum(g for _, g in reps) > sum(free.values()):
            return NoFit("not enough free GPUs")
        picks: list[tuple[str, int, NodeInfo]] = []
        for role, gpus in reps:
            if not any(free[n.name] >= gpus for n in nodes):
                return NoFit(f"no node has {gpus} free GPUs")
            chosen = choose(nodes, free, gpus)
            free[chosen.name] -= gpus
            picks.append((role, gpus, chosen))
        return _placement(snapshot, picks, name, cost)

    return place_gang


def _placement(
    snapshot: Snapshot, picks: list[tuple[str, int, NodeInfo]], name: str, cost: FabricCost
) -> Placement:
    names = level_names(snapshot.levels)
    index: dict[str, int] = {}
    out = []
    for rank, (role, gpus, node) in enumerate(picks):
        out.append(Assignment(role, index.get(role, 0), node.name, rank, node.topology, gpus))
        index[role] = index.get(role, 0) + 1
    used = list({n.name: n for _, _, n in picks}.values())
    span = {"node": len(used)}
    for level in ("rack", "block"):
        keys = [k for k, v in names.items() if v == level]
        span[level] = len({n.level_value(keys[0]) for n in used}) if keys else 0
    gpus_on: dict[str, int] = {}
    for _, gpus, n in picks:
        gpus_on[n.name] = gpus_on.get(n.name, 0) + gpus
    estimate = cost.estimate([(n, gpus_on[n.name]) for n in used], names)
    level = common_level(used, names)
    return Placement(tuple(out), level, (), FrozenMap(span), 0.0, name, estimate)


def policies(cost: FabricCost, seed: int) -> dict[str, PlaceFn]:
    """The compared policies by name (fresh random streams per run)."""
    return {
        "trainop": place,
        "spread": greedy("spread", _least_allocated(random.Random(seed)), cost),
        "first-fit": greedy("first-fit", _first, cost),
        "random": greedy("random", _random(random.Random(seed + 1)), cost),
    }


def gang_of(key: str, body: Mapping[str, Any], cost: FabricCost) -> GangRequest:
    spec = body["spec"]
    placement = spec.get("placement") or {}
    groups = tuple(
        GroupRequest(role, int(r.get("replicas", 1)), int(r.get("gpus", 0)))
        for role, r in sorted(spec["replicaSpecs"].items())
    )
    return GangRequest(
        key,
        groups,
        placement.get("topology", "rack"),
        placement.get("mode", "Preferred"),
        tuple(placement.get("gpuProducts") or ()),
        cost=cost,
    )


class BenchPlacer:
    """A Placer over one PlaceFn (see the module doc); ideal = trainop alone on the empty
    fleet, for Fit.ideal (topology-aware waiting, the comm_share stretch, the lower bound)."""

    def __init__(
        self, bodies: Mapping[str, Mapping[str, Any]], config: OperatorConfig, fn: PlaceFn
    ) -> None:
        self.fn = fn
        self.cost = config.cost
        self.requests = {k: gang_of(k, b, self.cost) for k, b in bodies.items()}
        self._snapshot: Snapshot | None = None
        self._memo: dict[tuple[Any, ...], Placement | NoFit] = {}
        self._ideal: dict[tuple[Any, ...], Placement | None] = {}
        self._empty: Snapshot | None = None
        self._views: dict[tuple[str, ...], Snapshot] = {}

    def view(self, snapshot: Snapshot, request: GangRequest) -> Snapshot:
        """The nodes of the allowed products only: the same placement, found faster (the
        engine would list every other node as excluded, for NoFit's details)."""
        products = request.gpu_products
        if not products:
            return snapshot
        found = self._views.get(products)
        if found is None:
            nodes = tuple(n for n in snapshot.nodes if n.gpu.product in products)
            found = self._views[products] = Snapshot(nodes, snapshot.levels)
        return found

    def ideal(self, request: GangRequest, snapshot: Snapshot) -> Placement | None:
        shape = (request.groups, request.topology, request.gpu_products)
        if shape not in self._ideal:
            if self._empty is None:
                self._empty = snapshot.with_released({n.name: n.gpus_used for n in snapshot.nodes})
            nodes = [n for n in self._empty.nodes if _allowed(n, request.gpu_products)]
            result = place(Snapshot(tuple(nodes), snapshot.levels), request)
            self._ideal[shape] = result if isinstance(result, Placement) else None
        return self._ideal[shape]

    def __call__(
        self, job: QueuedJob, snapshot: Snapshot, products: tuple[str, ...] | None
    ) -> Fit | Unfit:
        request = self.requests[job.key]
        if products is not None:
            allowed = [p for p in products if not request.gpu_products or p in request.gpu_products]
            request = replace(request, gpu_products=tuple(allowed))
        if snapshot is not self._snapshot:
            self._snapshot, self._memo, self._views = snapshot, {}, {}
        shape = (request.groups, request.topology, request.mode, request.gpu_products)
        result = self._memo.get(shape)
        if result is None:
            result = self._memo[shape] = self.fn(self.view(snapshot, request), request)
        if isinstance(result, NoFit):
            return Unfit(NOFIT, result.reason)
        ideal = self.ideal(request, snapshot) if len(result.nodes) > 1 else None
        return fit_of(result, snapshot, ideal)


def _allowed(node: NodeInfo, products: tuple[str, ...]) -> bool:
    return not products or node.gpu.product in products


def factory(fn: PlaceFn) -> Callable[[Mapping[str, Mapping[str, Any]], OperatorConfig], Any]:
    def make(bodies: Mapping[str, Mapping[str, Any]], config: OperatorConfig) -> BenchPlacer:
        return BenchPlacer(bodies, config, fn)

    return make


def lower_bound(
    bodies: Sequence[Mapping[str, Any]], snapshot: Snapshot, cost: FabricCost
) -> dict[str, Placement | None]:
    """Each job alone on the empty fleet, placed by trainop: job key -> placement."""
    placer = BenchPlacer({}, OperatorConfig(), place)
    out: dict[str, Placement | None] = {}
    for body in bodies:
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        out[key] = placer.ideal(gang_of(key, body, cost), snapshot)
    return out
