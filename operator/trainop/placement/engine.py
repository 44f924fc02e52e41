"""Gang placement on the topology tree: smallest domain that fits, best-fit packing, topology ranks.

Neighbours: reads inventory.Snapshot; the planner turns a Placement into pinned pods and
torchrun/TF_CONFIG ranks; queueing calls place() on what-if snapshots; the CLI prints NoFit.

Algorithm. Nodes that are schedulable, have GPUs, match gpu_products and pass node_filter are
eligible; those with free GPUs form a tree (cluster > block > rack > clique > node, from the
snapshot's topology paths). Levels are tried from the smallest: one node, one NVLink clique, one
rack, one block, the cluster; Required stops at the requested level, Preferred goes on and says
so. A Required rack or block for several pods when no eligible node carries that level's label
is refused up front, naming the label: the unlabelled nodes would form one domain spanning the
cluster, and the guarantee would be kept in name only. At a level, the domains that could hold the gang (enough free GPUs, and for every replica
size s at least as many s-GPU slots, sum(floor(free/s)), as replicas of size >= s) are tried in
best-fit order: least free GPUs left over, then more eligible nodes already holding the image,
then path. Inside a domain replicas are packed largest first. Among sibling sub-domains (racks
of a block, cliques of a rack) a child that can take everything left is chosen best-fit; if none
can, the child with the most room is filled first, which keeps the number of racks/blocks
crossed minimal (Kueue's topology-aware scheduling does the same). Among the nodes of one
rack or clique each replica goes best-fit: the node with the fewest free GPUs that still fit,
preferring nodes the gang already uses, then nodes holding the image, then name; nodes are thus
filled whole and 2 x 4 shares one 8-GPU node. Greedy throughout: no backtracking beyond retrying
the next best-fit child, so a 64 x 8 gang on 1000 nodes takes milliseconds.

Ranks. Replica indices and ranks follow the topology path (block, rack, clique, node, then node
name), so replicas sharing a node get contiguous ranks and neighbours in the ring are neighbours
in the fabric. With several GPU groups, ranks run across them in group order: group 1's replicas
take ranks 0..n1-1 (by topology), group 2's the next ones, and so on; a replica's index within
its role follows the same order. 0-GPU replicas (parameter servers, MPI launchers) are not
pinned: node None, rank None.

Score (lower is better): sum over levels of weight x (domains used - 1), with weights node 1,
clique 10, rack 100, block 1000 (levels above block 10000), plus a fragmentation term in [0, 1):
the GPUs left free on the nodes the gang uses divided by (those + the gang's GPUs). Span
dominates; fragmentation breaks ties between placements of equal span.

Cost. Every Placement carries the fabric cost model's estimate of a 1 GiB allreduce
(placement.cost). When a Preferred gang is spread beyond its topology and the candidate
domains of the level hold different GPU products (so different NVLink and NIC bandwidths),
the first few that pack are priced and the cheapest is taken, ties to best-fit order. Within
the requested topology, and on a homogeneous fleet, best fit alone decides (a faster product
is not taken from jobs that need it just because it is free). Admission's topology-aware
waiting (queueing.topowait) compares the estimate with the gang's ideal placement.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from trainop.api.constants import LABEL_GPU_CLIQUE, RESOURCE_GPU
from trainop.inventory import UNLABELLED, FrozenMap, NodeInfo, Snapshot, TopologyPath
from trainop.placement.cost import DEFAULT_COST, FabricCost
from trainop.placement.types import Assignment, GangRequest, NoFit, Placement

NODE = "node"
CLIQUE = "clique"
RACK = "rack"
BLOCK = "block"
CLUSTER = "cluster"

_WEIGHTS = {NODE: 1, CLIQUE: 10, RACK: 100, BLOCK: 1000}
_OTHER_WEIGHT = 10000
_COST_CANDIDATES = 4  # packings priced per tier when candidate domains differ in GPU product

# A replica to pin: (gpus, group position). Sorted largest first, then group order.
_Rep = tuple[int, int]


def level_names(levels: Sequence[str]) -> dict[str, str]:
    """Label key -> placement level name: the last level is "node", the one above "rack", the
    one above that "block"; higher configured levels keep their label key as name."""
    names = {levels[-1]: NODE, LABEL_GPU_CLIQUE: CLIQUE}
    for position, key in enumerate(reversed(levels[:-1])):
        names.setdefault(key, (RACK, BLOCK)[position] if position < 2 else key)
    return names


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _dom_name(dom: _Dom) -> str:
    return dom.node.name if dom.node is not None else _domain_name(dom.path)


def _domain_name(path: TopologyPath) -> str:
    if not path:
        return "the cluster"
    if path[-1][1] == UNLABELLED:
        return "/".join(v for _, v in path)
    return path[-1][1]


class _Dom:
    """A node of the placement tree's skeleton; leaves carry a node (for its name, product
    and topology: its free GPUs are the snapshot's, read through `_Tree`). `lo:hi` is the
    domain's range of leaves in depth-first order, so its sums are prefix-sum differences."""

    __slots__ = ("anc", "children", "hi", "id", "leaf_only", "lo", "node", "order", "path")

    def __init__(self, path: TopologyPath, node: NodeInfo | None = None) -> None:
        self.path = path
        self.node = node
        self.children: list[_Dom] = []
        self.leaf_only = False
        self.lo = self.hi = 0
        self.id = 0  # index into the per-domain counters of `_Counts`
        self.anc: tuple[int, ...] = ()  # ids of this domain and every domain above it
        self.order: tuple[TopologyPath, str] = (path, node.name if node else "")


class _Skeleton:
    """The topology of a set of eligible nodes: built once per eligible set and image and
    kept across the snapshots of a cycle and across cycles while no node changes, where the
    tree used to be rebuilt for every candidate placement."""

    def __init__(self, nodes: Sequence[NodeInfo], image: str | None, names: dict[str, str]):
        self.root = _Dom(())
        self.by_tier: dict[str, list[_Dom]] = defaultdict(list)
        self.image_of = {n.name: n.has_image(image) for n in nodes}
        index: dict[TopologyPath, _Dom] = {(): self.root}
        for node in nodes:
            parent = self.root
            for depth in range(len(node.topology) - 1):
                prefix = node.topology[: depth + 1]
                dom = index.get(prefix)
                if dom is None:
                    dom = index[prefix] = _Dom(prefix)
                    parent.children.append(dom)
                    self.by_tier[names.get(prefix[-1][0], prefix[-1][0])].append(dom)
                parent = dom
            leaf = _Dom(node.topology, node)
            parent.children.append(leaf)
            self.by_tier[NODE].append(leaf)
        self.by_tier[CLUSTER].append(self.root)
        self.leaves: list[_Dom] = []
        self.doms: list[_Dom] = []
        self._number(self.root, ())
        for doms in self.by_tier.values():
            doms.sort(key=lambda d: d.order)
        self.leaf_image = [self.image_of[d.node.name] for d in self.leaves if d.node]
        self.any_image = any(self.leaf_image)
        self.leaf_index = {d.node.name: d.lo for d in self.leaves if d.node}
        self.leaf_names = [d.node.name for d in self.leaves if d.node]
        self.alloc_total = sum(n.gpus_allocatable for n in nodes)
        # The largest node: a need above its allocatable can never fit (static).
        self.biggest = min(nodes, key=lambda n: (-n.gpus_allocatable, n.name)) if nodes else None
        self.products: dict[int, frozenset[str | None]] = {}

    def _number(self, dom: _Dom, above: tuple[int, ...]) -> None:
        dom.id = len(self.doms)
        dom.anc = (dom.id, *above)
        self.doms.append(dom)
        dom.lo = len(self.leaves)
        if dom.node is not None:
            self.leaves.append(dom)
        else:
            dom.children.sort(key=lambda d: d.order)
            for child in dom.children:
                self._number(child, dom.anc)
            dom.leaf_only = all(c.node is not None for c in dom.children)
        dom.hi = len(self.leaves)

    def products_of(self, dom: _Dom) -> frozenset[str | None]:
        found = self.products.get(id(dom))
        if found is None:
            leaves = self.leaves[dom.lo : dom.hi]
            found = self.products[id(dom)] = frozenset(d.node.gpu.product for d in leaves if d.node)
        return found


class _Counts:
    """Free GPUs per leaf, and per domain its free GPUs, nodes with free GPUs and such nodes
    holding the image, on one snapshot. Built once per skeleton (O(nodes x depth)); the
    snapshot a cycle derives next (a gang reserved, a pod ended) derives its counts from
    these by updating only the changed nodes and the domains above them
    (`Snapshot.delta_memo`), so a placement never re-reads the whole fleet."""

    __slots__ = ("free", "frees", "image", "live", "skeleton")

    def __init__(
        self,
        skeleton: _Skeleton,
        frees: list[int],
        free: list[int],
        live: list[int],
        image: list[int],
    ) -> None:
        self.skeleton, self.frees, self.free, self.live, self.image = (
            skeleton,
            frees,
            free,
            live,
            image,
        )

    @classmethod
    def build(cls, skeleton: _Skeleton, snapshot: Snapshot) -> _Counts:
        size = len(skeleton.doms)
        out = cls(skeleton, [0] * len(skeleton.leaves), [0] * size, [0] * size, [0] * size)
        for i, name in enumerate(skeleton.leaf_names):
            out._set(i, snapshot.node(name).gpus_free)
        return out

    def derive(self, snapshot: Snapshot, changed: frozenset[str]) -> _Counts:
        out = _Counts(
            self.skeleton, list(self.frees), list(self.free), list(self.live), list(self.image)
        )
        index = self.skeleton.leaf_index
        for name in changed:
            i = index.get(name)
            if i is not None:
                out._set(i, snapshot.node(name).gpus_free)
        return out

    def _set(self, i: int, new: int) -> None:
        old = self.frees[i]
        if new == old:
            return
        self.frees[i] = new
        dlive = (new > 0) - (old > 0)
        dimage = dlive if self.skeleton.leaf_image[i] else 0
        for a in self.skeleton.leaves[i].anc:
            self.free[a] += new - old
            self.live[a] += dlive
            self.image[a] += dimage


class _Tree:
    """A snapshot's free GPUs over a skeleton: per-domain sums are O(1) reads of `_Counts`;
    only domains with free GPUs count, as if the others were not there."""

    def __init__(self, skeleton: _Skeleton, snapshot: Snapshot, key: Any = None) -> None:
        """`key`: the skeleton's memo key, under which the snapshot keeps the counts (None:
        a skeleton of this call alone, counted afresh)."""
        self.skeleton, self.snapshot = skeleton, snapshot
        self.root, self.by_tier, self.image_of = skeleton.root, skeleton.by_tier, skeleton.image_of
        self.counts: _Counts = (
            snapshot.delta_memo(
                ("delta", "counts", key),
                lambda: _Counts.build(skeleton, snapshot),
                lambda parent, changed: parent.derive(snapshot, changed),
            )
            if key is not None
            else _Counts.build(skeleton, snapshot)
        )
        self.frees = self.counts.frees
        self._slots: dict[tuple[int, int], int] = {}

    def free(self, dom: _Dom) -> int:
        return self.counts.free[dom.id]

    def live(self, dom: _Dom) -> int:
        """Nodes with free GPUs in the domain."""
        return self.counts.live[dom.id]

    def image_nodes(self, dom: _Dom) -> int:
        return self.counts.image[dom.id]

    def node(self, leaf: _Dom) -> NodeInfo:
        """The snapshot's NodeInfo of a leaf (its current free GPUs)."""
        assert leaf.node is not None
        return self.snapshot.node(leaf.node.name)

    def freest(self) -> tuple[int, str]:
        """(most free GPUs on one eligible node, that node): C-level max over the leaves."""
        if not self.frees:
            return 0, ""
        most = max(self.frees)
        return most, self.skeleton.leaf_names[self.frees.index(most)]

    def best_node_for(self, gpus: int) -> str | None:
        """The node a one-pod gang of `gpus` GPUs goes to: fewest free GPUs that still fit,
        then holding the image, then topology path and name (leaf order)."""
        frees = self.frees
        fitting = sorted(f for f in set(frees) if f >= gpus)
        if not fitting:
            return None
        best = fitting[0]
        if self.skeleton.any_image:
            image = self.skeleton.leaf_image
            for i, f in enumerate(frees):
                if f == best and image[i]:
                    return self.skeleton.leaf_names[i]
        return self.skeleton.leaf_names[frees.index(best)]

    def with_free(self, tier: str) -> list[_Dom]:
        """The tier's domains that have free GPUs, in topology order."""
        return [d for d in self.by_tier.get(tier, ()) if self.free(d) > 0]

    def slots(self, dom: _Dom, size: int) -> int:
        """How many `size`-GPU replicas the untouched domain could host, node by node."""
        key = (id(dom), size)
        cached = self._slots.get(key)
        if cached is None:
            cached = self._slots[key] = sum(f // size for f in self.frees[dom.lo : dom.hi])
        return cached

    def can_take(self, dom: _Dom, reps: Sequence[_Rep], need: int | None = None) -> bool:
        """Necessary (and for one replica size sufficient) test on an untouched domain;
        `need`: the GPUs of `reps`, when the caller has summed them already."""
        if self.free(dom) < (sum(g for g, _ in reps) if need is None else need):
            return False
        if dom.node is not None:
            return True
        count = 0
        for i, (size, _) in enumerate(reps):
            count += 1
            if i + 1 < len(reps) and reps[i + 1][0] == size:
                continue
            if self.slots(dom, size) < count:
                return False
        return True


class _Packer:
    """Greedy packing with an undo log, so a failed trial costs nothing but time."""

    def __init__(self, tree: _Tree) -> None:
        self.tree = tree
        self.free: dict[str, int] = {}
        self.uses: dict[str, int] = defaultdict(int)
        self.log: list[tuple[_Rep, NodeInfo]] = []

    def reset(self) -> None:
        self.free.clear()
        self.uses.clear()
        self.log.clear()

    def _free(self, node: NodeInfo) -> int:
        return self.free.get(node.name, node.gpus_free)

    def _put(self, rep: _Rep, node: NodeInfo) -> None:
        self.free[node.name] = self._free(node) - rep[0]
        self.uses[node.name] += 1
        self.log.append((rep, node))

    def _rollback(self, mark: int) -> None:
        while len(self.log) > mark:
            rep, node = self.log.pop()
            self.free[node.name] += rep[0]
            self.uses[node.name] -= 1

    def fill(self, dom: _Dom, reps: list[_Rep]) -> list[_Rep]:
        """Place as many of `reps` (largest first) inside `dom` as fit; return the rest."""
        if not reps:
            return reps
        tree = self.tree
        if dom.node is not None:
            return self._fill_node(tree.node(dom), reps)
        if dom.leaf_only:
            return self._best_fit([tree.node(c) for c in dom.children], reps)
        remaining = reps
        pending = list(dom.children)
        while remaining and pending:
            need = sum(g for g, _ in remaining)
            fitting = [c for c in pending if tree.can_take(c, remaining, need)]
            fitting.sort(key=lambda c: (tree.free(c) - need, -tree.image_nodes(c), c.order))
            for child in fitting:
                mark = len(self.log)
                if not self.fill(child, remaining):
                    return []
                self._rollback(mark)  # the size test is only necessary for mixed sizes
            size = remaining[0][0]
            biggest = min(
                pending,
                key=lambda c: (-tree.slots(c, size), -tree.free(c), -tree.image_nodes(c), c.order),
            )
            pending.remove(biggest)
            remaining = self.fill(biggest, remaining)
        return remaining

    def _fill_node(self, node: NodeInfo, reps: list[_Rep]) -> list[_Rep]:
        rest = []
        for rep in reps:
            if rep[0] <= self._free(node):
                self._put(rep, node)
            else:
                rest.append(rep)
        return rest

    def _best_fit(self, nodes: list[NodeInfo], reps: list[_Rep]) -> list[_Rep]:
        # Sorted (free, not used by the gang, no image, name): bisect finds the node with the
        # fewest free GPUs that still fit, ties going to nodes the gang already uses.
        image_of = self.tree.image_of
        by_name = {n.name: n for n in nodes}
        keys = sorted(
            (self._free(n), 0 if self.uses[n.name] else 1, 0 if image_of[n.name] else 1, n.name)
            for n in nodes
            if self._free(n) > 0
        )
        rest = []
        for rep in reps:
            i = bisect_left(keys, (rep[0],))
            if i == len(keys):
                rest.append(rep)
                continue
            free, _, no_image, name = keys.pop(i)
            self._put(rep, by_name[name])
            if free > rep[0]:
                insort(keys, (free - rep[0], 0, no_image, name))
        return rest


class _Gang:
    """The request's GPU replicas and how to talk about them."""

    def __init__(self, request: GangRequest) -> None:
        self.request = request
        self.gpu_groups = [
            (pos, g) for pos, g in enumerate(request.groups) if g.gpus and g.replicas
        ]
        reps = [(g.gpus, pos) for pos, g in self.gpu_groups for _ in range(g.replicas)]
        self.reps: list[_Rep] = sorted(reps, key=lambda r: (-r[0], r[1]))
        self.total = sum(g for g, _ in self.reps)
        self.largest = self.reps[0][0] if self.reps else 0
        self.largest_count = sum(1 for g, _ in self.reps if g == self.largest)

    def describe(self) -> str:
        parts = [f"{g.replicas} x {g.gpus}" for _, g in self.gpu_groups]
        if len(parts) == 1:
            return f"{parts[0]} GPUs"
        return f"{' + '.join(parts)} GPUs ({self.total})"

    def role_needing(self, size: int) -> str:
        return next(g.role for _, g in self.gpu_groups if g.gpus == size)


def _eligibility(
    snapshot: Snapshot, request: GangRequest
) -> tuple[list[NodeInfo], dict[str, list[tuple[str, str]]]]:
    """Eligible nodes, and the rest by cause: cause -> [(node, reason)], checked in this order."""
    eligible: list[NodeInfo] = []
    excluded: dict[str, list[tuple[str, str]]] = defaultdict(list)
    products = set(request.gpu_products)
    for node in snapshot.nodes:
        if node.gpus_allocatable <= 0:
            excluded["gpus"].append((node.name, f"no {RESOURCE_GPU} allocatable"))
        elif not node.schedulable:
            excluded["schedulable"].append((node.name, node.unschedulable_reason or "unknown"))
        elif products and node.gpu.product not in products:
            excluded["product"].append((node.name, f"GPU product {node.gpu.product or 'unknown'}"))
        else:
            why = request.node_filter(node) if request.node_filter else None
            if why is None:
                eligible.append(node)
            else:
                excluded["filter"].append((node.name, why))
    return eligible, excluded


def _nodes_verb(count: int, singular: str, plural: str) -> str:
    return f"{_plural(count, 'node')} {singular if count == 1 else plural}"


def _exclusion_summary(excluded: dict[str, list[tuple[str, str]]]) -> list[str]:
    phrases = []
    if excluded.get("filter"):
        items = excluded["filter"]
        phrases.append(f"{_nodes_verb(len(items), 'fails', 'fail')} the node filter: {items[0][1]}")
    if excluded.get("schedulable"):
        items = excluded["schedulable"]
        name, why = items[0]
        phrases.append(f"{_nodes_verb(len(items), 'is', 'are')} not schedulable ({name}: {why})")
    if excluded.get("product"):
        items = excluded["product"]
        phrases.append(f"{_nodes_verb(len(items), 'has', 'have')} another GPU product")
    if excluded.get("gpus"):
        phrases.append(f"{_nodes_verb(len(excluded['gpus']), 'has', 'have')} no GPUs")
    return phrases


def _exclusion_details(excluded: dict[str, list[tuple[str, str]]]) -> list[str]:
    """One line per distinct reason: "node filter (3 nodes): <reason> (n0, n1, n2)"."""
    details = []
    labels = {
        "filter": "node filter",
        "schedulable": "not schedulable",
        "product": "gpuProducts",
        "gpus": "no GPUs",
    }
    for cause in ("filter", "schedulable", "product", "gpus"):
        by_reason: dict[str, list[str]] = defaultdict(list)
        for name, why in excluded.get(cause, ()):
            by_reason[why].append(name)
        for why, names in by_reason.items():
            sample = ", ".join(names[:3])
            if len(names) > 3:
                sample += f" and {len(names) - 3} more"
            details.append(f"{labels[cause]} ({_plural(len(names), 'node')}): {why} ({sample})")
    return details


def _eligible(
    snapshot: Snapshot, request: GangRequest
) -> tuple[list[NodeInfo], dict[str, list[tuple[str, str]]]]:
    """Eligible nodes and the rest by cause. Which nodes are eligible does not depend on
    free GPUs, so with a filter key it is a "static" memo that the what-if snapshots of a
    cycle share: read only the nodes' static facts from it (topology, labels, GPUs), the
    free GPUs from the snapshot or the tree."""
    if request.filter_key is None:
        return _eligibility(snapshot, request)
    key = ("static", "eligible-nodes", request.filter_key, request.gpu_products)
    found: tuple[list[NodeInfo], dict[str, list[tuple[str, str]]]] = snapshot.memo(
        key, lambda: _eligibility(snapshot, request)
    )
    return found


def place(snapshot: Snapshot, request: GangRequest) -> Placement | NoFit:
    """Place every replica of the gang or none; deterministic for equal inputs.

    The early NoFit checks come first, in order, each with its own message (no node has
    the product, no node is eligible, a Required level no eligible node is labelled with,
    the tree's counters say no); then one pod takes the node tier's best fit and a gang
    walks the tiers from one node outwards (`_by_tier`)."""
    gang = _Gang(request)
    if not gang.reps:
        return _placement(snapshot, request, gang, [], CLUSTER, (), "")
    refused = _no_product(snapshot, request)
    if refused is not None:
        return refused
    eligible, excluded = _eligible(snapshot, request)
    details = _exclusion_details(excluded)
    if not eligible:
        if not snapshot.nodes:
            return NoFit("no node can run the job: the cluster has no nodes")
        return NoFit(
            f"no node can run the job: {'; '.join(_exclusion_summary(excluded))}", tuple(details)
        )
    unverifiable = _unlabelled_level(snapshot, request, gang, eligible)
    if unverifiable is not None:
        return unverifiable
    names = level_names(snapshot.levels)
    tree = _skeleton_tree(snapshot, request, eligible, names)
    early = _early_nofit(tree, gang, len(eligible), details)
    if early is not None:
        return early
    if len(gang.reps) == 1:
        # One pod: the node tier's best fit, read off the tree's leaves (fewest GPUs left
        # over, holding the image, then topology path and name).
        best = snapshot.node(tree.best_node_for(gang.total) or "")
        return _placement(snapshot, request, gang, [(gang.reps[0], best)], NODE, best.topology, "")
    return _by_tier(snapshot, request, gang, tree, names, details)


def _no_product(snapshot: Snapshot, request: GangRequest) -> NoFit | None:
    """NoFit when spec.gpuProducts names no product any GPU node has (listing those there)."""
    if not request.gpu_products or snapshot.memo(
        ("static", "has-product", request.gpu_products),
        lambda: any(
            n.gpus_allocatable > 0 and n.gpu.product in request.gpu_products for n in snapshot.nodes
        ),
    ):
        return None
    present: dict[str, int] = defaultdict(int)
    for n in snapshot.nodes:
        if n.gpus_allocatable > 0:
            present[n.gpu.product or "unknown"] += 1
    listing = ", ".join(f"{p} ({_plural(c, 'node')})" for p, c in sorted(present.items()))
    return NoFit(
        f"gpuProducts [{', '.join(request.gpu_products)}] matches no node; "
        f"products present: {listing or 'none (no node has GPUs)'}",
    )


def _tiers(
    snapshot: Snapshot, request: GangRequest, names: Mapping[str, str]
) -> tuple[list[str], int, int]:
    """The tiers from one node to the cluster, the index of the one the job asks for, and
    the last one it may widen to (the asked one when Required, the cluster when Preferred)."""
    tiers = [NODE, CLIQUE]
    tiers += [names[k] for k in reversed(snapshot.levels[:-1])]
    tiers.append(CLUSTER)
    wanted = {"none": CLUSTER, "node": NODE, "clique": CLIQUE, "rack": RACK, "block": BLOCK}[
        request.topology
    ]
    wanted_at = tiers.index(wanted) if wanted in tiers else len(tiers) - 1
    last = wanted_at if request.mode == "Required" else len(tiers) - 1
    return tiers, wanted_at, last


def _by_tier(
    snapshot: Snapshot,
    request: GangRequest,
    gang: _Gang,
    tree: _Tree,
    names: dict[str, str],
    details: list[str],
) -> Placement | NoFit:
    """The cheapest domain of the narrowest tier that holds the gang, widening past the
    asked tier only when Preferred (with a note saying so); else why nothing held it."""
    tiers, wanted_at, last = _tiers(snapshot, request, names)
    packer = _Packer(tree)
    cost = request.cost or DEFAULT_COST
    for at, tier in enumerate(tiers[: last + 1]):
        if tier == NODE and gang.total > tree.freest()[0]:
            candidates = []  # no node holds the gang: skip a scan of every leaf
        else:
            candidates = [
                d for d in tree.by_tier.get(tier, ()) if tree.can_take(d, gang.reps, gang.total)
            ]
        candidates.sort(key=lambda d: (tree.free(d) - gang.total, -tree.image_nodes(d), d.order))
        chosen = _cheapest(candidates, packer, gang, cost, names, priced=at > wanted_at)
        if chosen is not None:
            log, dom = chosen
            note = _widened_note(tree, tiers[wanted_at], gang) if at > wanted_at else ""
            return _placement(snapshot, request, gang, log, tier, dom.path, note)
    if last < len(tiers) - 1:
        return _required_nofit(tree, tiers[last], gang, details)
    return _fragmented(tree, gang, details)


def _fragmented(tree: _Tree, gang: _Gang, details: list[str]) -> NoFit:
    """Why a gang that the free GPUs add up to found no packing anywhere in the cluster."""
    room, free_total = tree.slots(tree.root, gang.largest), tree.free(tree.root)
    if room < gang.largest_count:
        return NoFit(
            f"needs {gang.describe()}; eligible nodes have {free_total} free GPUs in total but "
            f"too fragmented: room for only {room} x {gang.largest} GPUs on single nodes",
            tuple(details),
        )
    return NoFit(
        f"needs {gang.describe()}; the {free_total} free GPUs on eligible nodes are too "
        f"fragmented to pack these mixed replica sizes",
        tuple(details),
    )


def _unlabelled_level(
    snapshot: Snapshot, request: GangRequest, gang: _Gang, eligible: Sequence[NodeInfo]
) -> NoFit | None:
    """A Required clique, rack or block for a gang of several pods when no eligible node
    carries that level's label: every node would sit in one `<unlabelled>` domain and the
    gang would be "placed in one rack" spanning the whole cluster, so it is refused, naming
    the label. One pod is always within one rack and is not refused."""
    if (
        request.mode != "Required"
        or request.topology not in (CLIQUE, RACK, BLOCK)
        or len(gang.reps) < 2
    ):
        return None
    names = level_names(snapshot.levels)
    key = next((k for k, name in names.items() if name == request.topology), None)
    if key is None:  # topologyLevels has no such level: the cluster is the domain, as configured
        return None

    def labelled() -> bool:
        # a configured level reads UNLABELLED on a node without it, the clique None
        return any(n.level_value(key) not in (None, UNLABELLED) for n in eligible)

    if request.filter_key is None:
        found = labelled()
    else:  # labels do not change on the what-if snapshots of a cycle: a "static" memo
        memo = ("static", "labelled", key, request.filter_key, request.gpu_products)
        found = snapshot.memo(memo, labelled)
    if found:
        return None
    if request.topology == CLIQUE:
        return NoFit(
            f"topology clique is Required, but no eligible node carries label {key} (GPU "
            "feature discovery writes it on multi-node NVLink systems such as GB200 NVL72)"
        )
    return NoFit(
        f"topology {request.topology} is Required, but no eligible node carries label {key}; "
        f"label {request.topology}s with it or set topologyLevels"
    )


def _cheapest(
    candidates: Sequence[_Dom],
    packer: _Packer,
    gang: _Gang,
    cost: FabricCost,
    names: dict[str, str],
    priced: bool,
) -> tuple[list[tuple[_Rep, NodeInfo]], _Dom] | None:
    """The packing of the first candidate that packs; when `priced` (a Preferred gang spread
    beyond its topology) and the candidates hold different GPU products (so different
    fabrics), the lowest estimated allreduce among the first _COST_CANDIDATES that pack,
    ties to best-fit order."""
    products = packer.tree.skeleton.products_of
    mixed = priced and len({products(d) for d in candidates}) > 1
    best: tuple[float, int, list[tuple[_Rep, NodeInfo]], _Dom] | None = None
    tried = 0
    for i, dom in enumerate(candidates):
        packer.reset()
        if packer.fill(dom, list(gang.reps)):
            continue
        log = list(packer.log)
        if not mixed:
            return log, dom
        seconds = cost.estimate(_gpus_on(log), names).seconds
        if best is None or round(seconds, 9) < round(best[0], 9):
            best = (seconds, i, log, dom)
        tried += 1
        if tried >= _COST_CANDIDATES:
            break
    return (best[2], best[3]) if best is not None else None


def _gpus_on(log: Sequence[tuple[_Rep, NodeInfo]]) -> list[tuple[NodeInfo, int]]:
    gpus: dict[str, int] = defaultdict(int)
    nodes: dict[str, NodeInfo] = {}
    for (g, _), node in log:
        gpus[node.name] += g
        nodes[node.name] = node
    return [(nodes[name], gpus[name]) for name in nodes]


def _skeleton_tree(
    snapshot: Snapshot, request: GangRequest, eligible: list[NodeInfo], names: dict[str, str]
) -> _Tree:
    """The eligible nodes' tree. Its skeleton is a "static" memo when eligibility is (it
    does not depend on free GPUs), so the what-if snapshots of a cycle share it; its counts
    are derived from the parent snapshot's (see `_Counts`)."""
    if request.filter_key is None:
        return _Tree(_Skeleton(eligible, request.image, names), snapshot)
    key = (request.filter_key, request.gpu_products, request.image)
    skeleton: _Skeleton = snapshot.memo(
        ("static", "skeleton", *key), lambda: _Skeleton(eligible, request.image, names)
    )
    return _Tree(skeleton, snapshot, key)


def _early_nofit(tree: _Tree, gang: _Gang, eligible: int, details: list[str]) -> NoFit | None:
    """The checks that need no packing, in the order a user would fix them: a replica
    larger than any node, fewer free GPUs than the gang, a replica larger than any node's
    free GPUs. Appends the eligible-nodes line to `details`."""
    skeleton = tree.skeleton
    free_total, alloc_total = tree.free(tree.root), skeleton.alloc_total
    details.append(
        f"{_plural(eligible, 'eligible node')} with {free_total} free GPUs "
        f"of {alloc_total} allocatable"
    )
    biggest = skeleton.biggest
    assert biggest is not None
    if gang.largest > biggest.gpus_allocatable:
        return NoFit(
            f"each {gang.role_needing(gang.largest)} replica needs {gang.largest} GPUs on one "
            f"node; the largest eligible node has {biggest.gpus_allocatable} GPUs "
            f"({biggest.name})",
            tuple(details),
        )
    if free_total < gang.total:
        return NoFit(
            f"needs {gang.describe()}; eligible nodes have {free_total} free GPUs "
            f"({alloc_total} allocatable, {alloc_total - free_total} in use)",
            tuple(details),
        )
    most, freest = tree.freest()
    if gang.largest > most:
        return NoFit(
            f"each {gang.role_needing(gang.largest)} replica needs {gang.largest} free GPUs on "
            f"one node; the most free on an eligible node is {most} ({freest})",
            tuple(details),
        )
    return None


def _largest(tree: _Tree, tier: str) -> _Dom | None:
    doms = tree.with_free(tier)
    if not doms:
        return None
    return min(doms, key=lambda d: (-tree.free(d), d.order))


def _where(tier: str) -> str:
    return "on one node" if tier == NODE else f"in one {tier}"


def _required_nofit(tree: _Tree, tier: str, gang: _Gang, details: list[str]) -> NoFit:
    top = sorted(tree.with_free(tier), key=lambda d: (-tree.free(d), d.order))
    for dom in top[:3]:
        details.append(
            f"{tier} {_dom_name(dom)}: {tree.free(dom)} free GPUs on "
            f"{_plural(tree.live(dom), 'eligible node')}, room for "
            f"{tree.slots(dom, gang.largest)} x {gang.largest} GPUs"
        )
    head = f"needs {gang.describe()} {_where(tier)} (Required)"
    if not top:
        return NoFit(f"{head}; no {tier} has eligible nodes with free GPUs", tuple(details))
    best = top[0]
    if tier == NODE:
        return NoFit(
            f"{head}; the most free GPUs on one eligible node is {tree.free(best)} ({_dom_name(best)})",
            tuple(details),
        )
    if tree.free(best) < gang.total:
        return NoFit(
            f"{head}; the largest {tier} has {tree.free(best)} free GPUs on eligible nodes "
            f"({_domain_name(best.path)})",
            tuple(details),
        )
    room = tree.slots(best, gang.largest)
    if room >= gang.largest_count:
        return NoFit(
            f"{head}; no {tier} can pack these mixed replica sizes: the largest, "
            f"{_domain_name(best.path)}, has {tree.free(best)} free GPUs",
            tuple(details),
        )
    return NoFit(
        f"{head}; no {tier} has its free GPUs on few enough nodes: the largest, "
        f"{_domain_name(best.path)}, has {tree.free(best)} free but room for only "
        f"{room} x {gang.largest} GPUs",
        tuple(details),
    )


def _widened_note(tree: _Tree, tier: str, gang: _Gang) -> str:
    best = _largest(tree, tier)
    largest = (
        f"the largest, {_dom_name(best)}, has {tree.free(best)} free GPUs"
        if best is not None
        else f"no {tier} has free GPUs"
    )
    return f"no single {tier} had room for {gang.describe()} ({largest})"


def _span(nodes: Sequence[NodeInfo], names: dict[str, str]) -> dict[str, int]:
    paths: dict[str, set[TopologyPath]] = defaultdict(set)
    for node in nodes:
        for depth, (key, _) in enumerate(node.topology[:-1]):
            paths[names.get(key, key)].add(node.topology[: depth + 1])
    span = {NODE: len({n.name for n in nodes})}
    for level in (CLIQUE, RACK, BLOCK):
        span[level] = len(paths.pop(level, ()))
    span.update((k, len(v)) for k, v in sorted(paths.items()))
    return span


def _score(span: dict[str, int], stranded: int, total: int) -> float:
    cost = sum(_WEIGHTS.get(k, _OTHER_WEIGHT) * max(0, v - 1) for k, v in span.items())
    return float(cost) + (stranded / (stranded + total) if total else 0.0)


def _placement(
    snapshot: Snapshot,
    request: GangRequest,
    gang: _Gang,
    log: Sequence[tuple[_Rep, NodeInfo]],
    tier: str,
    domain: TopologyPath,
    widened: str,
) -> Placement:
    # Indices and ranks by topology path: replicas of a group on one node get neighbouring
    # indices; ranks run across groups in group order.
    slots: dict[int, list[NodeInfo]] = defaultdict(list)
    for (_, pos), node in log:
        slots[pos].append(node)
    by_group: dict[int, list[NodeInfo]] = {
        pos: sorted(nodes, key=lambda n: (n.topology, n.name)) for pos, nodes in slots.items()
    }
    assignments: list[Assignment] = []
    rank = 0
    for pos, group in enumerate(request.groups):
        if pos in by_group:
            for index, node in enumerate(by_group[pos]):
                assignments.append(
                    Assignment(group.role, index, node.name, rank, node.topology, group.gpus)
                )
                rank += 1
        else:
            assignments.extend(
                Assignment(group.role, index, None, None, (), group.gpus)
                for index in range(group.replicas)
            )

    used = list({node.name: node for _, node in log}.values())
    names = level_names(snapshot.levels)
    span = _span(used, names)
    gpus_on: dict[str, int] = defaultdict(int)
    for (gpus, _), node in log:
        gpus_on[node.name] += gpus
    stranded = sum(n.gpus_free - gpus_on[n.name] for n in used)
    score = _score(span, stranded, gang.total)
    estimate = (request.cost or DEFAULT_COST).estimate(_gpus_on(log), names)
    return Placement(
        assignments=tuple(assignments),
        level=tier,
        domain=domain,
        span=FrozenMap(span),
        score=round(score, 6),
        explanation=_explain(request, gang, used, span, tier, domain, widened),
        allreduce=estimate,
    )


def _explain(
    request: GangRequest,
    gang: _Gang,
    used: Sequence[NodeInfo],
    span: dict[str, int],
    tier: str,
    domain: TopologyPath,
    widened: str,
) -> str:
    unpinned = [g for g in request.groups if g.replicas and not g.gpus]
    idle = "; ".join(
        f"{g.role} ({_plural(g.replicas, 'replica')}, no GPUs) is left to the scheduler"
        for g in unpinned
    )
    if not gang.reps:
        return idle or "nothing to place"
    if tier == NODE:
        parts = [f"placed {gang.describe()} on node {used[0].name}"]
    elif tier == CLUSTER:
        spread = ", ".join(
            _plural(span[level], level) for level in (BLOCK, RACK) if span.get(level)
        )
        parts = [f"placed {gang.describe()} on {_plural(len(used), 'node')} across {spread}"]
    else:
        parts = [
            f"placed {gang.describe()} on {_plural(len(used), 'node')} in {tier} "
            f"{_domain_name(domain)}"
        ]
    if widened:
        wanted = request.topology
        parts.append(
            f"topology {wanted} is Preferred and {widened}, so the gang spans "
            f"{_plural(span.get(wanted, 0), wanted)}"
        )
    elif request.topology != "none":
        parts.append(f"topology {request.topology} ({request.mode}) is met")
    if request.image:
        holding = sum(1 for n in used if n.has_image(request.image))
        if holding:
            parts.append(f"{holding} of {_plural(len(used), 'node')} already hold the image")
    if idle:
        parts.append(idle)
    return "; ".join(parts)
