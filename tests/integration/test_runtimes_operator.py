"""The operator honours runtimes (issue 34) on the real API server, with the real operator:
a 12-line job naming a ClusterTrainingRuntime runs with the runtime's template (env,
volumes, mounts) and records which runtime generation it used; editing or deleting the
runtime leaves the running gang alone; a job naming a missing runtime waits (condition and
one Event naming it) and starts once the runtime is created; a runtime deleted under a
queued job makes it wait; a queue whose policy forbids the runtime refuses the job."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import yaml

from tests.builders import job, queue, runtime
from tests.integration.conftest import Kube, repo_root

pytestmark = pytest.mark.usefixtures("operator")

EXAMPLE = repo_root() / "examples" / "runtimes" / "pytorch-ddp.yaml"


def _runtime(name: str, dataset: str) -> dict[str, Any]:
    """ClusterTrainingRuntime `name`: the chart's pytorch runtime, plus an env var, a volume
    and its mount that the job itself never states."""
    trainer = {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    built = (
        runtime(name)
        .framework("pytorch", "2.4")
        .set("cuda", "12.4")
        .role("Worker", replicas=2, gpus=8)
        .trainer(**trainer)
        .env(DATASET=dataset)
        .pod(volumes=[{"name": "data", "emptyDir": {}}])
        .set("placement", {"topology": "rack", "mode": "Required"})
        .set("network", {"fabric": "Auto"})
        .set("runPolicy", {"restartPolicy": "OnFailure", "backoffLimit": 3})
    )
    return built.manifest()


def _short_job(namespace: str, name: str, runtime_name: str) -> dict[str, Any]:
    """examples/runtimes/pytorch-ddp.yaml (12 lines) in `namespace`, naming `runtime_name`."""
    text = EXAMPLE.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) <= 12, lines
    body = dict(yaml.safe_load(text))
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"]["runtimeRef"] = {"name": runtime_name}
    return body


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _job(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict(kube.get("trainingjob", name, "-n", ns))


def _status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    tj = kube.maybe_get("trainingjob", name, "-n", ns)
    return dict((tj or {}).get("status") or {})


def _pods(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return list(kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"])


def _condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((cd for cd in status.get("conditions") or [] if cd["type"] == ctype), None)


def _wait_phase(kube: Kube, ns: str, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
    kube.wait_for(
        f"{ns}/{name} phase {phase}",
        lambda: _status(kube, ns, name).get("phase") == phase,
        timeout,
    )
    return _status(kube, ns, name)


def _wait_for_runtime(kube: Kube, ns: str, name: str, reason: str) -> dict[str, Any]:
    def waiting() -> bool:
        status = _status(kube, ns, name)
        cond = _condition(status, "RuntimeResolved") or {}
        return status.get("pendingReason") == "Runtime" and cond.get("reason") == reason

    kube.wait_for(f"{ns}/{name} waits for its runtime ({reason})", waiting, timeout=60)
    return _status(kube, ns, name)


def _events(kube: Kube, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in kube.events_for(ns, name) if e["reason"] == reason]


def _trainer(p: dict[str, Any]) -> dict[str, Any]:
    return dict(p["spec"]["containers"][0])


def _env(p: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in _trainer(p).get("env") or []}


def test_a_short_job_runs_with_its_runtimes_template_and_keeps_it(
    kube: Kube, namespace: str
) -> None:
    name = _unique("pt")
    kube.apply(_runtime(name, "one"))
    try:
        kube.apply(_short_job(namespace, "bert", name))
        status = _wait_phase(kube, namespace, "bert", "Running")
        assert status["runtime"] == {
            "kind": "ClusterTrainingRuntime",
            "name": name,
            "generation": 1,
        }
        assert status["framework"] == "pytorch"  # the runtime's, for kubectl get's column
        table = kube.run("get", "tj", "bert", "-n", namespace, "-o", "wide").stdout.splitlines()
        header, row = table[0].split(), table[1].split()
        assert row[header.index("FRAMEWORK")] == "pytorch"
        assert row[header.index("RUNTIME")] == name
        pods = _pods(kube, namespace, "bert")
        assert sorted(p["metadata"]["name"] for p in pods) == ["bert-worker-0", "bert-worker-1"]
        for p in pods:
            env = _env(p)
            assert env["DATASET"] == "one"  # the runtime's env
            assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "8"
            assert _trainer(p)["command"][:2] == ["torchrun", "/workspace/train.py"]  # the job's
            assert {"name": "data", "emptyDir": {}} in p["spec"]["volumes"]
            assert {"name": "data", "mountPath": "/data"} in [
                {k: m[k] for k in ("name", "mountPath")} for m in _trainer(p)["volumeMounts"]
            ]
        uids = sorted(p["metadata"]["uid"] for p in pods)

        kube.apply(_runtime(name, "two"))  # edited: generation 2
        rt = kube.get("clustertrainingruntime", name)
        assert rt["metadata"]["generation"] == 2
        time.sleep(3)  # the operator saw the edit (and reconciled the job it concerns)
        assert sorted(p["metadata"]["uid"] for p in _pods(kube, namespace, "bert")) == uids
        assert all(_env(p)["DATASET"] == "one" for p in _pods(kube, namespace, "bert"))
        status = _status(kube, namespace, "bert")
        assert status["phase"] == "Running" and not status.get("restartCount")
        assert status["runtime"]["generation"] == 1  # the merge its gang was planned from

        # (a job seen before its runtime's watch event waits a moment, told so: counted)
        told = len(_events(kube, namespace, "bert", "RuntimeNotFound"))
        kube.run("delete", "clustertrainingruntime", name)  # deleted under the running gang
        time.sleep(3)
        assert sorted(p["metadata"]["uid"] for p in _pods(kube, namespace, "bert")) == uids
        status = _status(kube, namespace, "bert")
        assert status["phase"] == "Running" and status["runtime"]["generation"] == 1
        assert len(_events(kube, namespace, "bert", "RuntimeNotFound")) == told
    finally:
        kube.run("delete", "clustertrainingruntime", name, "--ignore-not-found", check=False)


def test_a_job_naming_a_missing_runtime_waits_then_starts_once_it_exists(
    kube: Kube, namespace: str
) -> None:
    name = _unique("later")
    try:
        kube.apply(_short_job(namespace, "bert", name))
        status = _wait_for_runtime(kube, namespace, "bert", "RuntimeNotFound")
        assert status["phase"] == "Queued"  # not Invalid: the fix may be the runtime's
        cond = _condition(status, "RuntimeResolved")
        assert cond is not None and cond["status"] == "False"
        assert f"ClusterTrainingRuntime {name} not found" in cond["message"]
        assert "kubectl get clustertrainingruntimes" in cond["message"]  # the fix
        assert name in status["pendingMessage"]
        assert not _pods(kube, namespace, "bert")
        events = kube.wait_for(
            "the RuntimeNotFound Event",
            lambda: _events(kube, namespace, "bert", "RuntimeNotFound"),
        )
        assert len(events) == 1 and events[0]["type"] == "Warning"
        assert name in events[0]["message"]
        assert (events[0].get("count") or 1) == 1

        kube.apply(_runtime(name, "one"))  # created: the job is admitted now
        status = _wait_phase(kube, namespace, "bert", "Running")
        assert status["runtime"]["name"] == name
        cond = _condition(status, "RuntimeResolved")
        assert cond is not None and cond["status"] == "True"
        assert all(_env(p)["DATASET"] == "one" for p in _pods(kube, namespace, "bert"))
        assert len(_events(kube, namespace, "bert", "RuntimeNotFound")) == 1
    finally:
        kube.run("delete", "clustertrainingruntime", name, "--ignore-not-found", check=False)


def test_a_runtime_deleted_under_a_queued_job_makes_it_wait(kube: Kube, namespace: str) -> None:
    name, q = _unique("gone"), _unique("q")
    kube.apply(_runtime(name, "one"))
    kube.apply(queue(q).serves(namespace, default=True).quota("any", 16).build())
    try:
        blocker = job("blocker", namespace=namespace, workers=2, gpus=8)
        blocker.template(containers=[{"name": "trainer", "command": ["sleep", "infinity"]}])
        kube.apply(blocker.manifest())
        _wait_phase(kube, namespace, "blocker", "Running")
        kube.apply(_short_job(namespace, "bert", name))
        kube.wait_for(
            "bert waits for quota",
            lambda: _status(kube, namespace, "bert").get("pendingReason") == "Quota",
        )
        kube.run("delete", "clustertrainingruntime", name)
        status = _wait_for_runtime(kube, namespace, "bert", "RuntimeNotFound")
        assert status["phase"] == "Queued" and name in status["pendingMessage"]
        events = kube.wait_for(
            "the RuntimeNotFound Event",
            lambda: _events(kube, namespace, "bert", "RuntimeNotFound"),
        )
        assert len(events) == 1 and name in events[0]["message"]
        kube.run("delete", "trainingjob", "blocker", "-n", namespace)  # room, but no runtime
        time.sleep(3)
        assert _status(kube, namespace, "bert").get("pendingReason") == "Runtime"
        assert not _pods(kube, namespace, "bert")
    finally:
        kube.run("delete", "clustertrainingruntime", name, "--ignore-not-found", check=False)
        kube.run("delete", "trainingqueue", q, "--ignore-not-found", check=False)


def test_a_queue_whose_policy_forbids_the_runtime_refuses_the_job(
    kube: Kube, namespace: str
) -> None:
    name, q = _unique("nope"), _unique("q")
    kube.apply(_runtime(name, "one"))
    allowed = ["ClusterTrainingRuntime/some-other"]
    kube.apply(
        queue(q)
        .serves(namespace, default=True)
        .quota("any", 64)
        .policy(allowedRuntimes=allowed)
        .build()
    )
    try:
        kube.apply(_short_job(namespace, "bert", name))
        status = _wait_phase(kube, namespace, "bert", "Invalid")
        invalid = _condition(status, "Invalid")
        assert invalid is not None and invalid["reason"] == "PolicyViolation"
        assert f"ClusterTrainingRuntime {name} is not allowed by queue {q}" in invalid["message"]
        assert "policy.allowedRuntimes" in invalid["message"]
        assert not _pods(kube, namespace, "bert")
    finally:
        kube.run("delete", "clustertrainingruntime", name, "--ignore-not-found", check=False)
        kube.run("delete", "trainingqueue", q, "--ignore-not-found", check=False)
