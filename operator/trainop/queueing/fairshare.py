"""Fair share over time: each queue's GPU usage, decayed with a half-life, for the DRF order.

Neighbours: `queueing.model.QueueState` carries a queue's half-life
(`spec.fairSharing.usageHalfLifeSeconds`) and the history its status last recorded
(`status.fairSharing`); `queueing.ledger.Ledger.share` reads `effective_used` in place of
the instantaneous usage; `queueing.admission` advances the history to the pass's clock and
`queueing.model.QueueUsage.to_status` writes it back, so it survives operator restarts
(it lives in the TrainingQueue's status, never only in memory). `trainop simulate` runs the
same code over simulated time. Pure: times are plain seconds passed in.

The rule, in words (as Kueue's admission fair sharing, `usageHalfLifeTime`; KAI's
time-aware fairness, `decayHalfLife`; Volcano 1.16's fairshare plugin, a half-life decay of
resource-seconds; all three forgive past use exponentially):

- A queue's history is, per product group, an exponentially weighted average of the GPUs
  it used, with half-life T: after T without usage it counts half, after 2T a quarter.
  Kept as an average in GPUs rather than as GPU-seconds, so it compares with the quota:
  a queue that used u GPUs steadily for many half-lives has an average of u.
- Usage changes only at an admission pass, and every pass that changes it records the GPUs
  now held (`holding`) with the average; the next pass advances the average over the time
  between exactly: `a' = a·d + u·(1 - d)`, `d = 2^(-dt/T)`, u the GPUs held since. A pass
  that changes no queue's usage writes nothing (status is not rewritten per pass).
- A queue with a half-life is ordered by its average plus what this pass admitted to it so
  far (so a pass still spreads its admissions), over its quota and weight, exactly where the
  plain DRF share would use the GPUs it holds now. A team that used the cluster heavily
  yesterday has a higher share today and its heads go after those of a team that did not.
- Without a half-life (the default) nothing changes: the share is today's usage alone.
- The average is a preference, never a quota: admission still checks quota against the
  GPUs held now, and it never makes anyone a preemption victim.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

# status.fairSharing.updated, read and written as the pass's naive UTC clock reads it.
_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# An average below this many GPUs is dropped from status (it decayed to nothing).
NEGLIGIBLE_GPUS = 0.005


@dataclass(frozen=True)
class UsageHistory:
    """A queue's decayed average of GPUs used per product group as of `at` (seconds), and
    the GPUs per group it held from `at` on (what the average grows towards until the
    queue's usage next changes)."""

    at: float
    gpus: tuple[tuple[str, float], ...] = ()
    holding: tuple[tuple[str, int], ...] = ()

    def of(self, group: str) -> float:
        for name, value in self.gpus:
            if name == group:
                return value
        return 0.0

    def as_dict(self) -> dict[str, float]:
        return dict(self.gpus)


def decay_factor(elapsed: float, half_life: float) -> float:
    """How much of an average is left after `elapsed` seconds: 2^(-elapsed/half_life)."""
    if half_life <= 0:
        return 0.0
    return math.pow(2.0, -max(0.0, elapsed) / half_life)


def advance(history: UsageHistory | None, now: float, half_life: float) -> UsageHistory:
    """The history at `now`: the average advanced with the GPUs held since `history.at`
    (exact, as usage only changes at a pass and every pass that changes it records it).

    No history yet: it starts at `now` from nothing, so a new queue (or one whose half-life
    was just set) starts with a clean slate, as Kueue's and KAI's do. A clock that went
    backwards advances nothing."""
    if history is None:
        return UsageHistory(now)
    if now <= history.at:
        return history
    d = decay_factor(now - history.at, half_life)
    held = dict(history.holding)
    groups = {name for name, _ in history.gpus} | {k for k, v in held.items() if v}
    out: list[tuple[str, float]] = []
    for k in sorted(groups):
        value = history.of(k) * d + float(held.get(k, 0)) * (1.0 - d)
        if value >= NEGLIGIBLE_GPUS:
            out.append((k, value))
    return UsageHistory(now, tuple(out), history.holding)


def holding(history: UsageHistory, used: Mapping[str, int]) -> UsageHistory:
    """`history` with the GPUs per group the queue holds from its `at` on."""
    return replace(history, holding=tuple(sorted((k, v) for k, v in used.items() if v)))


def effective_used(
    history: UsageHistory, group: str, used_now: float, used_at_start: float
) -> float:
    """The usage the DRF share reads for a queue with a half-life: its average, plus what
    this pass charged it since its start (negative: what it gave back), never below 0."""
    return max(0.0, history.of(group) + used_now - used_at_start)


def from_status(status: Mapping[str, object] | None) -> UsageHistory | None:
    """The history a TrainingQueue's status.fairSharing recorded (None: none, or unreadable:
    a fresh start is the safe reading)."""
    if not isinstance(status, Mapping):
        return None
    fair = status.get("fairSharing")
    if not isinstance(fair, Mapping):
        return None
    at = fair.get("updated")
    if not isinstance(at, str):
        return None
    try:  # naive, as the pass's clock is (queueing.cluster: `now.timestamp()`)
        when = datetime.strptime(at, _FORMAT).timestamp()
    except ValueError:
        return None
    groups: list[tuple[str, float]] = []
    held: list[tuple[str, int]] = []
    for row in fair.get("usage") or ():
        if not isinstance(row, Mapping):
            continue
        name, value, gpus = row.get("name"), row.get("averageGpus"), row.get("holding")
        if not isinstance(name, str):
            continue
        if isinstance(value, int | float) and value >= NEGLIGIBLE_GPUS:
            groups.append((name, float(value)))
        if isinstance(gpus, int) and gpus > 0:
            held.append((name, gpus))
    return UsageHistory(when, tuple(sorted(groups)), tuple(sorted(held)))


def to_status(history: UsageHistory, half_life: float) -> dict[str, object]:
    """status.fairSharing: the average per group (2 decimals) and the GPUs held since, as
    of when, and the half-life."""
    averages, held = history.as_dict(), dict(history.holding)
    return {
        "usageHalfLifeSeconds": int(half_life),
        "updated": datetime.fromtimestamp(history.at).strftime(_FORMAT),
        "usage": [
            {"name": k, "averageGpus": round(averages.get(k, 0.0), 2), "holding": held.get(k, 0)}
            for k in sorted({*averages, *held})
        ],
    }
