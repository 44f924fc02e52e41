"""Preemption: which admitted gangs a blocked head may evict, and the fewest that will do.

Neighbours: `queueing.admission` (the pass) calls `plan_preemption` for a queue's head
blocked on Quota or NoFit, with a `fits` callable that re-runs quota and placement with
the victims gone (on a what-if snapshot); `queueing.ordering` orders the candidates;
`queueing.ledger` does the quota arithmetic. Pure: the ledger is copied, never changed.

The rules, in words:
  (a) Reclaim: when the head fits its queue's nominal quota, admitted gangs of cohort
      members that borrow that group are candidates, as long as their queue still
      borrows; in a queue tree, gangs of queues whose path below the level they share
      with the head's queue borrows at every step (`Ledger.lends`): reclaim goes down the
      tree to whoever borrowed, never below a level's guarantee;
  (b) Priority (preemption.withinQueue LowerPriority): admitted gangs of the same queue
      with lower priority.
Candidates go lowest priority first, then least work lost (GPU-seconds since the last
checkpoint or start, `ordering.lost_work`), then youngest first; victims are
added one by one until quota and placement fit; then each victim but the last is tried
back (most valuable first) and kept running when the head still fits. If no set of
victims makes the head fit, nobody is preempted. Jobs admitted in this pass are never
victims. Elastic gangs (queueing.elastic) are offered first as shrink slices (their
workers above minReplicas), before any whole gang; a plan only whole evictions can make
is tried after that.

Guaranteed minimum run (spec.preemption.minRunSeconds of the victim's queue, or the
annotation trainop.dev/min-run-seconds of its PriorityClass, the stricter of the two; as
KAI's min-runtime and Kueue's minAdmitDuration, kubernetes-sigs/kueue#9874): a gang that has
run less than its minimum is no candidate at all, for reclaim or priority, whole or as a
shrink slice (a resize restarts its workers too); a gang with no start time yet counts as
just started. When only such gangs could make room, nobody is preempted and
`protection_note` says which and when the first of them becomes a candidate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainop.api.constants import ANNOTATION_MIN_RUN
from trainop.inventory import Snapshot
from trainop.queueing.elastic import shrink_first
from trainop.queueing.groups import Candidate
from trainop.queueing.ledger import Ledger
from trainop.queueing.model import PRIORITY, RECLAIM, Fit, QueuedJob, QueueState
from trainop.queueing.ordering import Running, same_group_first, victim_order

# (candidate group, victims, ledger with the victims uncharged) -> (fit, GPUs borrowed)
Fits = Callable[[Candidate, list[Running], Ledger], tuple[Fit, int] | None]


@dataclass(frozen=True)
class PreemptPlan:
    victims: tuple[Running, ...]
    candidate: Candidate
    fit: Fit
    borrow: int
    reason: str


def released(victims: Iterable[Running], snapshot: Snapshot) -> dict[str, int]:
    """GPUs per node the victims give back (a node gone from the snapshot gives nothing)."""
    out: dict[str, int] = defaultdict(int)
    for r in victims:
        for node, gpus in r.job.nodes:
            if node in snapshot:
                out[node] += gpus
    return dict(out)


def protected_for(r: Running, queues: Mapping[str, QueueState]) -> float:
    """Seconds until `r` may be a victim under its guaranteed minimum run (0: it may now)."""
    return protection(r, queues)[0]


def protection(r: Running, queues: Mapping[str, QueueState]) -> tuple[float, str]:
    """Seconds until `r` may be a victim, and the rule that says so: the stricter of its
    queue's spec.preemption.minRunSeconds and its PriorityClass's trainop.dev/min-run-seconds
    (the queue's on a tie). Its run counts from the gang's start (`started`), at the pass's
    clock (`r.at`). (0, ""): it may be one now."""
    q = queues.get(r.queue)
    by_queue = q.min_run_seconds if q is not None else 0.0
    by_class = r.job.class_min_run_seconds
    if max(by_queue, by_class) <= 0 or r.at is None:
        return 0.0, ""
    if by_class > by_queue:
        least, rule = by_class, f"PriorityClass {r.job.priority_class}: {ANNOTATION_MIN_RUN} "
        rule += f"{by_class:g}"
    else:
        least, rule = by_queue, f"queue {r.queue}: minRunSeconds {by_queue:g}"
    ran = 0.0 if r.job.started is None else max(0.0, r.at - r.job.started)
    left = max(0.0, least - ran)
    return left, (rule if left > 0 else "")


def class_min_run(name: str, annotations: Mapping[str, Any] | None) -> float:
    """A PriorityClass's guaranteed minimum run from its trainop.dev/min-run-seconds
    annotation (0: none). ValueError names the class, the annotation and the fix."""
    raw = (annotations or {}).get(ANNOTATION_MIN_RUN)
    if raw is None:
        return 0.0
    try:
        value = float(str(raw))
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(
            f"PriorityClass {name}: metadata.annotations.{ANNOTATION_MIN_RUN}: must be a "
            f'number of seconds >= 0 (e.g. "1800"), got {raw!r}'
        )
    return value


def plan_preemption(
    job: QueuedJob,
    q: QueueState,
    cands: tuple[Candidate, ...],
    excluded: Collection[str],
    ledger: Ledger,
    running: Iterable[Running],
    fits: Fits,
    *,
    protect: bool = True,
) -> PreemptPlan | None:
    """The first plan that works: reclaim within the cohort, then lower priority within
    the queue, each group of `cands` in order (`excluded`: groups held for another head).
    `protect`: leave out gangs younger than their queue's minRunSeconds (the rule; False
    only to tell what the guarantee blocked, `protection_note`)."""
    queues = ledger.queues

    def may_go(r: Running) -> bool:  # asked only of gangs the cheaper tests let through
        return not r.fresh and not (protect and protected_for(r, queues) > 0)

    pool = list(running)  # walked once per candidate group
    if (q.cohort or ledger.in_tree(q)) and q.reclaim_within_cohort and not q.unlimited:
        members = set(ledger.members(q)) - {q.name}
        for c in (c for c in cands if c.group.name not in excluded):
            k = c.group.name
            if ledger.used[(q.name, k)] + job.gpus > q.nominal(k):
                continue  # reclaim restores nominal quota only
            lent = sorted(
                (r for r in pool if r.queue in members and r.group == k and may_go(r)),
                key=victim_order,
            )
            plan = _search_shrinking_first(c, lent, RECLAIM, ledger, fits, q.name)
            if plan is not None:
                return plan
    if q.within_queue == "LowerPriority":
        for c in (c for c in cands if c.group.name not in excluded):
            lower = sorted(
                (
                    r
                    for r in pool
                    if r.queue == q.name and r.job.priority < job.priority and may_go(r)
                ),
                key=same_group_first(c.group.name),
            )
            plan = _search_shrinking_first(c, lower, PRIORITY, ledger, fits)
            if plan is not None:
                return plan
    return None


def _search_shrinking_first(
    c: Candidate,
    pool: list[Running],
    reason: str,
    ledger: Ledger,
    fits: Fits,
    requester: str | None = None,
) -> PreemptPlan | None:
    """Shrink elastic gangs before evicting anyone whole (see queueing.elastic)."""
    shrinking = shrink_first(pool)
    if any(r.shrink_to is not None for r in shrinking):
        plan = search(c, shrinking, reason, ledger, fits, requester)
        if plan is not None:
            return plan
    return search(c, pool, reason, ledger, fits, requester)


def search(
    c: Candidate,
    pool: list[Running],
    reason: str,
    ledger: Ledger,
    fits: Fits,
    requester: str | None = None,
) -> PreemptPlan | None:
    """Add victims from `pool` in order until the head fits, then try each back
    (`requester`: the head's queue, which decides who lends to it in a queue tree)."""
    k = c.group.name
    trial_ledger = ledger.copy()
    chosen: list[Running] = []
    found: tuple[Fit, int] | None = None
    for r in pool:
        if reason == RECLAIM and not trial_ledger.lends(r.queue, k, requester):
            continue  # that member no longer borrows: its remaining jobs are its own quota
        chosen.append(r)
        trial_ledger.uncharge(r.queue, r.group, r.job.gpus)
        found = fits(c, chosen, trial_ledger)
        if found is not None:
            break
    if found is None:
        return None
    for r in reversed(chosen[:-1]):  # only as many as needed: the most valuable first
        trial = [x for x in chosen if x is not r]
        kept = ledger.copy()
        for x in trial:
            kept.uncharge(x.queue, x.group, x.job.gpus)
        again = fits(c, trial, kept)
        if again is not None:
            chosen, found = trial, again
    fit, borrow = found
    return PreemptPlan(tuple(chosen), c, fit, borrow, reason)


def protection_note(
    job: QueuedJob,
    q: QueueState,
    cands: tuple[Candidate, ...],
    excluded: Collection[str],
    ledger: Ledger,
    running: Iterable[Running],
    fits: Fits,
) -> str:
    """Why no plan was found when the minimum run is what blocked it: the victims a plan
    would take without the guarantee, and in how long the last of them may be taken
    (""): nothing protected would have helped)."""
    pool = [r for r in running if not r.fresh]
    if all(q.min_run_seconds <= 0 for q in ledger.queues.values()) and all(
        r.job.class_min_run_seconds <= 0 for r in pool
    ):
        return ""  # no guarantee anywhere (asked of every head that waits: the cheap test)
    if not any(protected_for(r, ledger.queues) > 0 for r in pool):
        return ""
    plan = plan_preemption(job, q, cands, excluded, ledger, pool, fits, protect=False)
    if plan is None:
        return ""
    shielded = [(*protection(r, ledger.queues), r) for r in plan.victims]
    shielded = [(left, rule, r) for left, rule, r in shielded if left > 0]
    if not shielded:
        return ""
    left = max(t for t, _, _ in shielded)
    names = ", ".join(f"{r.key} ({rule})" for _, rule, r in shielded)
    return (
        f"preempting {names} would make room ({plan.reason}), but they have not run their "
        f"guaranteed minimum yet; they become preemptible in {left:.0f} s"
    )
