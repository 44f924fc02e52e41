"""Why a TrainingJob waits: the values of `status.pendingReason`, as one enum.

A `StrEnum`, so a member is its string everywhere a reason goes: `WaitReason.NOFIT ==
"NoFit"`, equal hashes (a member finds a plain string's dict entry), and JSON, f-strings and
status patches carry "NoFit" unchanged.

Neighbours: the planner answers `Wait(WaitReason.NOFIT | INCOMPATIBLE)`; `queueing.model`
names the reasons the admission core gives (its QUOTA, NOFIT, ... are these members);
`reconcile` writes them to status and `explain` prints them back. The table in
tests/unit/test_wait_reasons.py has one case per member, from where it is made to what
`trainop explain` shows.
"""

from __future__ import annotations

from enum import StrEnum


class WaitReason(StrEnum):
    """status.pendingReason of a Queued job."""

    QUOTA = "Quota"  # its queue (and cohort) has no quota left for it now
    NOFIT = "NoFit"  # no domain has room for the gang now
    POLICY = "Policy"  # its queue's policy refuses it (wrong namespace, a parent queue, ...)
    INCOMPATIBLE = "Incompatible"  # no node can run its image
    QUEUE_INVALID = "QueueInvalid"  # its TrainingQueue is broken: it waits, never falls through
    TOPOLOGY = "Topology"  # a Preferred gang waits a bounded time for a better domain
    INADMISSIBLE = "Inadmissible"  # can never be admitted as written: waits out of line
    PENDING = "Pending"  # not decided yet: the admission loop has not spoken (shellrules)
    RUNTIME = "Runtime"  # its spec.runtimeRef names a missing or invalid runtime (runtimes)
