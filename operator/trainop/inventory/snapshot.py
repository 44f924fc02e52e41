"""Nodes and Pods (API dicts) -> a frozen cluster snapshot: GPUs, free capacity, topology, health.

Neighbours: fed by the operator's shell state (`handlers.state`), the CLI's fleet files and the
simulator; read by placement, queueing and the planner. Pure: no Kubernetes client, no clock.

Topology path. Each node gets `topology`, (label key, value) pairs from the top configured level
down to the node, e.g. (("trainop.dev/block", "b1"), ("trainop.dev/rack", "r3"),
("nvidia.com/gpu.clique", "<uuid>.1"), ("kubernetes.io/hostname", "dgx-07")). The clique pair is
inserted just above the node only when GFD wrote the label. The last configured level names the
node; without its label the node name stands in. A missing intermediate label becomes the value
UNLABELLED ("<unlabelled>"), so every node has a full path and the tree stays well-formed: the
unlabelled nodes under one parent form one domain, which is what a cluster without rack labels
means (one flat network). Domains are identified by their path (the prefix of pairs), never by the
bare value, so "<unlabelled>" racks in two blocks (or two racks both called "1") stay apart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from trainop.api.constants import (
    DEFAULT_TOPOLOGY_LEVELS,
    LABEL_GPU_CLIQUE,
    LABEL_HOSTNAME,
    RESOURCE_GPU,
)
from trainop.catalog.gfd import GpuFacts, gpu_facts_from_labels
from trainop.inventory.frozen import FrozenMap
from trainop.inventory.pods import BY_NAME, is_terminated, pod_binding, pod_request
from trainop.inventory.quantity import parse_count

UNLABELLED = "<unlabelled>"
DEFAULT_TOLERATED_TAINT_KEYS: tuple[str, ...] = (RESOURCE_GPU,)
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

TopologyPath = tuple[tuple[str, str], ...]

# Node class -> small int, so a class key is cheap to hash and compare. Interning is
# deterministic per process and never reused for another class (see NodeInfo.class_key).
_CLASS_IDS: dict[tuple[Any, ...], int] = {}


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        if self.value:
            return f"{self.key}={self.value}:{self.effect}"
        return f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class NodeInfo:
    """One node as placement sees it. gpus_free = max(0, allocatable - used)."""

    name: str
    labels: FrozenMap[str, str]
    gpu: GpuFacts
    gpus_allocatable: int
    gpus_used: int
    gpus_free: int
    extended: FrozenMap[str, int]
    topology: TopologyPath
    schedulable: bool
    images: frozenset[str]
    taints: tuple[Taint, ...]
    unschedulable_reason: str | None = None  # a short phrase when not schedulable, e.g. "cordoned"
    # When a node that is not Ready stopped being Ready (its Ready condition's
    # lastTransitionTime, as the API writes it); None while Ready.
    not_ready_since: str | None = field(default=None, compare=False)
    # What makes nodes interchangeable for eligibility (GPU facts, labels other than topology
    # and hostname, taints, GPU count): nodes of one class get the same compatibility verdict,
    # so the planner works a verdict out once per class, not once per node (see planner).
    class_key: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        per_node = {key for key, _ in self.topology} | {LABEL_HOSTNAME, LABEL_GPU_CLIQUE}
        labels = frozenset((k, v) for k, v in self.labels.items() if k not in per_node)
        gpu = replace(self.gpu, clique=None)
        key = (gpu, labels, self.taints, self.gpus_allocatable, self.schedulable)
        object.__setattr__(self, "class_key", _CLASS_IDS.setdefault(key, len(_CLASS_IDS)))

    def has_image(self, image: str | None) -> bool:
        """Whether the image is already pulled; tolerant of Docker Hub's implicit prefixes."""
        if not image or not self.images:
            return False
        return any(candidate in self.images for candidate in _image_aliases(image))

    def level_value(self, key: str) -> str | None:
        for k, v in self.topology:
            if k == key:
                return v
        return None


class Reservation(Protocol):
    """Anything with a node and a GPU count, e.g. placement's Assignment."""

    @property
    def node(self) -> str | None: ...

    @property
    def gpus(self) -> int: ...


Reservations = Mapping[str, int] | Iterable[Reservation]


class StaticMemo(dict[Any, Any]):
    """The "static" memo of a family of snapshots: a dict that only grows, but for
    `Snapshot.forget_static`, which counts what it drops in `drops`. So a caller that saw
    some keys in it can tell they are all still there from (the same memo, the same drops)
    without looking each one up again (queueing.tail; at 10,000 waiting jobs the lookups,
    each hashing a nested tuple, were 3 ms of a 25 ms cycle)."""

    drops: int = 0


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of the fleet; derive what-if views with with_reserved / with_released."""

    nodes: tuple[NodeInfo, ...]
    levels: tuple[str, ...] = DEFAULT_TOPOLOGY_LEVELS
    _by_name: dict[str, NodeInfo] = field(init=False, repr=False, compare=False)
    _domains: dict[str, FrozenMap[TopologyPath, tuple[NodeInfo, ...]]] = field(
        init=False, repr=False, compare=False
    )
    _memo: dict[Any, Any] = field(init=False, repr=False, compare=False)
    # The "static" memo entries (values that do not depend on GPU use): one dict shared by
    # every snapshot derived from this one (same nodes), never copied (issue 33, part 2).
    _static: StaticMemo = field(init=False, repr=False, compare=False)
    # Node name -> position in `nodes` (shared by every snapshot derived from this one).
    _pos: dict[str, int] = field(init=False, repr=False, compare=False)
    # Delta memos (see `delta_memo`): where a derived snapshot finds its parent's values,
    # and the nodes whose usage changed since.
    _src: dict[Any, Any] | None = field(init=False, repr=False, compare=False)
    _changed: frozenset[str] = field(init=False, repr=False, compare=False)
    _holds_delta: bool = field(init=False, repr=False, compare=False)
    # Free GPU units on schedulable GPU nodes: their sum, and how many nodes have each free
    # count (kept through derivations by the changed nodes alone; see free_bound).
    _free_total: int = field(init=False, repr=False, compare=False)
    _free_hist: dict[int, int] = field(init=False, repr=False, compare=False)

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """A value derived from this (immutable) snapshot alone, computed once per key. Keys
        that start with "static" name values that do not depend on free GPUs: the what-if
        snapshots of with_reserved / with_released / with_usage share them."""
        memo = self._static if type(key) is tuple and key and key[0] == "static" else self._memo
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    def __post_init__(self) -> None:
        nodes = tuple(sorted(self.nodes, key=lambda n: n.name))
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "levels", tuple(self.levels))
        by_name = {n.name: n for n in nodes}
        if len(by_name) != len(nodes):
            raise ValueError("duplicate node names in snapshot")
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_domains", {})
        object.__setattr__(self, "_memo", {})
        object.__setattr__(self, "_static", StaticMemo())
        object.__setattr__(self, "_pos", {n.name: i for i, n in enumerate(nodes)})
        object.__setattr__(self, "_src", None)
        object.__setattr__(self, "_changed", frozenset())
        object.__setattr__(self, "_holds_delta", False)
        hist: dict[int, int] = defaultdict(int)
        for n in nodes:
            if _counted(n):
                hist[n.gpus_free] += 1
        object.__setattr__(self, "_free_hist", dict(hist))
        object.__setattr__(self, "_free_total", sum(f * c for f, c in hist.items()))

    def free_bound(self) -> tuple[int, int]:
        """(free GPU units on all schedulable GPU nodes, the most free on one such node):
        O(1). A gang needing more than either can be placed nowhere now; the admission
        cycle asks this before running the planner for a waiting gang."""
        most = max((f for f, c in self._free_hist.items() if c > 0), default=0)
        return self._free_total, most

    def memo_view(self) -> StaticMemo:
        """The "static" memo as it is (read only): to ask whether such a key was computed."""
        return self._static

    def delta_memo(
        self,
        key: Any,
        build: Callable[[], Any],
        derive: Callable[[Any, frozenset[str]], Any],
    ) -> Any:
        """A value kept per snapshot that a derived snapshot (with_reserved, with_released,
        with_usage) derives from its parent's: `derive(parent_value, changed_node_names)`
        touches only the nodes whose usage changed, where `build()` would read them all.
        Keys must start with "delta". What-if chains stay one link deep: a snapshot refers
        to the memo of the nearest ancestor that holds delta values, never to a snapshot."""
        found = self._memo.get(key)
        if found is None:
            base = self._src.get(key) if self._src is not None else None
            found = derive(base, self._changed) if base is not None else build()
            self._memo[key] = found
            object.__setattr__(self, "_holds_delta", True)
        return found

    def node(self, name: str) -> NodeInfo:
        """The node called `name`; KeyError if the snapshot has none."""
        return self._by_name[name]

    def get(self, name: str) -> NodeInfo | None:
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def domains(self, level_key: str) -> Mapping[TopologyPath, tuple[NodeInfo, ...]]:
        """Domain path (pairs down to and including `level_key`) -> its nodes, in path order.

        Keys are paths rather than bare values so equal values under different parents stay
        apart; the value is `path[-1][1]`. Nodes without the level (e.g. no clique label) are
        absent. All nodes are included, schedulable or not.
        """
        cached = self._domains.get(level_key)
        if cached is None:
            groups: dict[TopologyPath, list[NodeInfo]] = defaultdict(list)
            for n in self.nodes:
                for depth, (key, _) in enumerate(n.topology):
                    if key == level_key:
                        groups[n.topology[: depth + 1]].append(n)
                        break
            cached = FrozenMap((k, tuple(groups[k])) for k in sorted(groups))
            self._domains[level_key] = cached
        return cached

    def free_gpus_by_product(self) -> Mapping[str, int]:
        """Free whole GPUs on schedulable nodes per GFD product ("unknown" when unlabelled).
        Nodes whose nvidia.com/gpu are slices (time-slicing, MPS, MIG) are not counted."""
        out: dict[str, int] = defaultdict(int)
        for n in self.nodes:
            if n.schedulable and n.gpus_allocatable > 0 and not n.gpu.shared:
                out[n.gpu.product or "unknown"] += n.gpus_free
        return FrozenMap((k, out[k]) for k in sorted(out))

    @property
    def gpus_free(self) -> int:
        """Free whole GPUs on schedulable nodes (sliced capacity is not whole GPUs)."""
        return sum(n.gpus_free for n in self.nodes if n.schedulable and not n.gpu.shared)

    def with_reserved(self, reservations: Reservations) -> Snapshot:
        """A new snapshot with these GPUs taken (simulate); the original is the undo.

        Raises ValueError on an unknown node or when a node lacks the free GPUs, because a caller
        that reserves more than placement handed out has a bug worth hearing about.
        """
        updated: dict[str, NodeInfo] = {}
        for name, gpus in _totals(reservations).items():
            node = self._by_name.get(name)
            if node is None:
                raise ValueError(f"cannot reserve GPUs on unknown node {name!r}")
            if gpus > node.gpus_free:
                raise ValueError(
                    f"cannot reserve {gpus} GPUs on {name}: only {node.gpus_free} free"
                )
            updated[name] = _with_used(node, node.gpus_used + gpus)
        return self._derived(updated)

    def with_usage(self, used: Mapping[str, int]) -> Snapshot:
        """A new snapshot in which each named node has exactly `used` GPUs in use (the
        operator's next view of the same nodes: only the nodes whose use moved are named)."""
        updated: dict[str, NodeInfo] = {}
        for name, gpus in used.items():
            node = self._by_name.get(name)
            if node is None:
                raise ValueError(f"cannot set the usage of unknown node {name!r}")
            if node.gpus_used != gpus:
                updated[name] = _with_used(node, gpus)
        return self._derived(updated)

    def standalone(self) -> Snapshot:
        """This (new, unshared) snapshot without a delta source, for a value kept beyond its
        parent's life (a "static" memo): it must not keep the parent's memo alive, with the
        per-job entries in it. Its delta memos are built afresh on first use."""
        object.__setattr__(self, "_src", None)
        object.__setattr__(self, "_changed", frozenset())
        object.__setattr__(self, "_static", StaticMemo())
        return self

    def forget_static(self, drop: Callable[[Any], bool]) -> None:
        """Forget the "static" memo entries whose key `drop` names (say, those of a job
        that is gone), here and in the memo this one derives its delta values from:
        derived snapshots share what is left."""
        memo = self._static
        for key in list(memo):  # a copy: the cycle's worker may add entries meanwhile
            if drop(key):
                memo.pop(key, None)
                memo.drops += 1

    def inherit_static(self, other: Snapshot) -> None:
        """Share `other`'s "static" memo: for a snapshot of the same nodes (names, labels,
        taints, allocatable) whose only difference is GPU usage. Shared, not copied: at
        10,000 waiting jobs (a "placeable" entry each) the copy was 5 ms a cycle; an entry
        any of them adds holds for all of them."""
        object.__setattr__(self, "_static", other._static)

    def _derived(self, updated: dict[str, NodeInfo]) -> Snapshot:
        """Same nodes in the same (sorted) order, `updated` ones with new usage: the dict
        and tuple copies are C-level; nothing per node runs in Python but the changes."""
        by_name = dict(self._by_name)
        by_name.update(updated)
        nodes = list(self.nodes)
        for name, info in updated.items():
            nodes[self._pos[name]] = info
        out = object.__new__(Snapshot)
        object.__setattr__(out, "nodes", tuple(nodes))
        object.__setattr__(out, "levels", self.levels)
        object.__setattr__(out, "_by_name", by_name)
        object.__setattr__(out, "_domains", {})
        object.__setattr__(out, "_memo", {})
        object.__setattr__(out, "_pos", self._pos)
        object.__setattr__(out, "_holds_delta", False)
        hist, total = dict(self._free_hist), self._free_total
        for name, info in updated.items():
            old = self._by_name[name]
            if _counted(old):
                hist[old.gpus_free] -= 1
                total -= old.gpus_free
            if _counted(info):
                hist[info.gpus_free] = hist.get(info.gpus_free, 0) + 1
                total += info.gpus_free
        object.__setattr__(out, "_free_hist", hist)
        object.__setattr__(out, "_free_total", total)
        changed = frozenset(updated)
        if self._holds_delta:
            object.__setattr__(out, "_src", self._memo)
            object.__setattr__(out, "_changed", changed)
        else:
            object.__setattr__(out, "_src", self._src)
            object.__setattr__(out, "_changed", self._changed | changed)
        out.inherit_static(self)
        return out

    def with_released(self, reservations: Reservations) -> Snapshot:
        """A new snapshot with these GPUs given back (e.g. preemption victims); used stays >= 0."""
        updated: dict[str, NodeInfo] = {}
        for name, gpus in _totals(reservations).items():
            node = self._by_name.get(name)
            if node is None:
                raise ValueError(f"cannot release GPUs on unknown node {name!r}")
            updated[name] = _with_used(node, max(0, node.gpus_used - gpus))
        return self._derived(updated)


def _counted(node: NodeInfo) -> bool:
    return node.schedulable and node.gpus_allocatable > 0


def _totals(reservations: Reservations) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    if isinstance(reservations, Mapping):
        for name, gpus in reservations.items():
            totals[name] += int(gpus)
    else:
        for r in reservations:
            if r.node is not None and r.gpus:
                totals[r.node] += r.gpus
    for name, gpus in totals.items():
        if gpus < 0:
            raise ValueError(f"negative GPU count {gpus} for node {name}")
    return totals


def _with_used(node: NodeInfo, used: int) -> NodeInfo:
    return replace(node, gpus_used=used, gpus_free=max(0, node.gpus_allocatable - used))


def _image_aliases(image: str) -> tuple[str, ...]:
    # status.images lists fully qualified names; a job may name "pytorch:2.4" or
    # "library/pytorch:2.4" for the same Docker Hub image.
    aliases = [image]
    first = image.split("/", 1)[0]
    has_registry = "/" in image and ("." in first or ":" in first or first == "localhost")
    if not has_registry:
        path = image if "/" in image else f"library/{image}"
        aliases.append(f"docker.io/{path}")
    return tuple(aliases)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _ready(node: Mapping[str, Any]) -> tuple[bool, str | None]:
    for cond in _get(node, "status", "conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            if cond.get("status") == "True":
                return True, None
            why = cond.get("reason") or f"Ready={cond.get('status')}"
            return False, f"not Ready ({why})"
    return False, "not Ready (no Ready condition reported)"


def _taints(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    out = []
    for t in _get(node, "spec", "taints") or ():
        if isinstance(t, Mapping) and t.get("key"):
            out.append(Taint(str(t["key"]), str(t.get("value") or ""), str(t.get("effect") or "")))
    return tuple(out)


def _topology(
    name: str, labels: Mapping[str, str], levels: Sequence[str], clique: str | None
) -> TopologyPath:
    path = [(key, labels.get(key) or UNLABELLED) for key in levels[:-1]]
    if clique:
        path.append((LABEL_GPU_CLIQUE, clique))
    path.append((levels[-1], labels.get(levels[-1]) or name))
    return tuple(path)


def _extended(allocatable: Mapping[str, Any]) -> FrozenMap[str, int]:
    # Extended resources are the domain-prefixed names outside kubernetes.io (RDMA devices,
    # SR-IOV VFs, ...); GPUs get their own fields.
    out = {}
    for key in sorted(allocatable):
        if "/" not in key or key == RESOURCE_GPU:
            continue
        domain = key.split("/", 1)[0]
        if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
            continue
        out[key] = parse_count(allocatable[key], default=0)
    return FrozenMap(out)


def node_info(
    node: Mapping[str, Any],
    *,
    levels: Sequence[str] = DEFAULT_TOPOLOGY_LEVELS,
    tolerated_taint_keys: Iterable[str] = DEFAULT_TOLERATED_TAINT_KEYS,
    gpus_used: int = 0,
) -> NodeInfo:
    """One Node dict -> NodeInfo with `gpus_used` GPUs already taken."""
    name = _get(node, "metadata", "name")
    if not name:
        raise ValueError("node without metadata.name")
    if not levels:
        raise ValueError("at least one topology level (the node level) is required")
    raw_labels = _get(node, "metadata", "labels") or {}
    labels = FrozenMap((str(k), str(v)) for k, v in raw_labels.items())
    gpu = gpu_facts_from_labels(labels)
    allocatable = _get(node, "status", "allocatable") or {}
    gpus = parse_count(allocatable.get(RESOURCE_GPU, 0), default=0)

    ready, reason = _ready(node)
    taints = _taints(node)
    tolerated = frozenset(tolerated_taint_keys)
    if ready and _get(node, "spec", "unschedulable"):
        reason = "cordoned (spec.unschedulable)"
    if ready and reason is None:
        blocking = [t for t in taints if t.effect in _BLOCKING_EFFECTS and t.key not in tolerated]
        if blocking:
            reason = f"taint {blocking[0]}"
    images = frozenset(
        str(n) for img in _get(node, "status", "images") or () for n in (img.get("names") or ())
    )
    since = None
    if not ready:
        for cond in _get(node, "status", "conditions") or ():
            if isinstance(cond, Mapping) and cond.get("type") == "Ready":
                since = str(cond.get("lastTransitionTime") or "") or None
    return NodeInfo(
        not_ready_since=since,
        name=str(name),
        labels=labels,
        gpu=gpu,
        gpus_allocatable=gpus,
        gpus_used=gpus_used,
        gpus_free=max(0, gpus - gpus_used),
        extended=_extended(allocatable),
        topology=_topology(str(name), labels, levels, gpu.clique),
        schedulable=reason is None,
        images=images,
        taints=taints,
        unschedulable_reason=reason,
    )


def gpus_in_use(
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    *,
    ignore_pods: Callable[[Mapping[str, Any]], bool] | None = None,
) -> dict[str, int]:
    """Node name -> GPUs held by live pods bound to it or pinned to it (see pods.pod_binding)."""
    by_hostname: dict[str, str] = {}
    names: set[str] = set()
    for node in nodes:
        name = str(_get(node, "metadata", "name") or "")
        names.add(name)
        hostname = (_get(node, "metadata", "labels") or {}).get(LABEL_HOSTNAME)
        by_hostname.setdefault(str(hostname or name), name)
    used: dict[str, int] = defaultdict(int)
    for pod in pods:
        if is_terminated(pod) or (ignore_pods is not None and ignore_pods(pod)):
            continue
        binding = pod_binding(pod)
        if binding is None:
            continue
        kind, value = binding
        target = value if kind == BY_NAME else by_hostname.get(value)
        if target is None or target not in names:
            continue  # a pod for a node outside the snapshot holds nothing we place on
        gpus = pod_request(pod)
        if gpus:
            used[target] += gpus
    return dict(used)


def build_snapshot(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]] = (),
    *,
    levels: Sequence[str] = DEFAULT_TOPOLOGY_LEVELS,
    tolerated_taint_keys: Iterable[str] = DEFAULT_TOLERATED_TAINT_KEYS,
    ignore_pods: Callable[[Mapping[str, Any]], bool] | None = None,
) -> Snapshot:
    """Build the snapshot from `kubectl get nodes/pods -o yaml` items (plain dicts).

    GPUs in use: every pod not Succeeded/Failed (deleting pods included: they hold their GPUs
    until gone) that is bound to a node or pinned to exactly one node. `ignore_pods` drops pods,
    e.g. those of the job being re-planned. `tolerated_taint_keys` names NoSchedule/NoExecute
    taints that do not make a node unschedulable (GPU nodes are commonly tainted nvidia.com/gpu
    and trainop's pods tolerate it).
    """
    levels = tuple(levels)
    used = gpus_in_use(pods, nodes, ignore_pods=ignore_pods)
    tolerated = tuple(tolerated_taint_keys)
    infos = []
    for node in nodes:
        name = str(_get(node, "metadata", "name") or "")
        infos.append(
            node_info(
                node,
                levels=levels,
                tolerated_taint_keys=tolerated,
                gpus_used=used.get(name, 0),
            )
        )
    return Snapshot(nodes=tuple(infos), levels=levels)
