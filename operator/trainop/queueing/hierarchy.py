"""Queue trees: TrainingQueues that name a parent (spec.parent), to any depth (pure).

Model (docs/queues.md, "Hierarchical queues"): a queue names its parent; a queue no other
names is a leaf and takes jobs; a parent's quota is what its whole subtree may use, and its
children's quotas are carved out of it (their sum per product group must not exceed it).
A tree's root may join a flat cohort (spec.cohort), which then lends between whole trees;
queues below a root share only through the tree. This is KAI's and Volcano's parent/child
queue model, chosen over nesting cohorts (Kueue) because a TrainingQueue already carries the
quota, limits and weight every level needs, so one object kind describes the organisation.

Neighbours: `queueing.cluster.load_queues` runs `tree_errors` (fail closed: a queue in a
cycle, under a missing or broken parent, or whose children's quotas exceed its own, is
broken, and so is its subtree: their jobs wait, reason QueueInvalid); `queueing.ledger`
walks `Tree.path` for the quota rules; `queueing.cluster.decide` rolls leaf usage up the
tree (`roll_up`) for each parent's status; `queueing.status` writes path, level, summary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from trainop.queueing.model import GroupUsage, QueueConfigError, QueueState, QueueUsage


@dataclass(frozen=True)
class Tree:
    """Parent links among usable queues; a queue without a usable parent is a root."""

    parent: Mapping[str, str] = field(default_factory=dict)
    children: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def path(self, name: str) -> tuple[str, ...]:
        """`name`, its parent, ... up to its root (leaf first)."""
        out = [name]
        while out[-1] in self.parent:
            out.append(self.parent[out[-1]])
        return tuple(out)

    def in_tree(self, name: str) -> bool:
        return name in self.parent or name in self.children

    def subtree(self, name: str) -> tuple[str, ...]:
        """`name` and every queue below it (parents before their children)."""
        out, todo = [], [name]
        while todo:
            n = todo.pop()
            out.append(n)
            todo.extend(reversed(self.children.get(n, ())))
        return tuple(out)

    def below_common(self, a: str, b: str) -> tuple[str, ...]:
        """The queues on `a`'s path strictly below the lowest ancestor it shares with `b`
        (all of `a`'s path when they share none)."""
        theirs = set(self.path(b))
        out: list[str] = []
        for n in self.path(a):
            if n in theirs:
                break
            out.append(n)
        return tuple(out)


def build_tree(queues: Iterable[QueueState]) -> Tree:
    """The tree of `queues` (already checked by `tree_errors`: a missing parent makes a root)."""
    listed = list(queues)
    names = {q.name for q in listed}
    parent = {q.name: q.parent for q in listed if q.parent and q.parent in names}
    children: dict[str, list[str]] = defaultdict(list)
    for child, p in sorted(parent.items()):
        children[p].append(child)
    return Tree(parent, {p: tuple(c) for p, c in children.items()})


def tree_errors(queues: Sequence[QueueState]) -> dict[str, QueueConfigError]:
    """Queues the operator must not use because of their place in a tree, by name: in a
    cycle, naming a parent that does not exist or is broken, a parent whose children's
    quotas exceed its own, a queue with a parent but no quotas, and everything below
    any of these. `queues` includes broken ones (their `error` set)."""
    by_name = {q.name: q for q in queues}
    errors: dict[str, QueueConfigError] = {}
    for q in queues:
        err = _link_error(q, by_name)
        if err is not None:
            errors[q.name] = err
    errors.update(_guarantee_errors(queues, by_name, errors))
    return _spread_down(queues, by_name, errors)


def _link_error(q: QueueState, by_name: Mapping[str, QueueState]) -> QueueConfigError | None:
    if not q.parent or q.error is not None:
        return None
    if q.cohort:
        return QueueConfigError(
            q.name,
            "spec.cohort",
            "spec.cohort and spec.parent exclude each other: a queue in a tree shares "
            "through its parent; set spec.cohort on the tree's root only",
        )
    seen = [q.name]
    p: str | None = q.parent
    while p is not None:
        if p == q.name:
            loop = " -> ".join([*seen, p])
            return QueueConfigError(
                q.name,
                "spec.parent",
                f"the queues form a cycle ({loop}): a tree needs a root; clear spec.parent "
                "on one of them",
            )
        if p in seen:
            return None  # a cycle above, not through q: its members report it, q inherits it
        nxt = by_name.get(p)
        if nxt is None:
            return None if p != q.parent else _missing(q)
        seen.append(p)
        p = nxt.parent
    if q.unlimited:
        return QueueConfigError(
            q.name,
            "spec.quotas",
            f"a queue with a parent ({q.parent}) needs quotas: its GPUs are counted against "
            "the parent's; add spec.quotas (gpus: 0 borrows only)",
        )
    return None


def _missing(q: QueueState) -> QueueConfigError:
    return QueueConfigError(
        q.name,
        "spec.parent",
        f"parent TrainingQueue {q.parent!r} does not exist: create it or fix spec.parent",
    )


def _guarantee_errors(
    queues: Sequence[QueueState],
    by_name: Mapping[str, QueueState],
    errors: Mapping[str, QueueConfigError],
) -> dict[str, QueueConfigError]:
    """Parents whose children's quotas, added up per product group, exceed their own."""
    kids: dict[str, list[QueueState]] = defaultdict(list)
    for q in queues:
        if q.parent and q.parent in by_name and q.name not in errors:
            kids[q.parent].append(q)
    out: dict[str, QueueConfigError] = {}
    for name, children in sorted(kids.items()):
        p = by_name[name]
        if p.error is not None or name in errors:
            continue
        totals: dict[str, int] = defaultdict(int)
        for c in children:
            for g in c.groups:
                totals[g.name] += g.nominal
        over = [(k, t) for k, t in sorted(totals.items()) if t > p.nominal(k)]
        if over:
            k, total = over[0]
            names = ", ".join(sorted(c.name for c in children if c.nominal(k)))
            out[name] = QueueConfigError(
                name,
                "spec.quotas",
                f"its children ({names}) are guaranteed {total} {k} GPUs together, more than "
                f"its own quota of {p.nominal(k)}: raise this queue's {k} quota or lower "
                "theirs (a child's quota is carved out of its parent's)",
            )
    return out


def _spread_down(
    queues: Sequence[QueueState],
    by_name: Mapping[str, QueueState],
    errors: dict[str, QueueConfigError],
) -> dict[str, QueueConfigError]:
    """Every queue below a broken one is broken too (fail closed), naming the ancestor."""
    out = dict(errors)
    for q in queues:
        if q.name in out or q.error is not None:
            continue
        seen = {q.name}
        p = q.parent
        while p is not None and p not in seen:
            seen.add(p)
            anc = by_name.get(p)
            if anc is None:
                break
            bad = out.get(p) or anc.error
            if bad is not None:
                out[q.name] = QueueConfigError(
                    q.name,
                    "spec.parent",
                    f"its ancestor {p} is invalid ({bad.field}: {bad.detail}); fix {p} first",
                )
                break
            p = anc.parent
    return out


def roll_up(usage: Mapping[str, QueueUsage], tree: Tree) -> dict[str, QueueUsage]:
    """Each parent's usage as its subtree's (its own jobs, if any, plus its children's),
    borrowed counted against the parent's own quota; leaves are returned as they are."""
    out = dict(usage)
    for name in sorted(tree.children, key=lambda n: -len(tree.path(n))):  # deepest first
        own = out.get(name)
        if own is None:
            continue
        parts = [out[c] for c in tree.children[name] if c in out]
        used: dict[str, int] = defaultdict(int)
        pending: dict[str, int] = defaultdict(int)
        for u in (own, *parts):
            for g in u.groups:
                used[g.name] += g.used
                pending[g.name] += g.pending
        quota = {g.name: g.quota for g in own.groups}
        names = [g.name for g in own.groups] + sorted(k for k in used if k not in quota)
        groups = tuple(
            GroupUsage(k, quota.get(k, 0), used[k], max(0, used[k] - quota.get(k, 0)), pending[k])
            for k in names
        )
        out[name] = replace(
            own,
            groups=groups,
            admitted_jobs=own.admitted_jobs + sum(p.admitted_jobs for p in parts),
            pending_jobs=own.pending_jobs + sum(p.pending_jobs for p in parts),
        )
    return out


def tree_fields(name: str, stored: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """status.path and status.level of a queue, read from the stored objects' spec.parent
    (a cycle or a missing parent ends the walk)."""
    path = [name]
    p = ((stored.get(name) or {}).get("spec") or {}).get("parent")
    while isinstance(p, str) and p and p not in path and len(path) < 64:
        path.append(p)
        p = ((stored.get(p) or {}).get("spec") or {}).get("parent")
    return {"path": "/".join(reversed(path)), "level": len(path)}


def usage_summary(usage: Sequence[Mapping[str, Any]], fair: Mapping[str, Any] | None = None) -> str:
    """One line for `kubectl get tq`: "h100 20/16(+4) a100 0/8" (used/quota, borrowed);
    with fair share over time, each group's decayed average too: "h100 20/16(+4) avg 17.5"."""
    averages = {a.get("name"): a.get("averageGpus", 0) for a in (fair or {}).get("usage") or ()}
    parts = []
    for u in usage:
        borrowed = u.get("borrowed", 0)
        extra = f"(+{borrowed})" if borrowed else ""
        name = u.get("name", "-")
        avg = f" avg {averages[name]:g}" if name in averages else ""
        parts.append(f"{name} {u.get('used', 0)}/{u.get('quota', 0)}{extra}{avg}")
    return " ".join(parts) or "-"
