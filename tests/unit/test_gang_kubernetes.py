"""gangScheduling: kubernetes on the default fake fleet: the Workload and PodGroup trainop
writes, the pods that join the group (no gate, no pin, eligibility as affinity), the
config key, and the reconcile that hands a new gang over with a PodGroup of its own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from tests.builders import JOB, busy, fleet_node_names, fleet_snapshot, job
from trainop.api import constants as c
from trainop.config import ConfigError, operator_config_from_data
from trainop.planner import OperatorConfig, Plan, Wait, plan_job
from trainop.reconcile import reconcile
from trainop.workload import SCHEDULING_API, gang_name, topology_key

UPSTREAM = OperatorConfig(gang_scheduling="kubernetes")
NOW = datetime(2026, 11, 25, 21, 0, 0)
LEVELS = c.DEFAULT_TOPOLOGY_LEVELS


def _full_fleet() -> list[dict[str, Any]]:
    """Every GPU of the fleet taken by pods of someone else."""
    snap = fleet_snapshot()
    return [busy(n, snap.node(n).gpus_allocatable) for n in fleet_node_names()]


def _plan(body: dict[str, Any], config: OperatorConfig = UPSTREAM) -> Plan:
    result = plan_job(body, fleet_snapshot(_full_fleet()), config)
    assert isinstance(result, Plan), result
    return result


def _kinds(plan: Plan) -> list[str]:
    return [o["kind"] for o in plan.objects]


def _terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    aff = pod["spec"].get("affinity", {}).get("nodeAffinity", {})
    return list(
        aff.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    )


def test_trainop_mode_waits_where_the_upstream_mode_hands_the_gang_over() -> None:
    body = job().build()
    assert isinstance(plan_job(body, fleet_snapshot(_full_fleet()), OperatorConfig()), Wait)
    plan = _plan(body)
    assert _kinds(plan)[-4:] == ["Workload", "PodGroup", "Pod", "Pod"]


def test_workload_and_pod_group_carry_the_whole_gang() -> None:
    plan = _plan(job(workers=3).priority("high").placement("rack", "Required").build())
    workload, group = plan.gang
    assert workload["apiVersion"] == group["apiVersion"] == SCHEDULING_API
    template = workload["spec"]["podGroupTemplates"][0]
    assert template["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert template["schedulingConstraints"] == {"topology": [{"key": c.LABEL_RACK}]}
    assert workload["spec"]["controllerRef"]["kind"] == "TrainingJob"
    assert group["spec"]["workloadRef"] == {"workloadName": JOB, "templateName": "gang"}
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert group["spec"]["priorityClassName"] == "high"
    assert group["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"


def test_pods_join_the_group_unpinned_and_ungated_but_kept_on_eligible_nodes() -> None:
    plan = _plan(job().build())
    for pod in plan.pods:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": JOB}
        assert not pod["spec"].get("schedulingGates")
        terms = _terms(pod)
        assert terms, "eligibility must stay as required node affinity"
        for term in terms:
            assert "matchFields" not in term
            assert all(e["key"] != c.LABEL_HOSTNAME for e in term["matchExpressions"])
            assert any(e["key"].startswith("nvidia.com/") for e in term["matchExpressions"])
        # Rank order and wiring stay trainop's.
        assert pod["metadata"]["annotations"][c.ANNOTATION_RANK] in ("0", "1")


@dataclass(frozen=True)
class TopologyCase:
    name: str
    topology: str
    mode: str
    key: str | None


TOPOLOGY_CASES = [
    TopologyCase("required rack", "rack", "Required", c.LABEL_RACK),
    TopologyCase("required block", "block", "Required", c.LABEL_BLOCK),
    TopologyCase("required node", "node", "Required", c.LABEL_HOSTNAME),
    TopologyCase("preferred rack: upstream has no preference", "rack", "Preferred", None),
    TopologyCase("none", "none", "Required", None),
]


@pytest.mark.parametrize("case", TOPOLOGY_CASES, ids=lambda k: k.name)
def test_topology_key(case: TopologyCase) -> None:
    assert topology_key(case.topology, case.mode, LEVELS) == case.key


@dataclass(frozen=True)
class ConfigCase:
    name: str
    data: dict[str, Any]
    error: str | None


CONFIG_CASES = [
    ConfigCase("default", {}, None),
    ConfigCase("kubernetes", {"gangScheduling": "kubernetes"}, None),
    ConfigCase("unknown mode", {"gangScheduling": "volcano"}, "gangScheduling: must be one of"),
    ConfigCase(
        "with kueue",
        {"gangScheduling": "kubernetes", "externalQueue": "kueue"},
        "gangScheduling: kubernetes is not combined with externalQueue: kueue",
    ),
]


@pytest.mark.parametrize("case", CONFIG_CASES, ids=lambda k: k.name)
def test_config_key(case: ConfigCase) -> None:
    if case.error is None:
        cfg = operator_config_from_data(case.data)
        assert cfg.gang_scheduling == case.data.get("gangScheduling", "trainop")
        return
    with pytest.raises(ConfigError, match=case.error):
        operator_config_from_data(case.data)


def test_reconcile_hands_each_new_gang_a_pod_group_of_its_own() -> None:
    body = job().build()
    acts = reconcile(body, [], lambda: fleet_snapshot(_full_fleet()), UPSTREAM, NOW)
    group = gang_name(JOB, NOW.timestamp())
    made = {o["kind"]: o for o in acts.create}
    assert made["PodGroup"]["metadata"]["name"] == group
    assert made["Workload"]["metadata"]["name"] == JOB
    pods = [o for o in acts.create if o["kind"] == "Pod"]
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {group}
    assert not acts.release_created and not acts.ungate
    assert acts.status["phase"] == "Admitted"
    assert any("kube-scheduler" in cd.get("message", "") for cd in acts.status["conditions"])
    later = reconcile(body, [], lambda: fleet_snapshot(), UPSTREAM, NOW.replace(minute=5))
    assert {o["metadata"]["name"] for o in later.create if o["kind"] == "PodGroup"} != {group}
