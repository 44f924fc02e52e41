"""A snapshot's "static" memo (values that do not depend on GPU use) is one dict shared by
the snapshots derived from it (issue 33, part 2: copying it was 5 ms a cycle at 10,000
waiting jobs). Named cases: who sees an entry, and what forgets it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.builders import fleet_nodes
from trainop.inventory import Snapshot, build_snapshot

KEY = ("static", "placeable", "team-a/bert", "uid", 1, None)


def _base() -> Snapshot:
    return build_snapshot(fleet_nodes(), [])


def _one(s: Snapshot) -> str:
    return s.nodes[0].name


CASES: list[object] = [
    pytest.param(lambda s: s.with_usage({_one(s): 1}), True, id="next-cycle-with-usage"),
    pytest.param(lambda s: s.with_reserved({_one(s): 1}), True, id="what-if-reserved"),
    pytest.param(lambda s: s.with_released({_one(s): 0}), True, id="what-if-released"),
    pytest.param(lambda s: s.with_released({}).standalone(), False, id="standalone-own"),
    pytest.param(lambda s: build_snapshot(fleet_nodes(), []), False, id="rebuilt-nodes"),
]


@pytest.mark.parametrize(("derive", "shared"), CASES)
def test_who_sees_a_static_entry(derive: Callable[[Snapshot], Snapshot], shared: bool) -> None:
    base = _base()
    base.memo(KEY, lambda: True)
    other = derive(base)
    assert (KEY in other.memo_view()) is shared
    later = ("static", "later")
    other.memo(later, lambda: 1)  # added on the derived one: the parent sees it when shared
    assert (later in base.memo_view()) is shared


def test_a_non_static_entry_is_per_snapshot_and_forget_static_drops_from_all() -> None:
    base = _base()
    base.memo(("free", "x"), lambda: 1)
    base.memo(KEY, lambda: True)
    derived = base.with_usage({_one(base): 1})
    assert derived.memo(("free", "x"), lambda: 2) == 2
    derived.forget_static(lambda k: k == KEY)
    assert KEY not in base.memo_view() and KEY not in derived.memo_view()
