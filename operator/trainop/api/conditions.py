"""Status conditions (metav1.Condition's shape) as plain dicts: the one upsert, and the stamp.

Neighbours: `reconcile` keeps a TrainingJob's conditions with it; `queueing.kueue` keeps a
Kueue Workload's (whose API caps a message at 32,768 characters and wants an integer
observedGeneration, so it passes `max_message` and `generation or 0`). Pure: the caller
passes the time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

# metav1.Condition's limit on a message (Kueue's Workload enforces it).
MAX_MESSAGE = 32768


def iso(t: datetime) -> str:
    """A status timestamp: RFC 3339 in UTC, whole seconds (metav1.Time)."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def find_condition(
    conditions: Iterable[Mapping[str, Any]] | None, ctype: str
) -> Mapping[str, Any] | None:
    """The condition of type `ctype`, or None: the one reader beside the one upsert."""
    return next((cd for cd in conditions or () if cd.get("type") == ctype), None)


def set_condition(
    conditions: list[dict[str, Any]],
    ctype: str,
    status: str,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
    *,
    max_message: int | None = None,
) -> None:
    """Upsert the condition `ctype` in place; lastTransitionTime moves only when the status
    flips (or the condition had none)."""
    if max_message is not None:
        message = message[:max_message]
    for cond in conditions:
        if cond.get("type") == ctype:
            if cond.get("status") != status or not cond.get("lastTransitionTime"):
                cond["lastTransitionTime"] = iso(now)
            cond.update(
                status=status, reason=reason, message=message, observedGeneration=generation
            )
            return
    conditions.append(
        {
            "type": ctype,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": iso(now),
            "observedGeneration": generation,
        }
    )
