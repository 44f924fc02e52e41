"""Gang placement records: what a job asks for (GangRequest), what it gets (Placement/NoFit)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainop.inventory import FrozenMap, NodeInfo, TopologyPath
from trainop.placement.cost import AllreduceEstimate, FabricCost

Topology = Literal["none", "node", "clique", "rack", "block"]
Mode = Literal["Required", "Preferred"]
NodeFilter = Callable[[NodeInfo], str | None]

TOPOLOGIES: tuple[str, ...] = ("none", "node", "clique", "rack", "block")
MODES: tuple[str, ...] = ("Required", "Preferred")


@dataclass(frozen=True)
class GroupRequest:
    """`replicas` pods of one role, each needing `gpus` GPUs on a single node (0: not pinned)."""

    role: str
    replicas: int
    gpus: int

    def __post_init__(self) -> None:
        if not self.role:
            raise ValueError("group role must not be empty")
        if self.replicas < 0:
            raise ValueError(f"{self.role}: replicas must be >= 0, got {self.replicas}")
        if self.gpus < 0:
            raise ValueError(f"{self.role}: gpus must be >= 0, got {self.gpus}")


@dataclass(frozen=True)
class GangRequest:
    """A whole job: all GPU replicas are placed together or not at all.

    node_filter(node) returns None when the node can run the job, else a sentence saying why
    not (the CUDA/driver compatibility check plugs in here). gpu_products is an allow-list of
    nvidia.com/gpu.product values (empty: any). image prefers nodes that already pulled it.
    cost prices placements (placement.cost; None: the built-in FabricProfiles and defaults).
    """

    job: str
    groups: tuple[GroupRequest, ...]
    topology: Topology
    mode: Mode
    gpu_products: tuple[str, ...] = ()
    node_filter: NodeFilter | None = field(default=None, compare=False)
    image: str | None = None
    # What node_filter depends on (hashable), when the caller can say: requests with equal
    # keys get the same eligibility, which place() then works out once per snapshot.
    filter_key: Any = field(default=None, compare=False)
    cost: FabricCost | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        object.__setattr__(self, "gpu_products", tuple(self.gpu_products))
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}: {self.topology!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}: {self.mode!r}")
        roles = [g.role for g in self.groups]
        if len(set(roles)) != len(roles):
            raise ValueError(f"duplicate roles in gang {self.job}: {roles}")


@dataclass(frozen=True)
class Assignment:
    """One replica. GPU replicas have a node, a rank and the node's topology path; 0-GPU ones
    have node None, rank None and domain ()."""

    role: str
    index: int
    node: str | None
    rank: int | None
    domain: TopologyPath
    gpus: int = 0


@dataclass(frozen=True)
class Placement:
    """Where every replica goes.

    level: the smallest level one of whose domains holds all GPU replicas ("node", "clique",
    "rack", "block" or "cluster"; a configured level beyond block is named by its label key);
    domain: that domain's path (() for the cluster); span: distinct domains used per level
    ("node", "clique", "rack", "block"); score: lower is better (see placement.engine);
    allreduce: the cost model's estimate for a 1 GiB allreduce (see placement.cost).
    """

    assignments: tuple[Assignment, ...]
    level: str
    domain: TopologyPath
    span: FrozenMap[str, int]
    score: float
    explanation: str
    allreduce: AllreduceEstimate | None = None

    def __iter__(self) -> Iterator[Assignment]:
        return iter(self.assignments)

    @property
    def ranked(self) -> tuple[Assignment, ...]:
        """GPU assignments in rank order."""
        gpu = [a for a in self.assignments if a.rank is not None]
        return tuple(sorted(gpu, key=lambda a: a.rank or 0))

    @property
    def nodes(self) -> tuple[str, ...]:
        """Distinct nodes in rank order (the first hosts rank 0)."""
        seen: dict[str, None] = {}
        for a in self.ranked:
            if a.node is not None:
                seen.setdefault(a.node, None)
        return tuple(seen)

    def gpus_by_node(self) -> Mapping[str, int]:
        out: dict[str, int] = {}
        for a in self.assignments:
            if a.node is not None:
                out[a.node] = out.get(a.node, 0) + a.gpus
        return FrozenMap(out)

    def assignment(self, role: str, index: int) -> Assignment:
        for a in self.assignments:
            if a.role == role and a.index == index:
                return a
        raise KeyError((role, index))


@dataclass(frozen=True)
class NoFit:
    """The gang cannot be placed now: `reason` is one sentence a user can act on; `details`
    carries the supporting facts (excluded nodes by cause, the largest domains, ...)."""

    reason: str
    details: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.reason
