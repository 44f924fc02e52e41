"""TrainingQueue status bodies from one admission pass: usage, counts and the Active condition.

Neighbours: `queueing.cluster.decide` yields the usage of every usable queue and the
error of every broken one (`PassResult.broken`); the operator's handlers patch what
`queue_statuses` returns onto each TrainingQueue's status subresource. Pure: the clock and
the stored statuses (for lastTransitionTime) are arguments.

Active=True (reason Valid) on a queue the operator uses; Active=False (reason InvalidSpec, the
message naming the field and the fix) on a broken one, whose jobs wait with pendingReason
QueueInvalid instead of falling through to another queue. Every status also carries the
queue's place in its tree (path, level; queueing.hierarchy) and a one-line usage summary,
which `kubectl get tq` prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trainop.queueing.hierarchy import tree_fields, usage_summary
from trainop.queueing.model import Decisions, QueueConfigError

ACTIVE = "Active"
VALID = "Valid"
INVALID_SPEC = "InvalidSpec"


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def active_condition(
    error: QueueConfigError | None, old: Mapping[str, Any] | None, now: datetime
) -> dict[str, Any]:
    """The Active condition; its lastTransitionTime moves only when the status flips."""
    if error is None:
        status, reason, message = "True", VALID, "the queue admits jobs"
    else:
        status, reason = "False", INVALID_SPEC
        message = (
            f"{error.field}: {error.detail}; fix the TrainingQueue: until then its jobs wait "
            "(pendingReason QueueInvalid) and never fall through to another queue"
        )
    old_cond = next(
        (c for c in (old or {}).get("conditions") or [] if c.get("type") == ACTIVE), None
    )
    since = (
        old_cond["lastTransitionTime"]
        if old_cond and old_cond.get("status") == status and old_cond.get("lastTransitionTime")
        else _iso(now)
    )
    return {
        "type": ACTIVE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


def queue_statuses(
    decisions: Decisions,
    broken: Mapping[str, QueueConfigError],
    stored: Mapping[str, Mapping[str, Any]],
    now: datetime,
) -> dict[str, dict[str, Any]]:
    """Status body per TrainingQueue in `stored` (name -> object as the API returns it)."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(stored):
        old = stored[name].get("status") or {}
        usage = decisions.usage.get(name)
        if usage is not None:
            body = usage.to_status()
        elif name in broken:
            body = {
                "usage": [],
                "admittedJobs": _count(decisions, name, admitted=True),
                "pendingJobs": _count(decisions, name, admitted=False),
            }
        else:
            continue  # not seen by this pass (created since): the next pass covers it
        body["conditions"] = [active_condition(broken.get(name), old, now)]
        body.update(tree_fields(name, stored))
        body["summary"] = usage_summary(body["usage"], body.get("fairSharing"))
        out[name] = body
    return out


def _count(decisions: Decisions, queue: str, *, admitted: bool) -> int:
    return sum(1 for d in decisions if d.queue == queue and d.admitted == admitted)
