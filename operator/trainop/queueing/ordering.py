"""Who goes first: the order of a queue's line, of queues against each other, of victims.

Neighbours: `queueing.admission` (the pass) orders with these keys; `queueing.preemption`
orders its candidate victims with `victim_order` / `same_group_first`; `queueing.ledger`
supplies the weighted dominant-resource share the cross-queue order reads. Pure: keys are
tuples compared as Python compares tuples, each ending in the job's or queue's name, so
every order is total and deterministic.

The rules, in words:
- In a queue's line: higher priority first, then older (creation) first.
- Across queues, the next job comes from the queue whose head fits its own nominal quota
  (or may reclaim it) before queues whose head would borrow (as Kueue does), then the
  lowest weighted dominant-resource share, then the head's priority and age.
- Victims: lowest priority first, then the youngest (latest start); for priority
  preemption, victims charged to the wanted quota group before the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from trainop.queueing.model import QueuedJob


@dataclass(slots=True)
class Running:
    """An admitted job as the pass sees it: charged to `group`; `fresh` when admitted in
    this pass (never a victim of the same pass)."""

    job: QueuedJob
    group: str
    fresh: bool = False
    # Set on a shrink slice (queueing.elastic): `job` is then only the workers an elastic
    # job gives back, and it keeps running with `shrink_to` workers.
    shrink_to: int | None = None
    # The pass's clock, for the work an eviction now would lose (`lost_work`).
    at: float | None = None

    @property
    def key(self) -> str:
        return self.job.key

    @property
    def queue(self) -> str:
        return self.job.queue


def line_order(job: QueuedJob) -> tuple[int, float, str]:
    """A queue's line: higher priority first, then older first."""
    return (-job.priority, job.created, job.key)


QueueKey = tuple[bool, tuple[float, ...], int, float, str]


def queue_order(
    would_borrow: bool, share: float | tuple[float, ...], head: QueuedJob, queue: str
) -> QueueKey:
    """Across queues (lowest first): heads within their nominal quota before borrowers,
    then the lower weighted share, then the head's priority and age. In a queue tree
    `share` is the shares from the root down (queueing.ledger.share_path): the subtree
    with the lower share goes first at each level, as hierarchical DRF."""
    shares = share if isinstance(share, tuple) else (share,)
    return (would_borrow, shares, -head.priority, head.created, queue)


def lost_work(r: Running) -> float:
    """GPU-seconds an eviction at the pass's time loses: the time since the job's last
    reported checkpoint, or since its gang started without one, x its GPUs (issue 24)."""
    since = max((t for t in (r.job.started, r.job.checkpointed) if t is not None), default=None)
    if r.at is None or since is None:
        return 0.0
    return max(0.0, r.at - since) * r.job.gpus


def victim_order(r: Running) -> tuple[int, float, float, float, int, str]:
    """Lowest priority first, then the least work lost (GPU-seconds since the last
    checkpoint, `lost_work`), then the youngest (latest start) first; a job without a
    start time is treated as just started. Start times have a resolution of one second
    (status.startTime), so two gangs admitted in the same second tie: the one created later,
    then the smaller one goes first. Otherwise a reclaim could take a gang that fits its
    queue's quota, and more GPUs than needed, in place of the one that borrows."""
    started = r.job.started if r.job.started is not None else math.inf
    return (r.job.priority, lost_work(r), -started, -r.job.created, r.job.gpus, r.job.key)


def same_group_first(
    group: str,
) -> Callable[[Running], tuple[bool, int, float, float, float, int, str]]:
    """Victims charged to the wanted group free its quota and nodes; others only free a
    running slot (maxRunningJobs), so they come last."""

    def key(r: Running) -> tuple[bool, int, float, float, float, int, str]:
        return (r.group != group, *victim_order(r))

    return key
