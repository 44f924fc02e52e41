"""Fail closed and fail loud on the real control plane (issue 12).

The apiserver itself refuses what the CRDs' CEL rules can state (names too long for the
generated pods, a GPU product in two quotas); the operator marks the rest Invalid with a
condition and a Warning Event and creates nothing (a missing PriorityClass), and a broken
TrainingQueue holds its namespaces' jobs (pendingReason QueueInvalid, Active=False) instead
of letting them fall through to the built-in queue.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.builders import A100, H100, job, queue
from tests.integration.conftest import Kube


def tj(ns: str, name: str, gpus: int = 1, **spec: Any) -> dict[str, Any]:
    builder = job(name, namespace=ns, workers=1, gpus=gpus).products(A100)
    for key, value in spec.items():
        builder.set(key, value)
    return builder.manifest()


def tq(name: str, **spec: Any) -> dict[str, Any]:
    builder = queue(name)
    for key, value in spec.items():
        builder.set(key, value)
    return builder.build()


def dry_run(kube: Kube, obj: dict[str, Any]) -> str:
    """The apiserver's answer to a server-side dry-run create: '' when accepted."""
    proc = kube.run("create", "--dry-run=server", "-f", "-", input=json.dumps(obj), check=False)
    return "" if proc.returncode == 0 else proc.stderr


# (id, object, text the apiserver's refusal must contain; '' means accepted)
SCHEMA_CASES = [
    ("name-fits", tj("default", "b" * 54), ""),
    ("name-too-long-for-pod-hostnames", tj("default", "b" * 55), "metadata.name is too long"),
    ("name-with-a-dot", tj("default", "bert.v2"), "DNS-1035"),
    (
        "priority-class-not-a-name",
        tj("default", "a", priorityClassName="Hi There"),
        "spec.priorityClassName",
    ),
    ("queue-not-a-name", tj("default", "a", queue="Team_A"), "spec.queue"),
    (
        "product-in-two-quotas",
        tq(
            "dup-product",
            quotas=[
                {"name": "x", "products": [H100], "gpus": 8},
                {"name": "y", "products": [H100], "gpus": 8},
            ],
        ),
        "a GPU product appears in two quotas",
    ),
    (
        "two-quotas-one-name",
        tq(
            "dup-name",
            quotas=[
                {"name": "x", "products": [H100], "gpus": 8},
                {"name": "x", "products": [A100], "gpus": 8},
            ],
        ),
        "two quotas have the same name",
    ),
    (
        "two-any-quotas",
        tq("two-any", quotas=[{"name": "a", "gpus": 8}, {"name": "b", "gpus": 8}]),
        "only one quota may leave products empty",
    ),
    (
        "product-twice-in-one-quota",
        tq("dup-in-one", quotas=[{"products": [H100, H100], "gpus": 8}]),
        "spec.quotas[0].products",
    ),
    ("good-queue", tq("good", quotas=[{"products": [H100], "gpus": 8}, {"gpus": 8}]), ""),
]


@pytest.mark.usefixtures("crds_installed")
@pytest.mark.parametrize(("obj", "says"), [pytest.param(*c[1:], id=c[0]) for c in SCHEMA_CASES])
def test_the_apiserver_refuses_what_cel_can_state(kube: Kube, obj: dict, says: str) -> None:
    answer = dry_run(kube, obj)
    if not says:
        assert answer == ""
    else:
        assert says in answer, answer


def _status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict((kube.get("trainingjob", name, "-n", ns).get("status")) or {})


def _cond(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), {})


def _pods(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return list(kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"])


@pytest.mark.usefixtures("operator")
def test_missing_priority_class_is_invalid_until_it_exists(kube: Kube, namespace: str) -> None:
    pc = f"pc-{uuid.uuid4().hex[:6]}"
    kube.apply(tj(namespace, "prio", priorityClassName=pc))
    kube.wait_for("Invalid", lambda: _status(kube, namespace, "prio").get("phase") == "Invalid")
    invalid = _cond(_status(kube, namespace, "prio"), "Invalid")
    assert invalid["reason"] == "PriorityClassNotFound"
    assert invalid["message"].startswith(f"spec.priorityClassName: PriorityClass '{pc}'")
    events = kube.events_for(namespace, "prio")
    assert any(e["type"] == "Warning" and e["reason"] == "PriorityClassNotFound" for e in events)
    assert _pods(kube, namespace, "prio") == []
    assert kube.maybe_get("service", "prio", "-n", namespace) is None
    kube.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": pc},
            "value": 10,
        }
    )
    try:
        kube.wait_for(
            "admitted once the PriorityClass exists",
            lambda: _status(kube, namespace, "prio").get("phase") in ("Admitted", "Running"),
            timeout=60,
        )
    finally:
        kube.run("delete", "trainingjob", "prio", "-n", namespace, "--wait=false", check=False)
        kube.run("delete", "priorityclass", pc, "--wait=false", check=False)


@pytest.mark.usefixtures("operator")
def test_broken_queue_fails_closed_then_admits_once_fixed(kube: Kube, namespace: str) -> None:
    qname = f"broken-{uuid.uuid4().hex[:6]}"
    # Passes CEL, but the first quota's group key is h100-80gb-hbm3, the second's name too.
    broken = tq(
        qname,
        namespaces=[namespace],
        default=True,
        quotas=[
            {"products": [H100], "gpus": 8},
            {"name": "h100-80gb-hbm3", "products": [A100], "gpus": 8},
        ],
    )
    kube.apply(broken)
    privileged = {"containers": [{"name": "trainer", "securityContext": {"privileged": True}}]}
    job = tj(namespace, "tenant")
    job["spec"]["replicaSpecs"]["Worker"]["template"] = {"spec": privileged}
    try:
        kube.apply(job)
        kube.wait_for(
            "QueueInvalid",
            lambda: _status(kube, namespace, "tenant").get("pendingReason") == "QueueInvalid",
        )
        st = _status(kube, namespace, "tenant")
        assert st["phase"] == "Queued" and st["queue"] == qname
        assert st["pendingMessage"].startswith(f"queue {qname} is invalid: spec.quotas[1].name")
        assert _pods(kube, namespace, "tenant") == []
        events = kube.events_for(namespace, "tenant")
        assert any(e["type"] == "Warning" and e["reason"] == "QueueInvalid" for e in events)
        active = kube.wait_for(
            "Active=False",
            lambda: _cond(kube.get("trainingqueue", qname).get("status") or {}, "Active"),
        )
        assert (active["status"], active["reason"]) == ("False", "InvalidSpec")
        tq_row = kube.run("get", "tq", qname, "--no-headers").stdout.split()
        assert tq_row[:2] == [qname, "False"], tq_row  # the ACTIVE column
        # Fixed: the same queue's policy now refuses the privileged pod (never the built-in).
        kube.run(
            "patch",
            "trainingqueue",
            qname,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"quotas": [{"products": [A100], "gpus": 8}]}}),
        )
        kube.wait_for(
            "PolicyViolation",
            lambda: _status(kube, namespace, "tenant").get("phase") == "Invalid",
        )
        assert _cond(_status(kube, namespace, "tenant"), "Invalid")["reason"] == "PolicyViolation"
        # A clean job in the same namespace is admitted through the queue and shows it.
        kube.apply(tj(namespace, "clean"))
        kube.wait_for(
            "clean admitted",
            lambda: _status(kube, namespace, "clean").get("phase") in ("Admitted", "Running"),
        )
        assert _status(kube, namespace, "clean")["queue"] == qname
        row = kube.run("get", "tj", "clean", "-n", namespace, "--no-headers").stdout
        assert qname in row.split(), row
        kube.wait_for(
            "Active=True",
            lambda: (
                _cond(kube.get("trainingqueue", qname).get("status") or {}, "Active").get("status")
                == "True"
            ),
            timeout=30,
        )
    finally:
        kube.run("delete", "trainingjob", "--all", "-n", namespace, "--wait=false", check=False)
        kube.run("delete", "trainingqueue", qname, "--wait=false", check=False)
