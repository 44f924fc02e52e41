"""When a Lease may be taken over (kube.lease.expired), as a named-case table."""

from __future__ import annotations

from datetime import datetime

import pytest

from trainop.handlers.state import ShellState
from trainop.kube.lease import expired

NOW = datetime(2026, 1, 1, 12, 0, 0)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param({}, True, id="never-held"),
        pytest.param({"holderIdentity": ""}, True, id="released"),
        pytest.param({"holderIdentity": "a"}, True, id="held-but-never-renewed"),
        pytest.param(
            {
                "holderIdentity": "a",
                "renewTime": "2026-01-01T11:59:55.000000Z",
                "leaseDurationSeconds": 10,
            },
            False,
            id="renewed-5s-ago-of-10",
        ),
        pytest.param(
            {
                "holderIdentity": "a",
                "renewTime": "2026-01-01T11:59:45.000000Z",
                "leaseDurationSeconds": 10,
            },
            True,
            id="renewed-15s-ago-of-10",
        ),
        pytest.param(
            {"holderIdentity": "a", "renewTime": "2026-01-01T11:59:58.123000+00:00"},
            False,
            id="renewed-2s-ago-offset-form",
        ),
        pytest.param(
            {"holderIdentity": "a", "renewTime": "2026-01-01T12:59:58+01:00"},
            False,
            id="renewed-2s-ago-other-zone",
        ),
        pytest.param(
            {"holderIdentity": "a", "acquireTime": "2026-01-01T11:59:58Z"},
            False,
            id="acquired-just-now-default-term",
        ),
    ],
)
def test_expired(spec: dict[str, object], want: bool) -> None:
    assert expired(spec, NOW) is want


def test_a_new_leader_wakes_the_loop_and_a_standby_does_not() -> None:
    woken: list[int] = []
    state = ShellState(on_change=lambda: woken.append(1), leader=False)
    state.mark_synced()
    woken.clear()
    assert state.set_leader(True) is True
    assert woken == [1]
    assert state.set_leader(True) is False
    assert state.set_leader(False) is True
    assert woken == [1]
