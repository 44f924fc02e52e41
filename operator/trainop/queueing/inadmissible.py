"""Jobs that can never be admitted as written, told apart from jobs that wait (pure).

A job waits (Quota, NoFit) when what it asks for is in use; it is Inadmissible when no
amount of waiting could give it: more GPUs than its queue could ever have for its GPU
products (nominal quota plus what it may borrow), more than the fleet has at all, a
replica larger than any node, or a Required rack/block/node larger than any such domain.
An Inadmissible job waits out of line (`QueuedJob.blocked_reason`), so it is never a
queue's head: it holds no quota and blocks no backfill. Its intake is taken again when
the job, its queue or the nodes change (handlers.state.intake_signature), so it is
reconsidered then. Kueue marks such workloads inadmissible in the same way
(https://kueue.sigs.k8s.io/docs/concepts/workload/#inadmissible-workloads).

Neighbours: `queueing.cluster.intake` asks both checks for every job not yet admitted;
`trainop render` asks `fleet_shortfall` to exit with its own code ("never fits this
fleet"). Everything here is static per snapshot ("static" memos): allocatable GPUs, not
free ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from trainop.inventory import Snapshot
from trainop.placement import BLOCK, CLIQUE, NODE, RACK, level_names
from trainop.queueing.model import QueueState, QuotaGroup


def _alloc(snapshot: Snapshot, products: tuple[str, ...]) -> tuple[int, int]:
    """(GPUs allocatable on nodes of `products` (any when empty), the most on one node)."""

    def count() -> tuple[int, int]:
        total = most = 0
        for n in snapshot.nodes:
            if n.gpus_allocatable > 0 and (not products or n.gpu.product in products):
                total += n.gpus_allocatable
                most = max(most, n.gpus_allocatable)
        return total, most

    found: tuple[int, int] = snapshot.memo(("static", "allocatable", products), count)
    return found


def _largest_domain(snapshot: Snapshot, level: str, products: tuple[str, ...]) -> int | None:
    """The most GPUs allocatable in one domain of `level` (rack, block, clique, node); None when
    the fleet's topology has no such level."""

    def largest() -> int | None:
        names = level_names(snapshot.levels)
        key = next((k for k, name in names.items() if name == level), None)
        if key is None:
            return None
        sums: dict[object, int] = defaultdict(int)
        for path, nodes in snapshot.domains(key).items():
            for n in nodes:
                if n.gpus_allocatable > 0 and (not products or n.gpu.product in products):
                    sums[path] += n.gpus_allocatable
        return max(sums.values(), default=0)

    found: int | None = snapshot.memo(("static", "largest-domain", level, products), largest)
    return found


def fleet_shortfall(
    gpus: int,
    largest_replica: int,
    products: Sequence[str],
    topology: str,
    mode: str,
    snapshot: Snapshot,
) -> str | None:
    """Why the fleet can never hold the gang, with the numbers; None when it might."""
    allowed = tuple(sorted(products))
    what = f" of {', '.join(allowed)}" if allowed else ""
    total, most = _alloc(snapshot, allowed)
    if gpus > total:
        return f"needs {gpus} GPUs; the whole fleet has {total} GPUs{what}"
    if largest_replica > most:
        return (
            f"a replica needs {largest_replica} GPUs on one node; the largest node has {most}{what}"
        )
    if mode == "Required" and topology in (RACK, BLOCK, NODE, CLIQUE):
        room = _largest_domain(snapshot, topology, allowed)
        if room is not None and gpus > room:
            return (
                f"needs {gpus} GPUs in one {topology} (Required); the largest {topology} has "
                f"{room} GPUs{what}"
            )
    return None


def quota_shortfall(
    gpus: int,
    products: Sequence[str],
    queue: QueueState,
    queues: Sequence[QueueState],
) -> str | None:
    """Why `queue` can never give the job its GPUs: more than any group that serves its
    products could ever reach (nominal plus its borrowing limit, or plus all the other
    cohort members' nominal when it has none). None when it might, or the queue counts no
    GPUs."""
    if queue.unlimited or queue.builtin:
        return None
    groups = [
        g for g in queue.groups if g.is_any or not products or set(g.products) & set(products)
    ]
    if not groups:
        return None  # which group serves it is the quota's own message (Policy / Quota)
    if queue.parent:
        return _tree_shortfall(gpus, queue, groups, queues)
    lend = _lendable(queue, queues)
    best = max(groups, key=lambda g: _ceiling(g.nominal, g.borrowing_limit, lend.get(g.name, 0)))
    ceiling = _ceiling(best.nominal, best.borrowing_limit, lend.get(best.name, 0))
    if gpus <= ceiling:
        return None
    borrow = ceiling - best.nominal
    return (
        f"needs {gpus} GPUs; TrainingQueue {queue.name} can never have more than {ceiling} "
        f"for group {best.name} ({best.nominal} nominal + {borrow} it may borrow)"
    )


def _tree_shortfall(
    gpus: int, queue: QueueState, groups: Sequence[QuotaGroup], queues: Sequence[QueueState]
) -> str | None:
    """quota_shortfall for a queue in a tree: the lowest ceiling on its path to the root
    (each level's nominal plus its borrowingLimit; the root's as a flat queue's)."""
    by_name = {q.name: q for q in queues}
    best: tuple[int, str, str] | None = None  # (ceiling, group, the level that caps it)
    for g in groups:
        cap, where = _tree_ceiling(queue, g.name, by_name, queues)
        if best is None or cap > best[0]:
            best = (cap, g.name, where)
    if best is None or gpus <= best[0]:
        return None
    return (
        f"needs {gpus} GPUs; TrainingQueue {queue.name} can never have more than {best[0]} "
        f"for group {best[1]}: {best[2]} caps it"
    )


def _tree_ceiling(
    queue: QueueState,
    group: str,
    by_name: Mapping[str, QueueState],
    queues: Sequence[QueueState],
) -> tuple[int, str]:
    cap, where = 1 << 62, queue.name
    seen: set[str] = set()
    q: QueueState | None = queue
    while q is not None and q.name not in seen:
        seen.add(q.name)
        g = q.group(group)
        nominal, limit = (g.nominal, g.borrowing_limit) if g else (0, None)
        if q.parent is None or q.parent not in by_name:
            lend = _lendable(q, queues).get(group, 0)
            here = _ceiling(nominal, limit, lend)
        else:
            here = nominal + limit if limit is not None else 1 << 62
        if here < cap:
            lim = "" if limit is None else f", borrowingLimit {limit}"
            cap, where = here, f"{q.name} (quota {nominal}{lim})"
        q = by_name.get(q.parent) if q.parent else None
    return cap, where


def _ceiling(nominal: int, limit: int | None, lendable: int) -> int:
    return nominal + (lendable if limit is None else min(limit, lendable))


def _lendable(queue: QueueState, queues: Sequence[QueueState]) -> Mapping[str, int]:
    """Per group name: the nominal GPUs of the other members of the queue's cohort."""
    out: dict[str, int] = defaultdict(int)
    if not queue.cohort:
        return out
    for q in queues:
        if q.name != queue.name and q.cohort == queue.cohort and not q.unlimited:
            for g in q.groups:
                out[g.name] += g.nominal
    return out
