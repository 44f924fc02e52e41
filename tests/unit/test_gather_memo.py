"""The admission loop's gather keeps each job's share while nothing it reads moved
(handlers.scheduler.GatherMemo; issue 33, part 2: an unchanged waiting job costs a lookup).

Each named case changes one thing the gather reads and says which jobs' shares are made
again; in every case the gather with the memo gives what a gather without one gives."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from tests.builders import fleet_nodes, job, pod
from trainop.handlers.scheduler import GatherMemo, Work, gather
from trainop.handlers.state import ShellState
from trainop.planner import OperatorConfig

NOW = datetime(2026, 11, 27)
BERT, GPT = "team-a/bert", "team-a/gpt"


def _body(name: str, rv: str = "1") -> dict[str, Any]:
    return job(name).meta(resourceVersion=rv, creationTimestamp="2026-11-27T00:00:00Z").build()


def _state() -> ShellState:
    state = ShellState()
    for node in fleet_nodes():
        state.upsert_node(node)
    state.upsert_job(_body("bert"))
    state.upsert_job(_body("gpt"))
    state.mark_synced()
    return state


def _took_in(state: ShellState, work: Work) -> None:
    """What the cycle does after a decision: each job's intake kept with its signature."""
    for key, signature in work.signatures.items():
        state.jobs[key].took_in(signature, ("intake of", key, signature))


def _same(a: Work, b: Work) -> None:
    assert [x["metadata"]["name"] for x in a.bodies] == [x["metadata"]["name"] for x in b.bodies]
    assert a.signatures == b.signatures
    assert a.known == b.known
    assert a.pods.keys() == b.pods.keys()


def _node_changed(state: ShellState, config: Any) -> Any:
    node = fleet_nodes()[0]
    node["metadata"]["labels"]["extra"] = "yes"
    state.upsert_node(node)
    return config


CASES: list[Any] = [
    pytest.param(lambda s, c: c, set(), id="nothing-changed-both-kept"),
    pytest.param(lambda s, c: (s.upsert_job(_body("bert", "2")), c)[1], {BERT}, id="body"),
    pytest.param(
        lambda s, c: (s.upsert_pod(pod("bert-worker-0").build()), c)[1], {BERT}, id="its-pod"
    ),
    pytest.param(_node_changed, {BERT, GPT}, id="a-node-all"),
    pytest.param(
        lambda s, c: (s.upsert_namespace({"metadata": {"name": "x", "labels": {"a": "b"}}}), c)[1],
        {BERT, GPT},
        id="namespaces-all",
    ),
    pytest.param(lambda s, c: dataclasses.replace(c), {BERT, GPT}, id="another-config-all"),
    pytest.param(lambda s, c: (s.reject(BERT, 1), c)[1], {BERT}, id="refused-out-of-line"),
    pytest.param(
        lambda s, c: (s.assume(GPT, {"gpt-worker-0": ("name", "node-0", 8)}, 0.0), c)[1],
        {GPT},
        id="assumed",
    ),
    pytest.param(
        lambda s, c: (s.record_written(BERT, _body("bert", "3")), c)[1], {BERT}, id="own-write"
    ),
    pytest.param(
        lambda s, c: (s.remove_job("team-a", "gpt"), c)[1], {GPT}, id="job-gone-leaves-line"
    ),
]


@pytest.mark.parametrize(("change", "made_again"), CASES)
def test_a_share_is_made_again_only_when_what_it_read_moved(
    change: Callable[[ShellState, OperatorConfig], OperatorConfig], made_again: set[str]
) -> None:
    state, config, memo = _state(), OperatorConfig(), GatherMemo()
    _took_in(state, gather(state, config, NOW, 0.0, memo))
    gather(state, config, NOW, 0.0, memo)  # both kept now
    before = dict(memo.entries)
    config = change(state, config)
    work = gather(state, config, NOW, 0.0, memo)
    kept = {k for k, e in memo.entries.items() if before.get(k) is e}
    assert {BERT, GPT} - kept == made_again
    _same(work, gather(state, config, NOW, 0.0))


def test_a_job_that_went_leaves_the_memo() -> None:
    state, memo = _state(), GatherMemo()
    gather(state, OperatorConfig(), NOW, 0.0, memo)
    state.remove_job("team-a", "gpt")
    state.drop_if_gone(GPT)
    work = gather(state, OperatorConfig(), NOW, 0.0, memo)
    assert GPT not in memo.keys and GPT not in memo.entries and GPT not in work.signatures


def test_a_restart_backoff_is_never_kept() -> None:
    state, config, memo = _state(), OperatorConfig(), GatherMemo()
    body = _body("bert", "2")
    body["status"] = {
        "phase": "Restarting",
        "restartCount": 1,
        "lastRestartTime": "2026-11-27T00:00:00Z",
    }
    state.upsert_job(body)
    for _ in range(2):
        work = gather(state, config, NOW, 5.0, memo)
        assert BERT not in memo.entries and BERT not in work.signatures and work.later


def test_a_gather_after_nothing_changed_looks_at_no_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """The marks say which records moved: an unchanged job is not even looked at."""
    import trainop.handlers.scheduler as scheduler

    state, config, memo = _state(), OperatorConfig(), GatherMemo()
    _took_in(state, gather(state, config, NOW, 0.0, memo))
    gather(state, config, NOW, 0.0, memo)  # both settled now
    looked: list[str] = []
    real = scheduler._share

    def counting(state: ShellState, key: str, *rest: Any) -> Any:
        looked.append(key)
        return real(state, key, *rest)

    monkeypatch.setattr(scheduler, "_share", counting)
    work = gather(state, config, NOW, 0.0, memo)
    assert looked == [] and list(work.signatures) == [BERT, GPT] and not work.pods
    state.upsert_job(_body("gpt", "2"))
    work = gather(state, config, NOW, 0.0, memo)
    assert looked == [GPT] and list(work.pods) == [GPT]
    _same(work, gather(state, config, NOW, 0.0))


def test_a_gather_without_a_memo_leaves_the_marks_to_the_loops() -> None:
    state, config, memo = _state(), OperatorConfig(), GatherMemo()
    _took_in(state, gather(state, config, NOW, 0.0, memo))
    gather(state, config, NOW, 0.0, memo)
    state.upsert_job(_body("gpt", "2"))
    alone = gather(state, config, NOW, 0.0)  # every job, as a full gather
    assert list(alone.signatures) == [BERT, GPT] and GPT in state.marked
    assert list(gather(state, config, NOW, 0.0, memo).pods) == [GPT]
