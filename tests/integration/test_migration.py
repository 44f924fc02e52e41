"""Migration on the fake fleet with the real operator (issue 37): a gang admitted across two
racks is moved into one rack once that rack empties. It checkpoints first (the test stands
in for its trainer, reporting through the real endpoint with its pod's token) and comes back
on the new nodes with TRAINOP_RESUME_FROM pointing at that checkpoint.

The fleet has two racks of eight DGX H100 (rack-h100-a, rack-h100-b). Two fillers of seven
nodes each take one rack apiece, so the gang of two nodes can only start across both; then
one filler ends, and the next admission cycle moves the gang into that rack.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import H100, job
from tests.integration.conftest import Kube, OperatorProcess
from trainop.api.progress import PROGRESS_PATH
from trainop.cluster.local import LocalCluster


@pytest.fixture(scope="module")
def operator(
    local_cluster: LocalCluster, crds_installed: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator with migration on; a move costs 1 s until measured, so any real gain pays."""
    work = tmp_path_factory.mktemp("migration")
    config = work / "operator.yaml"
    config.write_text("migration: {enabled: true, defaultCostSeconds: 1}\n")
    op = OperatorProcess(local_cluster, work)
    progress_url = f"http://127.0.0.1:{op.progress_port}{PROGRESS_PATH}"  # pods can be asked
    op.extra = ["--config", str(config), "--progress-url", progress_url]
    op.start()
    yield op
    op.stop()


def _tj(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict(kube.maybe_get("tj", name, "-n", ns) or {})


def _status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict(_tj(kube, ns, name).get("status") or {})


def _running(kube: Kube, ns: str, name: str, timeout: float = 90) -> None:
    kube.wait_for(
        f"{ns}/{name} Running",
        lambda: _status(kube, ns, name).get("phase") == "Running",
        timeout,
    )


def _racks(kube: Kube, ns: str, name: str) -> set[str]:
    nodes = (_status(kube, ns, name).get("placement") or {}).get("nodes") or []
    return {str(kube.get("node", n)["metadata"]["labels"]["trainop.dev/rack"]) for n in nodes}


def _report(op: OperatorProcess, kube: Kube, ns: str, pod: str, body: dict[str, Any]) -> Any:
    """A report as the gang's rank 0 sends it: its pod-bound projected token."""
    return op.report(kube.pod_token(ns, kube.get("pod", pod, "-n", ns)), body)[1]


def test_a_spread_gang_moves_into_the_rack_that_empties(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    ns = namespace
    for filler in ("fill-1", "fill-2"):
        kube.apply(
            job(filler, namespace=ns, workers=7, gpus=8)
            .fake_run("3600s")
            .placement("rack", "Required", [H100])
            .manifest()
        )
        _running(kube, ns, filler)
    assert _racks(kube, ns, "fill-1") != _racks(kube, ns, "fill-2")

    gang = (
        job("mig", namespace=ns, workers=2, gpus=8)
        .fake_run("3600s")
        .placement("rack", "Preferred", [H100])
        .set("progress", {"totalSteps": 10_000_000})
    )
    gang.template(containers=[{"name": "trainer", "command": ["python", "train.py"]}])
    gang.checkpoint(mount="/ckpt", gracePeriodSeconds=120)
    kube.apply(gang.manifest())
    _running(kube, ns, "mig")
    assert len(_racks(kube, ns, "mig")) == 2, _status(kube, ns, "mig").get("placement")
    before = set((_status(kube, ns, "mig").get("placement") or {}).get("nodes") or [])

    # The trainer reports its step (steps left: 10M - 100) before the rack empties.
    _report(operator, kube, ns, "mig-worker-0", {"step": 100, "stepSeconds": 0.5})
    kube.wait_for(
        "mig's status.progress",
        lambda: (_status(kube, ns, "mig").get("progress") or {}).get("step") == 100,
        30,
    )
    empty_rack = _racks(kube, ns, "fill-1")
    kube.run("delete", "tj", "fill-1", "-n", ns, "--wait=false")

    # The move starts: status.migration Moving, a checkpoint asked for (reason Migration).
    kube.wait_for(
        "mig moving, a checkpoint asked for",
        lambda: (
            (_status(kube, ns, "mig").get("migration") or {}).get("phase") == "Moving"
            and (_status(kube, ns, "mig").get("checkpointRequest") or {}).get("reason")
            == "Migration"
        ),
        60,
    )
    moving = _status(kube, ns, "mig")["migration"]
    assert set(moving["source"]) == before
    assert moving["estimatedGainSeconds"] >= 2 * moving["estimatedCostSeconds"]

    # The trainer checkpoints (as trainop-launch would on its signal) and reports it.
    answer = _report(
        operator,
        kube,
        ns,
        "mig-worker-0",
        {"step": 120, "stepSeconds": 0.5, "checkpoint": {"path": "/ckpt/120.pt", "step": 120}},
    )
    assert answer.get("checkpointRequested") in (True, False)

    # It comes back whole in the rack that emptied, resuming from that checkpoint.
    seen: list[Any] = []

    def moved() -> bool:
        st = _status(kube, ns, "mig")
        seen[:] = [st.get("phase"), st.get("migration"), st.get("conditions")]
        return (st.get("migration") or {}).get("phase") == "Moved" and st["phase"] == "Running"

    try:
        kube.wait_for("mig moved and running", moved, 120)
    except AssertionError as exc:
        pods = [
            (
                p["metadata"]["name"],
                p["metadata"].get("creationTimestamp"),
                p["status"].get("phase"),
            )
            for p in kube.get("pods", "-n", ns)["items"]
        ]
        raise AssertionError(f"{exc}; status {seen}; pods {pods}") from None
    placed = _status(kube, ns, "mig").get("placement") or {}
    pods = {
        p["metadata"]["name"]: p["spec"].get("nodeName")
        for p in kube.get("pods", "-n", ns)["items"]
        if not p["metadata"].get("deletionTimestamp")
    }
    events = [(e["reason"], e["message"]) for e in kube.events_for(ns, "mig")]
    assert _racks(kube, ns, "mig") == empty_rack, (placed, pods, events)
    done = _status(kube, ns, "mig")["migration"]
    assert done["measuredCostSeconds"] >= 0 and done["moves"] == 1
    env = {
        e["name"]: e.get("value")
        for c in kube.get("pod", "mig-worker-0", "-n", ns)["spec"]["containers"]
        for e in c.get("env") or []
    }
    assert env.get("TRAINOP_RESUME_FROM") == "/ckpt/120.pt"
    reasons = {e["reason"] for e in kube.events_for(ns, "mig")}
    assert {"Migrating", "Migrated", "CheckpointRequested"} <= reasons, reasons
    assert "trainop_migrations_total{" in operator.metrics()
