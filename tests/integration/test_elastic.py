"""An elastic PyTorch gang on the fake fleet (issue 25 part 1): admitted at the largest size its
queue's quota allows, grown when a job ends, shrunk to make room for a higher-priority job,
never evicted whole; status.elastic and the Grown/Shrunk Events follow.

One TrainingQueue with a 32-GPU H100 quota bounds the gang (the fake fleet has more H100s than
that): 2 x 8 GPUs of a fixed job leave room for 2 of the elastic job's 3 workers of 8.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import H100, job, queue
from tests.integration.conftest import Kube

pytestmark = pytest.mark.usefixtures("operator")

TIMEOUT = 90.0


def _live_workers(kube: Kube, ns: str, name: str) -> list[str]:
    pods = kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"]
    return sorted(
        p["metadata"]["name"]
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


def _elastic_status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    status = kube.get("trainingjob", name, "-n", ns).get("status") or {}
    return dict(status.get("elastic") or {})


@pytest.fixture
def tenant(kube: Kube) -> Iterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:6]
    ns, pc = f"elastic-{suffix}", f"elastic-high-{suffix}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    q = queue(ns).serves(ns, default=True).quota("h100", 32, H100)
    kube.apply(q.set("topologyWaitSeconds", 0).build())
    kube.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": pc},
            "value": 1000,
        }
    )
    yield ns, pc
    kube.run("delete", "namespace", ns, "--wait=false", check=False)
    kube.run("delete", "trainingqueue", ns, "--wait=false", check=False)
    kube.run("delete", "priorityclass", pc, "--wait=false", check=False)


def _job(ns: str, name: str, replicas: int) -> Any:
    return job(name, namespace=ns, workers=replicas).placement("rack", "Preferred", [H100])


def test_elastic_gang_starts_small_grows_and_shrinks_instead_of_eviction(
    kube: Kube, tenant: tuple[str, str]
) -> None:
    ns, pc = tenant
    kube.apply(_job(ns, "fixed", 2).manifest())
    kube.wait_for("fixed running", lambda: len(_live_workers(kube, ns, "fixed")) == 2, TIMEOUT)

    kube.apply(_job(ns, "el", 3).elastic(2, 3).manifest())
    kube.wait_for("el at 2", lambda: len(_live_workers(kube, ns, "el")) == 2, TIMEOUT)
    assert _elastic_status(kube, ns, "el")["targetReplicas"] == 2

    kube.run("delete", "trainingjob", "fixed", "-n", ns)  # 16 GPUs of quota free up
    kube.wait_for("el grown to 3", lambda: len(_live_workers(kube, ns, "el")) == 3, TIMEOUT)
    grown = kube.wait_for(
        "a Grown Event",
        lambda: [e for e in kube.events_for(ns, "el") if e["reason"] == "Grown"],
        TIMEOUT,
    )
    assert "2 -> 3 workers" in grown[0]["message"]
    assert _elastic_status(kube, ns, "el")["currentReplicas"] == 3

    kube.apply(_job(ns, "urgent", 2).priority(pc).manifest())
    kube.wait_for("urgent running", lambda: len(_live_workers(kube, ns, "urgent")) == 2, TIMEOUT)
    assert _live_workers(kube, ns, "el") == ["el-worker-0", "el-worker-1"]
    shrunk = [e for e in kube.events_for(ns, "el") if e["reason"] == "Shrunk"]
    assert shrunk and "3 -> 2 workers" in shrunk[0]["message"]
    status = kube.get("trainingjob", "el", "-n", ns)["status"]
    assert status["phase"] == "Running"
    assert not any(
        c["type"] == "Preempted" and c["status"] == "True" for c in status.get("conditions", [])
    )
