"""ShellState (the operator's one state object) and the admission loop's cycle, without kopf.

The state is fed plain dicts as the watches would; the cycle runs the real pure admission
and planner against it, with recording callbacks in place of the API server.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pytest

from tests.builders import busy, fleet_nodes, job, pod, runtime, uid_of
from trainop.handlers.scheduler import AdmissionLoop, gather, plan_pods
from trainop.handlers.state import Assumed, JobKey, ShellState, Verdict
from trainop.inventory import build_snapshot
from trainop.planner import OperatorConfig
from trainop.queueing.cluster import PassResult
from trainop.queueing.model import JobDecision
from trainop.runtimes import Resolved, RuntimeProblem

CONFIG = OperatorConfig()


def fleet_state() -> ShellState:
    state = ShellState()
    for node in fleet_nodes():
        state.upsert_node(node)
    state.mark_synced()
    return state


def verdicts(state: ShellState) -> dict[JobKey, Verdict]:
    """The admission loop's verdicts, from the job records that hold one."""
    return {k: m.verdict for k, m in state.jobs.items() if m.verdict is not None}


def assumed(state: ShellState) -> dict[JobKey, Assumed]:
    """The assumed gangs, from the job records that hold one."""
    return {k: m.assumed for k, m in state.jobs.items() if m.assumed is not None}


def new_job(name: str, workers: int = 2, gpus: int = 8, **placement: Any) -> dict[str, Any]:
    b = job(name, workers=workers, gpus=gpus).meta(creationTimestamp="2025-06-01T11:00:00Z")
    if placement:
        b.placement(**placement)
    return b.build()


class Recorder:
    def __init__(self) -> None:
        self.reconciled: list[JobKey] = []
        self.evicted: list[str] = []
        self.published: list[PassResult] = []

    async def reconcile(self, key: JobKey) -> None:
        self.reconciled.append(key)

    async def evict(self, decision: JobDecision, now: Any) -> None:
        self.evicted.append(decision.key)

    async def publish(self, result: PassResult) -> None:
        self.published.append(result)


def run_cycle(state: ShellState, rec: Recorder | None = None) -> Recorder:
    rec = rec or Recorder()

    async def go() -> None:
        loop = AdmissionLoop(state, lambda: CONFIG, rec.reconcile, rec.evict, rec.publish)
        await loop.cycle()
        await asyncio.gather(*loop.tasks)

    asyncio.run(go())
    return rec


# --- the caches --------------------------------------------------------------------------
def test_snapshot_matches_a_full_rebuild() -> None:
    state = fleet_state()
    other = busy("h100-a-01", 8, "busy")
    state.upsert_pod(other)
    full = build_snapshot(fleet_nodes(), [other])
    snap = state.snapshot()
    assert [(n.name, n.gpus_free) for n in snap.nodes] == [
        (n.name, n.gpus_free) for n in full.nodes
    ]


def test_snapshot_is_reused_until_something_changes() -> None:
    state = fleet_state()
    first = state.snapshot()
    assert state.snapshot() is first
    state.upsert_pod(busy("h100-a-01", 4, "busy"))
    second = state.snapshot()
    assert second is not first
    assert second.node("h100-a-01").gpus_free == 4


def test_a_heartbeat_does_not_wake_the_loop() -> None:
    state = fleet_state()
    node = fleet_nodes()[0]
    before = state.revision
    state.upsert_node(copy.deepcopy(node))
    assert state.revision == before
    node["metadata"]["labels"]["example.com/new"] = "1"
    state.upsert_node(node)
    assert state.revision == before + 1


def test_finished_and_deleted_pods_free_their_gpus() -> None:
    state = fleet_state()
    taken = busy("h100-a-01", 8, "busy")
    state.upsert_pod(taken)
    assert state.snapshot().node("h100-a-01").gpus_free == 0
    taken["status"]["phase"] = "Succeeded"
    state.upsert_pod(taken)
    assert state.snapshot().node("h100-a-01").gpus_free == 8
    state.upsert_pod(busy("h100-a-01", 8, "busy2"))
    state.remove_pod("default", "busy2")
    assert state.snapshot().node("h100-a-01").gpus_free == 8


def test_a_job_that_finishes_wakes_the_loop() -> None:
    """Its quota is free for the jobs that wait (seen on the real tier: a preempted job
    waited for ever behind a preemptor that had succeeded)."""
    state = fleet_state()
    body = job("done").meta(resourceVersion="1").phase("Running").build()
    state.upsert_job(body)
    before = state.revision
    state.upsert_job(copy.deepcopy(body))  # a status write that changes nothing
    assert state.revision == before
    finished = job("done").meta(resourceVersion="2").phase("Succeeded").build()
    state.record_written(f"{finished['metadata']['namespace']}/done", finished)
    assert state.revision == before + 1
    state.upsert_job(finished)  # the watch catches up: already known
    assert state.revision == before + 1


def test_wakes_only_once_synced() -> None:
    woken: list[int] = []
    state = ShellState(on_change=lambda: woken.append(1))
    for node in fleet_nodes()[:2]:
        state.upsert_node(node)
    assert woken == []
    state.mark_synced()
    assert woken == [1]


# --- assume / forget ---------------------------------------------------------------------
def test_an_assumed_gang_counts_until_its_pods_are_visible() -> None:
    state = fleet_state()
    state.assume("team-a/bert", {"bert-worker-0": ("name", "a100-01", 8)}, now=0.0)
    assert state.snapshot().node("a100-01").gpus_free == 0
    seen = pod("bert-worker-0").on("a100-01").build()
    seen["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    state.upsert_pod(seen)
    assert "team-a/bert" not in assumed(state)
    assert state.snapshot().node("a100-01").gpus_free == 0  # counted once, by the pod


@pytest.mark.parametrize(
    "how",
    [
        pytest.param(lambda s: s.forget("team-a/bert"), id="create-failed"),
        pytest.param(lambda s: s.expire(1000.0), id="ttl-passed"),
        pytest.param(lambda s: s.remove_job("team-a", "bert"), id="job-deleted"),
    ],
)
def test_an_assumption_is_forgotten(how: Any) -> None:
    state = fleet_state()
    state.assume("team-a/bert", {"bert-worker-0": ("name", "a100-01", 8)}, now=0.0)
    how(state)
    assert assumed(state) == {}
    assert state.snapshot().node("a100-01").gpus_free == 8


def test_created_pods_count_as_present_until_the_watch_shows_them() -> None:
    state = fleet_state()
    body = new_job("bert")
    state.upsert_job(body)
    created = pod("bert-worker-0").build()
    state.created(created)
    assert [p["metadata"]["name"] for p in state.job_pods("team-a/bert", uid_of("bert"))] == [
        "bert-worker-0"
    ]
    state.upsert_pod(created)
    assert state.inflight == {}
    assert len(state.job_pods("team-a/bert", uid_of("bert"))) == 1


def test_written_status_wins_until_the_watch_catches_up() -> None:
    state = fleet_state()
    body = new_job("bert")
    body["metadata"]["resourceVersion"] = "5"
    state.upsert_job(body)
    newer = copy.deepcopy(body)
    newer["metadata"]["resourceVersion"] = "6"
    newer["status"] = {"phase": "Queued"}
    state.record_written("team-a/bert", newer)
    got = state.job("team-a/bert")
    assert got is not None and got["status"] == {"phase": "Queued"}


def test_only_the_echo_of_our_own_write_is_own() -> None:
    state = fleet_state()
    body = new_job("bert")
    body["metadata"]["resourceVersion"] = "5"
    assert not state.is_own_write(body)  # never written
    state.upsert_job(body)
    written = copy.deepcopy(body)
    written["metadata"]["resourceVersion"] = "6"
    state.record_written("team-a/bert", written)
    assert state.is_own_write(written)
    later = copy.deepcopy(written)
    later["metadata"]["resourceVersion"] = "7"  # someone else's change after ours
    assert not state.is_own_write(later)


def test_the_echo_of_a_write_that_ended_the_job_is_reconciled() -> None:
    # Kueue's Workload is marked Finished by the reconcile that reads the terminal phase;
    # skipping this echo left it to whatever pod event came next (a flaky integration test).
    state = fleet_state()
    body = new_job("bert")
    body["metadata"]["resourceVersion"] = "5"
    state.upsert_job(body)
    for phase, own in (("Running", True), ("Succeeded", False), ("Failed", False)):
        written = copy.deepcopy(body)
        written["metadata"]["resourceVersion"] = "6"
        written["status"] = {"phase": phase}
        state.record_written("team-a/bert", written)
        assert state.is_own_write(written) is own, phase


# --- the cycle -----------------------------------------------------------------------------
def test_a_cycle_admits_and_assumes_so_the_next_job_sees_it() -> None:
    state = fleet_state()
    for name in ("j1", "j2", "j3"):
        state.upsert_job(new_job(name))
    rec = run_cycle(state)
    admitted = [k for k, v in verdicts(state).items() if v.admission.admitted]
    assert len(admitted) == 3
    nodes = [set(v.admission.plan.placement.nodes) for v in verdicts(state).values()]
    assert all(not (a & b) for i, a in enumerate(nodes) for b in nodes[i + 1 :])
    assert sorted(rec.reconciled) == sorted(admitted)
    assert set(assumed(state)) == set(admitted)
    # The next cycle sees them as admitted (assumed) and admits nothing twice.
    rec2 = run_cycle(state)
    assert rec2.reconciled == []


def test_a_second_cycle_without_change_reconciles_nobody() -> None:
    state = fleet_state()
    state.upsert_job(new_job("big", workers=40))  # more GPUs than the fleet has
    first = run_cycle(state)
    assert first.reconciled == ["team-a/big"]
    verdict = verdicts(state)["team-a/big"]
    assert not verdict.admission.admitted and verdict.admission.reason == "Inadmissible"
    assert run_cycle(state).reconciled == []


def test_plan_pods_lists_each_pinned_pod() -> None:
    state = fleet_state()
    state.upsert_job(new_job("bert"))
    run_cycle(state)
    plan = verdicts(state)["team-a/bert"].admission.plan
    held = plan_pods(plan)
    assert sorted(held) == ["bert-worker-0", "bert-worker-1"]
    assert all(kind == "name" and gpus == 8 for kind, _, gpus in held.values())


def test_a_job_in_restart_backoff_is_not_admitted() -> None:
    state = fleet_state()
    body = new_job("bert")
    body["status"] = {
        "phase": "Restarting",
        "restartCount": 1,
        "lastRestartTime": "2999-01-01T00:00:00Z",
    }
    state.upsert_job(body)
    run_cycle(state)
    assert "team-a/bert" not in verdicts(state)


def test_job_counts_come_from_the_cache_with_the_admitting_queue() -> None:
    from trainop import metrics

    queued = new_job("a")
    queued["status"] = {"phase": "Queued"}
    running = new_job("b")
    running["spec"]["queue"] = "asked"
    running["status"] = {"phase": "Running", "queue": "team-a-default"}
    fresh = new_job("c")  # no status yet: not counted
    counts = metrics.count_jobs([queued, running, fresh])
    assert counts == {("Queued", "", "pytorch"): 1, ("Running", "team-a-default", "pytorch"): 1}
    state = fleet_state()
    for body in (queued, running, fresh):
        state.upsert_job(body)
    metrics.JOBS.source = state.job_bodies
    probe, metrics.LEADERSHIP.probe = metrics.LEADERSHIP.probe, None  # this replica acts
    try:
        family = next(iter(metrics.JOBS.collect()))
        assert {tuple(s.labels.values()): s.value for s in family.samples} == {
            ("Queued", "", "pytorch"): 1,
            ("Running", "team-a-default", "pytorch"): 1,
        }
    finally:
        metrics.JOBS.source = None
        metrics.LEADERSHIP.probe = probe


@pytest.mark.parametrize(
    ("old", "new", "tell", "since"),
    [
        pytest.param(None, (False, "NoFit", "m", 40), True, 60.0, id="first-verdict"),
        pytest.param((False, "NoFit", "m", 40), (False, "NoFit", "m", 40), False, 60.0, id="same"),
        pytest.param(
            (False, "NoFit", "m", 40), (False, "NoFit", "m", 39), False, 60.0, id="deep-move"
        ),
        pytest.param(
            (False, "NoFit", "m", 11), (False, "NoFit", "m", 10), True, 60.0, id="front-move"
        ),
        pytest.param((False, "NoFit", "m", 40), (False, "Quota", "m", 40), True, 60.0, id="reason"),
        pytest.param(
            (False, "NoFit", "m", 40), (False, "NoFit", "m2", 40), False, 60.0, id="deep-message"
        ),
        pytest.param(
            (False, "NoFit", "m", 3), (False, "NoFit", "m2", 3), True, 60.0, id="front-message"
        ),
        pytest.param(
            (False, "NoFit", "m", 3), (False, "NoFit", "m2", 3), False, 5.0, id="front-message-soon"
        ),
        pytest.param(
            (False, "NoFit", "m", 3), (False, "NoFit", "m", 2), True, 5.0, id="front-move-soon"
        ),
    ],
)
def test_which_verdict_changes_reach_the_job(old: Any, new: Any, tell: bool, since: float) -> None:
    """`since`: seconds since the old verdict last reached the job."""
    from trainop.handlers.scheduler import _worth_telling
    from trainop.reconcile import Admission

    def verdict(v: Any, told: float) -> Verdict | None:
        return None if v is None else Verdict(Admission(*v), "uid", 1, told)

    got = _worth_telling(verdict(old, 100.0), verdict(new, 100.0 + since), 100.0 + since)  # type: ignore[arg-type]
    assert got is tell


def test_created_pods_stay_counted_when_the_watch_lags_past_the_assumption() -> None:
    """Found at 2,000 nodes: a watch minutes behind a burst must not free a gang's GPUs
    (or make it look half-gone) because its assumption expired."""
    state = fleet_state()
    state.upsert_job(new_job("bert"))
    pod_body = pod("bert-worker-0").on("a100-01").build()
    pod_body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    state.assume("team-a/bert", {"bert-worker-0": ("name", "a100-01", 8)}, now=0.0)
    state.created(pod_body, now=0.0)
    state.expire(now=300.0)  # the assumption is gone ...
    assert assumed(state) == {}
    assert state.snapshot().node("a100-01").gpus_free == 0  # ... the created pod is not
    assert len(state.job_pods("team-a/bert", uid_of("bert"))) == 1
    state.expire(now=1000.0)  # never seen for 10 minutes: gone before we saw it
    assert state.snapshot().node("a100-01").gpus_free == 8


# --- what a started gang's checks read -----------------------------------------------------
def test_the_fleet_view_is_rebuilt_only_when_a_node_changes() -> None:
    state = fleet_state()
    first = state.fleet()
    state.upsert_pod(busy("h100-a-01", 4, "busy"))
    assert state.fleet() is first  # a pod is no reason to rebuild the node facts
    node = fleet_nodes()[0]
    node["metadata"]["labels"]["example.com/new"] = "1"
    assert state.upsert_node(node)
    assert state.fleet() is not first
    assert not state.upsert_node(copy.deepcopy(node))  # unchanged: nothing to look at


def test_jobs_on_node_names_the_jobs_with_a_pod_there() -> None:
    state = fleet_state()
    state.upsert_job(new_job("bert"))
    mine = busy("a100-01", 8, "bert-worker-0")
    mine["metadata"].update(namespace="team-a", labels={"trainop.dev/job-name": "bert"})
    state.upsert_pod(mine)
    state.upsert_pod(busy("a100-01", 4, "busy"))  # no job label: nobody to tell
    assert state.jobs_on_node("a100-01") == ["team-a/bert"]
    assert state.jobs_on_node("a100-02") == []


def test_a_created_pod_deleted_before_the_watch_saw_it_is_gone_for_its_job() -> None:
    state = fleet_state()
    state.upsert_job(new_job("bert"))
    state.created(pod("bert-worker-0").build())
    state.created(pod("bert-worker-1").build())
    state.drop_created("team-a", "bert-worker-0")
    names = [p["metadata"]["name"] for p in state.job_pods("team-a/bert", uid_of("bert"))]
    assert names == ["bert-worker-1"]
    state.forget("team-a/bert")
    assert state.inflight == {}
    assert state.job_pods("team-a/bert", uid_of("bert")) == []


@pytest.mark.parametrize(
    ("case", "terminating", "pods", "gathered"),
    [
        ("namespace-live", False, [], True),
        ("terminating-without-pods", True, [], False),
        ("terminating-pods-going-too", True, ["deleting"], False),
        ("terminating-with-a-live-pod", True, ["live"], True),
    ],
)
def test_a_job_whose_namespace_is_going_away_is_not_admitted(
    case: str, terminating: bool, pods: list[str], gathered: bool
) -> None:
    # Deleting a namespace takes its pods first, often before its jobs: a job left with no
    # pod looked as if its gang had to start again, and was admitted into a namespace that
    # refuses every create, holding GPUs until its assumption ran out.
    state = fleet_state()
    body = new_job("bert")
    state.upsert_job(body)
    for i, kind in enumerate(pods):
        made = pod(f"bert-worker-{i}")
        state.upsert_pod((made.deleting() if kind == "deleting" else made).build())
    meta: dict[str, Any] = {"name": "team-a", "labels": {}}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    state.upsert_namespace({"metadata": meta})
    work = gather(state, OperatorConfig(), datetime(2026, 11, 26), 0.0)
    assert ("team-a/bert" in work.signatures) is gathered, case
    state.remove_namespace("team-a")
    assert not state.terminating


# --- full listings ---------------------------------------------------------------------------
def test_a_start_up_listing_fills_the_state_of_every_kind() -> None:
    state = ShellState()
    state.load("nodes", fleet_nodes())
    state.load("pods", [busy("h100-a-01", 8, "busy")])
    state.load("trainingjobs", [new_job("bert")])
    state.load("namespaces", [{"metadata": {"name": "team-a", "labels": {"tier": "gold"}}}])
    state.load("priorityclasses", [{"metadata": {"name": "high"}, "value": 1000}])
    state.load("trainingqueues", [{"metadata": {"name": "q"}, "spec": {}}])
    state.load("fabricprofiles", [{"metadata": {"name": "bad"}, "spec": {"fabric": 7}}])
    assert len(state.nodes) == len(fleet_nodes())
    assert state.snapshot().node("h100-a-01").gpus_free == 0
    assert list(state.jobs) == ["team-a/bert"]
    assert state.namespaces == {"team-a": {"tier": "gold"}}
    assert state.priorities == {"high": 1000}
    assert list(state.queues) == ["q"]
    assert state.fabrics == {}  # an invalid profile is skipped, as the watch handler does
    assert not state.synced  # the operator marks it once every kind is in


def test_prune_forgets_only_what_the_listing_lacks_and_no_event_showed_since() -> None:
    now = [0.0]
    state = ShellState(clock=lambda: now[0])
    state.load("nodes", fleet_nodes())
    state.upsert_pod(busy("h100-a-01", 8, "gone"))  # deleted while no watch looked
    state.upsert_pod(busy("h100-a-02", 8, "kept"))
    now[0] = 10.0  # the listing begins
    since = state.clock()
    now[0] = 11.0
    state.upsert_pod(busy("h100-a-03", 8, "new"))  # created while it ran
    listed = [busy("h100-a-02", 8, "kept")]
    assert state.prune("pods", listed, since) == 1
    assert sorted(n for _, n in state.pods) == ["kept", "new"]
    assert state.snapshot().node("h100-a-01").gpus_free == 8
    assert state.prune("nodes", fleet_nodes()[1:], since) == 1
    assert fleet_nodes()[0]["metadata"]["name"] not in state.nodes


# --- a job the API server refused holds nothing (issue: a refused gang kept its GPUs) -------
def _rejected(name: str, generation: int = 1) -> dict[str, Any]:
    b = job(name, workers=2, gpus=8).meta(creationTimestamp="2025-06-01T11:00:00Z")
    b.generation(generation).phase("Invalid", "Rejected", "Pod ...: 422 Invalid")
    b.with_status(observedGeneration=1)
    return b.build()


def test_a_rejected_job_is_not_admitted_again_and_holds_nothing() -> None:
    state = fleet_state()
    state.upsert_job(_rejected("refused"))
    run_cycle(state)
    assert "team-a/refused" not in verdicts(state)
    assert not assumed(state)


def test_a_rejected_job_is_decided_again_once_its_spec_changes() -> None:
    state = fleet_state()
    state.upsert_job(_rejected("refused", generation=2))  # status still says generation 1
    run_cycle(state)
    assert verdicts(state)["team-a/refused"].admission.admitted


def test_the_shells_rejection_keeps_the_job_out_before_its_status_lands() -> None:
    state = fleet_state()
    body = new_job("refused")
    state.upsert_job(body)
    state.reject("team-a/refused", body["metadata"].get("generation"))
    run_cycle(state)
    assert not assumed(state) and "team-a/refused" not in verdicts(state)


# --- usage accounting under random event orders ---------------------------------------------
class UsageModel:
    """What admission should count as used, kept without ShellState's indexes: the live
    pods of the cache, plus each assumed gang's pods the watch has not shown (until it is
    forgotten or expires), plus pods created and not yet shown (until `inflight_ttl`)."""

    def __init__(self, assume_ttl: float, inflight_ttl: float) -> None:
        self.assume_ttl, self.inflight_ttl = assume_ttl, inflight_ttl
        self.cache: dict[str, tuple[str, int, bool]] = {}  # pod -> (job, GPUs, live)
        self.assumed: dict[str, tuple[float, dict[str, int]]] = {}  # job -> (expires, pods)
        self.inflight: dict[str, tuple[str, int, float]] = {}  # pod -> (job, GPUs, created at)

    def _settle(self, job: str) -> None:
        visible = {p for p, (j, _, _) in self.cache.items() if j == job}
        if job in self.assumed and set(self.assumed[job][1]) <= visible:
            del self.assumed[job]

    def upsert(self, name: str, job: str, gpus: int, live: bool) -> None:
        self.cache[name] = (job, gpus, live)
        self.inflight.pop(name, None)
        self._settle(job)

    def remove(self, name: str) -> None:
        self.cache.pop(name, None)

    def assume(self, job: str, pods: dict[str, int], now: float) -> None:
        self.assumed[job] = (now + self.assume_ttl, dict(pods))
        self._settle(job)

    def created(self, name: str, job: str, gpus: int, now: float) -> None:
        if name not in self.cache:
            self.inflight[name] = (job, gpus, now)

    def forget(self, job: str) -> None:
        self.assumed.pop(job, None)
        self.inflight = {p: v for p, v in self.inflight.items() if v[0] != job}

    def expire(self, now: float) -> None:
        self.assumed = {j: a for j, a in self.assumed.items() if a[0] > now}
        self.inflight = {p: v for p, v in self.inflight.items() if v[2] + self.inflight_ttl > now}

    def usage(self) -> tuple[int, int]:
        seen = sum(g for _, g, live in self.cache.values() if live)
        pending = {
            p: g
            for job, (_, pods) in self.assumed.items()
            for p, g in pods.items()
            if self.cache.get(p, ("", 0, False))[0] != job
        }
        created = sum(g for p, (_, g, _) in self.inflight.items() if p not in pending)
        extra = sum(pending.values()) + created
        return seen + extra, extra


def _gang_pod(name: str, node_name: str, gpus: int, how: str) -> dict[str, Any]:
    b = pod(name).gpus(str(gpus))
    if how == "gated":
        return b.pinned(node_name).build()
    b.on(node_name).bound(node_name)
    return {"running": b.running, "done": b.succeeded, "failed": b.failed}[how]().build()


@pytest.mark.parametrize("seed", range(25))
def test_gpu_usage_is_the_cache_plus_what_is_pending(seed: int) -> None:
    """After any order of assume / created / upsert_pod / remove_pod / forget / expire,
    gpu_usage() is the live pods' GPUs plus the pending assumptions and created pods,
    and once every assumption is settled or gone the second figure is 0."""
    import random

    rng = random.Random(seed)
    state = fleet_state()
    model = UsageModel(state.assume_ttl, state.inflight_ttl)
    nodes = ["h100-a-01", "h100-a-02", "a100-01", "t4-01"]
    gangs = {f"j{k}": [f"j{k}-worker-{i}" for i in range(3)] for k in range(3)}
    now = 0.0
    for _ in range(150):
        job_name = rng.choice(sorted(gangs))
        name = rng.choice(gangs[job_name])
        gpus, node_name = rng.choice([1, 2, 4]), rng.choice(nodes)
        op = rng.choice(["assume", "created", "upsert", "upsert", "remove", "forget", "expire"])
        if op == "assume":
            chosen = rng.sample(gangs[job_name], rng.randint(1, 3))
            state.assume(f"team-a/{job_name}", {p: ("name", node_name, gpus) for p in chosen}, now)
            model.assume(job_name, dict.fromkeys(chosen, gpus), now)
        elif op == "created":
            state.created(_gang_pod(name, node_name, gpus, "gated"), now)
            model.created(name, job_name, gpus, now)
        elif op == "upsert":
            how = rng.choice(["gated", "running", "running", "done", "failed"])
            state.upsert_pod(_gang_pod(name, node_name, gpus, how))
            model.upsert(name, job_name, gpus, how in ("gated", "running"))
        elif op == "remove":
            state.remove_pod("team-a", name)
            model.remove(name)
        elif op == "forget":
            state.forget(f"team-a/{job_name}")
            model.forget(job_name)
        else:
            now += rng.choice([1.0, 60.0, 130.0, 700.0])
            state.expire(now)
            model.expire(now)
        assert state.gpu_usage() == model.usage(), (op, name)
        assert sum(n.gpus_used for n in state.snapshot().nodes) == model.usage()[0], (op, name)
    state.expire(now + 10_000)
    assert state.gpu_usage()[1] == 0


# --- intake kept per job version ------------------------------------------------------------
def _published_jobs(state: ShellState) -> dict[str, Any]:
    rec = run_cycle(state)
    return dict(rec.published[-1].jobs)


def _fresh_copy(state: ShellState) -> ShellState:
    """The same objects in a new state: every intake computed from scratch."""
    fresh = fleet_state()
    for body in state.job_bodies():
        fresh.upsert_job(body)
    for p in state.pods.values():
        fresh.upsert_pod(p)
    for key, a in assumed(state).items():
        fresh.assume(key, a.pods, now=a.expires - state.assume_ttl)
    return fresh


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: None, id="nothing"),
        pytest.param(
            lambda s: s.upsert_pod(pod("j1-worker-0").on("a100-01").gpus(8).build()),
            id="a-pod-of-j1-shows-up",
        ),
        pytest.param(
            lambda s: s.upsert_job(
                job("j2", workers=1, gpus=8)
                .generation(2)
                .meta(creationTimestamp="2025-06-01T11:00:00Z")
                .build()
            ),
            id="j2-edited",
        ),
        pytest.param(lambda s: s.forget("team-a/j3"), id="j3-forgotten"),
        pytest.param(lambda s: s.upsert_priority("high", 1000), id="a-priority-class"),
        pytest.param(lambda s: s.remove_job("team-a", "j1"), id="j1-deleted"),
    ],
)
def test_kept_intakes_equal_a_fresh_intake(change: Any) -> None:
    state = fleet_state()
    for name in ("j1", "j2", "j3", "huge"):
        state.upsert_job(new_job(name, workers=40 if name == "huge" else 1))
    run_cycle(state)
    change(state)
    fresh = _fresh_copy(state)  # before the cycle: it assumes what it admits
    assert _published_jobs(state) == _published_jobs(fresh)


def test_a_leader_that_comes_back_tells_every_verdict_again() -> None:
    """A lease lost and won back: verdicts kept from before must not look unchanged, or a
    reconcile skipped while standing by (a gang to re-create) would never run."""
    state = fleet_state()
    state.upsert_job(new_job("j1"))
    first = run_cycle(state)
    assert first.reconciled == ["team-a/j1"]
    assert "team-a/j1" in assumed(state)  # its reconcile was skipped: lease lost
    state.set_leader(False)
    state.set_leader(True)
    assert run_cycle(state).reconciled == ["team-a/j1"]


# --- a deleted job leaves no trace (its memory is one record, pruned in one place) ---------
def _traces(where: Any, needles: frozenset[Any], path: str, seen: set[int]) -> list[str]:
    """The paths in `where` that hold one of `needles` as a key, member or value, walking
    every container, however deep: builtin ones, dataclasses (the Shell, its ShellState,
    each JobMemory, ...) and other objects' attributes; not the builtin modules' objects
    (locks, tasks, timer handles), which hold no job."""
    try:
        if where in needles:
            return [path]
    except TypeError:  # unhashable: a container, looked into below
        pass
    if id(where) in seen or isinstance(where, str | bytes | int | float | bool | type(None)):
        return []
    seen.add(id(where))
    if isinstance(where, dict):
        return [
            t
            for k, v in where.items()
            for t in _traces(k, needles, f"{path}[key]", seen)
            + _traces(v, needles, f"{path}[{k!r}]", seen)
        ]
    if isinstance(where, set | frozenset | list | tuple):
        return [t for v in where for t in _traces(v, needles, f"{path}[]", seen)]
    if dataclasses.is_dataclass(where):
        names = [f.name for f in dataclasses.fields(where)]
    elif type(where).__module__.startswith("trainop."):
        # the admission loop and its tail memo, the pod feed, the progress service
        slots = [n for k in type(where).__mro__ for n in getattr(k, "__slots__", ())]
        names = [*getattr(where, "__dict__", {}), *(n for n in slots if hasattr(where, n))]
    else:
        return []
    return [t for n in names for t in _traces(getattr(where, n), needles, f"{path}.{n}", seen)]


def _remember_a_merge(state: ShellState, key: JobKey) -> None:
    """The job's runtime merge: the one its gang was planned from, and the memoized
    resolution (the runtime itself is no job's and stays)."""
    state.upsert_runtime(runtime("pytorch").framework("pytorch").env(TAG="any").build())
    mine = [{"name": "trainer", "env": [{"name": "TAG", "value": "bert-merged"}]}]
    named = job("bert").runtime_ref("pytorch").unset("framework").template(containers=mine)
    mem = state.jobs[key]
    merged = mem.resolution(named.build(), state.runtimes, state.runtimes_revision, False)
    assert isinstance(merged, Resolved)
    mem.planned_from(merged)


def _shell(state: ShellState, **parts: Any) -> Any:
    from trainop.handlers.shell import Shell

    return Shell(state=state, **parts)


@pytest.mark.parametrize("reconciling", [False, True], ids=["idle", "a-reconcile-holds-its-lock"])
def test_a_deleted_job_leaves_no_trace(reconciling: bool) -> None:
    """Every container of the Shell is walked: the job's record (its Workload included),
    the state's indexes, the admission loop, the Shell's own attributes."""
    from trainop.handlers import kueue
    from trainop.handlers import operator as handlers

    state = fleet_state()
    shell = _shell(state)
    for name in ("bert", "other"):
        state.upsert_job(new_job(name))
    rec = Recorder()
    shell.loop = AdmissionLoop(state, lambda: CONFIG, rec.reconcile, rec.evict, rec.publish)
    asyncio.run(shell.loop.cycle())  # a verdict, an intake and an assumption for each
    key = "team-a/bert"
    plan = state.jobs[key].verdict.admission.plan  # type: ignore[union-attr]
    (first, (node, _)), (second, _) = sorted(plan.pinned().items())
    needles = frozenset({key, ("team-a", first), ("team-a", second), "bert-wl", "bert-merged"})

    def traces() -> list[str]:
        return _traces(shell, needles, "shell", set())

    async def go() -> None:
        state.upsert_pod(pod(first).on(node).gpus(8).build())  # the watch shows one pod
        state.released[("team-a", first)] = 0.0
        state.created(pod(second).build())  # the other is created, not shown yet
        written = new_job("bert")
        written["metadata"]["resourceVersion"] = "9"
        state.record_written(key, written)
        state.reject(key, 7)
        state.jobs[key].failed()
        workload = {"metadata": {"name": "bert-wl", "namespace": "team-a"}}
        workload["metadata"]["labels"] = {"trainop.dev/job-name": "bert"}
        kueue.remember_workload(state, {"type": "ADDED"}, workload)
        _remember_a_merge(state, key)
        handlers._requeue(shell, key, 30.0)
        handle = state.jobs[key].requeue
        lock = handlers._lock(shell, key)
        assert lock is not None and handle is not None
        assert state.jobs[key].workload is not None
        assert traces() != []
        if reconciling:
            async with lock:
                state.remove_pod("team-a", first)
                state.remove_job("team-a", "bert")
                assert state.jobs[key].lock is lock and state.job(key) is None
            state.drop_if_gone(key)  # as the reconcile does once it lets the lock go
        else:
            state.remove_pod("team-a", first)
            state.remove_job("team-a", "bert")
        assert handle.cancelled()

    asyncio.run(go())
    # The deletion woke the admission loop (ShellState.touch); its next cycle derives the
    # snapshot and the waiting tails afresh, and with that nothing of the job is left.
    asyncio.run(shell.loop.cycle())
    assert traces() == []
    assert state.jobs["team-a/other"].verdict is not None  # the other job kept its own


def test_a_workload_seen_before_its_job_waits_in_the_record_and_goes_with_it() -> None:
    from trainop.handlers import kueue

    state = fleet_state()
    workload = {"metadata": {"name": "wl", "namespace": "team-a"}}
    workload["metadata"]["labels"] = {"trainop.dev/job-name": "bert"}
    kueue.remember_workload(state, {"type": "ADDED"}, workload)
    assert kueue.workload_of(state, "team-a/bert") == workload  # no job yet: kept
    state.upsert_job(new_job("bert"))
    assert kueue.workload_of(state, "team-a/bert") == workload
    kueue.remember_workload(state, {"type": "DELETED"}, workload)
    assert kueue.workload_of(state, "team-a/bert") is None
    kueue.remember_workload(state, {"type": "ADDED"}, workload)
    state.remove_job("team-a", "bert")
    assert "team-a/bert" not in state.jobs


class StatusApi:
    """The writes an eviction makes, recorded; a status patch answers with the job as the
    API server would (its status patched, a newer resourceVersion)."""

    def __init__(self, state: ShellState) -> None:
        self.state = state
        self.calls: list[tuple[str, str]] = []

    def patch_job_status(
        self, ns: str, name: str, status: dict[str, Any], old: dict[str, Any]
    ) -> dict[str, Any]:
        self.calls.append(("status", status.get("phase") or ",".join(sorted(status))))
        body = copy.deepcopy(self.state.job(f"{ns}/{name}"))
        assert body is not None
        body["status"] = {**(body.get("status") or {}), **status}
        body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        return body

    def delete_pod(self, ns: str, name: str) -> None:
        self.calls.append(("delete", name))

    def post_event(self, body: Any, etype: str, reason: str, message: str) -> None:
        self.calls.append(("event", reason))


def test_an_eviction_waits_for_the_checkpoint_in_the_jobs_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The victim is asked for a checkpoint, evicted once it reports one, and its record
    (progress, checkpoint event, wait) goes with it like the rest."""
    from datetime import UTC, datetime

    from trainop.handlers import operator as handlers
    from trainop.handlers.progress import ProgressService
    from trainop.progress import iso
    from trainop.queueing.model import Action

    state = fleet_state()
    body = job("bert", workers=2, gpus=8).checkpoint(gracePeriodSeconds=60)
    state.upsert_job(body.meta(resourceVersion="1").phase("Running").build())
    for name, node in (("bert-worker-0", "a100-01"), ("bert-worker-1", "a100-02")):
        state.upsert_pod(pod(name).on(node).gpus(8).running().build())
    api = StatusApi(state)
    service = ProgressService(lambda: api, lambda: state, 1.0)
    config = dataclasses.replace(CONFIG, progress_url="http://trainop:8443")
    shell = _shell(state, api=api, progress=service, config=config)
    key, now = "team-a/bert", datetime.now(UTC).replace(tzinfo=None)
    decision = JobDecision(key, "q", Action.PREEMPT, reason="Priority", message="for x")

    async def go() -> None:
        await handlers.evict(shell, decision, now)
        mem = state.jobs[key]
        assert mem.checkpoint_wait and ("delete", "bert-worker-0") not in api.calls
        mem.reported({"step": 5, "lastCheckpoint": {"time": iso(now), "step": 5, "path": "/c"}})
        service.checkpointed(key).set()  # as a report with a newer checkpoint does
        await asyncio.gather(*shell.tasks)
        assert not mem.checkpoint_wait
        state.remove_job("team-a", "bert")

    asyncio.run(go())
    assert api.calls == [
        ("status", "checkpointRequest"),
        ("event", "CheckpointRequested"),
        ("status", "Queued"),
        ("event", "Preempted"),
        ("delete", "bert-worker-0"),
        ("delete", "bert-worker-1"),
    ]
    assert key not in state.jobs


# --- runtimes (spec.runtimeRef) ------------------------------------------------------------
def _runtime_job(name: str = "bert", generation: int = 1) -> dict[str, Any]:
    """A job that takes framework, CUDA and its pod template from ClusterTrainingRuntime
    pytorch (as examples/runtimes/ do): only its size and command are its own."""
    built = (
        job(name, workers=2, gpus=8)
        .runtime_ref("pytorch")
        .unset("framework", "cuda")
        .generation(generation)
        .meta(creationTimestamp="2025-06-01T11:00:00Z")
    )
    return built.build()


def _pt_runtime(tag: str = "one", generation: int = 1, cuda: str = "12.4") -> dict[str, Any]:
    return (
        runtime("pytorch")
        .framework("pytorch", "2.4")
        .set("cuda", cuda)
        .env(DATASET=tag)
        .pod(volumes=[{"name": "data", "emptyDir": {}}])
        .generation(generation)
        .build()
    )


def _env(body: Mapping[str, Any]) -> dict[str, str]:
    trainer = body["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in trainer.get("env") or []}


def test_a_runtime_change_bumps_the_revision_and_names_the_jobs_that_name_it() -> None:
    state = fleet_state()
    state.upsert_job(_runtime_job("bert"))
    state.upsert_job(new_job("plain"))
    woke: list[int] = []
    state.on_change = lambda: woke.append(state.revision)
    assert state.upsert_runtime(_pt_runtime()) == ["team-a/bert"]
    assert state.runtimes_revision == 1 and woke
    assert state.upsert_runtime(_pt_runtime()) == []  # the same again: nothing moved
    assert state.runtimes_revision == 1
    assert state.upsert_runtime(_pt_runtime("two", generation=2)) == ["team-a/bert"]
    other = runtime("jax").framework("jax").build()
    assert state.upsert_runtime(other) == []  # nobody names it, but it is kept
    assert state.runtimes_revision == 3
    assert state.remove_runtime("ClusterTrainingRuntime", None, "pytorch") == ["team-a/bert"]
    assert state.remove_runtime("ClusterTrainingRuntime", None, "pytorch") == []
    assert list(state.runtimes) == [("ClusterTrainingRuntime", "", "jax")]
    local = runtime("pytorch", namespace="team-a").framework("pytorch").build()
    state.load("trainingruntimes", [{k: v for k, v in local.items() if k != "kind"}])
    assert ("TrainingRuntime", "team-a", "pytorch") in state.runtimes  # kind set by the loader


def test_a_job_waits_out_of_line_for_its_runtime_then_is_admitted_merged() -> None:
    state = fleet_state()
    state.upsert_job(_runtime_job("bert"))
    problem = state.resolution("team-a/bert")
    assert isinstance(problem, RuntimeProblem) and problem.reason == "RuntimeNotFound"
    now = datetime(2025, 6, 1, 12, 0, 0)
    assert gather(state, CONFIG, now, 0.0).bodies == []  # no verdict, nothing assumed
    rec = run_cycle(state)
    assert verdicts(state) == {} and rec.reconciled == []
    state.upsert_runtime(_pt_runtime())
    work = gather(state, CONFIG, now, 0.0)
    (merged,) = work.bodies
    assert merged["spec"]["framework"] == {"name": "pytorch", "version": "2.4"}
    assert _env(merged) == {"DATASET": "one"}
    rec = run_cycle(state)
    assert rec.reconciled == ["team-a/bert"]
    assert verdicts(state)["team-a/bert"].admission.admitted


def test_a_resolution_is_kept_until_the_spec_or_the_runtimes_move() -> None:
    state = fleet_state()
    state.upsert_runtime(_pt_runtime())
    state.upsert_job(_runtime_job("bert"))
    first = state.resolution("team-a/bert")
    assert isinstance(first, Resolved) and first.runtime is not None
    assert first.status() == {
        "runtime": {"kind": "ClusterTrainingRuntime", "name": "pytorch", "generation": 1}
    }
    written = _runtime_job("bert")
    written["metadata"]["resourceVersion"] = "200"
    written["status"] = {"phase": "Queued"}
    state.record_written("team-a/bert", written)
    again = state.resolution("team-a/bert")
    assert isinstance(again, Resolved)
    assert again.body["spec"] is first.body["spec"]  # kept, not merged again
    assert again.body["status"] == {"phase": "Queued"}  # under the newest status
    state.upsert_runtime(_pt_runtime("two", generation=2))
    moved = state.resolution("team-a/bert")
    assert isinstance(moved, Resolved) and _env(moved.body) == {"DATASET": "two"}
    assert state.merged("team-a/bert") == moved.body
    state.remove_runtime("ClusterTrainingRuntime", None, "pytorch")
    assert state.merged("team-a/bert") == state.job("team-a/bert")  # the body as it is


def test_a_live_gang_keeps_its_merge_until_the_job_itself_is_edited() -> None:
    state = fleet_state()
    state.upsert_runtime(_pt_runtime("one"))
    state.upsert_job(_runtime_job("bert"))
    key = "team-a/bert"
    planned = state.resolution(key)
    assert isinstance(planned, Resolved)
    state.jobs[key].planned_from(planned)
    state.upsert_pod(pod("bert-worker-0").on("h100-a-01").gpus(8).build())
    for change in (
        lambda: state.upsert_runtime(_pt_runtime("two", generation=2)),  # edited
        lambda: state.upsert_runtime(_pt_runtime("two", 3, cuda="x")),  # broken
        lambda: state.remove_runtime("ClusterTrainingRuntime", None, "pytorch"),  # deleted
    ):
        change()
        kept = state.resolution(key)
        assert isinstance(kept, Resolved), kept
        assert _env(kept.body) == {"DATASET": "one"} and kept.runtime == planned.runtime
    state.upsert_job(_runtime_job("bert", generation=2))  # the job edited: merged again
    assert isinstance(state.resolution(key), RuntimeProblem)
    state.upsert_job(_runtime_job("bert"))
    state.remove_pod("team-a", "bert-worker-0")  # the gang ended: the next one waits
    assert isinstance(state.resolution(key), RuntimeProblem)


class CreatingApi(StatusApi):
    """StatusApi that also creates (answering with the object) and releases pods."""

    def __init__(self, state: ShellState) -> None:
        super().__init__(state)
        self.created: list[dict[str, Any]] = []

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", f"{obj['kind']}/{obj['metadata']['name']}"))
        self.created.append(obj)
        return obj

    def ungate_pod(self, ns: str, name: str, keep: Any) -> None:
        self.calls.append(("release", name))


def test_the_shell_waits_for_a_missing_runtime_then_plans_from_it() -> None:
    """The reconcile of a job naming a missing runtime: Queued (Runtime), the condition and
    one Event, nothing assumed; the runtime created: admitted by the next cycle, its pods
    carry the runtime's env, status.runtime records it and the gang keeps that merge."""
    from trainop.handlers import operator as handlers

    state = fleet_state()
    state.upsert_job(_runtime_job("bert"))
    api = CreatingApi(state)
    shell = _shell(state, api=api)
    key = "team-a/bert"
    asyncio.run(handlers.reconcile_job(shell, key))
    asyncio.run(handlers.reconcile_job(shell, key))  # the same problem again: no write, no Event
    assert api.calls == [("status", "Queued"), ("event", "RuntimeNotFound")]
    status = (state.job(key) or {})["status"]
    assert (status["phase"], status["pendingReason"]) == ("Queued", "Runtime")
    assert "ClusterTrainingRuntime pytorch not found" in status["pendingMessage"]
    assert assumed(state) == {} and verdicts(state) == {}

    assert state.upsert_runtime(_pt_runtime("one")) == [key]
    rec = Recorder()
    loop = AdmissionLoop(state, lambda: CONFIG, rec.reconcile, rec.evict, rec.publish)
    asyncio.run(loop.cycle())
    assert rec.reconciled == [key] and verdicts(state)[key].admission.admitted
    api.calls.clear()
    asyncio.run(handlers.reconcile_job(shell, key))
    pods = [o for o in api.created if o["kind"] == "Pod"]
    assert len(pods) == 2
    for p in pods:
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
        assert env["DATASET"] == "one"
        assert {"name": "data", "emptyDir": {}} in p["spec"]["volumes"]
    status = (state.job(key) or {})["status"]
    assert status["runtime"] == {
        "kind": "ClusterTrainingRuntime",
        "name": "pytorch",
        "generation": 1,
    }
    assert status["framework"] == "pytorch"
    resolved = next(cd for cd in status["conditions"] if cd["type"] == "RuntimeResolved")
    assert (resolved["status"], resolved["reason"]) == ("True", "Resolved")
    planned = state.jobs[key].planned
    assert planned is not None and planned.runtime is not None
    assert planned.runtime.generation == 1


def test_a_kept_decision_is_recorded_again_once_its_verdict_was_dropped() -> None:
    """The loop skips a decision that is the very object of its last cycle (a kept tail's
    wait) for a job not marked since; a dropped verdict (JobMemory.undecided) marks the
    job, so its kept decision is recorded again."""
    from bench.admission import Bench, Gang, fleet, job_body, mixed_gangs

    bench = Bench(fleet(50))  # 2 racks of 25 DGX nodes, filled by two 25-pod gangs
    bench.add_jobs([job_body(Gang(f"f{i:05d}", 25, 8)) for i in range(2)])
    while bench.cycle()[1]:
        pass
    bench.add_jobs([job_body(g) for g in mixed_gangs(40, 5, 8)])
    for _ in range(3):  # the waiting tails are kept from the third cycle on
        bench.cycle()
    last = dict(bench.loop.recorded)
    bench.cycle()
    kept = sorted(k for k, d in bench.loop.recorded.items() if last.get(k) is d)
    assert len(kept) >= 30  # the same decision objects: not looked at
    key = kept[-1]
    mem = bench.state.jobs[key]
    before = mem.verdict
    assert before is not None and not before.admission.admitted
    mem.undecided()
    bench.cycle()
    assert bench.loop.recorded[key] is last[key]
    assert mem.verdict is not None and mem.verdict.admission == before.admission
