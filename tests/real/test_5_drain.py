"""A drain that waits for the checkpoint, on a real node (issue 35; docs/progress.md).

A checkpointing DDP job (examples/real/pytorch-preempt-cpu.yaml) trains on the real node;
its running gang has a PodDisruptionBudget. `kubectl drain` of that node (its pods only,
`--pod-selector`: the tier's operator and registry may share the node, and the chart's own
budget holds the operator) cordons it, trainop asks the trainer for a checkpoint, and the
drain's evictions are refused until the checkpoint is reported; then trainop deletes the
budget, restarts the gang, and the job waits (the only real node is cordoned) with the
reason. After `kubectl uncordon` it resumes from the checkpoint, its loss going on from
there, and finishes; no budget is left behind.

Not run by the session that wrote it (the real tier needs root-level node setup); run it
with `make test-real` or `pytest tests/real/test_5_drain.py`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import Kube
from tests.real.scenarios import (
    JOB_TIMEOUT,
    Target,
    diagnose,
    example,
    logs,
    tenant_queue,
    wait_finished,
)

QUEUE, NAME = "real-drain", "ddp-drain"
CKPT_PATH = re.compile(r"step-(\d+)-loss-([0-9.e+-]+)\.pt$")
DONE = re.compile(r"done start=(\d+) loss ([0-9.e+-]+) -> ([0-9.e+-]+)")


@pytest.fixture
def drain_queue(target: Target, namespace: str) -> Iterator[str]:
    """A queue that serves the test's namespace and allows the checkpoints' hostPath."""
    with tenant_queue(target.kube, QUEUE, namespace, 4) as queue:
        yield queue


def _status(kube: Kube, ns: str) -> dict[str, Any]:
    return dict((kube.maybe_get("trainingjob", NAME, "-n", ns) or {}).get("status") or {})


def _budget(kube: Kube, ns: str) -> Any:
    return kube.maybe_get("pdb", f"{NAME}-checkpoint", "-n", ns)


def _answered(kube: Kube, ns: str) -> dict[str, Any] | None:
    """The checkpoint that answers the drain's request, once reported."""
    status = _status(kube, ns)
    request = status.get("checkpointRequest") or {}
    ckpt = (status.get("progress") or {}).get("lastCheckpoint") or {}
    if request.get("reason") != "NodeDrain" or not ckpt.get("time"):
        return None
    if ckpt["time"] < request["requestedAt"] or ckpt["step"] < request.get("step", 0):
        return None
    return {"request": request, "checkpoint": ckpt}


def test_kubectl_drain_waits_for_the_checkpoint_and_the_job_resumes(
    target: Target, namespace: str, drain_queue: str
) -> None:
    kube = target.kube
    job = example(target, "pytorch-preempt-cpu.yaml", namespace)
    job["metadata"]["name"] = NAME
    job["spec"].pop("priorityClassName", None)
    job["spec"]["checkpoint"]["gracePeriodSeconds"] = 120
    volume = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]
    volume["hostPath"]["path"] = f"/var/tmp/trainop-checkpoints/{namespace}"
    kube.apply(job)
    kube.wait_for(
        f"{NAME} to report step 20",
        lambda: (_status(kube, namespace).get("progress") or {}).get("step", 0) >= 20,
        JOB_TIMEOUT,
        interval=1.0,
    )
    assert _budget(kube, namespace), "a running checkpointing gang has a budget"
    node = kube.get("pod", f"{NAME}-worker-0", "-n", namespace)["spec"]["nodeName"]

    drained: dict[str, Any] = {}

    def drain() -> None:
        proc = kube.run(
            "drain",
            node,
            f"--pod-selector=trainop.dev/job-name={NAME}",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=300s",
            check=False,
        )
        drained.update(rc=proc.returncode, at=time.monotonic(), out=proc.stdout + proc.stderr)

    started = time.monotonic()
    thread = threading.Thread(target=drain)
    thread.start()
    try:
        answer = kube.wait_for(
            "the checkpoint the drain asked for", lambda: _answered(kube, namespace), 150
        )
        answered_at = time.monotonic()
        assert "at" not in drained, f"the drain finished before the checkpoint: {drained}"
        thread.join(200)
        assert drained.get("rc") == 0, drained
        print(
            f"\nkubectl drain: checkpoint at step {answer['checkpoint']['step']} "
            f"{answered_at - started:.1f} s after the drain began (asked at step "
            f"{answer['request']['step']}), drain done after {drained['at'] - started:.1f} s"
        )
        kube.wait_for("no budget left", lambda: _budget(kube, namespace) is None, 30)
        kube.wait_for(
            f"{NAME} waiting while its node is cordoned",
            lambda: _status(kube, namespace).get("phase") in ("Queued", "Pending", "Restarting"),
            60,
        )
        waiting = _status(kube, namespace)
        print(f"while cordoned: phase {waiting.get('phase')}: {waiting.get('message', '')}")
    finally:
        thread.join(5)
        kube.run("uncordon", node, check=False)
    wait_finished(target, namespace, NAME)
    kube.wait_for(
        "the last progress report in status",
        lambda: DONE.search((_status(kube, namespace).get("progress") or {}).get("phase", "")),
        30,
    )
    status = _status(kube, namespace)
    done = DONE.search(status["progress"]["phase"])
    assert done, diagnose(kube, namespace, {"status": status})
    saved = CKPT_PATH.search(answer["checkpoint"]["path"])
    assert saved, answer
    start, after, saved_loss = int(done.group(1)), float(done.group(2)), float(saved.group(2))
    assert start == answer["checkpoint"]["step"] + 1, (done.group(0), answer)
    assert after < 1.5 * saved_loss + 1e-3, (after, saved_loss)
    assert _budget(kube, namespace) is None  # finished: no budget left behind
    print(
        f"resumed at step {start} with loss {after:.4g} (checkpoint's {saved_loss:.4g})\n"
        + logs(kube, namespace, f"{NAME}-worker-0")[-1200:]
    )
