"""Every host name trainop writes into a pod resolves inside that pod (issue 38).

A one-pod job used to get `MASTER_ADDR=<pod>.<job>.<ns>.svc` with no Service behind it, and
torchrun's store looped for ever on a name nobody served. The rule
(`manifest_helpers.unresolvable_hosts`, written from Kubernetes' DNS and /etc/hosts rules,
not from trainop's naming) runs over a named table of gang shapes for every framework, the
elastic sizes, host networking, and the hypothesis jobs of the dry-run property test
(tests/integration/test_render_accepted.py) on its fleets and configs.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given

from tests.builders import JobBuilder
from tests.integration.test_render_accepted import CONFIGS, FLEETS, RENDER, training_jobs
from tests.unit.manifest_helpers import FLEET_NODES, env_of, pods_of, unresolvable_hosts
from trainop.api import constants as c
from trainop.cli.inputs import read_objects
from trainop.cli.render import EXIT_PLACED, render_job
from trainop.frameworks import gang_has_service, hosts_named, member_host
from trainop.inventory.snapshot import build_snapshot
from trainop.planner import OperatorConfig, Plan, plan_growth, plan_job

NODES = read_objects(str(FLEET_NODES), "Node", "--nodes")
NS = "team"


def _placed(body: dict[str, Any], config: OperatorConfig | None = None) -> Plan:
    r = render_job(body, NODES, [], config or OperatorConfig())
    assert r.code == EXIT_PLACED and r.plan is not None, r.errors
    return r.plan


def _job(fw: str, roles: dict[str, tuple[int, int]]) -> JobBuilder:
    b = JobBuilder("solo", NS).framework(fw)
    for role, (replicas, gpus) in roles.items():
        b.role(role, replicas, gpus)
    return b


# (id, framework, roles {role: (replicas, gpus)}, the Service expected)
GANGS = [
    ("pytorch-one-pod", "pytorch", {"Worker": (1, 2)}, False),
    ("pytorch-two-pods", "pytorch", {"Worker": (2, 8)}, True),
    ("tensorflow-one-worker", "tensorflow", {"Worker": (1, 1)}, False),
    ("tensorflow-chief-one-worker", "tensorflow", {"Chief": (1, 1), "Worker": (1, 1)}, True),
    (
        "tensorflow-chief-workers-ps",
        "tensorflow",
        {"Chief": (1, 1), "Worker": (2, 1), "PS": (1, 0)},
        True,
    ),
    ("jax-one-process", "jax", {"Worker": (1, 8)}, False),
    ("jax-three-processes", "jax", {"Worker": (3, 1)}, True),
    ("paddle-one-trainer", "paddle", {"Worker": (1, 4)}, False),
    ("paddle-two-trainers", "paddle", {"Worker": (2, 1)}, True),
    (
        "mxnet-scheduler-server-worker",
        "mxnet",
        {"Scheduler": (1, 0), "Server": (1, 0), "Worker": (1, 1)},
        True,
    ),
    ("mpi-launcher-one-worker", "mpi", {"Launcher": (1, 0), "Worker": (1, 2)}, True),
    ("mpi-launcher-two-workers", "mpi", {"Launcher": (1, 0), "Worker": (2, 8)}, True),
]


@pytest.mark.parametrize(("fw", "roles", "service"), [pytest.param(*g[1:], id=g[0]) for g in GANGS])
def test_every_written_host_resolves_in_its_pod(
    fw: str, roles: dict[str, tuple[int, int]], service: bool
) -> None:
    plan = _placed(_job(fw, roles).build())
    assert (plan.service is not None) == service
    assert unresolvable_hosts(plan.objects) == []
    # trainop-launch's list of names to wait for is exactly the names the wiring wrote
    for pod in pods_of(plan.objects):
        listed = env_of(pod).get(c.ENV_PEER_HOSTS, "")
        assert listed, f"{pod['metadata']['name']} names no peer"
        assert all(not h.endswith(".svc") for h in listed.split(",")) or service


def test_one_pod_pytorch_job_names_its_own_hostname() -> None:
    """The issue's job: MASTER_ADDR is the pod's hostname, in its /etc/hosts."""
    plan = _placed(_job("pytorch", {"Worker": (1, 2)}).build())
    (pod,) = pods_of(plan.objects)
    env = env_of(pod)
    assert pod["spec"]["hostname"] == "solo-worker-0"
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "solo-worker-0"
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("1", "2")
    assert env[c.ENV_PEER_HOSTS] == "solo-worker-0"


def test_the_rule_catches_the_regression() -> None:
    """The names of issue 38 (`.svc` with no Service; another pod's short name) are caught."""
    plan = _placed(_job("pytorch", {"Worker": (1, 2)}).build())
    (pod,) = copy.deepcopy(pods_of(plan.objects))
    for e in pod["spec"]["containers"][0]["env"]:
        if e["name"] in ("MASTER_ADDR", "PET_MASTER_ADDR"):
            e["value"] = "solo-worker-0.solo.team.svc"
    assert unresolvable_hosts([pod]) == [
        "solo-worker-0: solo-worker-0.solo.team.svc (no Service serves it)"
    ]
    two = _placed(_job("pytorch", {"Worker": (2, 8)}).build())
    objs = [o for o in two.objects if o["kind"] != "Service"]
    assert len(unresolvable_hosts(objs)) == 2  # each worker names worker 0 through the Service
    objs = copy.deepcopy(two.objects)
    for e in pods_of(objs)[1]["spec"]["containers"][0]["env"]:
        if e["name"] == "MASTER_ADDR":
            e["value"] = "solo-worker-0"  # worker 0's short name, in worker 0's /etc/hosts only
    assert unresolvable_hosts(objs) == ["solo-worker-1: solo-worker-0 (not this pod's name)"]


def test_host_network_one_pod_job_keeps_the_service() -> None:
    """On the host's network the hostname is the node's: the Service's name resolves (with
    dnsPolicy ClusterFirstWithHostNet), the pod's own name does not."""
    body = (
        _job("pytorch", {"Worker": (1, 2)})
        .template(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
        .build()
    )
    plan = _placed(body)
    assert plan.service is not None
    assert env_of(pods_of(plan.objects)[0])["MASTER_ADDR"] == "solo-worker-0.solo.team.svc"
    assert unresolvable_hosts(plan.objects) == []


def test_elastic_gang_has_its_service_at_every_size() -> None:
    """An elastic gang can run, and start, with one pod; its rendezvous endpoint stays the
    Service name of worker 0 at every size, and the pods that grow it name the same."""
    body = _job("pytorch", {"Worker": (1, 8)}).elastic(1, 3).build()
    snapshot = build_snapshot(NODES, [])
    config = OperatorConfig()
    for size in (1, 2, 3):
        plan = plan_job(body, snapshot, config, workers=size)
        assert isinstance(plan, Plan) and plan.service is not None, size
        assert unresolvable_hosts(plan.objects) == [], size
        for pod in pods_of(plan.objects):
            assert env_of(pod)["PET_RDZV_ENDPOINT"] == "solo-worker-0.solo.team.svc:29500"
    first = plan_job(body, snapshot, config, workers=1)
    assert isinstance(first, Plan)
    held = {a.node for a in first.placement.assignments if a.node}
    grown = plan_growth(body, snapshot, config, grow_from=1, size=2, held=held)
    assert not isinstance(grown, tuple) or grown[0].service is not None
    assert isinstance(grown, tuple)
    objs = [*first.objects, *pods_of(grown[0].objects)]
    assert unresolvable_hosts(objs) == []


@pytest.mark.parametrize(
    ("pods", "elastic", "host_network", "served"),
    [
        pytest.param(1, False, False, False, id="one-pod"),
        pytest.param(2, False, False, True, id="two-pods"),
        pytest.param(1, True, False, True, id="elastic-one-pod"),
        pytest.param(1, False, True, True, id="host-network-one-pod"),
    ],
)
def test_gang_has_service(pods: int, elastic: bool, host_network: bool, served: bool) -> None:
    assert gang_has_service(pods, elastic, host_network) is served
    host = member_host("j", "ns", "Worker", 0, served=served)
    assert host == ("j-worker-0.j.ns.svc" if served else "j-worker-0")


@pytest.mark.parametrize(
    ("texts", "found"),
    [
        pytest.param(["j-worker-0:29500"], ("j-worker-0",), id="host-port"),
        pytest.param(
            ["j-worker-1 slots=2\nj-worker-10 slots=2\n"],
            ("j-worker-1", "j-worker-10"),
            id="hostfile",
        ),
        pytest.param(
            ['{"cluster": {"ps": ["j-ps-0.j.ns.svc:2222"]}}'], ("j-ps-0.j.ns.svc",), id="tf-config"
        ),
        pytest.param(
            ["j-worker-0.j.ns.svc:1,j-worker-1.j.ns.svc:1"],
            ("j-worker-0.j.ns.svc", "j-worker-1.j.ns.svc"),
            id="paddle-endpoints",
        ),
        pytest.param(
            ["k-worker-0", "j-evaluator-0", "j-worker-0.other.ns.svc"], (), id="not-this-gang"
        ),
    ],
)
def test_hosts_named(texts: list[str], found: tuple[str, ...]) -> None:
    assert hosts_named(texts, "j", "ns", ("Worker", "PS")) == found


@RENDER
@given(training_jobs(NS))
def test_hypothesis_jobs_write_only_names_their_pods_resolve(body: dict[str, Any]) -> None:
    """The dry-run property test's jobs, on its fleets and configs, without the API server."""
    for fleet, nodes in FLEETS.items():
        for cname, config in CONFIGS.items():
            r = render_job(body, nodes, [], config)
            if r.code == EXIT_PLACED and r.plan is not None:
                assert unresolvable_hosts(r.plan.objects) == [], f"{fleet} ({cname})"
