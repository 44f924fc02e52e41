"""TrainingJob lifecycle on the local cluster, driven by the real operator process."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import job
from tests.integration.conftest import Kube, OperatorProcess, repo_root

pytestmark = pytest.mark.usefixtures("operator")


def _example(name: str = "pytorch-ddp.yaml") -> dict[str, Any]:
    return dict(yaml.safe_load((repo_root() / "examples" / name).read_text()))


def _job(
    namespace: str,
    name: str = "bert",
    *,
    replicas: int = 2,
    gpus: int = 8,
    annotations: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """examples/pytorch-ddp.yaml's job, resized; `spec` sets further fields as they are."""
    builder = job(name, namespace=namespace, workers=replicas, gpus=gpus)
    builder.template(
        containers=[{"name": "trainer", "command": ["torchrun", "/workspace/train.py"]}]
    )
    builder.placement("rack").set("network", {"fabric": "Auto"})
    builder.set("runPolicy", {"restartPolicy": "OnFailure", "backoffLimit": 3})
    if annotations:
        builder.pod_annotations(**annotations)
    if run_policy is not None:
        builder.set("runPolicy", run_policy)
    for key, value in spec.items():
        builder.set(key, value)
    return builder.manifest()


def _phase(kube: Kube, ns: str, name: str) -> str | None:
    tj = kube.maybe_get("trainingjob", name, "-n", ns)
    return None if tj is None else (tj.get("status") or {}).get("phase")


def _wait_phase(kube: Kube, ns: str, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
    kube.wait_for(f"{ns}/{name} phase {phase}", lambda: _phase(kube, ns, name) == phase, timeout)
    return dict(kube.get("trainingjob", name, "-n", ns))


def _pods(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return list(kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"])


def test_example_runs_to_succeeded(kube: Kube, namespace: str) -> None:
    job = _example()
    job["metadata"]["namespace"] = namespace
    kube.apply(job)
    tj = _wait_phase(kube, namespace, "bert", "Running")
    pods = _pods(kube, namespace, "bert")
    assert sorted(p["metadata"]["name"] for p in pods) == ["bert-worker-0", "bert-worker-1"]
    for p in pods:
        labels = p["metadata"]["labels"]
        assert labels["trainop.dev/job-name"] == "bert"
        assert labels["trainop.dev/replica-type"] == "worker"
        assert p["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]
        assert p["spec"]["nodeName"] in tj["status"]["placement"]["nodes"]
        assert not p["spec"].get("schedulingGates")
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
        assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "8"
        assert env["PET_MASTER_ADDR"] == f"bert-worker-0.bert.{namespace}.svc"
    ranks = sorted(
        {e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]}["PET_NODE_RANK"]
        for p in pods
    )
    assert ranks == ["0", "1"]
    svc = kube.get("service", "bert", "-n", namespace)
    assert svc["spec"]["clusterIP"] == "None"
    # One rack holds the gang (placement Required on rack).
    assert tj["status"]["placement"]["span"]["rack"] == 1
    for p in pods:
        kube.run(
            "annotate",
            "pod",
            p["metadata"]["name"],
            "-n",
            namespace,
            "trainop.dev/fake-exit-code=0",
        )
    tj = _wait_phase(kube, namespace, "bert", "Succeeded")
    assert tj["status"]["completionTime"]
    conds = {c["type"]: c["status"] for c in tj["status"]["conditions"]}
    assert conds["Succeeded"] == "True" and conds["Running"] == "False"
    reasons = [e["reason"] for e in kube.events_for(namespace, "bert")]
    # Admitted at its first decision: no GangPlaced Event, only news (docs/operator.md#events).
    assert "JobSucceeded" in reasons and "GangPlaced" not in reasons


def test_failing_worker_restarts_gang_then_fails_after_backoff_limit(
    kube: Kube, namespace: str
) -> None:
    kube.apply(
        _job(
            namespace,
            "flaky",
            annotations={
                "trainop.dev/fake-exit-code": "137",
                "trainop.dev/fake-run-duration": "1s",
            },
            run_policy={"restartPolicy": "OnFailure", "backoffLimit": 2},
        )
    )
    tj = _wait_phase(kube, namespace, "flaky", "Failed", timeout=90)
    assert tj["status"]["restartCount"] == 2
    failed = next(c for c in tj["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "exit code 137" in failed["message"]
    reasons = [e["reason"] for e in kube.events_for(namespace, "flaky")]
    assert "GangRestart" in reasons
    kube.wait_for("pods cleaned up", lambda: not _pods(kube, namespace, "flaky"))


def test_exit_code_policy_permanent_failure_does_not_restart(kube: Kube, namespace: str) -> None:
    kube.apply(
        _job(
            namespace,
            "perm",
            annotations={"trainop.dev/fake-exit-code": "2"},
            run_policy={"restartPolicy": "ExitCode", "backoffLimit": 3},
        )
    )
    tj = _wait_phase(kube, namespace, "perm", "Failed")
    assert tj["status"].get("restartCount", 0) == 0
    failed = next(c for c in tj["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PodFailed" and "exit code 2" in failed["message"]


def test_suspend_and_resume(kube: Kube, namespace: str) -> None:
    kube.apply(_job(namespace, "pausable"))
    _wait_phase(kube, namespace, "pausable", "Running")
    kube.run(
        "patch",
        "trainingjob",
        "pausable",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"runPolicy":{"suspend":true}}}',
    )
    _wait_phase(kube, namespace, "pausable", "Suspended")
    kube.wait_for("pods deleted on suspend", lambda: not _pods(kube, namespace, "pausable"))
    kube.run(
        "patch",
        "trainingjob",
        "pausable",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"runPolicy":{"suspend":false}}}',
    )
    _wait_phase(kube, namespace, "pausable", "Running")
    assert len(_pods(kube, namespace, "pausable")) == 2


def test_delete_cleans_up(kube: Kube, namespace: str) -> None:
    kube.apply(_job(namespace, "gone"))
    _wait_phase(kube, namespace, "gone", "Running")
    kube.run("delete", "trainingjob", "gone", "-n", namespace, "--wait=true", "--timeout=60s")
    kube.wait_for("pods gone", lambda: not _pods(kube, namespace, "gone"))
    kube.wait_for(
        "service gone", lambda: kube.maybe_get("service", "gone", "-n", namespace) is None
    )


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        (
            {"replicaSpecs": {"Worker": {"replicas": 0, "gpus": 8}}},
            "spec.replicaSpecs.Worker.replicas",
            "greater than or equal to 1",
        ),
        (
            {"replicaSpecs": {"Chief": {"replicas": 1}}},
            "spec.replicaSpecs",
            "Worker role is required",
        ),
        ({"framework": {"name": "caffe"}}, "spec.framework.name", "Unsupported value"),
        ({"placement": {"topology": "galaxy"}}, "spec.placement.topology", "Unsupported value"),
        ({"cuda": "twelve"}, "spec.cuda", "should match"),
    ],
    ids=["zero-replicas", "no-worker", "unknown-framework", "bad-topology", "bad-cuda"],
)
def test_schema_rejects_bad_documents_naming_the_field(
    kube: Kube, namespace: str, patch: dict[str, Any], field: str, words: str
) -> None:
    job = _job(namespace, "bad")
    job["spec"] = {**job["spec"], **copy.deepcopy(patch)}
    proc = kube.apply(job, check=False)
    assert proc.returncode != 0
    assert field in proc.stderr and words in proc.stderr, proc.stderr
    assert kube.maybe_get("trainingjob", "bad", "-n", namespace) is None


def test_semantic_error_sets_invalid_and_creates_no_pods(kube: Kube, namespace: str) -> None:
    job = _job(namespace, "nogpu", gpus=0)  # valid schema, but no role asks for GPUs
    kube.apply(job)
    tj = _wait_phase(kube, namespace, "nogpu", "Invalid")
    cond = next(c for c in tj["status"]["conditions"] if c["type"] == "Invalid")
    assert cond["status"] == "True" and "spec.replicaSpecs.Worker.gpus" in cond["message"]
    assert any(
        e["reason"] == "InvalidSpec" and e["type"] == "Warning"
        for e in kube.events_for(namespace, "nogpu")
    )
    assert not _pods(kube, namespace, "nogpu")


def test_pods_the_apiserver_refuses_make_the_job_invalid_with_nothing_left(
    kube: Kube, namespace: str
) -> None:
    """A template the CRD lets through (its schema has no pattern for a container name) but
    the Pod API refuses: the error reaches the job's status and Events, no pod is left, and
    it is not retried."""
    job = _job(namespace, "refused")
    job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "Not_A_DNS"
    kube.apply(job)
    tj = _wait_phase(kube, namespace, "refused", "Invalid")
    cond = next(c for c in tj["status"]["conditions"] if c["type"] == "Invalid")
    assert cond["reason"] == "Rejected"
    assert "Pod refused-worker-0: 422" in cond["message"], cond["message"]
    assert any(
        e["reason"] == "Rejected" and e["type"] == "Warning"
        for e in kube.events_for(namespace, "refused")
    )
    kube.wait_for("no pod left", lambda: not _pods(kube, namespace, "refused"))


def test_operator_killed_mid_job_converges(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(_job(namespace, "resilient"))
    _wait_phase(kube, namespace, "resilient", "Running")
    operator.kill()
    # While it is down: a pod is deleted by hand and another exits 0.
    kube.run("delete", "pod", "resilient-worker-1", "-n", namespace, "--wait=false")
    operator.start()
    _wait_phase(kube, namespace, "resilient", "Running", timeout=60)
    kube.wait_for(
        "gang recreated",
        lambda: (
            len(
                [
                    p
                    for p in _pods(kube, namespace, "resilient")
                    if p["status"].get("phase") == "Running"
                ]
            )
            == 2
        ),
    )
    tj = kube.get("trainingjob", "resilient", "-n", namespace)
    assert tj["status"].get("restartCount", 0) == 0, (
        "a pod deleted by hand is not a training failure"
    )
    names = [p["metadata"]["name"] for p in _pods(kube, namespace, "resilient")]
    assert sorted(names) == ["resilient-worker-0", "resilient-worker-1"], "no duplicates"


def test_unplaceable_job_waits_with_reason(kube: Kube, namespace: str) -> None:
    kube.apply(_job(namespace, "huge", replicas=20, gpus=8))
    kube.wait_for(
        "pending reason",
        lambda: (
            (kube.get("trainingjob", "huge", "-n", namespace).get("status") or {}).get(
                "pendingReason"
            )
            == "Inadmissible"  # 160 GPUs in one rack (Required): more than any rack has
        ),
    )
    tj = kube.get("trainingjob", "huge", "-n", namespace)
    assert tj["status"]["phase"] == "Queued"
    assert "needs 160 GPUs" in tj["status"]["pendingMessage"]
    assert not _pods(kube, namespace, "huge")


def test_example_files_are_accepted_by_the_apiserver(kube: Kube) -> None:
    for path in sorted(Path(repo_root() / "examples").glob("*.yaml")):
        docs = [
            d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "TrainingJob"
        ]
        for doc in docs:
            doc["metadata"]["namespace"] = "default"
            proc = kube.apply(doc, "--dry-run=server", check=False)
            assert proc.returncode == 0, f"{path.name}: {proc.stderr}"
