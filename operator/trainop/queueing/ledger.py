"""Quota arithmetic: GPUs used per queue and product group, borrowing within a cohort, fair share.

Quota rule (as Kueue's ClusterQueue/cohort). For queue Q, group k, a gang of g GPUs:
  * within nominal: used(Q,k) + g <= nominal(Q,k), and the cohort still has the room
    (sum of used over members + g <= sum of nominal over members). When members borrowed Q's
    idle quota the second test fails: Q is entitled to the GPUs and reclaims them (preemption).
  * borrowing: the excess b = used(Q,k) + g - nominal(Q,k) must stay within Q's
    borrowingLimit for k, and the cohort must have the room (same sum test): Q only takes
    quota other members leave idle. A queue without a cohort cannot borrow.
Members of a cohort lend per group key (QuotaGroup.name): a member without that group lends 0.

Queue trees (spec.parent; queueing.hierarchy). A parent's used is its subtree's: charging a
leaf charges every queue on its path. A gang of g GPUs for leaf L fits when, at every level
N on the path from L up to its root (u = used(N,k) + g):
  * u <= nominal(N,k): within N's guarantee at this level, or
  * N borrows b = u - nominal(N,k) within N's borrowingLimit for k, from its parent, which
    is checked the same way one level up; the root lends nothing beyond its quota unless it
    is a member of a flat cohort (then the cohort rule above, over whole trees).
So borrowing comes from siblings first (the parent's quota their idle GPUs leave room in),
and from further up only when the parent itself is full. Children's quotas add up to at
most their parent's (checked by queueing.hierarchy), so a leaf within its quota is owed its
GPUs at every level: when another level is full, its borrowers are reclaimed (`lends`).

Fair share (weighted dominant-resource share, the order in which queues' heads go next):
  share(Q) = max over Q's groups k of used(Q,k) / max(nominal(Q,k), 1), divided by weight(Q)
i.e. each tenant's most used group relative to its entitlement. A queue at 25% of its H100
quota goes before one at 75%; weight 2 counts usage at half. Unlimited queues use the
fleet's GPU count as their entitlement. Ties: the head with higher priority, then the older
head, then the queue name. In a tree, queues compare by `share_path` (the shares from the
root down to the queue): siblings by their own share at each level, as hierarchical DRF.

Fair share over time (spec.fairSharing; queueing.fairshare): for a queue with a usage
half-life, `used(Q,k)` in the share is its decayed average of GPUs used, plus what the pass
charged it since it began (`begin_history`). Quota checks always read the GPUs held now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from trainop.queueing.fairshare import UsageHistory, advance, effective_used, holding
from trainop.queueing.hierarchy import Tree, build_tree
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
        self.tree: Tree = build_tree(q for q in queues.values() if not q.unlimited)
        # queue -> the queues charged with its jobs: itself, then its ancestors
        self._paths = {name: self.tree.path(name) for name in self.tree.parent}
        # Fair share over time: each half-life queue's history at the pass's clock, and the
        # usage it was advanced with (what the pass started from).
        self.history: dict[str, UsageHistory] = {}
        self._start: dict[tuple[str, str], int] = {}

    def copy(self) -> Ledger:
        other = Ledger.__new__(Ledger)
        other.queues = self.queues
        other.fleet_gpus = self.fleet_gpus
        other.used = defaultdict(int, self.used)
        other.running = defaultdict(int, self.running)
        other._cohorts = self._cohorts
        other.tree = self.tree
        other._paths = self._paths
        other.history = self.history
        other._start = self._start
        return other

    def begin_history(self, now: float) -> None:
        """Advance every half-life queue's usage history to `now` (queueing.fairshare) and
        note the usage charged so far (the admitted jobs at the start of the pass)."""
        self._start = dict(self.used)
        for q in self.queues.values():
            if q.half_life is not None:
                self.history[q.name] = advance(q.history, now, q.half_life)

    def history_to_keep(self, queue: QueueState) -> UsageHistory | None:
        """The history status keeps after the pass: the stored one while the queue holds
        what it held (advancing it is exact from there), else the one at the pass's clock
        holding what the queue holds now."""
        now = self.history.get(queue.name)
        if now is None or queue.half_life is None:
            return None
        used = {k: v for (name, k), v in self.used.items() if name == queue.name and v}
        kept = holding(now, used)
        stored = queue.history
        if stored is not None and stored.holding == kept.holding:
            return stored
        return kept

    def path(self, queue: str) -> tuple[str, ...]:
        """`queue` and its ancestors, leaf first (just `queue` outside a tree)."""
        return self._paths.get(queue, (queue,))

    def charge(self, queue: str, group: str, gpus: int) -> None:
        for n in self.path(queue):
            self.used[(n, group)] += gpus
        self.running[queue] += 1

    def uncharge(self, queue: str, group: str, gpus: int) -> None:
        for n in self.path(queue):
            self.used[(n, group)] -= gpus
        self.running[queue] -= 1

    def in_tree(self, queue: QueueState) -> bool:
        return not queue.unlimited and self.tree.in_tree(queue.name)

    def members(self, queue: QueueState) -> tuple[str, ...]:
        """Queues sharing quota with `queue` (itself included): its cohort, or in a tree
        every queue of its tree (and of the trees its root's cohort holds)."""
        if self.in_tree(queue):
            root = self.queues[self.path(queue.name)[-1]]
            roots = self._cohorts.get(root.cohort, (root.name,)) if root.cohort else (root.name,)
            return tuple(n for r in roots for n in self.tree.subtree(r))
        if queue.cohort and not queue.unlimited:
            return self._cohorts.get(queue.cohort, (queue.name,))
        return (queue.name,)

    def lender(self, queue: QueueState) -> str:
        """Who lends to `queue`, for messages: "cohort c" or "queue tree org"."""
        if self.in_tree(queue):
            return f"queue tree {self.path(queue.name)[-1]}"
        return f"cohort {queue.cohort}"

    def lends(self, victim: str, group: str, to: str | None = None) -> bool:
        """Whether reclaim for queue `to` may take a gang of `victim`'s: in a tree, every
        queue on the victim's path below the level it shares with `to` uses more than its
        quota (it borrowed), so no level is taken below its guarantee; else `victim`
        borrows `group` at all."""
        if to is None or victim not in self._paths:
            return self.borrowed(victim, group) > 0
        below = self.tree.below_common(victim, to) or (victim,)
        return all(self.borrowed(n, group) > 0 for n in below)

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
        if self.in_tree(queue):
            return self._tree_fit(queue, group, gpus)
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

    def _tree_fit(self, queue: QueueState, group: str, gpus: int) -> QuotaVerdict:
        """`quota_fit` for a queue in a tree: every level on its path (see module doc)."""
        path = self.path(queue.name)
        nominal, used = queue.nominal(group), self.used[(queue.name, group)]
        borrow = max(0, used + gpus - nominal)
        head = (
            f"queue {queue.name} uses {used} of its {nominal} {group} GPUs and the job needs {gpus}"
        )
        for i, name in enumerate(path):
            why = self._level_blocks(name, group, gpus, is_root=i == len(path) - 1)
            if why is None:
                continue
            level = len(path) - i
            where = f"held at {name} (level {level} of {len(path)}, root first)"
            if borrow == 0:
                return QuotaVerdict(
                    False,
                    0,
                    f"{head}: within its quota, but {where}: {why}; the queues there that "
                    "borrowed give it back (reclaim)",
                    reclaimable=True,
                )
            return QuotaVerdict(False, borrow, f"{head}: {where}: {why}")
        return QuotaVerdict(True, borrow)

    def _level_blocks(self, name: str, group: str, gpus: int, *, is_root: bool) -> str | None:
        """Why one level of a tree cannot take `gpus` more of `group` (None: it can)."""
        q = self.queues[name]
        nominal = q.nominal(group)
        after = self.used[(name, group)] + gpus
        if after <= nominal:
            return None
        b = after - nominal
        g = q.group(group)
        limit = g.borrowing_limit if g else None
        uses = f"{name} would use {after} of its {nominal} {group} GPUs"
        if limit is not None and b > limit:
            return f"{uses}, borrowing {b}, above its borrowingLimit of {limit}"
        if not is_root:
            return None  # borrowed from the parent: the next level checks it
        if not q.cohort:
            return f"{uses} and it is the tree's root: nothing above it to borrow from"
        room = self.cohort_room(q, group)
        if room < gpus:
            return f"{uses} and cohort {q.cohort} has {max(room, 0)} idle {group} GPUs to lend"
        return None

    def share_path(self, queue: QueueState) -> tuple[float, ...]:
        """The weighted shares from the root down to `queue` (one share outside a tree)."""
        return tuple(self.share(self.queues[n]) for n in reversed(self.path(queue.name)))

    def share(self, queue: QueueState) -> float:
        """Weighted dominant-resource share (see module doc)."""
        history = self.history.get(queue.name)
        if queue.unlimited or not queue.groups:
            keys = {k for (q, k) in self.used if q == queue.name}
            if history is not None:
                keys |= {k for k, _ in history.gpus}
            total = sum(self.share_used(queue.name, k, history) for k in keys)
            return total / max(self.fleet_gpus, 1) / queue.weight
        worst = 0.0
        groups = {g.name for g in queue.groups} | {k for (q, k) in self.used if q == queue.name}
        if history is not None:
            groups |= {k for k, _ in history.gpus}
        for k in groups:
            used = self.share_used(queue.name, k, history)
            worst = max(worst, used / max(queue.nominal(k), 1))
        return worst / queue.weight

    def share_used(self, queue: str, group: str, history: UsageHistory | None) -> float:
        """The usage the share reads: GPUs held now, or for a queue with a usage half-life
        its decayed average plus this pass's change (queueing.fairshare.effective_used)."""
        used = self.used.get((queue, group), 0)
        if history is None:
            return float(used)
        return effective_used(history, group, used, self._start.get((queue, group), 0))
