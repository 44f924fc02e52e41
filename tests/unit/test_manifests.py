"""manifests: pods, the headless Service and the ConfigMap built from a plan and a user template."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.manifest_helpers import env_of, pinned_node, walk
from trainop.api import constants as c
from trainop.manifests import (
    JobRef,
    PodPlan,
    build_config_map,
    build_pod,
    build_service,
    pod_name,
    spec_hash,
)

JOB = JobRef(name="bert", namespace="team-nlp", uid="1234")
COMPAT = (
    {"matchExpressions": [{"key": c.GFD_DRIVER_MAJOR, "operator": "Gt", "values": ["524"]}]},
    {"matchExpressions": [{"key": c.GFD_DRIVER_MAJOR_OLD, "operator": "Gt", "values": ["524"]}]},
)


def plan(**kw: Any) -> PodPlan:
    base: dict[str, Any] = {
        "role": "Worker",
        "index": 1,
        "rank": 1,
        "gpus": 8,
        "node": "a100-02",
        "image": "nvcr.io/nvidia/pytorch:24.07-py3",
        "env": {"PET_NODE_RANK": "1", "NCCL_IB_HCA": "=mlx5_0,mlx5_1"},
    }
    base.update(kw)
    return PodPlan(**base)


USER_TEMPLATE: dict[str, Any] = {
    "metadata": {
        "labels": {"team": "nlp", c.LABEL_JOB_NAME: "spoofed"},
        "annotations": {"owner": "alice"},
    },
    "spec": {
        "containers": [
            {
                "name": "main",
                "command": ["torchrun", "train.py"],
                "env": [
                    {"name": "NCCL_IB_HCA", "value": "=mlx5_0"},
                    {"name": "HF_HOME", "value": "/cache"},
                ],
                "resources": {
                    "limits": {"cpu": "32", "memory": "256Gi"},
                    "requests": {"cpu": "16", "memory": "128Gi"},
                },
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            },
            {
                "name": "logshipper",
                "image": "fluent/fluent-bit:3.0",
                "env": [{"name": "X", "value": "1"}],
                "resources": {"limits": {"cpu": "1"}},
            },
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "ds"}}],
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}],
        "nodeSelector": {"pool": "gpu"},
    },
}


def test_names_and_fixed_labels() -> None:
    pod = build_pod(JOB, plan(role="Worker", index=3), {}, gang_generation=0)
    assert pod["metadata"]["name"] == "bert-worker-3" == pod_name("bert", "Worker", 3)
    labels = pod["metadata"]["labels"]
    assert labels[c.LABEL_JOB_NAME] == "bert"
    assert labels[c.LABEL_REPLICA_TYPE] == "worker"
    assert labels[c.LABEL_REPLICA_INDEX] == "3"
    assert pod["spec"]["hostname"] == "bert-worker-3" and pod["spec"]["subdomain"] == "bert"
    assert pod["spec"]["restartPolicy"] == "Never"


def test_owner_reference() -> None:
    pod = build_pod(JOB, plan(), {}, gang_generation=0)
    (ref,) = pod["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": c.API_VERSION,
        "kind": "TrainingJob",
        "name": "bert",
        "uid": "1234",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_user_template_is_merged() -> None:
    template = copy.deepcopy(USER_TEMPLATE)
    pod = build_pod(JOB, plan(rdma_resources={"rdma/ib": 1}), template, gang_generation=2)
    assert template == USER_TEMPLATE, "the job's template must not be mutated"
    meta = pod["metadata"]
    assert meta["labels"]["team"] == "nlp"
    assert meta["labels"][c.LABEL_JOB_NAME] == "bert", "trainop's labels win over the user's"
    assert meta["annotations"]["owner"] == "alice"
    assert meta["annotations"][c.ANNOTATION_RESTART_COUNT] == "2"

    main, sidecar = pod["spec"]["containers"]
    assert main["name"] == "main" and main["image"] == "nvcr.io/nvidia/pytorch:24.07-py3"
    env = main["env"]
    assert [e["name"] for e in env] == ["PET_NODE_RANK", "NCCL_IB_HCA", "HF_HOME"]
    assert env_of(pod)["NCCL_IB_HCA"] == "=mlx5_0", "the user's value wins, in place"
    res = main["resources"]
    assert res["limits"] == {"cpu": "32", "memory": "256Gi", c.RESOURCE_GPU: "8", "rdma/ib": "1"}
    assert res["requests"] == {"cpu": "16", "memory": "128Gi", c.RESOURCE_GPU: "8", "rdma/ib": "1"}
    assert {"name": "data", "mountPath": "/data"} in main["volumeMounts"]

    assert sidecar == USER_TEMPLATE["spec"]["containers"][1], "sidecars are left alone"
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "ds"}} in spec["volumes"]
    keys = [t["key"] for t in spec["tolerations"]]
    assert keys == ["dedicated", c.RESOURCE_GPU]


def test_user_image_is_kept() -> None:
    template = {"spec": {"containers": [{"name": "t", "image": "my/img:1"}]}}
    assert (
        build_pod(JOB, plan(), template, gang_generation=0)["spec"]["containers"][0]["image"]
        == "my/img:1"
    )


def test_no_template_gives_a_trainer_container() -> None:
    pod = build_pod(JOB, plan(), {}, gang_generation=0)
    (ctr,) = pod["spec"]["containers"]
    assert ctr["name"] == "trainer"
    assert ctr["resources"]["limits"] == {c.RESOURCE_GPU: "8"}


def test_rdma_capabilities_and_shm() -> None:
    pod = build_pod(JOB, plan(capabilities=("IPC_LOCK",), shm_size="16Gi"), {}, gang_generation=0)
    ctr = pod["spec"]["containers"][0]
    assert ctr["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in ctr["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["spec"][
        "volumes"
    ]


OWN_SHM = [
    pytest.param(
        [{"name": "dshm", "emptyDir": {"medium": "Memory"}}], [], "dshm", id="volume-named-dshm"
    ),
    pytest.param(
        [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
        [{"name": "shm", "mountPath": "/dev/shm"}],
        "shm",
        id="mount-at-dev-shm",
    ),
]


@pytest.mark.parametrize(("volumes", "mounts", "kept"), OWN_SHM)
def test_the_users_own_dev_shm_wins(
    volumes: list[dict[str, Any]], mounts: list[dict[str, Any]], kept: str
) -> None:
    """The API server refused the pod with a duplicate volume name or mount path (422)."""
    template = {"spec": {"volumes": volumes, "containers": [{"name": "t", "volumeMounts": mounts}]}}
    pod = build_pod(JOB, plan(shm_size="16Gi"), template, gang_generation=0)
    assert pod["spec"]["volumes"] == volumes
    assert pod["spec"]["containers"][0].get("volumeMounts", []) == mounts
    assert [v["name"] for v in pod["spec"]["volumes"]] == [kept]


def test_user_capabilities_are_kept() -> None:
    template = {
        "spec": {
            "containers": [
                {"name": "t", "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}
            ]
        }
    }
    pod = build_pod(JOB, plan(capabilities=("IPC_LOCK",)), template, gang_generation=0)
    caps = pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]
    assert caps == ["IPC_LOCK", "SYS_PTRACE"]


def test_pin_is_anded_into_every_compat_term() -> None:
    pod = build_pod(JOB, plan(compat_terms=COMPAT), {}, gang_generation=0)
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == 2
    assert pinned_node(pod) == "a100-02"
    assert terms[1]["matchExpressions"][1]["key"] == c.GFD_DRIVER_MAJOR_OLD


def test_pods_share_no_mutable_objects() -> None:
    """Each pin is its own dict: editing one term must not edit the others (and YAML dumps
    would otherwise carry anchors)."""
    pod = build_pod(JOB, plan(compat_terms=COMPAT), {}, gang_generation=0)
    seen: dict[int, Any] = {}
    for node in walk(pod):
        if isinstance(node, dict | list):
            assert id(node) not in seen, node
            seen[id(node)] = node


def test_compat_terms_are_not_shared_with_the_input() -> None:
    compat = copy.deepcopy(COMPAT)
    pod = build_pod(JOB, plan(compat_terms=compat), {}, gang_generation=0)
    aff = pod["spec"]["affinity"]["nodeAffinity"]
    aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ][1]["values"].append("x")
    assert compat == COMPAT


def test_cpu_pod_is_not_pinned_and_gets_no_gpu() -> None:
    pod = build_pod(
        JOB, plan(role="Launcher", index=0, rank=None, gpus=0, node=None), {}, gang_generation=0
    )
    assert "affinity" not in pod["spec"]
    assert "tolerations" not in pod["spec"]
    assert "resources" not in pod["spec"]["containers"][0]
    assert c.ANNOTATION_RANK not in pod["metadata"]["annotations"]


def test_scheduling_gate_added_once_and_user_gates_kept() -> None:
    template = {"spec": {"schedulingGates": [{"name": "other"}, {"name": c.SCHEDULING_GATE}]}}
    pod = build_pod(JOB, plan(), template, gang_generation=0)
    assert [g["name"] for g in pod["spec"]["schedulingGates"]] == ["other", c.SCHEDULING_GATE]


def test_ungated_pod_has_no_admission_gate() -> None:
    pod = build_pod(JOB, plan(), {}, gang_generation=0, gated=False)
    assert "schedulingGates" not in pod["spec"]


def test_command_prefix_and_ports() -> None:
    template = {
        "spec": {
            "containers": [
                {"name": "t", "command": ["mpirun", "x"], "ports": [{"containerPort": 22}]}
            ]
        }
    }
    pod = build_pod(
        JOB,
        plan(command_prefix=("sh", "-c", 'exec "$@"', "--"), ports=(22, 2222)),
        template,
        gang_generation=0,
    )
    ctr = pod["spec"]["containers"][0]
    assert ctr["command"] == ["sh", "-c", 'exec "$@"', "--", "mpirun", "x"]
    assert ctr["ports"] == [{"containerPort": 22}, {"containerPort": 2222, "name": "trainop-1"}]


def test_priority_class_and_config_mount() -> None:
    pod = build_pod(
        JOB,
        plan(mount_config=True),
        {},
        gang_generation=0,
        priority_class_name="high",
        config_map="bert-config",
    )
    assert pod["spec"]["priorityClassName"] == "high"
    assert {"name": "trainop-config", "configMap": {"name": "bert-config"}} in pod["spec"][
        "volumes"
    ]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "trainop-config", "mountPath": c.CONFIG_MOUNT_PATH, "readOnly": True} in mounts


def test_spec_hash_is_deterministic_and_sensitive() -> None:
    a = build_pod(JOB, plan(), {}, gang_generation=0)
    b = build_pod(JOB, plan(), {}, gang_generation=0)
    assert a == b
    assert a["metadata"]["annotations"][c.ANNOTATION_SPEC_HASH] == spec_hash(a)
    other = build_pod(JOB, plan(node="a100-03"), {}, gang_generation=0)
    assert other["metadata"]["annotations"][c.ANNOTATION_SPEC_HASH] != spec_hash(a)


def test_headless_service() -> None:
    svc = build_service(JOB, [29500, 29500, 22])
    assert svc["metadata"]["name"] == "bert"
    assert svc["metadata"]["labels"][c.LABEL_JOB_NAME] == "bert"
    assert svc["metadata"]["ownerReferences"][0]["uid"] == "1234"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {c.LABEL_JOB_NAME: "bert"}
    assert [p["port"] for p in svc["spec"]["ports"]] == [22, 29500]


def test_config_map_sorted_data() -> None:
    cm = build_config_map(JOB, "bert-config", {"z": "1", "hostfile": "a slots=8\n"})
    assert list(cm["data"]) == ["hostfile", "z"]
    assert cm["metadata"]["ownerReferences"][0]["name"] == "bert"
