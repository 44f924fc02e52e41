"""Hypothesis properties of trainop.placement.place: capacity, completeness, domains, ranks."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import node
from trainop.api.constants import LABEL_BLOCK, LABEL_GPU_CLIQUE, LABEL_RACK
from trainop.inventory import NodeInfo, Snapshot, build_snapshot
from trainop.placement import GangRequest, GroupRequest, NoFit, Placement, place

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LEVEL_KEY = {"rack": LABEL_RACK, "block": LABEL_BLOCK}


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """1-3 blocks x 1-3 racks x 1-4 nodes of 4 or 8 GPUs, some busy, some down, some in cliques."""
    nodes: list[dict[str, Any]] = []
    used: dict[str, int] = {}
    for b in range(draw(st.integers(1, 3))):
        for r in range(draw(st.integers(1, 3))):
            cliques = draw(st.booleans())
            for n in range(draw(st.integers(1, 4))):
                name = f"n{b}{r}{n}"
                gpus = draw(st.sampled_from([4, 8]))
                builder = node(name).gpus(str(gpus)).block(f"b{b}").rack(f"r{b}{r}")
                if cliques:
                    builder.clique(f"c{b}{r}.{n // 2}")
                if draw(st.integers(0, 9)) == 0:
                    builder.not_ready()
                nodes.append(builder.build())
                used[name] = draw(st.sampled_from([0, 0, 0, 1, 2, 4, 8]))
    s = build_snapshot(nodes)
    return s.with_reserved({k: min(v, s.node(k).gpus_free) for k, v in used.items()})


@st.composite
def requests(draw: st.DrawFn, *, single: bool = False) -> GangRequest:
    size = draw(st.sampled_from([1, 2, 4, 8, 8]))  # whole-node replicas weigh double
    groups = [GroupRequest("Worker", draw(st.integers(1, 10)), size)]
    if not single and draw(st.booleans()):
        groups.append(
            GroupRequest("Chief", draw(st.integers(0, 2)), draw(st.sampled_from([0, 1, 4, 8])))
        )
    return GangRequest(
        "job",
        tuple(groups),
        draw(st.sampled_from(["none", "node", "rack", "block"])),
        draw(st.sampled_from(["Required", "Preferred"])),
    )


def _usable(node: NodeInfo) -> bool:
    return node.schedulable and node.gpus_allocatable > 0


def _prefix(node: NodeInfo, key: str) -> tuple[tuple[str, str], ...]:
    for depth, (k, _) in enumerate(node.topology):
        if k == key:
            return node.topology[: depth + 1]
    raise AssertionError(f"{node.name} has no {key}")


@SETTINGS
@given(snapshots(), requests())
def test_placement_invariants(snapshot: Snapshot, request: GangRequest) -> None:  # noqa: C901 - one assertion per placement invariant
    result = place(snapshot, request)
    assert result == place(snapshot, request)  # deterministic
    if isinstance(result, NoFit):
        assert result.reason
        return

    # exactly the requested replicas, each once
    for group in request.groups:
        mine = [a for a in result.assignments if a.role == group.role]
        assert sorted(a.index for a in mine) == list(range(group.replicas))
        for a in mine:
            assert a.gpus == group.gpus
            assert (a.node is None) == (group.gpus == 0)
            assert (a.rank is None) == (group.gpus == 0)
    assert len(result.assignments) == sum(g.replicas for g in request.groups)

    # never over-commits, only eligible nodes
    taken: Counter[str] = Counter()
    for a in result.assignments:
        if a.node is not None:
            taken[a.node] += a.gpus
    for name, gpus in taken.items():
        node = snapshot.node(name)
        assert _usable(node)
        assert gpus <= node.gpus_free
    snapshot.with_reserved(result.assignments)  # raises on over-commit

    used = [snapshot.node(n) for n in taken]
    # Required never spans two domains of its level
    if request.mode == "Required" and used:
        if request.topology == "node":
            assert len(taken) == 1
        elif request.topology in LEVEL_KEY:
            assert len({_prefix(n, LEVEL_KEY[request.topology]) for n in used}) == 1

    # ranks: a permutation of 0..n-1, contiguous per node within each group
    gpu = sorted((a for a in result.assignments if a.rank is not None), key=lambda a: a.rank or 0)
    assert [a.rank for a in gpu] == list(range(len(gpu)))
    for group in request.groups:
        ranks_by_node: dict[str, list[int]] = defaultdict(list)
        for a in gpu:
            if a.role == group.role and a.node is not None and a.rank is not None:
                ranks_by_node[a.node].append(a.rank)
        for ranks in ranks_by_node.values():
            assert ranks == list(range(ranks[0], ranks[0] + len(ranks)))
    # ranks follow group order, and the topology path within a group
    assert [a.role for a in gpu] == sorted(
        (a.role for a in gpu), key=lambda r: [g.role for g in request.groups].index(r)
    )
    for group in request.groups:
        paths = [a.domain for a in gpu if a.role == group.role]
        assert paths == sorted(paths)

    assert sum(result.span.values()) >= 1
    assert result.span["node"] == len(taken)


def _capacity(nodes: list[NodeInfo], size: int) -> int:
    return sum(n.gpus_free // size for n in nodes)


def _best_capacity(snapshot: Snapshot, key: str | None, size: int) -> int:
    eligible = [n for n in snapshot.nodes if _usable(n)]
    if key is None:  # single nodes
        return max((n.gpus_free // size for n in eligible), default=0)
    groups: dict[tuple[tuple[str, str], ...], list[NodeInfo]] = defaultdict(list)
    for n in eligible:
        if n.level_value(key) is not None:
            groups[_prefix(n, key)].append(n)
    return max((_capacity(g, size) for g in groups.values()), default=0)


@SETTINGS
@given(snapshots(), requests(single=True))
def test_single_size_gangs_are_placed_whenever_possible(
    snapshot: Snapshot, request: GangRequest
) -> None:
    """With one replica size the greedy search is complete and picks the smallest level."""
    group = request.groups[0]
    replicas, size = group.replicas, group.gpus
    eligible = [n for n in snapshot.nodes if _usable(n)]
    levels: list[tuple[str, int]] = [
        ("node", _best_capacity(snapshot, None, size)),
        ("clique", _best_capacity(snapshot, LABEL_GPU_CLIQUE, size)),
        ("rack", _best_capacity(snapshot, LABEL_RACK, size)),
        ("block", _best_capacity(snapshot, LABEL_BLOCK, size)),
        ("cluster", _capacity(eligible, size)),
    ]
    smallest = next((name for name, cap in levels if cap >= replicas), None)
    cap_at = {"node": 0, "rack": 2, "block": 3, "none": 4}[request.topology]
    allowed = [name for name, _ in levels[: cap_at + 1]]
    if request.mode == "Preferred":
        allowed = [name for name, _ in levels]

    result = place(snapshot, request)
    if smallest is not None and smallest in allowed:
        assert isinstance(result, Placement), result
        assert result.level == smallest
    else:
        assert isinstance(result, NoFit), result
