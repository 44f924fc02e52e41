"""The one condition upsert (trainop.api.conditions), for TrainingJobs and Kueue Workloads alike."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.builders import NOW, ago
from trainop.api.conditions import find_condition, iso, set_condition

EARLIER = ago(60)


def cond(status: str, when: str | None = EARLIER, **extra: Any) -> dict[str, Any]:
    out = {"type": "Ready", "status": status, "reason": "Old", "message": "old", **extra}
    if when is not None:
        out["lastTransitionTime"] = when
    return out


# (id, conditions before, new status, max_message, lastTransitionTime after, message after)
CASES = [
    ("new-condition-is-appended-now", [], "True", None, iso(NOW), "m" * 40),
    ("same-status-keeps-its-time", [cond("True")], "True", None, EARLIER, "m" * 40),
    ("flipped-status-moves-the-time", [cond("False")], "True", None, iso(NOW), "m" * 40),
    ("missing-time-is-set", [cond("True", when=None)], "True", None, iso(NOW), "m" * 40),
    ("message-capped-for-kueue", [], "True", 8, iso(NOW), "m" * 8),
]


@pytest.mark.parametrize(
    ("before", "status", "cap", "when", "message"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_set_condition(
    before: list[dict[str, Any]], status: str, cap: int | None, when: str, message: str
) -> None:
    conds = [dict(x) for x in before]
    set_condition(conds, "Ready", status, "New", "m" * 40, NOW, 3, max_message=cap)
    (got,) = conds
    assert got == {
        "type": "Ready",
        "status": status,
        "reason": "New",
        "message": message,
        "lastTransitionTime": when,
        "observedGeneration": 3,
    }


def test_other_conditions_are_left_alone() -> None:
    other = {"type": "Other", "status": "True", "lastTransitionTime": EARLIER}
    conds = [dict(other)]
    set_condition(conds, "Ready", "True", "R", "", NOW + timedelta(seconds=1), None)
    assert conds[0] == other and conds[1]["type"] == "Ready"


@pytest.mark.parametrize(
    ("conditions", "ctype", "found"),
    [
        pytest.param(None, "Running", None, id="no-conditions"),
        pytest.param([{"type": "Queued"}], "Running", None, id="absent"),
        pytest.param(
            [{"type": "Queued"}, {"type": "Running", "status": "True"}],
            "Running",
            {"type": "Running", "status": "True"},
            id="present",
        ),
    ],
)
def test_find_condition(conditions: Any, ctype: str, found: Any) -> None:
    assert find_condition(conditions, ctype) == found
