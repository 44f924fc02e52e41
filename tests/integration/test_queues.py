"""Two tenants contend for H100s through TrainingQueues: quota holds, borrowing, reclaim preemption."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import H100, job, queue
from tests.integration.conftest import Kube
from trainop.inventory.pods import is_terminated, pod_binding

pytestmark = pytest.mark.usefixtures("operator")


def _queue(name: str, namespace: str, gpus: int, cohort: str) -> dict[str, Any]:
    builder = queue(name).serves(namespace, default=True).cohort(cohort)
    builder.quota("h100", gpus, H100).policy(allowedFrameworks=["pytorch"])
    # Quota and reclaim are under test, not topology-aware waiting: a gang spread by an
    # earlier test's leftovers would otherwise wait for a better block.
    return builder.set("topologyWaitSeconds", 0).build()


def _job(namespace: str, name: str, replicas: int, **template_spec: Any) -> dict[str, Any]:
    builder = job(name, namespace=namespace, workers=replicas).template(**template_spec)
    return builder.placement("block", "Preferred", [H100]).manifest()


def _status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict((kube.get("trainingjob", name, "-n", ns).get("status")) or {})


def _running_pods(kube: Kube, ns: str, name: str) -> int:
    pods = kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"]
    return sum(
        1
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


@pytest.fixture
def tenants(kube: Kube, request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    suffix = f"{request.node.name.split('_')[-1][:6]}-{uuid.uuid4().hex[:4]}"  # unique per run
    a, b = f"alpha-{suffix}", f"beta-{suffix}"

    # The H100s must be free of earlier tests' pods (their namespaces are being deleted).
    def h100_free() -> bool:
        # Bound or only pinned (gated): both hold GPUs in the operator's inventory.
        pods = kube.get("pods", "-A")["items"]
        return not any(
            (b := pod_binding(p)) is not None and b[1].startswith("h100-") and not is_terminated(p)
            for p in pods
        )

    kube.wait_for("H100 nodes free", h100_free, timeout=90)
    for ns in (a, b):
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.apply([_queue(a, a, 64, f"pool-{suffix}"), _queue(b, b, 64, f"pool-{suffix}")])
    yield a, b
    for ns in (a, b):
        kube.run("delete", "namespace", ns, "--wait=false", check=False)
        kube.run("delete", "trainingqueue", ns, "--wait=false", check=False)


def test_quota_borrowing_and_reclaim_preemption(kube: Kube, tenants: tuple[str, str]) -> None:
    a, b = tenants
    # alpha: 64 GPUs within its quota, then 32 more borrowed from beta's idle quota.
    kube.apply(_job(a, "a-big", 8))
    try:
        kube.wait_for("a-big running", lambda: _running_pods(kube, a, "a-big") == 8, timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; a-big status: {_status(kube, a, 'a-big')}") from None
    kube.apply(_job(a, "a-borrow", 4))
    kube.wait_for("a-borrow running", lambda: _running_pods(kube, a, "a-borrow") == 4, timeout=60)
    usage = kube.wait_for(
        "queue status shows borrowing",
        lambda: next(
            (
                u
                for u in (kube.get("trainingqueue", a).get("status") or {}).get("usage", [])
                if u["name"] == "h100" and u["borrowed"] == 32
            ),
            None,
        ),
        timeout=40,
    )
    assert usage["quota"] == 64 and usage["used"] == 96

    # Quota holds: alpha cannot borrow more than beta leaves idle (cohort has 32 idle; 5x8 > 32).
    kube.apply(_job(a, "a-more", 5))
    st = kube.wait_for(
        "a-more waits on quota",
        lambda: (s := _status(kube, a, "a-more")).get("pendingReason") == "Quota" and s,
        timeout=40,
    )
    assert st["phase"] == "Queued" and "borrow" in st["pendingMessage"]
    kube.run("delete", "trainingjob", "a-more", "-n", a)

    # beta claims its nominal quota back: the borrowing gang is preempted (whole gang).
    kube.apply(_job(b, "b-claim", 8))
    kube.wait_for("b-claim running", lambda: _running_pods(kube, b, "b-claim") == 8, timeout=90)
    victim = _status(kube, a, "a-borrow")
    preempted = next((c for c in victim["conditions"] if c["type"] == "Preempted"), None)
    assert preempted is not None, (
        f"a-borrow was not marked Preempted: {victim}; a-big: {_status(kube, a, 'a-big')}; "
        f"a-big events: {[e['reason'] for e in kube.events_for(a, 'a-big')]}"
    )
    assert preempted["status"] == "True" and preempted["reason"] == "Reclaim"
    assert victim.get("restartCount", 0) == 0, "a preemption does not consume backoffLimit"
    assert _running_pods(kube, a, "a-borrow") == 0
    assert _running_pods(kube, a, "a-big") == 8, "jobs within quota are never reclaimed"
    assert any(e["reason"] == "Preempted" for e in kube.events_for(a, "a-borrow"))


def test_policy_violation_is_refused_not_altered(kube: Kube, tenants: tuple[str, str]) -> None:
    a, _ = tenants
    kube.apply(_job(a, "rooted", 1, hostNetwork=True))
    st = kube.wait_for(
        "Invalid",
        lambda: (s := _status(kube, a, "rooted")).get("phase") == "Invalid" and s,
        timeout=40,
    )
    cond = next(c for c in st["conditions"] if c["type"] == "Invalid")
    assert cond["reason"] == "PolicyViolation" and "hostNetwork" in cond["message"]
    assert not kube.get("pods", "-n", a, "-l", "trainop.dev/job-name=rooted")["items"]


def test_an_impossible_job_is_inadmissible_while_its_queue_runs(
    kube: Kube, tenants: tuple[str, str]
) -> None:
    """10,000 GPUs asked of a queue of 64 (+64 its cohort lends): Inadmissible with the
    numbers, never the head; a job behind it in the same queue runs."""
    a, _ = tenants
    kube.apply(_job(a, "huge", 1250))
    st = kube.wait_for(
        "Inadmissible",
        lambda: (s := _status(kube, a, "huge")).get("pendingReason") == "Inadmissible" and s,
        timeout=40,
    )
    cond = next(c for c in st["conditions"] if c["type"] == "Inadmissible")
    assert cond["status"] == "True" and "needs 10000 GPUs" in cond["message"]
    kube.apply(_job(a, "small", 1))
    kube.wait_for("small Running", lambda: _running_pods(kube, a, "small") == 1, timeout=60)
    assert _status(kube, a, "huge").get("phase") == "Queued"
    assert not kube.get("pods", "-n", a, "-l", "trainop.dev/job-name=huge")["items"]
