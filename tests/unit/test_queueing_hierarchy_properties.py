"""Property tests of queue trees (issue 25 part 2) over random 3-level trees and arrivals.

Each example draws a tree (root > 1-3 divisions > 1-3 teams; quotas in 4-GPU units, each
child's carved out of its parent's, random borrowingLimits) and a sequence of 4-GPU jobs
arriving at random teams, then runs the real admission pass (the real placement engine on
a fleet larger than the root's quota, so quota is what binds) after every arrival, applying
its decisions (admitted gangs take their nodes, victims go back to the line) until nothing
changes. Properties:
  * no level ever exceeds its limit (root: its quota; below: quota + borrowingLimit);
  * guarantees are honoured under any arrival order: at rest every team runs at least
    min(its quota, its demand);
  * reclaim never preempts within-quota work to serve a borrower: a Reclaim preemptor is
    within its team's quota, and each victim's path below the level it shares with the
    preemptor borrowed when the pass began.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import queue, small_fleet, workload
from tests.unit.queueing_harness import decide
from trainop.queueing.ledger import Ledger
from trainop.queueing.model import RECLAIM, Action, QueuedJob, QueueState

UNIT = 4  # GPUs per job, and the quota grain
FLEET = small_fleet(h100=16)  # 128 GPUs: more than any root's quota


@dataclass(frozen=True)
class Case:
    queues: tuple[QueueState, ...]
    leaves: tuple[str, ...]
    arrivals: tuple[str, ...]  # the team of each 4-GPU job, in arrival order


@st.composite
def cases(draw: st.DrawFn) -> Case:
    limit = st.one_of(st.none(), st.integers(0, 2).map(lambda n: n * UNIT))
    queues: list[QueueState] = []
    leaves: list[str] = []
    root_quota = 0
    for d in range(draw(st.integers(1, 3))):
        div, div_quota = f"div{d}", 0
        for t in range(draw(st.integers(1, 3))):
            name, quota = f"{div}-t{t}", draw(st.integers(0, 2)) * UNIT
            queues.append(queue(name).parent(div).quota("h100", quota, limit=draw(limit)).state())
            leaves.append(name)
            div_quota += quota
        div_quota += draw(st.integers(0, 1)) * UNIT  # room no team is guaranteed
        queues.append(queue(div).parent("org").quota("h100", div_quota, limit=draw(limit)).state())
        root_quota += div_quota
    root_quota += draw(st.integers(0, 1)) * UNIT
    queues.append(queue("org").quota("h100", root_quota).state())
    demand = [t for t in leaves for _ in range(draw(st.integers(0, 3)))]  # jobs per team
    arrivals = draw(st.permutations(demand)) if demand else [leaves[0]]
    return Case(tuple(queues), tuple(leaves), tuple(arrivals))


def _usage(case: Case, jobs: list[QueuedJob]) -> Ledger:
    led = Ledger({q.name: q for q in case.queues}, 128)
    for j in jobs:
        if j.admitted:
            led.charge(j.queue, "h100", j.gpus)
    return led


def _check_reclaims(case: Case, before: list[QueuedJob], decisions: object) -> None:
    led = _usage(case, before)
    by_key = {j.key: j for j in before}
    for d in decisions.preempted:  # type: ignore[attr-defined]
        if d.reason != RECLAIM:
            continue
        head = by_key[d.preemptor]
        leaf = next(q for q in case.queues if q.name == head.queue)
        assert led.used[(leaf.name, "h100")] + head.gpus <= leaf.nominal("h100"), "borrower"
        assert led.lends(d.queue, "h100", head.queue), f"{d.key} was within its quota"


def _settle(case: Case, jobs: list[QueuedJob], now: float) -> list[QueuedJob]:
    for _ in range(30):
        d = decide(list(case.queues), jobs, FLEET, now=now)
        _check_reclaims(case, jobs, d)
        changed = False
        out = []
        for j in jobs:
            dec = d[j.key]
            if dec.action == Action.ADMIT and dec.placement is not None:
                nodes = dec.placement.gpus_by_node
                j = replace(j, admitted=True, product=dec.placement.product, nodes=nodes)
                j = replace(j, started=now)
                changed = True
            elif dec.action == Action.PREEMPT:
                j = replace(j, admitted=False, nodes=(), product=None, started=None)
                changed = True
            out.append(j)
        jobs = out
        _check_limits(case, jobs)
        if not changed:
            return jobs
    raise AssertionError("admission did not settle in 30 passes")


def _check_limits(case: Case, jobs: list[QueuedJob]) -> None:
    led = _usage(case, jobs)
    for q in case.queues:
        used, nominal = led.used[(q.name, "h100")], q.nominal("h100")
        g = q.group("h100")
        if q.parent is None:
            assert used <= nominal, f"root {q.name} uses {used} of {nominal}"
        elif g is not None and g.borrowing_limit is not None:
            assert used <= nominal + g.borrowing_limit, f"{q.name} over its borrowingLimit"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_limits_guarantees_and_reclaim_hold_under_any_arrival_order(case: Case) -> None:
    jobs: list[QueuedJob] = []
    for i, team in enumerate(case.arrivals):
        jobs.append(workload(f"ns/j{i}", team, UNIT).created(float(i)).build())
        jobs = _settle(case, jobs, now=float(i) + 1)
    led = _usage(case, jobs)
    for team in case.leaves:
        q = next(q for q in case.queues if q.name == team)
        demand = UNIT * sum(1 for t in case.arrivals if t == team)
        owed = min(q.nominal("h100"), demand)
        assert led.used[(team, "h100")] >= owed, f"{team} runs less than its guarantee"
