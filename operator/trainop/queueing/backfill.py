"""Backfill and its limit: when a blocked head starts holding capacity, and whom it blocks.

Neighbours: `queueing.admission` (the pass) asks `new_hold` for each queue's head and
`blocks_for` before each attempt; `queueing.model` holds QueueState (backfillWaitSeconds,
cohort). Pure: holds are values, the clock is the pass's `now`.

The rules, in words: a job may be admitted past a blocked head of its queue. Once the
head has waited longer than the queue's backfillWaitSeconds (counted from
`queued_since`) it holds its quota groups: later jobs of its queue may not use them, and
cohort members may not borrow them (they wait, reason Quota), until it is admitted. A
hold reserves quota, not nodes: queues outside the cohort (own quota) still place by fair
share. Only the head holds; an Incompatible head holds nothing. Between two holding heads
the one that waited longer wins (no mutual blocking).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trainop.queueing.model import QUOTA, QueuedJob, QueueState


def secs(value: float) -> str:
    return "forever" if math.isinf(value) else f"{value:g}s"


@dataclass
class Hold:
    """Capacity held for a head that waited past its queue's backfillWaitSeconds."""

    queue: str
    cohort: str | None
    groups: frozenset[str] | None  # None: every group (unlimited queues)
    head: str
    waited: float
    threshold: float
    reason: str = QUOTA  # the head's own reason once known; cohort borrowers always see Quota

    @property
    def rank(self) -> tuple[float, str]:
        """Lower ranks first: the longer wait, then the key."""
        return (-self.waited, self.head)

    def message(self, group: str) -> str:
        what = f"{group} GPUs are" if group else "GPUs are"
        return (
            f"{what} held for {self.head}, first in queue {self.queue}, which has waited "
            f"{secs(self.waited)} (more than backfillWaitSeconds {secs(self.threshold)})"
        )


@dataclass
class Blocks:
    """What holds forbid a job: groups it may not use, groups it may not borrow."""

    excluded: dict[str, Hold] = field(default_factory=dict)
    no_borrow: dict[str, Hold] = field(default_factory=dict)
    whole_queue: Hold | None = None


def new_hold(
    head: QueuedJob,
    q: QueueState,
    now: float,
    groups: Iterable[str] | None,
    holds: Sequence[Hold],
) -> Hold | None:
    """The hold `head` starts now, if it waited past the threshold and its queue holds
    nothing yet; `groups`: the quota groups it could use (None: an unlimited queue)."""
    waited = now - head.waiting_since
    if waited <= q.backfill_wait_seconds or any(h.queue == q.name for h in holds):
        return None
    held = None if groups is None else frozenset(groups)
    return Hold(q.name, q.cohort, held, head.key, waited, q.backfill_wait_seconds)


def blocks_for(job_key: str, q: QueueState, holds: Sequence[Hold]) -> Blocks:
    """What the holds of other heads forbid `job_key` of queue `q`."""
    out = Blocks()
    own = next((h for h in holds if h.head == job_key), None)
    for h in holds:
        if h.head == job_key:
            continue
        if own is not None and own.rank <= h.rank:
            continue  # two heads holding against each other: the longer wait goes first
        if h.queue == q.name:
            if h.groups is None:
                out.whole_queue = h
            else:
                for g in h.groups:
                    out.excluded.setdefault(g, h)
        elif q.cohort and h.cohort == q.cohort and h.groups is not None:
            for g in h.groups:
                out.no_borrow.setdefault(g, h)
    return out
