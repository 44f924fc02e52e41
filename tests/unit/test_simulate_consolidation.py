"""`trainop simulate` with consolidation (issue 37): a small gang steps aside, a spread gang
moves into the rack it leaves, and both moves cost their checkpoint and restart.

The fleet: racks ra (a0, a1), rb (b0, b1), rc (c0, c1) and rd (d0), one 8-GPU H100 node each.
At 0 seven one-node gangs fill it (f4 a0, f6 a1, fb b0 until 5, fc b1, j1 c0 until 20, s c1
with spec.checkpoint, t d0 until 30). The 2-node gang m (spec.checkpoint) comes at 10 and
starts at 20 across b0 and c0. At 30 d0 frees: no rack is free for m, but s can step aside
onto d0 (one node either way: no slower), and m moves into rc.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import H100, job, node, queue
from trainop.api import constants as c
from trainop.planner import MigrationPolicy, OperatorConfig
from trainop.queueing import SimResult, simulate

RACKS = (("a0", "ra"), ("a1", "ra"), ("b0", "rb"), ("b1", "rb"), ("c0", "rc"), ("c1", "rc"))
MOVE = 300.0


def _gang(name: str, submit: float, duration: float, pods: int = 1, ckpt: bool = False) -> Any:
    b = job(name, namespace="team-q").workers(pods, 8, None).placement("rack", "Preferred", [H100])
    if ckpt:
        b.checkpoint()
    body = b.build()
    body["metadata"]["annotations"] = {
        c.ANNOTATION_SIM_SUBMIT: str(submit),
        c.ANNOTATION_SIM_DURATION: str(duration),
    }
    return body


def _run(policy: MigrationPolicy) -> SimResult:
    nodes = [
        node(n).gfd(H100, "580.95.05", ("9", "0")).gpus(8).rack(r).block("b").build()
        for n, r in (*RACKS, ("d0", "rd"))
    ]
    long = 10**5
    fillers = (("j1", 20), ("s", long), ("fb", 5), ("fc", long), ("f4", long), ("t", 30))
    jobs = [_gang(n, 0, d, ckpt=n == "s") for n, d in (*fillers, ("f6", long))]
    jobs.append(_gang("m", 10, 20_000, pods=2, ckpt=True))
    q = queue("q").serves("team-q", default=True).quota("h100", 200, H100).build()
    config = OperatorConfig(migration=policy, topology_wait_seconds=0)
    return simulate(nodes, [q], jobs, config=config, comm_share=0.3, move_seconds=MOVE)


@pytest.mark.parametrize(
    ("policy", "steps_aside"),
    [
        pytest.param(MigrationPolicy(enabled=True, max_in_flight=2), False, id="without"),
        pytest.param(
            MigrationPolicy(enabled=True, max_in_flight=2, consolidate=True), True, id="with"
        ),
    ],
)
def test_a_small_gang_steps_aside_and_the_spread_one_moves_in(
    policy: MigrationPolicy, steps_aside: bool
) -> None:
    got = _run(policy)
    m, s = got.job("team-q/m"), got.job("team-q/s")
    assert m.runs[0].nodes == ("b0", "c0") and m.runs[0].admitted == 20
    if not steps_aside:
        assert len(m.runs) == 1 and len(s.runs) == 1
        return
    aside, moved = s.runs[0], m.runs[0]
    assert (aside.ended, aside.preempt_reason, aside.moved_for) == (30, "Migration", "team-q/m")
    assert s.runs[1].nodes == ("d0",) and s.runs[1].started == 30 + MOVE
    assert (moved.ended, moved.preempt_reason, moved.moved_for) == (30, "Migration", None)
    assert set(m.runs[1].nodes) == {"c0", "c1"} and m.runs[1].started == 30 + MOVE
    assert m.runs[1].allreduce_seconds < moved.allreduce_seconds
    stays = _run(MigrationPolicy(enabled=True, max_in_flight=2)).job("team-q/m")
    assert m.finished is not None and stays.finished is not None
    assert m.finished < stays.finished  # the move paid for both moves' cost
