"""Migration on real nodes (issue 37): a second real node joins the tier's cluster for this
module, so the cluster has two racks (each real node is a rack of its own:
trainop.cluster.realnode.node_labels), and the operator is upgraded with helm to move gangs
(`operator.config.migration`).

Two fillers hold 3 of each node's 4 GPUs, so a 2-pod DDP job of one GPU a pod starts across
both racks. When one filler ends, trainop decides the move (the job's allreduce across racks
against inside the node that emptied, times its steps left, pays for the cost), asks the
trainer for a checkpoint through the progress channel, evicts the gang, starts it again
whole on the node that emptied with TRAINOP_RESUME_FROM, and the loss goes on from the
checkpoint's. On the way out, the second node is removed and the operator's config
restored, so the tier's other modules see one real node.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Kube
from tests.real.helm_operator import HelmOperator
from tests.real.scenarios import (
    JOB_TIMEOUT,
    Target,
    diagnose,
    example,
    logs,
    tenant_queue,
    wait_finished,
)
from tests.real.test_4_lifecycle import CKPT_PATH, DONE, FIRST, _status
from trainop.cluster import fleet, images
from trainop.cluster.local import LocalCluster

QUEUE = "real-migrate"
RESUMED = re.compile(r"ckpt: resumed step (\d+) loss ([0-9.e+-]+)")


@pytest.fixture(scope="module")
def second_node(real_cluster: LocalCluster, real_kube: Kube) -> Iterator[str]:
    """Real node 1 beside node 0, with the pytorch-cpu image; removed afterwards."""
    started = time.monotonic()
    the_fleet = fleet.load_fleet(Path(__file__).parent / "fleet-real.yaml")
    real_cluster.start_real_nodes(1, the_fleet, 120, first=1)
    rn = real_cluster.real_nodes()
    node = rn.layout(1)
    rn.import_image(node, images.build_image("pytorch-cpu", print), images.image_ref("pytorch-cpu"))
    print(f"\nreal node {node.name} up with pytorch-cpu in {time.monotonic() - started:.0f} s")
    try:
        yield node.name
    finally:
        real_kube.run("delete", "node", node.name, "--wait=false", check=False)
        rn.stop_node(node)


@pytest.fixture(scope="module")
def migrating(real_operator: HelmOperator) -> Iterator[HelmOperator]:
    """The operator with migration on; a move costs 1 s until measured, so a real gain pays."""
    real_operator.upgrade({"migration": {"enabled": True, "defaultCostSeconds": 1}})
    try:
        yield real_operator
    finally:
        real_operator.upgrade()


@pytest.fixture
def migrate_queue(real_kube: Kube, namespace: str) -> Iterator[str]:
    # topologyWaitSeconds 0: the spread gang is admitted at once.
    with tenant_queue(real_kube, QUEUE, namespace, 8, topologyWaitSeconds=0) as queue:
        yield queue


def _filler(target: Target, ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainop.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "framework": {"name": "pytorch", "version": "1.13"},
            "cuda": "12.2",
            "image": target.images["pytorch-cpu"],
            "replicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "gpus": 3,
                    "template": {
                        "spec": {"containers": [{"name": "trainer", "command": ["sleep", "3600"]}]}
                    },
                }
            },
        },
    }


def _mover(target: Target, ns: str) -> dict[str, Any]:
    """pytorch-preempt-cpu.yaml's DDP job, 2 pods of one GPU, 300 steps, rack Preferred."""
    job = example(target, "pytorch-preempt-cpu.yaml", ns)
    job["metadata"]["name"] = "ddp-move"
    job["spec"].pop("priorityClassName", None)
    job["spec"]["progress"]["totalSteps"] = 300
    job["spec"]["placement"] = {"topology": "rack", "mode": "Preferred"}
    worker = job["spec"]["replicaSpecs"]["Worker"]
    worker["gpus"] = 1
    env = worker["template"]["spec"]["containers"][0]["env"]
    next(e for e in env if e["name"] == "TRAINOP_STEPS")["value"] = "300"
    # One directory of this machine: both real nodes see it. Emptied first: the script
    # reports every checkpoint it writes, and a rerun may find an old one there.
    host = Path(f"/var/tmp/trainop-checkpoints/{ns}")
    shutil.rmtree(host, ignore_errors=True)
    worker["template"]["spec"]["volumes"][0]["hostPath"]["path"] = str(host)
    return job


def _nodes(kube: Kube, ns: str, job: str) -> list[str]:
    pods = kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={job}")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return sorted(str(p["spec"].get("nodeName") or "") for p in live)


def _running(kube: Kube, ns: str, name: str) -> None:
    kube.wait_for(f"{name} Running", lambda: _status(kube, ns, name).get("phase") == "Running", 120)


@pytest.mark.skipif(
    os.environ.get("TRAINOP_REAL_LONG") != "1",
    reason="about 7 minutes (a second real node, its image import, two helm upgrades, the "
    "move): TRAINOP_REAL_LONG=1",
)
def test_a_spread_ddp_job_moves_into_the_node_that_empties(
    target: Target,
    namespace: str,
    second_node: str,
    migrating: HelmOperator,
    migrate_queue: str,
) -> None:
    kube, ns = target.kube, namespace
    for name in ("fill-1", "fill-2"):
        kube.apply(_filler(target, ns, name))
        _running(kube, ns, name)
    assert _nodes(kube, ns, "fill-1") != _nodes(kube, ns, "fill-2")
    job = _mover(target, ns)
    kube.apply(job)
    _running(kube, ns, "ddp-move")
    before = _nodes(kube, ns, "ddp-move")
    assert len(set(before)) == 2, before  # across both racks
    kube.wait_for(
        "ddp-move to report step 20",
        lambda: (_status(kube, ns, "ddp-move").get("progress") or {}).get("step", 0) >= 20,
        JOB_TIMEOUT,
        interval=1.0,
    )
    emptied = _nodes(kube, ns, "fill-1")[0]
    asked = time.monotonic()
    kube.run("delete", "tj", "fill-1", "-n", ns, "--wait=false")
    kube.wait_for(
        "the move to start",
        lambda: (_status(kube, ns, "ddp-move").get("migration") or {}).get("phase"),
        120,
    )
    moving = _status(kube, ns, "ddp-move")
    kube.wait_for(
        "ddp-move moved and running",
        lambda: (
            (_status(kube, ns, "ddp-move").get("migration") or {}).get("phase") == "Moved"
            and _status(kube, ns, "ddp-move").get("phase") == "Running"
        ),
        JOB_TIMEOUT,
    )
    moved_in = time.monotonic() - asked
    after = _nodes(kube, ns, "ddp-move")
    status = _status(kube, ns, "ddp-move")
    tj = wait_finished(target, ns, "ddp-move")
    log_after = logs(kube, ns, "ddp-move-worker-0")  # the resumed run's, whole
    kube.wait_for(
        "the last progress report in status",
        lambda: DONE.search((_status(kube, ns, "ddp-move").get("progress") or {}).get("phase", "")),
        30,
    )
    final = _status(kube, ns, "ddp-move")
    _report(moving, status, final, before, after, moved_in, log_after)
    move = status["migration"]
    assert sorted(move["source"]) == sorted(set(before)), (move, before)
    assert after == [emptied, emptied], (after, emptied, diagnose(kube, ns, tj))
    assert move["destination"] == [emptied], move
    assert move["estimatedGainSeconds"] >= 2 * move["estimatedCostSeconds"], move
    assert move["measuredCostSeconds"] > 0 and move["moves"] == 1, move
    checkpoint = (moving.get("checkpointRequest") or {}, final["progress"]["lastCheckpoint"])
    saved = CKPT_PATH.search(checkpoint[1]["path"])
    assert saved and int(saved.group(1)) == checkpoint[1]["step"] >= 20, checkpoint
    resumed = RESUMED.search(log_after)
    assert resumed and int(resumed.group(1)) == checkpoint[1]["step"], log_after[-2000:]
    done = DONE.search(final["progress"]["phase"])
    first = FIRST.search(str((moving.get("progress") or {}).get("phase", "")))
    assert done and int(done.group(1)) == checkpoint[1]["step"] + 1, final["progress"]
    # The loss goes on from the checkpoint's, not from step 0's.
    assert float(done.group(2)) < 1.5 * float(saved.group(2)) + 1e-3, (done.group(0), saved)
    if first:
        assert float(saved.group(2)) < float(first.group(1)) / 2, (saved.group(0), first.group(0))
    reasons = {e["reason"] for e in kube.events_for(ns, "ddp-move")}
    assert {"Migrating", "Migrated"} <= reasons, reasons


def _report(
    moving: dict[str, Any],
    moved: dict[str, Any],
    final: dict[str, Any],
    before: list[str],
    after: list[str],
    seconds: float,
    log: str,
) -> None:
    move = moved["migration"]
    print(
        f"\nddp-move: pods on {before} -> {after}; from the filler's deletion to Running again "
        f"{seconds:.1f} s; status.migration {move}\n"
        f"progress when the move began: {moving.get('progress')}\n"
        f"checkpoint: {final['progress'].get('lastCheckpoint')}; last report: "
        f"{final['progress'].get('phase')}"
    )
    print("\n".join(line for line in log.splitlines() if "ckpt" in line or "step" in line)[-1500:])
