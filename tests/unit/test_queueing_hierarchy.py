"""Queue trees (issue 25 part 2): the checks that fail closed, the quota rules per level,
who reclaim may take from, usage rolled up for each parent, and DRF among siblings.

The tree most cases use (h100 GPUs; limit = borrowingLimit):

    org 32
    ├── vision 16            ├── nlp 16 (limit 4)
    │   ├── detect 8 (lim 4)  │   ├── chat 8
    │   └── segment 8         │   └── translate 8
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.builders import H100, QueueBuilder, fleet_snapshot, job, queue, small_fleet, workload
from tests.unit.queueing_harness import decide
from trainop.planner import OperatorConfig
from trainop.queueing.cluster import admission_pass
from trainop.queueing.hierarchy import build_tree, roll_up, tree_errors, usage_summary
from trainop.queueing.inadmissible import quota_shortfall
from trainop.queueing.ledger import Ledger
from trainop.queueing.model import (
    POLICY,
    QUEUE_INVALID,
    RECLAIM,
    Action,
    GroupUsage,
    QueueState,
    QueueUsage,
)
from trainop.queueing.status import queue_statuses

TREE: dict[str, QueueState] = {
    q.name: q
    for q in (
        queue("org").quota("h100", 32).state(),
        queue("vision").parent("org").quota("h100", 16).state(),
        queue("nlp").parent("org").quota("h100", 16, limit=4).state(),
        queue("detect").parent("vision").quota("h100", 8, limit=4).state(),
        queue("segment").parent("vision").quota("h100", 8).state(),
        queue("chat").parent("nlp").quota("h100", 8).state(),
        queue("translate").parent("nlp").quota("h100", 8).state(),
    )
}


def ledger(**used: int) -> Ledger:
    """The tree with these leaves using so many h100 GPUs."""
    out = Ledger(TREE, 64)
    for name, gpus in used.items():
        out.charge(name, "h100", gpus)
    return out


# --- checks that fail closed ---------------------------------------------------------------

ERROR_CASES = [
    pytest.param(
        [queue("org").quota("h100", 32), queue("a").parent("org").quota("h100", 8)], {}, id="valid"
    ),
    pytest.param(
        [queue("a").parent("a").quota("h100", 8)], {"a": "cycle (a -> a)"}, id="self-parent"
    ),
    pytest.param(
        [queue("a").parent("b").quota("h100", 8), queue("b").parent("a").quota("h100", 8)],
        {"a": "cycle (a -> b -> a)", "b": "cycle (b -> a -> b)"},
        id="two-queue-cycle",
    ),
    pytest.param(
        [queue("a").parent("nope").quota("h100", 8), queue("b").parent("a").quota("h100", 4)],
        {"a": "'nope' does not exist", "b": "ancestor a is invalid"},
        id="missing-parent-and-its-subtree",
    ),
    pytest.param(
        [
            queue("org").quota("h100", 8),
            queue("a").parent("org").quota("h100", 6),
            queue("b").parent("org").quota("h100", 6),
        ],
        {
            "org": "guaranteed 12 h100 GPUs together, more than its own quota of 8",
            "a": "ancestor org is invalid",
            "b": "ancestor org is invalid",
        },
        id="children-exceed-parent",
    ),
    pytest.param(
        [queue("org").quota("h100", 8), queue("a").parent("org")],
        {"a": "needs quotas"},
        id="child-without-quotas",
    ),
    pytest.param(
        [queue("org").quota("h100", 8), queue("a").parent("org").cohort("c").quota("h100", 8)],
        {"a": "spec.cohort and spec.parent exclude each other"},
        id="parent-and-cohort",
    ),
]


@pytest.mark.parametrize(("queues", "want"), ERROR_CASES)
def test_tree_errors(queues: list, want: dict[str, str]) -> None:
    errors = tree_errors([b.state() for b in queues])
    assert sorted(errors) == sorted(want)
    for name, text in want.items():
        assert text in str(errors[name])


# --- the quota rule, level by level --------------------------------------------------------

# (used per leaf, leaf, GPUs asked) -> (fits, GPUs the leaf borrows, where it is held, reclaim)
FIT_CASES = [
    pytest.param({}, "detect", 8, (True, 0, "", False), id="within-own-quota"),
    pytest.param({}, "detect", 12, (True, 4, "", False), id="borrows-from-idle-sibling"),
    pytest.param(
        {},
        "detect",
        16,
        (False, 8, "held at detect (level 3 of 3", False),
        id="leaf-borrowing-limit",
    ),
    pytest.param({"segment": 16}, "segment", 8, (True, 16, "", False), id="borrows-up-the-tree"),
    pytest.param(
        {"chat": 20},
        "chat",
        4,
        (False, 16, "held at nlp (level 2 of 3", False),
        id="parent-borrowing-limit",
    ),
    pytest.param(
        {"segment": 16, "chat": 16},
        "segment",
        4,
        (False, 12, "held at org (level 1 of 3", False),
        id="root-full",
    ),
    pytest.param(
        {"segment": 16, "chat": 16},
        "detect",
        8,
        (False, 0, "held at org (level 1 of 3", True),
        id="within-quota-blocked-by-borrowers-is-reclaim",
    ),
]


@pytest.mark.parametrize(("used", "leaf", "gpus", "want"), FIT_CASES)
def test_quota_fit_walks_the_tree(
    used: dict[str, int], leaf: str, gpus: int, want: tuple[bool, int, str, bool]
) -> None:
    verdict = ledger(**used).quota_fit(TREE[leaf], "h100", gpus)
    ok, borrow, where, reclaim = want
    assert (verdict.ok, verdict.borrow, verdict.reclaimable) == (ok, borrow, reclaim)
    assert where in verdict.message


def test_charging_a_leaf_charges_its_ancestors() -> None:
    led = ledger(detect=12, chat=4)
    assert [led.used[(n, "h100")] for n in ("detect", "vision", "org", "nlp")] == [12, 12, 16, 4]
    # detect borrowed 4 from its sibling: vision itself borrows nothing from above
    assert (led.borrowed("detect", "h100"), led.borrowed("vision", "h100")) == (4, 0)


# --- reclaim: down the tree, only to whoever borrowed --------------------------------------

LENDS_CASES = [
    pytest.param({"segment": 12}, "segment", "detect", True, id="sibling-that-borrowed"),
    pytest.param({"segment": 8}, "segment", "detect", False, id="sibling-within-its-quota"),
    pytest.param(
        {"chat": 12}, "chat", "detect", False, id="cousin-borrowed-within-its-own-subtree"
    ),
    pytest.param({"chat": 20}, "chat", "detect", True, id="cousin-whose-subtree-borrowed"),
    pytest.param(
        {"chat": 20, "translate": 0}, "translate", "detect", False, id="idle-cousin-lends-nothing"
    ),
]


@pytest.mark.parametrize(("used", "victim", "to", "want"), LENDS_CASES)
def test_lends(used: dict[str, int], victim: str, to: str, want: bool) -> None:
    assert ledger(**used).lends(victim, "h100", to) is want


def test_reclaim_takes_the_borrower_not_the_cousin() -> None:
    # segment borrowed detect's quota, chat runs within its own: detect's job takes segment's.
    jobs = [
        workload("v/seg-a", "segment", 8).running_on("h0", started=1).build(),
        workload("v/seg-b", "segment", 8).running_on("h1", started=2).build(),
        workload("n/chat", "chat", 8).running_on("h2", started=3).build(),
        workload("n/translate", "translate", 8).running_on("h3", started=4).build(),
        workload("v/detect", "detect", 8).created(10).build(),
    ]
    d = decide(list(TREE.values()), jobs, small_fleet(h100=4))
    assert [(v.key, v.reason) for v in d.preempted] == [("v/seg-b", RECLAIM)]
    assert d["v/detect"].action == Action.WAIT  # admitted once seg-b's pods are gone
    assert d["v/detect"].victims == ("v/seg-b",)


# --- status: each parent shows its subtree -------------------------------------------------


def test_roll_up_adds_children_into_parents() -> None:
    tree = build_tree(TREE.values())
    leaves = {
        "detect": QueueUsage("detect", (GroupUsage("h100", 8, 12, 4, 0),), 2, 1),
        "segment": QueueUsage("segment", (GroupUsage("h100", 8, 0, 0, 8),), 0, 1),
        "chat": QueueUsage("chat", (GroupUsage("h100", 8, 20, 12, 0),), 3, 0),
    }
    parents = {
        n: QueueUsage(n, (GroupUsage("h100", TREE[n].nominal("h100"), 0, 0, 0),), 0, 0)
        for n in ("org", "vision", "nlp")
    }
    out = roll_up({**leaves, **parents}, tree)
    assert out["vision"].groups == (GroupUsage("h100", 16, 12, 0, 8),)
    assert out["nlp"].groups == (GroupUsage("h100", 16, 20, 4, 0),)
    assert out["org"].groups == (GroupUsage("h100", 32, 32, 0, 8),)
    assert (out["org"].admitted_jobs, out["org"].pending_jobs) == (5, 2)
    assert usage_summary([{"name": "h100", "used": 20, "quota": 16, "borrowed": 4}]) == (
        "h100 20/16(+4)"
    )


# --- fair share among siblings at each level -----------------------------------------------


def test_drf_compares_siblings_level_by_level() -> None:
    # translate and detect both use half their quota; nlp's subtree uses a quarter of its
    # own, vision's half: the level above decides, and translate goes first.
    led = ledger(detect=4, segment=4, translate=4)
    assert led.share_path(TREE["translate"]) < led.share_path(TREE["detect"])
    assert led.share_path(TREE["chat"]) < led.share_path(TREE["translate"])


# --- the operator's cycle: fail closed, leaves only, status per level ----------------------

NOW = datetime(2025, 6, 1, 12, 0, 0)


def _tq(name: str, parent: str | None = None, gpus: int = 8) -> QueueBuilder:
    b = queue(name).quota("h100", gpus, H100)
    return b.parent(parent) if parent else b


def _job(name: str, queue_name: str) -> dict[str, Any]:
    j = job(name, namespace="team-a").workers(1, 8).set("queue", queue_name)
    return j.meta(creationTimestamp="2025-06-01T11:00:00Z").build()


CYCLE_CASES = [
    pytest.param(
        [_tq("org", gpus=16), _tq("team", "org").serves("team-a")],
        "team",
        (True, "Admitted", ""),
        id="leaf-of-a-valid-tree-admits",
    ),
    pytest.param(
        [_tq("a", "b").serves("team-a"), _tq("b", "a")],
        "a",
        (False, QUEUE_INVALID, "form a cycle (a -> b -> a)"),
        id="cycle-waits-with-the-reason",
    ),
    pytest.param(
        [_tq("team", "gone").serves("team-a")],
        "team",
        (False, QUEUE_INVALID, "parent TrainingQueue 'gone' does not exist"),
        id="missing-parent-waits",
    ),
    pytest.param(
        [_tq("org", gpus=4).serves("team-a"), _tq("team", "org").serves("team-a")],
        "team",
        (False, QUEUE_INVALID, "ancestor org is invalid"),
        id="child-over-its-parent-waits",
    ),
    pytest.param(
        [_tq("org", gpus=16).serves("team-a"), _tq("team", "org").serves("team-a")],
        "org",
        (False, POLICY, "is a parent queue (of team)"),
        id="jobs-go-to-leaves",
    ),
]


@pytest.mark.parametrize(("queues", "queue_name", "want"), CYCLE_CASES)
def test_admission_pass_over_a_tree(
    queues: list[QueueBuilder], queue_name: str, want: tuple[bool, str, str]
) -> None:
    objs = [q.build() for q in queues]
    result = admission_pass(
        NOW, [_job("j", queue_name)], {}, objs, {}, {}, fleet_snapshot(), OperatorConfig()
    )
    d = result.decisions["team-a/j"]
    admitted, reason, text = want
    assert (d.admitted, d.reason) == (admitted, reason)
    assert text in d.message


def test_status_shows_path_level_and_the_subtree_usage() -> None:
    objs = [_tq("org", gpus=16).build(), _tq("team", "org").serves("team-a").build()]
    stored = {o["metadata"]["name"]: o for o in objs}
    result = admission_pass(
        NOW, [_job("j", "team")], {}, objs, {}, {}, fleet_snapshot(), OperatorConfig()
    )
    got = queue_statuses(result.decisions, result.broken, stored, NOW)
    assert {k: (v["path"], v["level"], v["summary"]) for k, v in got.items()} == {
        "org": ("org", 1, "h100 8/16"),
        "team": ("org/team", 2, "h100 8/8"),
    }
    assert got["org"]["admittedJobs"] == 1


# --- a need no level could ever give: Inadmissible, naming the level that caps it -----------

SHORTFALL_CASES = [
    pytest.param("detect", 12, None, id="within-every-ceiling"),
    pytest.param("chat", 20, None, id="borrows-within-nlp-limit"),
    pytest.param(
        "chat", 21, "more than 20 for group h100: nlp (quota 16, borrowingLimit 4)", id="nlp-caps"
    ),
    pytest.param("segment", 33, "more than 32 for group h100: org (quota 32)", id="root-caps"),
    pytest.param(
        "detect", 13, "more than 12 for group h100: detect (quota 8, borrowingLimit 4)", id="leaf"
    ),
]


@pytest.mark.parametrize(("leaf", "gpus", "want"), SHORTFALL_CASES)
def test_quota_shortfall_takes_the_lowest_ceiling_on_the_path(
    leaf: str, gpus: int, want: str | None
) -> None:
    got = quota_shortfall(gpus, (), TREE[leaf], list(TREE.values()))
    assert (got is None) if want is None else (want in (got or "")), got
