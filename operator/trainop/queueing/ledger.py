"""Quota arithmetic: GPUs used per queue and product group, borrowing within a cohort, fair share.

Quota rule (as Kueue's ClusterQueue/cohort). For queue Q, group k, a gang of g GPUs:
  * within nominal: used(Q,k) + g <= nominal(Q,k), and the cohort still has the room
    (sum of used over members + g <= sum of nominal over members). When members borrowed Q's
    idle quota the second test fails: Q is entitled to the GPUs and reclaims them (preemption).
  * borrowing: the excess b = used(Q,k) + g - nominal(Q,k) must stay within Q's
    borrowingLimit for k, and the cohort must have the room (same sum test): Q only takes
    quota other members leave idle. A queue without a cohort cannot borrow.
Members of a cohort lend per group key (QuotaGroup.name): a member without that group lends 0.

Fair share (weighted dominant-resource share, the order in which queues' heads go next):
  share(Q) = max over Q's groups k of used(Q,k) / max(nominal(Q,k), 1), divided by weight(Q)
i.e. each tenant's most used group relative to its entitlement. A queue at 25% of its H100
quota goes before one at 75%; weight 2 counts usage at half. Unlimited queues use the
fleet's GPU count as their entitlement. Ties: the head with higher priority, then the older
head, then the queue name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from trainop.queueing.model import QueueState


@dataclass(frozen=True)
class QuotaVerdict:
    ok: bool
    borrow: int  # GPUs beyond nominal the gang would use (0: within nominal)
    message: str = ""
    reclaimable: bool = False  # within nominal, blocked only by what cohort members borrowed


class Ledger:
    """Mutable usage counters for one admission pass; `copy()` gives a what-if."""

    def __init__(self, queues: Mapping[str, QueueState], fleet_gpus: int) -> None:
        self.queues = queues
        self.fleet_gpus = fleet_gpus
        self.used: dict[tuple[str, str], int] = defaultdict(int)
        self.running: dict[str, int] = defaultdict(int)
        self._cohorts: dict[str, tuple[str, ...]] = {}
        members: dict[str, list[str]] = defaultdict(list)
        for q in queues.values():
            if q.cohort and not q.unlimited:
                members[q.cohort].append(q.name)
        self._cohorts = {c: tuple(sorted(names)) for c, names in members.items()}

    def copy(self) -> Ledger:
        other = Ledger.__new__(Ledger)
        other.queues = self.queues
        other.fleet_gpus = self.fleet_gpus
        other.used = defaultdict(int, self.used)
        other.running = defaultdict(int, self.running)
        other._cohorts = self._cohorts
        return other

    def charge(self, queue: str, group: str, gpus: int) -> None:
        self.used[(queue, group)] += gpus
        self.running[queue] += 1

    def uncharge(self, queue: str, group: str, gpus: int) -> None:
        self.used[(queue, group)] -= gpus
        self.running[queue] -= 1

    def members(self, queue: QueueState) -> tuple[str, ...]:
        """Queues sharing quota with `queue` (itself included)."""
        if queue.cohort and not queue.unlimited:
            return self._cohorts.get(queue.cohort, (queue.name,))
        return (queue.name,)

    def cohort_room(self, queue: QueueState, group: str) -> int:
        """Nominal minus used over the cohort's members for `group` (may be negative)."""
        total = 0
        for name in self.members(queue):
            q = self.queues[name]
            total += q.nominal(group) - self.used[(name, group)]
        return total

    def borrowed(self, queue: str, group: str) -> int:
        q = self.queues[queue]
        return max(0, self.used[(queue, group)] - q.nominal(group))

    def running_full(self, queue: QueueState) -> bool:
        limit = queue.max_running_jobs
        return limit is not None and self.running[queue.name] >= limit

    def quota_fit(self, queue: QueueState, group: str, gpus: int) -> QuotaVerdict:
        """Whether a gang of `gpus` fits the quota of `queue`'s `group` now (see module doc)."""
        if queue.unlimited:
            return QuotaVerdict(True, 0)
        nominal = queue.nominal(group)
        used = self.used[(queue.name, group)]
        after = used + gpus
        room = self.cohort_room(queue, group)
        head = (
            f"queue {queue.name} uses {used} of its {nominal} {group} GPUs and the job needs {gpus}"
        )
        if after <= nominal:
            if room >= gpus:
                return QuotaVerdict(True, 0)
            lent = sum(self.borrowed(m, group) for m in self.members(queue) if m != queue.name)
            return QuotaVerdict(
                False,
                0,
                f"{head}: within its quota, but cohort {queue.cohort} members borrowed {lent} "
                f"of them, leaving {max(room, 0)} free",
                reclaimable=True,
            )
        borrow = after - nominal
        g = queue.group(group)
        limit = g.borrowing_limit if g else None
        if not queue.cohort:
            return QuotaVerdict(
                False,
                borrow,
                f"{head}: {borrow} over its quota, and it has no cohort to borrow from",
            )
        if limit is not None and borrow > limit:
            return QuotaVerdict(
                False,
                borrow,
                f"{head}: it would borrow {borrow}, above its borrowingLimit of {limit}",
            )
        if room < gpus:
            idle = max(room - max(nominal - used, 0), 0)
            lends = f"only {idle} idle {group} GPUs" if idle else f"no idle {group} GPUs"
            return QuotaVerdict(
                False,
                borrow,
                f"{head}: it would borrow {borrow}, but cohort {queue.cohort} has {lends} to lend",
            )
        return QuotaVerdict(True, borrow)

    def share(self, queue: QueueState) -> float:
        """Weighted dominant-resource share (see module doc)."""
        if queue.unlimited or not queue.groups:
            total = sum(v for (q, _), v in self.used.items() if q == queue.name)
            return total / max(self.fleet_gpus, 1) / queue.weight
        worst = 0.0
        groups = {g.name for g in queue.groups} | {k for (q, k) in self.used if q == queue.name}
        for k in groups:
            used = self.used[(queue.name, k)]
            worst = max(worst, used / max(queue.nominal(k), 1))
        return worst / queue.weight
