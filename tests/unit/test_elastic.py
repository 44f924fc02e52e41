"""Elastic PyTorch gangs (issue 25 part 1): spec.elastic, torchrun's elastic env, and admission
admitting at the largest size that fits, growing when nobody waits, shrinking before evicting.

Admission runs over the real placement engine (tests/unit/queueing_harness.GangPlacer: a job
of G GPUs is G/8 pods of 8) on small_fleet: h100 nodes h0..h3 of 8 GPUs each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from bench.placement.__main__ import main as bench_main
from click.testing import CliRunner

from tests.builders import H100, NOW, ago, fleet_snapshot, job, pod, queue, workload
from tests.unit.manifest_helpers import FLEET_NODES
from tests.unit.queueing_harness import decide
from tests.unit.test_queueing_simulate import h100_nodes, tj, tq
from trainop import frameworks
from trainop.api.trainingjob import TrainingJobSpec, elastic_problem
from trainop.cli.main import cli
from trainop.frameworks.base import Member, WiringInput, member_host
from trainop.planner import InvalidJob, OperatorConfig, Plan, plan_growth, plan_job
from trainop.queueing import simulate
from trainop.queueing.cluster import admission_pass
from trainop.queueing.model import Action, QueuedJob
from trainop.reconcile import ADMIT_ALL, Actions, Admission, reconcile

Q = queue("q").state()  # no quotas: placement alone decides; withinQueue LowerPriority


def _spec(body: dict[str, Any]) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate(body["spec"])


# --- the API ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param(job("a").workers(3, 1).elastic(2, 3).build(), None, id="pytorch-ok"),
        pytest.param(
            job("a").workers(3, 1).elastic(4, 3).build(),
            ("spec.elastic.minReplicas", "4 exceeds spec.elastic.maxReplicas (3)"),
            id="min-above-max",
        ),
        pytest.param(
            job("a").framework("jax").workers(3, 1).elastic(2, 3).build(),
            ("spec.elastic", "framework jax cannot resize a running gang"),
            id="jax-refused",
        ),
        pytest.param(
            job("a").elastic(2, 3).workers(2, 1).build(),
            ("spec.replicaSpecs.Worker.replicas", "2 must equal spec.elastic.maxReplicas (3)"),
            id="replicas-not-max",
        ),
    ],
)
def test_elastic_spec_rules_name_the_field(
    body: dict[str, Any], want: tuple[str, str] | None
) -> None:
    problem = elastic_problem(_spec(body))
    if want is None:
        assert problem is None
    else:
        assert problem is not None
        assert problem[0] == want[0]
        assert problem[1].startswith(want[1])


def test_min_replicas_zero_is_refused_by_the_schema() -> None:
    body = job("a").workers(3, 1).elastic(0, 3).build()
    with pytest.raises(ValueError, match=r"min_replicas|minReplicas"):
        _spec(body)


def test_planner_refuses_an_elastic_jax_job_with_the_field() -> None:
    body = job("a").framework("jax").workers(3, 1).elastic(2, 3).build()
    with pytest.raises(InvalidJob) as err:
        plan_job(body, fleet_snapshot(), OperatorConfig())
    assert err.value.field == "spec.elastic"


# --- torchrun's elastic env -----------------------------------------------------------------
def test_elastic_wiring_is_c10d_at_worker_0_and_the_same_at_every_size() -> None:
    members = tuple(
        Member("Worker", i, rank=i, gpus=8, host=member_host("el", "ns", "Worker", i, served=True))
        for i in range(3)
    )
    wiring = frameworks.get("pytorch").wire(WiringInput("el", "ns", members, elastic=(2, 4)))
    env0, env2 = wiring.env[("Worker", 0)], wiring.env[("Worker", 2)]
    assert env0["PET_NNODES"] == "2:4"
    assert env0["PET_RDZV_BACKEND"] == "c10d"
    assert env0["PET_RDZV_ENDPOINT"] == "el-worker-0.el.ns.svc:29500"
    assert env0["PET_RDZV_ID"] == "el"
    assert (env0["PET_RDZV_CONF"], env2["PET_RDZV_CONF"]) == ("is_host=1", "is_host=0")
    assert "PET_NODE_RANK" not in env2 and "WORLD_SIZE" not in env2
    smaller = frameworks.get("pytorch").wire(WiringInput("el", "ns", members[:2], elastic=(2, 4)))
    assert smaller.env[("Worker", 1)] == wiring.env[("Worker", 1)]


def test_rendezvous_last_call_reaches_every_worker_through_the_plan() -> None:
    body = job("el").workers(3, 8).elastic(2, 3).build()
    body["spec"]["elastic"]["rendezvousLastCallSeconds"] = 5
    plan = plan_job(body, fleet_snapshot(), OperatorConfig(), workers=2)
    assert isinstance(plan, Plan)
    confs = [
        e["value"]
        for p in plan.pods
        for e in p["spec"]["containers"][0]["env"]
        if e["name"] == "PET_RDZV_CONF"
    ]
    assert confs == ["is_host=1,last_call_timeout=5", "is_host=0,last_call_timeout=5"]


def test_planner_plans_an_elastic_job_at_the_size_asked() -> None:
    body = job("el").workers(4, 8).elastic(1, 4).build()
    plan = plan_job(body, fleet_snapshot(), OperatorConfig(), workers=2)
    assert isinstance(plan, Plan)
    assert [p["metadata"]["name"] for p in plan.pods] == ["el-worker-0", "el-worker-1"]


RACK_A = [f"h100-a-0{i}" for i in range(1, 9)]
RACK_B = [f"h100-b-0{i}" for i in range(1, 9)]


@pytest.mark.parametrize(
    ("full", "node", "where"),
    [
        pytest.param(
            [n for n in RACK_A if n != "h100-a-05"],
            "h100-a-05",
            "within rack rack-h100-a",
            id="same-rack",
        ),
        pytest.param(RACK_A, "h100-b-", "within block block-a", id="next-rack-same-block"),
        pytest.param(RACK_A + RACK_B, "", "crosses block block-a", id="crosses-the-block"),
    ],
)
def test_growth_places_new_workers_in_the_smallest_domain_and_says_a_crossing(
    full: list[str], node: str, where: str
) -> None:
    body = job("el").workers(3, 8).elastic(1, 3).build()
    snap = fleet_snapshot().with_reserved(dict.fromkeys(full, 8))
    result = plan_growth(body, snap, OperatorConfig(), grow_from=1, size=2, held=["h100-a-01"])
    assert isinstance(result, tuple), result
    plan, said = result
    assert [p["metadata"]["name"] for p in plan.pods] == ["el-worker-1"]
    assert plan.placement.nodes[0].startswith(node)
    assert said.startswith(where)


# --- admission: admit, grow, shrink ---------------------------------------------------------
def _el(key: str = "q/el", lo: int = 1, hi: int = 4) -> Any:
    return workload(key, "q", 0).elastic(lo, hi)


ADMIT_CASES = [
    pytest.param([_el().build()], {}, ("q/el", Action.ADMIT, 4), id="empty-fleet-max"),
    pytest.param(
        [_el().build()], {"h0": 8, "h1": 8}, ("q/el", Action.ADMIT, 2), id="largest-that-fits"
    ),
    pytest.param(
        [_el(lo=3).build()], {"h0": 8, "h1": 8}, ("q/el", Action.WAIT, 3), id="below-min-waits"
    ),
    pytest.param(
        [_el(lo=2).prio(0).running_workers("h0", "h1", "h2", "h3", started=1.0).build()],
        {},
        ("q/el", Action.KEEP, None),
        id="at-max-nothing-to-do",
    ),
    pytest.param(
        [_el().running_workers("h0", "h1", started=1.0).build()],
        {},
        ("q/el", Action.GROW, 4),
        id="grows-to-largest-that-fits",
    ),
    pytest.param(
        [_el().running_workers("h0", started=1.0).build()],
        {"h3": 8},
        ("q/el", Action.GROW, 3),
        id="grows-into-what-is-free",
    ),
    pytest.param(
        [
            _el().running_workers("h0", "h1", started=1.0).build(),
            workload("q/big", "q", 24).created(5).build(),
        ],
        {},
        ("q/el", Action.KEEP, None),
        id="no-growth-while-a-job-waits",
    ),
    pytest.param(
        [
            _el(lo=2).running_workers("h0", "h1", "h2", "h3", started=1.0).build(),
            workload("q/hi", "q", 16).prio(10).created(5).build(),
        ],
        {},
        ("q/el", Action.SHRINK, 2),
        id="shrinks-to-min-for-higher-priority",
    ),
    pytest.param(
        [
            _el(lo=3).running_workers("h0", "h1", "h2", "h3", started=1.0).build(),
            workload("q/hi", "q", 16).prio(10).created(5).build(),
        ],
        {},
        ("q/el", Action.PREEMPT, None),
        id="evicted-whole-when-min-leaves-too-little",
    ),
]


@pytest.mark.parametrize(("jobs", "busy", "want"), ADMIT_CASES)
def test_elastic_admission(
    jobs: list[QueuedJob], busy: dict[str, int], want: tuple[str, Action, int | None]
) -> None:
    decisions = decide([Q], jobs, other_used=busy)
    key, action, size = want
    d = decisions[key]
    assert d.action == action, d.message
    if size is not None:
        assert (d.size if action != Action.WAIT else d.gpus // 8) == size


def test_shrink_frees_the_highest_workers_and_the_preemptor_takes_them() -> None:
    el = _el(lo=2).running_workers("h0", "h1", "h2", "h3", started=1.0).build()
    hi = workload("q/hi", "q", 16).prio(10).created(5).build()
    decisions = decide([Q], [el, hi])
    assert decisions["q/el"].gpus == 16
    assert decisions["q/el"].preemptor == "q/hi"
    assert decisions["q/hi"].victims == ("q/el",)
    assert decisions["q/hi"].placement is not None
    assert set(decisions["q/hi"].placement.nodes) == {"h2", "h3"}


def test_a_resizing_job_neither_grows_nor_shrinks() -> None:
    el = _el().running_workers("h0", started=1.0).set(resizing=True).build()
    assert decide([Q], [el])["q/el"].action == Action.KEEP


# --- reconcile: the gang follows the admitted size ------------------------------------------
def _running_elastic(size: int, target: int | None = None) -> tuple[dict[str, Any], list[Any]]:
    body = (
        job("el")
        .workers(3, 8)
        .elastic(1, 3)
        .with_status(
            startTime=ago(60),
            elastic={"currentReplicas": size, "targetReplicas": target or size},
        )
        .phase("Running", "AllPodsRunning", f"{size} pods running", since=30)
        .build()
    )
    nodes = ["h100-a-01", "h100-a-02", "h100-a-03"]
    pods = [pod(f"el-worker-{i}").on(nodes[i]).running().build() for i in range(size)]
    return body, pods


def _reconcile(body: dict[str, Any], pods: list[Any], admission: Admission) -> Actions:
    return reconcile(body, pods, lambda: fleet_snapshot(pods), OperatorConfig(), NOW, admission)


def test_a_shrink_deletes_the_highest_worker_and_keeps_the_job_running() -> None:
    body, pods = _running_elastic(3)
    acts = _reconcile(body, pods, Admission(admitted=True, reason="Priority", message="m", size=2))
    assert acts.delete_pods == ["el-worker-2"]
    assert acts.status["phase"] == "Running"
    assert acts.status["elastic"]["targetReplicas"] == 2
    assert acts.status["elastic"]["currentReplicas"] == 3
    assert ("Normal", "Shrunk", "target 3 -> 2 workers: m") in acts.events


def test_a_growth_creates_only_the_new_workers_from_the_plan() -> None:
    body, pods = _running_elastic(2)
    snap = fleet_snapshot(pods)
    grown = plan_growth(body, snap, OperatorConfig(), grow_from=2, size=3, held=["h100-a-01"])
    assert isinstance(grown, tuple)
    acts = _reconcile(body, pods, Admission(admitted=True, plan=grown[0], size=3, message="g"))
    assert [p["metadata"]["name"] for p in acts.create] == ["el-worker-2"]
    assert acts.delete_pods == []
    assert acts.status["elastic"]["targetReplicas"] == 3
    assert ("Normal", "Grown", "target 2 -> 3 workers: g") in acts.events


def test_a_running_elastic_job_without_a_verdict_keeps_its_size() -> None:
    body, pods = _running_elastic(2)
    acts = _reconcile(body, pods, ADMIT_ALL)
    assert acts.delete_pods == [] and acts.create == []
    assert acts.status["phase"] == "Running"
    assert acts.events == []


def test_status_estimates_the_allreduce_at_each_size() -> None:
    body, pods = _running_elastic(2)
    sizes = _reconcile(body, pods, ADMIT_ALL).status["elastic"]["allreduceBySize"]
    assert [s["replicas"] for s in sizes] == [1, 2, 3]
    assert sizes[0]["bottleneck"] == "node" and sizes[1]["bottleneck"] == "rack"
    assert sizes[0]["seconds"] < sizes[1]["seconds"]


# --- simulate: the same admission over time ---------------------------------------------
def _elastic_tj(key: str, submit: float, duration: float, lo: int, hi: int) -> dict[str, Any]:
    body = tj(key, submit, duration, 8 * hi)
    body["spec"]["elastic"] = {"minReplicas": lo, "maxReplicas": hi}
    return body


SIM_CASES = [
    pytest.param(
        [tj("team-nlp/a", 0, 100, 16), _elastic_tj("team-nlp/el", 10, 100, 1, 4)],
        {},
        ((10, 2), (100, 4)),
        155.0,
        id="starts-small-then-grows",
    ),
    pytest.param(
        [
            _elastic_tj("team-nlp/el", 0, 100, 2, 4),
            tj("team-nlp/hi", 20, 50, 16, priority="high"),
        ],
        {"high": 100},
        ((0, 4), (20, 2), (70, 4)),
        125.0,
        id="shrinks-for-priority-then-grows-back",
    ),
]


@pytest.mark.parametrize(("jobs", "classes", "sizes", "finished"), SIM_CASES)
def test_simulated_elastic_job_sizes(
    jobs: list[dict[str, Any]],
    classes: dict[str, int],
    sizes: tuple[tuple[float, int], ...],
    finished: float,
) -> None:
    got = simulate(h100_nodes(4), [tq("nlp", 32)], jobs, priority_classes=classes)
    el = got.job("team-nlp/el")
    assert el.sizes == sizes
    assert el.finished == pytest.approx(finished)
    assert el.preemptions == 0
    for other in (j for j in got.jobs if j.key != el.key):
        assert other.state == "Finished"


def test_bench_placement_elastic_runs_write_the_table(tmp_path: Path) -> None:
    lines: list[str] = []
    assert bench_main(["--smoke", "--elastic-only", "--out", str(tmp_path)], log=lines.append) == 0
    table = (tmp_path / "placement-elastic.md").read_text()
    assert "| 90% | fixed |" in table and "| 90% | elastic |" in table


# --- larger than the fleet at max, not at min ----------------------------------------------
def _too_big_at_max() -> dict[str, Any]:
    """1..40 workers of 8 H100 GPUs: the fleet's 16 H100 nodes hold 16 of them."""
    return job("big").workers(40, 8).elastic(1, 40).placement("rack", "Preferred", [H100]).build()


def test_render_shows_the_largest_size_that_fits(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(_too_big_at_max()))
    out = CliRunner().invoke(cli, ["render", str(path), "--nodes", str(FLEET_NODES)])
    assert out.exit_code == 0, out.output
    pods = [d for d in yaml.safe_load_all(out.output) if d and d.get("kind") == "Pod"]
    assert len(pods) == 16


def test_an_elastic_job_too_big_at_max_is_admitted_not_inadmissible() -> None:
    body = _too_big_at_max()
    result = admission_pass(NOW, [body], {}, [], {}, {}, fleet_snapshot(), OperatorConfig())
    d = result.decisions[f"{body['metadata']['namespace']}/big"]
    assert (d.action, d.size) == (Action.ADMIT, 16), d.message
