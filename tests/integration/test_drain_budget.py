"""Drains that wait for the checkpoint, on a real API server (issue 35; docs/progress.md).

A running gang of a job with spec.checkpoint gets a PodDisruptionBudget (policy/v1,
minAvailable the gang, owned by the job): the Eviction API, which `kubectl drain`, the cluster
autoscaler and Karpenter use, refuses to evict its pods. A cordon makes trainop ask for a
checkpoint; once one is reported (here through the real endpoint, with the pod's real
token) trainop deletes the budget and restarts the gang elsewhere; the new gang gets a new
budget, and deleting the job deletes it (garbage collection of the ownerReference). A job
without spec.checkpoint gets none. The operator runs with a progress URL: without the
report channel no budget is made (nothing could answer the drain).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import job
from tests.integration.conftest import Kube, LocalCluster, OperatorProcess
from trainop.api.progress import PROGRESS_PATH


@pytest.fixture
def wired_operator(
    local_cluster: LocalCluster,
    operator: OperatorProcess,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorProcess]:
    """The session operator restarted with a progress URL (pods wired to report)."""
    operator.stop()
    wired = OperatorProcess(local_cluster, tmp_path)
    wired.extra = ["--progress-url", f"http://127.0.0.1:{wired.progress_port}{PROGRESS_PATH}"]
    wired.start()
    yield wired
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:  # the conftest's hook prints the stopped one's
        print("---- wired operator log (tail) ----\n" + wired.log_tail(120))
    wired.stop()
    operator.start()


def _phase(kube: Kube, ns: str, name: str) -> str:
    return str(((kube.maybe_get("tj", name, "-n", ns) or {}).get("status") or {}).get("phase"))


def _budget(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = kube.maybe_get("pdb", f"{name}-checkpoint", "-n", ns)
    return found


def _evict(kube: Kube, ns: str, pod: str) -> Any:
    """POST an Eviction for `pod` (what kubectl drain does for each pod)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": ns},
    }
    return kube.run(
        "create",
        "--raw",
        f"/api/v1/namespaces/{ns}/pods/{pod}/eviction",
        "-f",
        "-",
        input=json.dumps(body),
        check=False,
    )


def _report(op: OperatorProcess, kube: Kube, ns: str, pod: dict[str, Any], body: Any) -> int:
    return op.report(kube.pod_token(ns, pod), body)[0]


def test_a_drain_waits_for_the_checkpoint(
    kube: Kube, namespace: str, wired_operator: OperatorProcess
) -> None:
    ns, name = namespace, "dr"
    builder = job(name, namespace=ns, workers=2, gpus=1).fake_run("600s")
    kube.apply(builder.checkpoint(mount="/ckpt", gracePeriodSeconds=120).manifest())
    plain = job("dr-plain", namespace=ns, workers=1, gpus=1).fake_run("600s")
    kube.apply(plain.manifest())
    kube.wait_for("dr Running", lambda: _phase(kube, ns, name) == "Running", 90)
    pdb = kube.wait_for("dr's PodDisruptionBudget", lambda: _budget(kube, ns, name), 30)
    owner = pdb["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("TrainingJob", name)
    assert pdb["spec"]["minAvailable"] == 2
    kube.wait_for(
        "the disruption controller to count the gang",
        lambda: ((_budget(kube, ns, name) or {}).get("status") or {}).get("currentHealthy") == 2,
        30,
    )
    refused = _evict(kube, ns, f"{name}-worker-0")
    print(f"\nEviction while the budget stands: rc {refused.returncode}: {refused.stderr.strip()}")
    assert refused.returncode != 0 and "disruption budget" in refused.stderr
    assert kube.maybe_get("pod", f"{name}-worker-0", "-n", ns) is not None

    kube.wait_for("dr-plain Running", lambda: _phase(kube, ns, "dr-plain") == "Running", 60)
    assert _budget(kube, ns, "dr-plain") is None  # no spec.checkpoint: nothing blocks a drain

    pod = kube.get("pod", f"{name}-worker-0", "-n", ns)
    node = pod["spec"]["nodeName"]
    kube.run("cordon", node)
    try:
        asked = kube.wait_for(
            "the checkpoint request of the drain",
            lambda: (kube.get("tj", name, "-n", ns).get("status") or {}).get("checkpointRequest"),
            30,
        )
        assert asked["reason"] == "NodeDrain"
        standing = _budget(kube, ns, name)
        assert standing is not None  # still standing: no checkpoint yet
        assert _evict(kube, ns, f"{name}-worker-1").returncode != 0
        started = time.monotonic()
        ckpt = {"step": 12, "checkpoint": {"path": "/ckpt/step-12.pt", "step": 12}}
        assert _report(wired_operator, kube, ns, pod, ckpt) == 200
        # The budget that held the drain goes. The gang restarted elsewhere gets one of its
        # own (below), and since pinned gangs start ungated that can come within one poll:
        # the old one is told apart by its uid.
        uid = standing["metadata"]["uid"]
        kube.wait_for(
            "the budget deleted",
            lambda: (_budget(kube, ns, name) or {}).get("metadata", {}).get("uid") != uid,
            30,
        )
        print(f"checkpoint reported -> budget deleted in {time.monotonic() - started:.1f} s")
        status = kube.get("tj", name, "-n", ns)["status"]
        assert status["progress"]["lastCheckpoint"]["path"] == "/ckpt/step-12.pt"
        # The gang restarts elsewhere and gets a budget of its own again.
        kube.wait_for(
            "dr Running elsewhere",
            lambda: (
                _phase(kube, ns, name) == "Running"
                and kube.get("pod", f"{name}-worker-0", "-n", ns)["spec"].get("nodeName") != node
            ),
            90,
        )
        kube.wait_for("a budget for the new gang", lambda: _budget(kube, ns, name), 30)
    finally:
        kube.run("uncordon", node, check=False)
    kube.run("delete", "tj", name, "-n", ns, "--wait=false")
    kube.wait_for("the budget gone with the job", lambda: _budget(kube, ns, name) is None, 60)
