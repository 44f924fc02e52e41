"""Elastic gangs in admission: the sizes a job may take, its slices for shrinking, growth.

Neighbours: `queueing.admission` (the pass) asks `sizes` which Worker counts to try for a
pending elastic job (largest first: the largest that fits is admitted), `growth_order` /
`growth_sizes` which running jobs may grow after every pending job was decided, and
`queueing.preemption` takes `shrink_slice`s before whole victims. The placer sees a sized
record (`at_size`; `grow_from` for a growth: only the new workers are placed). Pure: records
in, records out.

The rules, in words (issue 25, part 1):
- Admission admits an elastic job at any size in [min, max], the largest that fits; the
  gang rule is "at least min, placed together". Only the min size waits for a better
  domain or preempts: a larger size that does not fit cleanly is simply not taken.
- A running elastic job grows, one growth per pass, when nobody with a higher claim waits:
  no job of the pass is left waiting for GPUs (Quota, NoFit, Topology). Higher priority
  grows first, then the older start. It grows to the largest size that fits, in one step
  (torchrun re-forms the group once per membership change, so one step costs one restart
  of the workers, not one per added pod).
- Preemption shrinks an elastic victim down to min before it evicts anyone whole: the
  slices (the workers above min, highest index first) are candidates before whole gangs,
  and a plan made of slices alone is preferred; only when slices cannot make room are
  whole gangs (elastic ones at min included) evicted as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from trainop.queueing.model import QueuedJob
from trainop.queueing.ordering import Running, victim_order


def current(job: QueuedJob) -> int:
    """The Worker count this record stands for (max when unset)."""
    assert job.elastic is not None
    return job.size if job.size is not None else job.elastic[1]


def gpus_at(job: QueuedJob, size: int) -> int:
    """The job's GPUs with `size` Workers (GPUs of other roles stay)."""
    return job.gpus - job.replica_gpus * (current(job) - size)


def at_size(job: QueuedJob, size: int) -> QueuedJob:
    """The record of the job at `size` Workers (what the placer and the ledger see)."""
    return replace(job, gpus=gpus_at(job, size), size=size)


def sizes(job: QueuedJob) -> tuple[int, ...]:
    """Sizes admission tries for a pending job, largest first; (None-sized) fixed jobs: ()."""
    if job.elastic is None:
        return ()
    lo, hi = job.elastic
    return tuple(range(hi, lo - 1, -1))


def can_grow(job: QueuedJob) -> bool:
    return (
        job.elastic is not None
        and job.admitted
        and not job.resizing
        and current(job) < job.elastic[1]
    )


def growth_sizes(job: QueuedJob) -> tuple[int, ...]:
    """Sizes a running job may grow to, largest first."""
    assert job.elastic is not None
    return tuple(range(job.elastic[1], current(job), -1))


def growth_order(running: Iterable[Running]) -> list[Running]:
    """Running elastic jobs that may grow: higher priority first, then the older start."""
    out = [r for r in running if not r.fresh and r.shrink_to is None and can_grow(r.job)]
    return sorted(
        out,
        key=lambda r: (-r.job.priority, r.job.started or 0.0, r.job.created, r.job.key),
    )


def grow_request(job: QueuedJob, size: int) -> QueuedJob:
    """The record the placer gets for a growth to `size`: only workers current..size-1 are
    placed, so `gpus` is what they add."""
    return replace(
        job, gpus=job.replica_gpus * (size - current(job)), size=size, grow_from=current(job)
    )


def shrink_slice(r: Running) -> Running | None:
    """What an elastic running job gives back when it shrinks to min: its highest workers'
    GPUs, as a Running whose job holds only those (None: nothing to give)."""
    job = r.job
    if job.elastic is None or job.resizing or r.fresh:
        return None
    lo = job.elastic[0]
    size = current(job)
    if size <= lo or len(job.workers) != size:
        return None
    freed: dict[str, int] = {}
    for node, gpus in job.workers[lo:]:
        freed[node] = freed.get(node, 0) + gpus
    part = replace(
        job,
        gpus=job.replica_gpus * (size - lo),
        nodes=tuple(sorted(freed.items())),
        size=size - lo,
    )
    return Running(part, r.group, shrink_to=lo)


def shrink_first(pool: list[Running]) -> list[Running]:
    """The candidate victims with shrinking in mind: every shrink slice (in victim order)
    before the whole gangs; an elastic job that can shrink is offered only as its slice."""
    slices = [s for s in (shrink_slice(r) for r in pool) if s is not None]
    sliced = {s.key for s in slices}
    whole = [r for r in pool if r.key not in sliced]
    return sorted(slices, key=victim_order) + whole


def after_shrink(job: QueuedJob, size: int) -> QueuedJob:
    """The running job once it shrank to `size` workers."""
    kept = job.workers[:size]
    nodes: dict[str, int] = {}
    for node, gpus in kept:
        nodes[node] = nodes.get(node, 0) + gpus
    return replace(
        job,
        gpus=gpus_at(job, size),
        size=size,
        workers=kept,
        nodes=tuple(sorted(nodes.items())),
        resizing=True,
    )
