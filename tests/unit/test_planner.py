"""plan_job on the default fake fleet: wiring, NCCL, compatibility, waits and invalid jobs."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.builders import JobBuilder, busy, fleet_nodes, fleet_snapshot, job, node_product
from tests.unit.manifest_helpers import env_of, example, job_examples, pinned_node
from trainop.api import constants as c
from trainop.inventory import build_snapshot
from trainop.manifests import PodPlan
from trainop.planner import InvalidJob, OperatorConfig, Plan, Wait, needs_gate, plan_job

CONFIG = OperatorConfig()
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
V100 = "Tesla-V100-SXM2-32GB"
T4 = "Tesla-T4"
RDMA = c.DEFAULT_RDMA_RESOURCE


def plan(body: dict[str, Any], pods: list[dict[str, Any]] | None = None) -> Plan:
    result = plan_job(body, fleet_snapshot(pods or []), CONFIG)
    assert isinstance(result, Plan), result
    return result


def wait(body: dict[str, Any]) -> Wait:
    result = plan_job(body, fleet_snapshot(), CONFIG)
    assert isinstance(result, Wait), result
    return result


def host(pod: dict[str, Any]) -> str:
    return (
        f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}.{pod['metadata']['namespace']}.svc"
    )


def pytorch(replicas: int = 4, gpus: int = 8, **kw: Any) -> JobBuilder:
    return job("bert").workers(replicas, gpus, **kw)


@pytest.mark.parametrize("name", job_examples())
def test_every_example_plans(name: str) -> None:
    p = plan(example(name))
    assert p.pods and p.service["metadata"]["name"] == example(name)["metadata"]["name"]
    for pod in p.pods:
        if pod["spec"]["containers"][0].get("resources", {}).get("limits", {}).get(c.RESOURCE_GPU):
            assert pinned_node(pod) in p.placement.nodes


def test_pytorch_env_is_consistent() -> None:
    p = plan(pytorch(4, 8).placement("block", "Preferred").build())
    pods = list(p.pods)
    envs = [env_of(pod) for pod in pods]
    ranks = sorted(int(e[c.ENV_PET_NODE_RANK]) for e in envs)
    assert ranks == [0, 1, 2, 3]
    rank0 = next(pod for pod, e in zip(pods, envs, strict=True) if e[c.ENV_PET_NODE_RANK] == "0")
    assert rank0["metadata"]["annotations"][c.ANNOTATION_RANK] == "0"
    assert pinned_node(rank0) == p.placement.nodes[0], "rank 0 runs on the first node"
    for e in envs:
        assert e[c.ENV_PET_MASTER_ADDR] == host(rank0)
        assert e[c.ENV_PET_MASTER_PORT] == str(c.DEFAULT_MASTER_PORT)
        assert e[c.ENV_PET_NNODES] == "4"
        assert e[c.ENV_PET_NPROC_PER_NODE] == "8"


def test_pytorch_node_rank_follows_topology_not_pod_index() -> None:
    """Ranks come from placement (topology order); each pod's rank annotation and
    PET_NODE_RANK agree."""
    p = plan(pytorch(6, 8).placement("block", "Preferred").build())
    for pod in p.pods:
        assert env_of(pod)[c.ENV_PET_NODE_RANK] == pod["metadata"]["annotations"][c.ANNOTATION_RANK]


def test_tf_config_cluster_is_identical_and_tasks_distinct() -> None:
    p = plan(example("tensorflow-multiworker.yaml"))
    configs = [json.loads(env_of(pod)["TF_CONFIG"]) for pod in p.pods]
    clusters = {json.dumps(cfg["cluster"], sort_keys=True) for cfg in configs}
    assert len(clusters) == 1
    cluster = configs[0]["cluster"]
    workers = [pod for pod in p.pods if pod["metadata"]["labels"][c.LABEL_REPLICA_TYPE] == "worker"]
    assert sorted(cluster["worker"]) == sorted(f"{host(w)}:2222" for w in workers)
    assert "evaluator" not in cluster
    tasks = sorted((cfg["task"]["type"], cfg["task"]["index"]) for cfg in configs)
    assert tasks == [("evaluator", 0), ("worker", 0), ("worker", 1)]


def test_tf_gpu_evaluator_is_placed_with_the_gang() -> None:
    """A GPU evaluator outside the collective is accepted (the framework wiring ignores its
    rank), pinned to a node and given its GPU."""
    p = plan(example("tensorflow-multiworker.yaml"))
    (evaluator,) = [pod for pod in p.pods if pod["metadata"]["name"].endswith("-evaluator-0")]
    assert pinned_node(evaluator) is not None
    limits = evaluator["spec"]["containers"][0]["resources"]["limits"]
    assert limits[c.RESOURCE_GPU] == "1"


def test_mpi_hostfile_lists_every_worker() -> None:
    p = plan(example("mpi-horovod.yaml"))
    assert p.config_map is not None and (p.secret_name or "").startswith("bert-horovod-ssh-")
    hostfile = next(v for k, v in p.config_map["data"].items() if "hostfile" in k)
    workers = [pod for pod in p.pods if pod["metadata"]["labels"][c.LABEL_REPLICA_TYPE] == "worker"]
    assert len(workers) == 2
    for w in workers:
        assert host(w) in hostfile
        assert f"{host(w)} slots=8" in hostfile
    (launcher,) = [pod for pod in p.pods if pod["metadata"]["name"] == "bert-horovod-launcher-0"]
    assert pinned_node(launcher) is None, "the CPU launcher is left to the scheduler"


def test_rdma_nodes_get_rdma_resource_ipc_lock_and_shm() -> None:
    p = plan(pytorch(2, 8).placement("rack").build())
    for pod in p.pods:
        node = pinned_node(pod)
        assert node is not None and node_product(node) in (H100, A100)
        ctr = pod["spec"]["containers"][0]
        assert ctr["resources"]["limits"][RDMA] == "1"
        assert ctr["resources"]["requests"][RDMA] == "1"
        assert "IPC_LOCK" in ctr["securityContext"]["capabilities"]["add"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in ctr["volumeMounts"]
        shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory"
        assert env_of(pod)["NCCL_IB_HCA"].startswith("=mlx5_")
        assert "NCCL_IB_DISABLE" not in env_of(pod)


def test_t4_tcp_nodes_disable_ib() -> None:
    body = (
        job("t4", version=None, cuda="12.0").workers(2, 4).placement("rack", products=[T4]).build()
    )
    p = plan(body)
    assert len(p.placement.nodes) == 2
    for pod in p.pods:
        assert node_product(pinned_node(pod) or "") == T4
        ctr = pod["spec"]["containers"][0]
        assert env_of(pod)["NCCL_IB_DISABLE"] == "1"
        assert RDMA not in ctr["resources"]["limits"]
        assert "securityContext" not in ctr


def test_cuda_13_lands_on_h100_only() -> None:
    for replicas in (1, 2, 4, 12):
        p = plan(
            job("c13", version=None, cuda="13.0")
            .workers(replicas, 8)
            .placement("rack", "Preferred")
            .build()
        )
        assert {node_product(n) for n in p.placement.nodes} == {H100}, replicas


def test_cuda_13_beyond_the_h100s_waits() -> None:
    w = wait(job("c13", version=None, cuda="13.0").workers(17, 8).build())
    assert w.reason == "NoFit"


def test_gpu_products_drive_the_image_choice() -> None:
    """An A100-only job with CUDA 12.4 runs on the A100s: the image is chosen among what the
    allowed nodes can run, not what some H100 can."""
    p = plan(
        job("a", version=None, cuda="12.4").workers(2, 8).placement("rack", products=[A100]).build()
    )
    assert {node_product(n) for n in p.placement.nodes} == {A100}


def test_rack_required_beyond_any_rack_waits_naming_the_rack() -> None:
    w = wait(pytorch(20, 8).placement("rack", "Required").build())
    assert w.reason == "NoFit"
    assert "in one rack (Required)" in w.message
    assert "largest rack" in w.message and "rack-h100-" in w.message
    assert any("rack rack-a100" in d for d in w.details)


def test_rack_preferred_spans_racks() -> None:
    p = plan(pytorch(16, 8).placement("rack", "Preferred").build())
    assert p.placement.span["rack"] == 2 and p.placement.span["node"] == 16


def test_v100_only_with_cuda_12_waits_incompatible() -> None:
    body = (
        job("v", version=None, cuda="12.4").workers(1, 8).placement("node", products=[V100]).build()
    )
    w = wait(body)
    assert w.reason == "Incompatible"
    assert V100 in w.message


def test_v100_only_with_cuda_12_names_the_driver() -> None:
    body = (
        job("v", version=None, cuda="12.4").workers(1, 8).placement("node", products=[V100]).build()
    )
    w = wait(body)
    assert "418.87.01" in w.message and "driver" in w.message


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        pytest.param(lambda j: j.workers(2, -1), "spec.replicaSpecs.Worker.gpus", id="gpus"),
        pytest.param(lambda j: j.workers(0, 8), "spec.replicaSpecs.Worker.replicas", id="reps"),
        pytest.param(lambda j: j.role("Foo", 1, 0), "spec.replicaSpecs", id="role"),
        pytest.param(lambda j: j.role("Chief", 1, 8), "spec.replicaSpecs", id="tf-role"),
        pytest.param(lambda j: j.workers(2, 0), "spec.replicaSpecs.Worker.gpus", id="no-gpu"),
        pytest.param(lambda j: j.cuda("12"), "spec.cuda", id="cuda"),
        pytest.param(
            lambda j: j.framework("pytorch", "9.9"), "spec.framework.version", id="version"
        ),
        pytest.param(lambda j: j.framework("torch"), "spec.framework.name", id="framework"),
        pytest.param(lambda j: j.placement("zone"), "spec.placement.topology", id="topology"),
    ],
)
def test_invalid_jobs_name_the_field(mutate: Any, field: str) -> None:
    job = pytorch(2, 8)
    mutate(job)
    with pytest.raises(InvalidJob) as err:
        plan_job(job.build(), fleet_snapshot(), CONFIG)
    assert err.value.field == field, err.value


def test_used_gpus_move_the_gang() -> None:
    """Pods holding the A100s push a rack-Required 2 x 8 job onto an H100 rack."""
    taken = [busy(f"a100-0{i}", 8, f"other-{i}") for i in range(1, 5)]
    free = plan(pytorch(2, 8).placement("rack").build())
    assert {node_product(n) for n in free.placement.nodes} == {A100}
    moved = plan(pytorch(2, 8).placement("rack").build(), pods=taken)
    assert {node_product(n) for n in moved.placement.nodes} == {H100}


def test_deterministic_and_independent_of_input_order() -> None:
    body = example("pytorch-ddp.yaml")
    first = plan(body).objects
    assert plan(body).objects == first
    nodes = fleet_nodes()
    random.Random(7).shuffle(nodes)
    shuffled = plan_job(body, build_snapshot(nodes), CONFIG)
    assert isinstance(shuffled, Plan) and shuffled.objects == first


def test_gang_generation_and_gate() -> None:
    """Every pod of a GPU-only gang is pinned: created without the gate. A gang with a pod
    left to kube-scheduler (MPI's CPU Launcher) keeps it on every pod, unless asked not to."""
    p = plan_job(example("pytorch-ddp.yaml"), fleet_snapshot(), CONFIG, gang_generation=3)
    assert isinstance(p, Plan) and len(p.pods) > 1
    for pod in p.pods:
        assert pod["metadata"]["annotations"][c.ANNOTATION_RESTART_COUNT] == "3"
        assert "schedulingGates" not in pod["spec"]
    mpi = plan_job(example("mpi-horovod.yaml"), fleet_snapshot(), CONFIG)
    assert isinstance(mpi, Plan)
    for pod in mpi.pods:
        assert {"name": c.SCHEDULING_GATE} in pod["spec"]["schedulingGates"]
    ungated = plan_job(example("mpi-horovod.yaml"), fleet_snapshot(), CONFIG, gated=False)
    assert isinstance(ungated, Plan)
    assert all("schedulingGates" not in pod["spec"] for pod in ungated.pods)


def _pod_plan(node: str | None, index: int = 0) -> PodPlan:
    return PodPlan(
        role="Worker", index=index, rank=index, gpus=8 if node else 0, node=node, image="i", env={}
    )


@pytest.mark.parametrize(
    ("case", "nodes", "gate"),
    [
        ("one-pinned-pod", ["a"], False),
        ("one-unpinned-pod", [None], False),
        ("pinned-gang", ["a", "b"], False),
        ("pinned-gang-on-one-node", ["a", "a"], False),
        ("gang-with-a-cpu-pod-left-to-the-scheduler", [None, "a", "b"], True),
        ("unpinned-gang", [None, None], True),
    ],
)
def test_needs_gate(case: str, nodes: list[str | None], gate: bool) -> None:
    plans = [_pod_plan(n, i) for i, n in enumerate(nodes)]
    assert needs_gate(plans) is gate, case


def test_a_one_pod_gang_is_created_released() -> None:
    """Whole as soon as it exists: no gate, so no release write (its other gates stay)."""
    template = {"spec": {"schedulingGates": [{"name": "other"}]}}
    p = plan_job(pytorch(1, 8, template=template).build(), fleet_snapshot(), CONFIG)
    assert isinstance(p, Plan)
    (pod,) = p.pods
    assert pod["spec"]["schedulingGates"] == [{"name": "other"}]


def test_user_env_and_resources_survive_planning() -> None:
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "command": ["torchrun", "t.py"],
                    "env": [
                        {"name": "NCCL_IB_HCA", "value": "=mlx5_0"},
                        {"name": "NCCL_DEBUG", "value": "INFO"},
                    ],
                    "resources": {"limits": {"cpu": "32", "memory": "512Gi"}},
                },
                {"name": "sidecar", "image": "busybox", "command": ["sleep", "inf"]},
            ]
        }
    }
    p = plan(pytorch(2, 8, template=template).placement("rack").build())
    for pod in p.pods:
        env = env_of(pod)
        assert env["NCCL_IB_HCA"] == "=mlx5_0" and env["NCCL_DEBUG"] == "INFO"
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["cpu"] == "32" and limits["memory"] == "512Gi"
        assert limits[c.RESOURCE_GPU] == "8"
        assert pod["spec"]["containers"][1] == template["spec"]["containers"][1]


def test_a_template_spec_that_is_not_an_object_is_invalid_not_a_crash() -> None:
    """Found by the fuzz test: a string where the PodSpec goes."""
    from trainop.api.trainingjob import TrainingJobSpec
    from trainop.planner import InvalidJob, check_semantics

    spec = TrainingJobSpec.model_validate(
        {
            "framework": {"name": "pytorch", "version": "2.4"},
            "replicaSpecs": {"Worker": {"replicas": 1, "gpus": 1, "template": {"spec": "x"}}},
        }
    )
    with pytest.raises(InvalidJob) as err:
        check_semantics(spec)
    assert err.value.field == "spec.replicaSpecs.Worker.template.spec"


@pytest.mark.parametrize(
    ("cuda", "floor"),
    [
        pytest.param(None, False, id="no-cuda-no-driver-floor"),
        pytest.param("12.4", True, id="declared-cuda-sets-the-floor"),
    ],
)
def test_a_template_image_is_the_jobs_own_image(cuda: str | None, floor: bool) -> None:
    """A trainer image in the pod template replaces the NGC choice: the plan says so (render
    header, status.imageTried) and nodes are judged by what the user declared (spec.cuda),
    never by the NGC release it replaced."""
    body = (
        job("own", version=None, cuda=cuda)
        .workers(2, 8)
        .template(containers=[{"name": "trainer", "image": "example.com/me/train:1"}])
    )
    p = plan(body.build())
    assert p.image.image == "example.com/me/train:1" and p.image.release is None
    assert "overriding the NGC choice" in p.image_tried[0]
    assert ("spec.cuda 12.4" in p.image_tried[0]) is floor
    pod = p.pods[0]
    assert pod["spec"]["containers"][0]["image"] == "example.com/me/train:1"
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    ops = {e["operator"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert ("Gt" in ops) is floor
