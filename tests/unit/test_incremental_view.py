"""The operator's incremental placement view against a from-scratch rebuild.

ShellState derives each snapshot from the last by the nodes whose usage moved, and
placement derives its per-domain counters from the parent snapshot's (Snapshot.delta_memo).
Random sequences of what the watch and the admission cycle do (pods start and end, gangs
are assumed, created and forgotten, what-if reservations are taken) must give the same
free GPUs per node and the same placements as a snapshot built from nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import busy, fleet_nodes
from trainop.handlers.state import ShellState
from trainop.inventory import Snapshot, build_snapshot
from trainop.placement import GangRequest, GroupRequest, place

NODES = fleet_nodes()
NAMES = sorted(n["metadata"]["name"] for n in NODES)


def _built(used: dict[str, int]) -> Snapshot:
    """A snapshot built from the node bodies with `used` GPUs in use per node."""
    nodes = []
    for n in build_snapshot(NODES, []).nodes:
        u = used.get(n.name, 0)
        nodes.append(replace(n, gpus_used=u, gpus_free=max(0, n.gpus_allocatable - u)))
    return Snapshot(nodes=tuple(nodes))


def _fresh(state: ShellState) -> Snapshot:
    """The state's usage, counted from scratch."""
    return _built(state.used_by_node())


def _gang(size: int, gpus: int, topology: str, keyed: bool) -> GangRequest:
    return GangRequest(
        job="t/gang",
        groups=(GroupRequest("Worker", size, gpus),),
        topology=topology,
        mode="Preferred",
        filter_key=("any",) if keyed else None,
    )


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("pod"), st.sampled_from(NAMES), st.sampled_from([1, 2, 4, 8])),
        st.tuples(st.just("end"), st.integers(0, 40)),
        st.tuples(st.just("assume"), st.sampled_from(NAMES), st.sampled_from([2, 8])),
        st.tuples(st.just("forget"), st.integers(0, 10)),
        st.tuples(st.just("what-if"), st.sampled_from(NAMES), st.sampled_from([1, 4])),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops, shape=st.sampled_from([(1, 4), (2, 8), (3, 8), (2, 4)]))
def test_incremental_view_equals_a_rebuild(
    ops: list[tuple[Any, ...]], shape: tuple[int, int]
) -> None:
    state = ShellState()
    for node in NODES:
        state.upsert_node(node)
    state.mark_synced()
    pods: list[tuple[str, str]] = []
    jobs: list[str] = []
    for i, op in enumerate(ops):
        snap = state.snapshot()
        if op[0] == "pod":
            body = busy(op[1], op[2], f"p{i}")
            state.upsert_pod(body)
            pods.append(("default", f"p{i}"))
        elif op[0] == "end" and pods:
            state.remove_pod(*pods.pop(op[1] % len(pods)))
        elif op[0] == "assume":
            key = f"t/j{i}"
            state.assume(key, {f"j{i}-0": ("name", op[1], op[2])}, now=state.clock())
            jobs.append(key)
        elif op[0] == "forget" and jobs:
            state.forget(jobs.pop(op[1] % len(jobs)))
        elif op[0] == "what-if":  # a cycle's reservation: a derived snapshot, state unchanged
            node = snap.node(op[1])
            if node.gpus_free >= op[2]:
                snap = snap.with_reserved({op[1]: op[2]})
        # The gang is placed on the incremental view (delta counters, when keyed) and on
        # one built from nothing with the same usage, and the state's own view is checked.
        for keyed in (True, False):
            request = _gang(*shape, "rack", keyed)
            assert place(snap, request) == place(_same_usage(snap), request)
        view = state.snapshot()
        assert [n.gpus_free for n in view.nodes] == [n.gpus_free for n in _fresh(state).nodes]
    view = state.snapshot()
    fresh = _fresh(state)
    assert [(n.name, n.gpus_free) for n in view.nodes] == [
        (n.name, n.gpus_free) for n in fresh.nodes
    ]


def _same_usage(snap: Snapshot) -> Snapshot:
    return _built({n.name: n.gpus_used for n in snap.nodes})
