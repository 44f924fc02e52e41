"""externalQueue: kueue — the Workload trainop owns per job, its states and status patches
(trainop.queueing.kueue), and the local Kueue's webhook wiring (trainop.cluster.kueue)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.builders import H100, NOW, job, kueue_workload
from trainop.cluster.kueue import EXTERNAL_FRAMEWORK, configuration, webhook_configurations
from trainop.queueing import kueue as rules
from trainop.validation import checked_spec

GFD_PRODUCT = "nvidia.com/gpu.product"


def _workload(body: dict[str, Any], priority: int | None = None) -> dict[str, Any]:
    return rules.build_workload(body, checked_spec(body), priority)


def test_one_podset_per_role_owned_by_the_job() -> None:
    body = (
        job("bert", workers=None)
        .role("Worker", 4, 8)
        .role("Launcher", 1, 0)
        .framework("mpi", None)
        .queue("lq")
        .build()
    )
    wl = _workload(body, priority=1000)
    assert wl["metadata"]["name"] == rules.workload_name("bert", "uid-bert")
    assert wl["metadata"]["labels"] == {"trainop.dev/job-name": "bert"}
    (owner,) = wl["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TrainingJob", "uid-bert", True)
    sets = {ps["name"]: ps for ps in wl["spec"]["podSets"]}
    assert sets["worker"]["count"] == 4
    assert sets["worker"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "nvidia.com/gpu": "8"
    }
    assert sets["launcher"]["count"] == 1
    assert wl["spec"]["queueName"] == "lq"
    assert wl["spec"]["priority"] == 1000


@pytest.mark.parametrize(
    ("labels", "priority_class", "want"),
    [
        pytest.param(
            {rules.PRIORITY_LABEL: "high"},
            None,
            {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
            id="workload-priority-class-label",
        ),
        pytest.param(
            {},
            "prod",
            {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "prod"},
            id="pod-priority-class",
        ),
        pytest.param({}, None, None, id="none"),
    ],
)
def test_priority_class_ref(
    labels: dict[str, str], priority_class: str | None, want: dict[str, str] | None
) -> None:
    b = job().meta(labels=labels)
    if priority_class:
        b.priority(priority_class)
    assert _workload(b.build())["spec"].get("priorityClassRef") == want


def test_template_requests_and_constraints_reach_the_podset() -> None:
    body = (
        job()
        .template(
            nodeSelector={"zone": "a"},
            tolerations=[{"operator": "Exists"}],
            containers=[
                {
                    "name": "trainer",
                    "resources": {"requests": {"cpu": "8"}, "limits": {"memory": "64Gi"}},
                },
                {"name": "sidecar", "resources": {"limits": {"cpu": "1"}}},
            ],
        )
        .build()
    )
    (ps,) = _workload(body)["spec"]["podSets"]
    spec = ps["template"]["spec"]
    assert [c["resources"]["requests"] for c in spec["containers"]] == [
        {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
        {"cpu": "1"},
    ]
    assert spec["nodeSelector"] == {"zone": "a"}
    assert spec["tolerations"] == [{"operator": "Exists"}]


WL = _workload(job().queue("lq").build())


@pytest.mark.parametrize(
    ("wl", "state", "reason"),
    [
        pytest.param(None, "absent", "", id="absent"),
        pytest.param(kueue_workload(WL).build(), "pending", "Pending", id="new"),
        pytest.param(
            kueue_workload(WL).pending("Inadmissible", "LocalQueue lq doesn't exist").build(),
            "pending",
            "Inadmissible",
            id="inadmissible",
        ),
        pytest.param(
            kueue_workload(WL).quota_reserved("cq", worker="h100").build(),
            "pending",
            "QuotaReserved",
            id="reserved-not-yet-admitted",
        ),
        pytest.param(
            kueue_workload(WL).quota_reserved("cq", worker="h100").admitted().build(),
            "admitted",
            "",
            id="admitted",
        ),
        pytest.param(
            kueue_workload(WL)
            .quota_reserved("cq", worker="h100")
            .admitted()
            .evicted("Preempted", "Preempted to accommodate a workload")
            .build(),
            "evicted",
            "Preempted",
            id="evicted",
        ),
        pytest.param(
            kueue_workload(WL)
            .evicted("Preempted", "x")
            .quota_reserved("cq", worker="h100")
            .admitted()
            .build(),
            "admitted",
            "",
            id="readmitted-after-eviction",
        ),
        pytest.param(kueue_workload(WL).finished().build(), "finished", "", id="finished"),
    ],
)
def test_verdict(wl: dict[str, Any] | None, state: str, reason: str) -> None:
    found = rules.verdict(wl)
    assert (found.state, found.reason) == (state, reason)


def test_admitted_flavors_narrow_each_role_to_the_flavor_nodes() -> None:
    body = (
        job(workers=None)
        .role("Worker", 2, 8)
        .role("Chief", 1, 0)
        .framework("tensorflow", None)
        .build()
    )
    wl = kueue_workload(WL).quota_reserved("cq", worker="h100", chief="cpu").admitted().build()
    found = rules.verdict(wl)
    assert found.flavors == {"worker": ("h100",), "chief": ("cpu",)}
    out = rules.flavored(body, found.flavors or {}, {"h100": {GFD_PRODUCT: H100}, "cpu": {}})
    assert out["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {
        GFD_PRODUCT: H100
    }
    assert "template" not in out["spec"]["replicaSpecs"]["Chief"]  # a flavor without labels
    assert "template" not in body["spec"]["replicaSpecs"]["Worker"]  # the input is untouched


@pytest.mark.parametrize(
    ("reason", "requeued"),
    [
        pytest.param("Preempted", "True", id="preempted-requeued"),
        pytest.param("ClusterQueueStopped", "False", id="stopped-not-requeued"),
    ],
)
def test_requeued_status_clears_the_reservation(reason: str, requeued: str) -> None:
    wl = (
        kueue_workload(WL)
        .quota_reserved("cq", worker="h100")
        .admitted()
        .evicted(reason, "m")
        .build()
    )
    patch = rules.requeued_status(wl, NOW)
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["status"]["admission"] is None
    conds = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (conds["QuotaReserved"]["status"], conds["QuotaReserved"]["reason"]) == (
        "False",
        "Pending",
    )
    assert conds["Admitted"]["status"] == "False"
    assert conds["Requeued"]["status"] == requeued
    assert conds["Evicted"]["status"] == "True"  # Kueue resets it on the next admission


@pytest.mark.parametrize(
    ("phase", "reason"),
    [
        pytest.param("Succeeded", "Succeeded", id="succeeded"),
        pytest.param("Failed", "Failed", id="failed"),
    ],
)
def test_finished_status(phase: str, reason: str) -> None:
    wl = kueue_workload(WL).quota_reserved("cq", worker="h100").admitted().build()
    body = job().phase(phase, "Done", "Worker pods completed").build()
    conds = {c["type"]: c for c in rules.finished_status(wl, body, NOW)["status"]["conditions"]}
    assert (conds["Finished"]["status"], conds["Finished"]["reason"]) == ("True", reason)
    assert conds["Finished"]["message"] == "Worker pods completed"  # the job's own words


def test_active_follows_suspend() -> None:
    assert rules.active(WL)  # Kueue's default
    assert not rules.active({**WL, "spec": {**WL["spec"], "active": False}})


def test_owned_by_only_this_job_instance() -> None:
    assert rules.owned_by(WL, "uid-bert")
    assert not rules.owned_by(WL, "uid-of-a-recreated-bert")


# --- the local Kueue ---

MANIFESTS = [
    {
        "kind": "MutatingWebhookConfiguration",
        "webhooks": [
            {
                "name": "mworkload.kb.io",
                "clientConfig": {"service": {"path": "/mutate-kueue-x-k8s-io-v1beta2-workload"}},
            },
            {"name": "mpod.kb.io", "clientConfig": {"service": {"path": "/mutate--v1-pod"}}},
        ],
    },
    {
        "kind": "ValidatingWebhookConfiguration",
        "webhooks": [
            {"name": "vjob.kb.io", "clientConfig": {"service": {"path": "/validate-batch-v1-job"}}},
            {
                "name": "vworkload.kb.io",
                "clientConfig": {"service": {"path": "/validate-kueue-x-k8s-io-v1beta2-workload"}},
            },
        ],
    },
]


def test_webhooks_keep_kueue_kinds_and_point_at_the_local_process() -> None:
    mutating, validating = webhook_configurations(MANIFESTS, 9443, b"PEM")
    assert [h["name"] for h in mutating["webhooks"]] == ["mworkload.kb.io"]  # no pod webhook
    assert [h["name"] for h in validating["webhooks"]] == ["vworkload.kb.io"]
    config = validating["webhooks"][0]["clientConfig"]
    assert config == {
        "url": "https://127.0.0.1:9443/validate-kueue-x-k8s-io-v1beta2-workload",
        "caBundle": "UEVN",
    }


def test_configuration_runs_without_cert_management_or_leader_election() -> None:
    config = configuration(1, 2, 3, Path("/c"))
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["integrations"]["externalFrameworks"] == [EXTERNAL_FRAMEWORK]
    assert config["webhook"] == {"port": 3, "host": "127.0.0.1", "certDir": "/c"}
