"""Training-aware lifecycle on real nodes (issue 24; docs/progress.md): a DDP job reports its
progress to the operator (kubectl get tj shows it), is asked for a checkpoint before a
higher-priority job of its queue preempts it, checkpoints, and resumes from that step."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
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

QUEUE = "real-preempt"
LOW, HIGH = "trainop-real-low", "trainop-real-high"
CKPT_PATH = re.compile(r"step-(\d+)-loss-([0-9.e+-]+)\.pt$")
FIRST = re.compile(r"\(first ([0-9.e+-]+)\)")
DONE = re.compile(r"done start=(\d+) loss ([0-9.e+-]+) -> ([0-9.e+-]+)")


@pytest.fixture
def preempt_queue(target: Target, namespace: str) -> Iterator[str]:
    """A queue that serves the test's namespace only, preempts by priority, and allows the
    hostPath the checkpoints go to; two PriorityClasses."""
    kube = target.kube
    for name, value in ((LOW, 100), (HIGH, 1000)):
        kube.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    preemption = {"withinQueue": "LowerPriority"}
    with tenant_queue(kube, QUEUE, namespace, 4, preemption=preemption) as queue:
        yield queue


def _status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict((kube.maybe_get("trainingjob", name, "-n", ns) or {}).get("status") or {})


def _live_pods(kube: Kube, ns: str, job: str) -> list[str]:
    pods = kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={job}")["items"]
    return [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]


def _preempt(
    target: Target,
    ns: str,
    low: dict[str, Any],
    checkpoint: bool,
    watch: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run `low` to step >= 20, submit the high-priority job, time request -> pods gone;
    `watch` is called while the pods are still there (test_6_trainers reads a log)."""
    kube = target.kube
    name = low["metadata"]["name"]
    if not checkpoint:
        low["spec"].pop("checkpoint")
    kube.apply(low)
    kube.wait_for(
        f"{name} to report step 20",
        lambda: (_status(kube, ns, name).get("progress") or {}).get("step", 0) >= 20,
        JOB_TIMEOUT,
        interval=1.0,
    )
    shown = kube.run("get", "tj", name, "-n", ns).stdout
    high = example(target, "pytorch-ddp-cpu.yaml", ns)
    high["metadata"]["name"] = f"{name}-high"
    high["spec"]["priorityClassName"] = HIGH
    asked = time.monotonic()
    kube.apply(high)

    def pods_gone() -> bool:
        if watch is not None:
            watch()
        return not _live_pods(kube, ns, name)

    kube.wait_for(f"{name}'s pods to go", pods_gone, 180, interval=0.2)
    gone = time.monotonic() - asked
    status = _status(kube, ns, name)
    print(
        f"\n{name}: from the preempting job's submission to the pods deleted {gone:.1f} s "
        f"({'with' if checkpoint else 'without'} a checkpoint)\n{shown}"
    )
    return {"status": status, "seconds": gone, "shown": shown, "high": high["metadata"]["name"]}


def test_preempted_job_checkpoints_first_and_resumes(
    target: Target, namespace: str, preempt_queue: str
) -> None:
    kube = target.kube
    low = example(target, "pytorch-preempt-cpu.yaml", namespace)
    volume = low["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]
    volume["hostPath"]["path"] = f"/var/tmp/trainop-checkpoints/{namespace}"
    total = low["spec"]["progress"]["totalSteps"]
    run = _preempt(target, namespace, low, checkpoint=True)
    # kubectl get tj showed the progress column while it ran.
    assert re.search(rf"\b\d+/{total} \(\d+%\)", run["shown"]), run["shown"]
    status = run["status"]
    request, reported = status.get("checkpointRequest") or {}, status.get("progress") or {}
    checkpoint = reported.get("lastCheckpoint") or {}
    preempted = next(c for c in status["conditions"] if c["type"] == "Preempted")
    assert "checkpointed at step" in preempted["message"], diagnose(
        kube, namespace, {"status": status}
    )
    # The checkpoint is at or after the step reported when trainop asked for it.
    assert checkpoint["step"] >= request["step"] >= 20, (request, checkpoint)
    saved = CKPT_PATH.search(checkpoint["path"])
    assert saved and int(saved.group(1)) == checkpoint["step"], checkpoint
    first_run = FIRST.search(reported.get("phase", ""))
    assert first_run, reported
    wait_finished(target, namespace, run["high"])
    wait_finished(target, namespace, "ddp-preempt")
    # The trainer's last report is written when the job's write interval ends (10 s).
    kube.wait_for(
        "the last progress report in status",
        lambda: DONE.search(
            (_status(kube, namespace, "ddp-preempt").get("progress") or {}).get("phase", "")
        ),
        30,
    )
    tj = {"status": _status(kube, namespace, "ddp-preempt")}
    done = DONE.search(tj["status"]["progress"]["phase"])
    assert done, tj["status"]["progress"]
    # Resumed from the checkpoint's step, and the loss went on from the checkpoint's, not
    # from step 0's.
    start, after, saved_loss = int(done.group(1)), float(done.group(2)), float(saved.group(2))
    assert start == checkpoint["step"] + 1, (done.group(0), checkpoint)
    assert after < 1.5 * saved_loss + 1e-3, (after, saved_loss)
    assert saved_loss < float(first_run.group(1)) / 2, (saved_loss, first_run.group(0))
    assert tj["status"]["progress"]["step"] == total - 1
    print(
        f"checkpoint test: asked at step {request['step']}, checkpoint at step "
        f"{checkpoint['step']} (loss {saved_loss:.4g}; step 0's {first_run.group(1)}), resumed "
        f"at step {start} with loss {after:.4g}; preempted: {preempted['message']}\n"
        + logs(kube, namespace, "ddp-preempt-worker-0")[-1500:]
    )


def test_preemption_without_checkpoint_is_immediate(
    target: Target, namespace: str, preempt_queue: str
) -> None:
    """The reference figure: the same preemption of a job without spec.checkpoint."""
    low = example(target, "pytorch-preempt-cpu.yaml", namespace)
    low["metadata"]["name"] = "ddp-nockpt"
    low["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0] = {
        "name": "checkpoints",
        "emptyDir": {},
    }
    run = _preempt(target, namespace, low, checkpoint=False)
    assert "checkpointRequest" not in run["status"]
    assert run["seconds"] < 60
