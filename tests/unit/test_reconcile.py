"""The TrainingJob state machine (`trainop.reconcile.reconcile`) as named-case tables.

Every case is one call of the pure function on the default fake fleet at the fixed NOW, and
states everything the call must do: pods deleted, objects created, pods ungated, the phase and
its condition's reason, the Events, the requeue and whether the job itself is deleted.
Sections after the main table cover what one row cannot: policy boundaries, invalid specs,
conditions over several calls, idempotency, and a whole lifecycle walked through a fake
cluster. The tests at the end pin bugs found and fixed while this suite was written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from tests.builders import (
    NOW,
    JobBuilder,
    PodBuilder,
    ago,
    build_all,
    fleet_node_names,
    fleet_nodes,
    fleet_snapshot,
    job,
    pod,
)
from trainop import shellrules
from trainop.api import constants as c
from trainop.inventory import Snapshot
from trainop.inventory.pods import is_gated
from trainop.planner import OperatorConfig
from trainop.reconcile import ADMIT_ALL, Actions, Admission, iso, reconcile

CONFIG = OperatorConfig()  # restart backoff 10 s doubling, capped at 300 s
W0, W1, W2 = "bert-worker-0", "bert-worker-1", "bert-worker-2"
A100_1, A100_2 = "a100-01", "a100-02"  # where the default job lands on the empty fleet
GONE = "h100-z-99"  # a node name the fleet does not have
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"  # newest confirmed release the fleet runs natively
ABSENT = object()  # in Case.status: the key must not be in status


def as_body(b: JobBuilder | Mapping[str, Any]) -> dict[str, Any]:
    return b.build() if isinstance(b, JobBuilder) else dict(b)


def as_pods(pods: Sequence[PodBuilder | Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [p.build() if isinstance(p, PodBuilder) else dict(p) for p in pods]


def run(
    body: JobBuilder | Mapping[str, Any],
    pods: Sequence[PodBuilder | Mapping[str, Any]] = (),
    *,
    admission: Admission = ADMIT_ALL,
    now_offset: float = 0.0,
    snapshot: Callable[[], Snapshot] = fleet_snapshot,
    fleet: Callable[[], Snapshot] | None = None,
) -> Actions:
    return reconcile(
        as_body(body),
        as_pods(pods),
        snapshot,
        CONFIG,
        NOW + timedelta(seconds=now_offset),
        admission,
        fleet=fleet,
    )


def cond(status: Mapping[str, Any], ctype: str) -> dict[str, Any]:
    found = [x for x in status.get("conditions") or [] if x["type"] == ctype]
    assert len(found) == 1, f"condition {ctype}: {status.get('conditions')}"
    return dict(found[0])


def true_conditions(status: Mapping[str, Any]) -> set[str]:
    return {x["type"] for x in status.get("conditions") or [] if x["status"] == "True"}


# --- job states the table starts from -------------------------------------------------------

ADMITTED_MSG = f"2 pods placed in rack block-b/rack-a100 on {A100_1}, {A100_2}; image {IMAGE}"


def admitted(b: JobBuilder | None = None) -> JobBuilder:
    """Gang created at ago(60); the status reconcile leaves after planning it."""
    b = b or job()
    return b.with_status(startTime=ago(60), image=IMAGE).phase(
        "Admitted", "GangPlaced", ADMITTED_MSG, since=60
    )


def running(b: JobBuilder | None = None, pods: int = 2) -> JobBuilder:
    return admitted(b).phase("Running", "AllPodsRunning", f"{pods} pods running", since=30)


def restarting(restarts: int, last_restart: float, b: JobBuilder | None = None) -> JobBuilder:
    return (
        admitted(b)
        .with_status(restartCount=restarts, lastRestartTime=ago(last_restart))
        .phase("Restarting", "GangRestart", "restarting the whole gang", since=last_restart)
    )


def finished(phase: str, done: float, b: JobBuilder | None = None) -> JobBuilder:
    reason = "JobSucceeded" if phase == "Succeeded" else "PodFailed"
    return running(b).with_status(completionTime=ago(done)).phase(phase, reason, "done")


def tf_job() -> JobBuilder:
    return (
        job("tf", "tensorflow", "2.15", workers=None)
        .role("Chief", 1, 8)
        .role("Worker", 2, 8)
        .role("PS", 1, 0)
    )


def tf_pods(chief: str, workers: str, ps: str) -> list[PodBuilder]:
    def state(p: PodBuilder, what: str) -> PodBuilder:
        return getattr(p, what)()

    return [
        state(pod("tf-chief-0").rank(0), chief),
        state(pod("tf-ps-0").rank(None), ps),
        state(pod("tf-worker-0").rank(1), workers),
        state(pod("tf-worker-1").rank(2), workers),
    ]


def mpi_job() -> JobBuilder:
    return job("hv", "mpi", None, workers=None).role("Launcher", 1, 0).role("Worker", 2, 8)


def mpi_pods(launcher: str, workers: str) -> list[PodBuilder]:
    pods = [pod("hv-launcher-0").rank(None), pod("hv-worker-0"), pod("hv-worker-1")]
    return [getattr(pods[0], launcher)(), *(getattr(p, workers)() for p in pods[1:])]


# --- the main table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    job: JobBuilder
    pods: tuple[PodBuilder, ...] = ()
    admission: Admission = ADMIT_ALL
    phase: str | None = None  # expected status.phase
    reason: str | None = None  # reason of that phase's condition (when given)
    message: str | None = None  # substring of that condition's message (when given)
    create: tuple[str, ...] = ()  # names of the created objects, in order
    delete: tuple[str, ...] = ()
    ungate: tuple[str, ...] = ()
    events: tuple[tuple[str, str], ...] = ()  # (type, reason)
    requeue: float | None = None
    delete_job: bool = False
    status: Mapping[str, Any] = field(default_factory=dict)  # key -> value (or ABSENT)


CASES = [
    # Queued -> Admitted: one Service and the gang, gated.
    # Events only for news: admitted at its first decision, the phase says it (no Event).
    Case(
        "new-job-admitted",
        job(),
        phase="Admitted",
        reason="GangPlaced",
        message=ADMITTED_MSG,
        create=("bert", W0, W1),
        requeue=1.0,
        status={"startTime": ago(0), "image": IMAGE, "gpus": 16, "pendingReason": ABSENT},
    ),
    Case(
        "job-that-waited-admitted-posts-gang-placed",
        job().phase("Queued", "NoFit", "no rack has 16 free GPUs"),
        phase="Admitted",
        reason="GangPlaced",
        message=ADMITTED_MSG,
        create=("bert", W0, W1),
        events=(("Normal", "GangPlaced"),),
        requeue=1.0,
        status={"pendingReason": ABSENT},
    ),
    Case(
        "gated-complete-gang-ungated-together",
        admitted(),
        (pod(W0).on(A100_1).gated(), pod(W1).on(A100_2).gated()),
        phase="Admitted",
        ungate=(W0, W1),
        requeue=1.0,
    ),
    Case(
        "partly-ungated-gang-finishes-release",
        admitted(),
        (pod(W0).on(A100_1).pending(), pod(W1).on(A100_2).gated()),
        phase="Admitted",
        ungate=(W1,),
        requeue=1.0,
    ),
    Case(
        "half-created-gang-deleted-and-replanned",
        admitted(),
        (pod(W0).on(A100_1).gated(),),
        phase="Queued",
        reason="Replanning",
        delete=(W0,),
        events=(("Normal", "Replanning"),),
        requeue=1.0,
    ),
    # A pinned gang is created without the gate (planner.needs_gate): one that lacks pods
    # while its status still says Admitted (written before the creates) was never whole.
    Case(
        "ungated-half-created-gang-deleted-and-replanned",
        admitted(),
        (pod(W0).on(A100_1).running(),),
        phase="Queued",
        reason="Replanning",
        message="incomplete before it ran",
        delete=(W0,),
        events=(("Normal", "Replanning"),),
        requeue=1.0,
    ),
    Case(
        "half-created-gang-pod-failed-waiting-for-peers-not-counted",
        admitted().with_status(restartCount=1),
        (pod(W0).on(A100_1).failed(75),),
        phase="Queued",
        reason="Replanning",
        delete=(W0,),
        events=(("Normal", "Replanning"),),
        requeue=1.0,
        status={"restartCount": 1, "lastFailure": ABSENT},
    ),
    Case(
        "whole-ungated-gang-starting-waits",
        admitted(),
        (pod(W0).on(A100_1).running(), pod(W1).on(A100_2).pending()),
        phase="Admitted",
        requeue=2.0,
    ),
    Case(
        "gated-gang-on-lost-node-replanned",
        admitted(),
        (pod(W0).on(A100_1).gated(), pod(W1).on(GONE).gated()),
        phase="Queued",
        reason="NodeLost",
        message=GONE,
        delete=(W0, W1),
        events=(("Normal", "NodeLost"),),
        requeue=1.0,
    ),
    Case(
        "released-gang-still-pending",
        admitted(),
        (pod(W0).on(A100_1).pending(), pod(W1).on(A100_2).pending()),
        phase="Admitted",
        requeue=2.0,
    ),
    Case(
        "all-running",
        admitted(),
        (pod(W0).running(), pod(W1).running()),
        phase="Running",
        reason="AllPodsRunning",
        message="2 pods running",
        events=(),  # the phase and condition say it; the admission had its Event
        requeue=None,
        status={
            "replicaStatuses": {"Worker": {"pending": 0, "running": 2, "succeeded": 0, "failed": 0}}
        },
    ),
    Case(
        "running-steady-state-no-event",
        running(),
        (pod(W0).running(), pod(W1).running()),
        phase="Running",
        requeue=None,
    ),
    Case(
        "pending-pod-on-lost-node-restarts-uncounted",
        running().with_status(restartCount=1),
        (pod(W0).on(A100_1).running(), pod(W1).on(GONE).pending()),
        phase="Restarting",
        reason="NodeLost",
        delete=(W0, W1),
        events=(("Normal", "NodeLost"),),
        requeue=1.0,
        status={"restartCount": 1},
    ),
    # Success policies.
    Case(
        "all-workers-succeeded",
        running(),
        (pod(W0).succeeded(), pod(W1).succeeded()),
        phase="Succeeded",
        reason="JobSucceeded",
        message="Worker pods completed (successPolicy AllWorkers)",
        events=(("Normal", "JobSucceeded"),),
        status={"completionTime": ago(0)},
    ),
    Case(
        "all-workers-one-still-running",
        running(),
        (pod(W0).succeeded(), pod(W1).running()),
        phase="Running",
        requeue=None,
    ),
    Case(
        "rank-zero-succeeded-stops-peers",
        running(job().run_policy(successPolicy="RankZero")),
        (pod(W0).succeeded(), pod(W1).running()),
        phase="Succeeded",
        reason="JobSucceeded",
        message="successPolicy RankZero",
        delete=(W1,),
        events=(("Normal", "JobSucceeded"),),
    ),
    Case(
        "rank-zero-wins-over-peer-exit",
        running(job().run_policy(successPolicy="RankZero")),
        (pod(W0).succeeded(), pod(W1).failed(1)),
        phase="Succeeded",
        reason="JobSucceeded",
        events=(("Normal", "JobSucceeded"),),
    ),
    Case(
        "rank-zero-other-rank-done-is-not-success",
        running(job().run_policy(successPolicy="RankZero")),
        (pod(W0).running(), pod(W1).succeeded()),
        phase="Running",
        requeue=None,
    ),
    Case(
        "tf-chief-succeeded",
        running(tf_job(), pods=4),
        tuple(tf_pods(chief="succeeded", workers="running", ps="running")),
        phase="Succeeded",
        reason="JobSucceeded",
        message="Chief pods completed",
        delete=("tf-ps-0", "tf-worker-0", "tf-worker-1"),
        events=(("Normal", "JobSucceeded"),),
    ),
    Case(
        "tf-workers-done-chief-running",
        running(tf_job(), pods=4),
        tuple(tf_pods(chief="running", workers="succeeded", ps="running")),
        phase="Running",
        requeue=None,
    ),
    Case(
        "mpi-launcher-succeeded",
        running(mpi_job(), pods=3),
        tuple(mpi_pods(launcher="succeeded", workers="running")),
        phase="Succeeded",
        message="Launcher pods completed",
        delete=("hv-worker-0", "hv-worker-1"),
        events=(("Normal", "JobSucceeded"),),
    ),
    Case(
        "mpi-workers-exited-launcher-running",
        running(mpi_job(), pods=3),
        tuple(mpi_pods(launcher="running", workers="succeeded")),
        phase="Running",
        requeue=None,
    ),
    # Failures and restarts.
    Case(
        "on-failure-restarts-whole-gang",
        running(),
        (pod(W0).running(), pod(W1).failed(1)),
        phase="Restarting",
        reason="GangRestart",
        message=f"pod {W1} failed with exit code 1; restarting the whole gang (restart 1 of 3)",
        delete=(W0, W1),
        events=(("Warning", "GangRestart"),),
        requeue=1.0,
        status={"restartCount": 1, "lastRestartTime": ago(0)},
    ),
    Case(
        "old-gang-still-terminating",
        restarting(1, 30),
        (pod(W0).failed(1).deleting(), pod(W1).running().deleting()),
        phase="Restarting",
        requeue=1.0,
    ),
    Case(
        "backoff-first-restart-waits-10s",
        restarting(1, 4),
        phase="Restarting",
        requeue=6.0,
    ),
    Case(
        "backoff-doubles-per-restart",
        restarting(3, 15),
        phase="Restarting",
        requeue=25.0,  # 10 * 2^2 - 15
    ),
    Case(
        "backoff-capped",
        restarting(9, 0, job().run_policy(backoffLimit=20)),
        phase="Restarting",
        requeue=300.0,
    ),
    Case(
        "backoff-elapsed-next-gang",
        restarting(1, 10),
        phase="Admitted",
        reason="GangPlaced",
        create=("bert", W0, W1),
        events=(("Normal", "GangPlaced"),),
        requeue=1.0,
        status={"restartCount": 1, "startTime": ago(60)},
    ),
    Case(
        "backoff-limit-exceeded",
        running().with_status(restartCount=3),
        (pod(W0).failed(1), pod(W1).running()),
        phase="Failed",
        reason="BackoffLimitExceeded",
        message="the gang restarted 3 times (backoffLimit 3)",
        delete=(W0, W1),
        events=(("Warning", "BackoffLimitExceeded"),),
        status={"restartCount": 3, "completionTime": ago(0)},
    ),
    Case(
        "backoff-limit-zero-fails-first-failure",
        running(job().run_policy(backoffLimit=0)),
        (pod(W0).failed(1), pod(W1).running()),
        phase="Failed",
        reason="BackoffLimitExceeded",
        delete=(W0, W1),
        events=(("Warning", "BackoffLimitExceeded"),),
    ),
    Case(
        "exit-code-137-retryable",
        running(job().run_policy(restartPolicy="ExitCode")),
        (pod(W0).running(), pod(W1).failed(137)),
        phase="Restarting",
        reason="GangRestart",
        delete=(W0, W1),
        events=(("Warning", "GangRestart"),),
        requeue=1.0,
        status={"restartCount": 1},
    ),
    Case(
        "exit-code-2-permanent",
        running(job().run_policy(restartPolicy="ExitCode")),
        (pod(W0).running(), pod(W1).failed(2)),
        phase="Failed",
        reason="PodFailed",
        message="exit codes 1-127 are permanent under restartPolicy ExitCode",
        delete=(W0, W1),
        events=(("Warning", "PodFailed"),),
        status={"restartCount": ABSENT},
    ),
    Case(
        "never-fails-on-first-failure",
        running(job().run_policy(restartPolicy="Never")),
        (pod(W0).running(), pod(W1).failed(137)),
        phase="Failed",
        reason="PodFailed",
        message="restartPolicy is Never",
        delete=(W0, W1),
        events=(("Warning", "PodFailed"),),
    ),
    Case(
        "deadline-exceeded",
        running(job().run_policy(activeDeadlineSeconds=600)).with_status(startTime=ago(600)),
        (pod(W0).running(), pod(W1).running()),
        phase="Failed",
        reason="DeadlineExceeded",
        message="activeDeadlineSeconds (600 s)",
        delete=(W0, W1),
        events=(("Warning", "DeadlineExceeded"),),
        status={"completionTime": ago(0)},
    ),
    # Suspend and resume.
    Case(
        "suspend-deletes-pods",
        running(job().suspend()),
        (pod(W0).running(), pod(W1).running()),
        phase="Suspended",
        reason="Suspended",
        delete=(W0, W1),
        events=(("Normal", "Suspended"),),
    ),
    Case(
        "suspended-steady-state",
        job()
        .suspend()
        .phase("Suspended", "Suspended", "spec.runPolicy.suspend is true; pods deleted"),
        phase="Suspended",
    ),
    Case(
        "resume-replans",
        job()
        .suspend(False)
        .phase("Suspended", "Suspended", "spec.runPolicy.suspend is true; pods deleted"),
        phase="Admitted",
        reason="GangPlaced",
        create=("bert", W0, W1),
        events=(("Normal", "GangPlaced"),),
        requeue=1.0,
    ),
    # Finished jobs.
    Case(
        "ttl-expired-deletes-job",
        finished("Succeeded", 60, job().run_policy(ttlSecondsAfterFinished=60)),
        phase="Succeeded",
        delete_job=True,
    ),
    Case(
        "ttl-zero-deletes-job-at-once",
        finished("Failed", 0, job().run_policy(ttlSecondsAfterFinished=0)),
        phase="Failed",
        delete_job=True,
    ),
    Case(
        "ttl-not-yet-requeues",
        finished("Succeeded", 20, job().run_policy(ttlSecondsAfterFinished=60)),
        phase="Succeeded",
        requeue=40.0,
    ),
    Case(
        "finished-without-ttl-idles",
        finished("Failed", 20),
        (pod(W0).failed(1), pod(W1).succeeded()),
        phase="Failed",
    ),
    Case(
        "terminal-job-frees-still-running-pods",
        finished("Succeeded", 5, tf_job()),
        tuple(tf_pods(chief="succeeded", workers="succeeded", ps="running")),
        phase="Succeeded",
        delete=("tf-ps-0",),
    ),
    # Bad input.
    Case(
        "invalid-no-gpus-creates-nothing",
        job(gpus=0),
        phase="Invalid",
        reason="InvalidSpec",
        message="spec.replicaSpecs.Worker.gpus: no role asks for GPUs",
        events=(("Warning", "InvalidSpec"),),
    ),
    Case(
        "invalid-spec-deletes-existing-gang",
        running(job().role("PS", 1, 0)),
        (pod(W0).running(), pod(W1).running()),
        phase="Invalid",
        reason="InvalidSpec",
        message="'PS' is not a role of pytorch",
        delete=(W0, W1),
        events=(("Warning", "InvalidSpec"),),
    ),
    Case(
        "invalid-unknown-framework-version",
        job(version="9.9"),
        phase="Invalid",
        reason="UnknownImage",
        message="spec.framework.version: pytorch 9.9 is in no NGC release",
        events=(("Warning", "UnknownImage"),),
    ),
    # Waiting.
    Case(
        "unplaceable-queued-nofit",
        job(workers=40).placement("rack", "Required"),
        phase="Queued",
        reason="NoFit",
        message="needs 40 x 8 GPUs",
        events=(("Normal", "NoFit"),),
        requeue=5.0,
        status={"pendingReason": "NoFit", "startTime": ABSENT},
    ),
    Case(
        "incompatible-image-queued-with-warning",
        job().placement("rack", "Required", ["Tesla-V100-SXM2-32GB"]),
        phase="Queued",
        reason="Incompatible",
        message="no node can run nvcr.io/nvidia/pytorch:",
        events=(("Warning", "Incompatible"),),
        requeue=5.0,
        status={"pendingReason": "Incompatible"},
    ),
    Case(
        "not-admitted-by-queue",
        job(),
        admission=Admission(False, "QuotaExceeded", "queue nlp: 16 GPUs over its quota", 3),
        phase="Queued",
        reason="QuotaExceeded",
        message="queue nlp: 16 GPUs over its quota",
        events=(("Normal", "QuotaExceeded"),),
        requeue=5.0,
        status={
            "pendingReason": "QuotaExceeded",
            "pendingMessage": "queue nlp: 16 GPUs over its quota",
            "queuePosition": 3,
            "startTime": ABSENT,
        },
    ),
    Case(
        "queue-verdict-without-reason-is-pending",
        job(),
        admission=Admission(False),
        phase="Queued",
        reason="Pending",
        events=(("Normal", "Pending"),),
        requeue=5.0,
        status={"queuePosition": ABSENT},
    ),
    # Pods changed behind the operator's back.
    Case(
        "pod-deleted-by-hand-restarts-uncounted",
        running().with_status(restartCount=1),
        (pod(W0).running(),),
        phase="Restarting",
        reason="PodMissing",
        message=f"pod(s) {W1} disappeared",
        delete=(W0,),
        events=(("Warning", "PodMissing"),),
        requeue=1.0,
        status={"restartCount": 1},
    ),
    Case(
        "pod-being-deleted-by-hand-counts-as-missing",
        running(),
        (pod(W0).running(), pod(W1).running().deleting()),
        phase="Restarting",
        reason="PodMissing",
        delete=(W0,),
        events=(("Warning", "PodMissing"),),
        requeue=1.0,
        status={"restartCount": ABSENT},
    ),
    Case(
        "replicas-lowered-stray-pod-deleted",
        running(),
        (pod(W0).running(), pod(W1).running(), pod(W2).running()),
        phase="Running",
        delete=(W2,),
        events=(),  # "3 pods running" replaces "2 pods running" in the condition; no Event
        requeue=None,
    ),
    Case(
        "replicas-raised-restarts-gang-uncounted",
        running(job(workers=3)),
        (pod(W0).running(), pod(W1).running()),
        phase="Restarting",
        reason="PodMissing",
        delete=(W0, W1),
        events=(("Warning", "PodMissing"),),
        requeue=1.0,
    ),
    # Fail loud (issue 12): checks before anything is created.
    Case(
        "name-too-long-for-pod-hostnames-is-invalid",
        job("b" * 55),
        phase="Invalid",
        reason="InvalidName",
        message="shorten metadata.name to at most 54 characters",
        events=(("Warning", "InvalidName"),),
    ),
    Case(
        "name-with-a-dot-cannot-name-the-service",
        job("bert.v2"),
        phase="Invalid",
        reason="InvalidName",
        message="metadata.name: 'bert.v2' cannot name the job's headless Service",
        events=(("Warning", "InvalidName"),),
    ),
    Case(
        "template-label-value-too-long-is-invalid",
        job().role("Worker", 2, 8, {"metadata": {"labels": {"team": "x" * 64}}}),
        phase="Invalid",
        reason="InvalidName",
        message="spec.replicaSpecs.Worker.template.metadata.labels.team: label value",
        events=(("Warning", "InvalidName"),),
    ),
    Case(
        "running-gang-renamed-invalid-is-torn-down",
        running(job().role("Worker", 2, 8, {"metadata": {"labels": {"bad key": "v"}}})),
        (pod(W0).running(), pod(W1).running()),
        phase="Invalid",
        reason="InvalidName",
        delete=(W0, W1),
        events=(("Warning", "InvalidName"),),
    ),
    # A broken queue: the job waits on it, loudly, and names it.
    Case(
        "broken-queue-job-waits-naming-the-queue",
        job(),
        admission=Admission(
            False, "QueueInvalid", "queue nlp is invalid: spec.quotas[1].products: ...", queue="nlp"
        ),
        phase="Queued",
        reason="QueueInvalid",
        message="queue nlp is invalid",
        events=(("Warning", "QueueInvalid"),),
        requeue=5.0,
        status={"pendingReason": "QueueInvalid", "queue": "nlp"},
    ),
    Case(
        "admitting-queue-written-to-status",
        job(),
        admission=Admission(True, queue="team-a-default"),
        phase="Admitted",
        reason="GangPlaced",
        create=("bert", W0, W1),
        requeue=1.0,
        status={"queue": "team-a-default"},
    ),
    Case(
        "no-queue-verdict-leaves-status-queue-alone",
        job().with_status(queue="nlp"),
        phase="Admitted",
        create=("bert", W0, W1),
        requeue=1.0,
        status={"queue": "nlp"},
    ),
    # Failure classification.
    Case(
        "oom-killed-restarts-and-says-so",
        running(job().run_policy(restartPolicy="ExitCode")),
        (pod(W0).running(), pod(W1).oom_killed()),
        phase="Restarting",
        reason="GangRestart",
        message=f"pod {W1} was OOM-killed",
        delete=(W0, W1),
        events=(("Warning", "GangRestart"),),
        requeue=1.0,
        status={
            "restartCount": 1,
            "lastFailure": {
                "reason": "OOMKilled",
                "pod": W1,
                "retryable": True,
                "exitCode": 137,
                "message": f"pod {W1} was OOM-killed: raise the container's memory limit in its "
                "template",
            },
        },
    ),
    Case(
        "nccl-error-exit-1-retryable-under-exit-code",
        running(job().run_policy(restartPolicy="ExitCode")),
        (
            pod(W0).terminated(
                1, message="RuntimeError: NCCL error in: ...: unhandled system error"
            ),
            pod(W1).running(),
        ),
        phase="Restarting",
        reason="GangRestart",
        message="NCCL error",
        delete=(W0, W1),
        events=(("Warning", "GangRestart"),),
        requeue=1.0,
        status={"restartCount": 1},
    ),
    Case(
        "xid-is-the-root-cause-over-a-peer-exit-code",
        running(job().run_policy(restartPolicy="ExitCode")),
        (
            pod(W0).terminated(1),
            pod(W1).terminated(
                134, message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus"
            ),
        ),
        phase="Restarting",
        reason="GangRestart",
        message="GPU Xid 79 (GPU has fallen off the bus)",
        delete=(W0, W1),
        events=(("Warning", "GangRestart"),),
        requeue=1.0,
    ),
    Case(
        "evicted-restarts-uncounted",
        running().with_status(restartCount=2),
        (pod(W0).running(), pod(W1).evicted()),
        phase="Restarting",
        reason="Evicted",
        message="not counted against backoffLimit",
        delete=(W0, W1),
        events=(("Warning", "Evicted"),),
        requeue=1.0,
        status={"restartCount": 2},
    ),
    Case(
        "node-lost-restarts-uncounted-even-at-the-backoff-limit",
        running(job().run_policy(backoffLimit=0)),
        (pod(W0).node_lost(), pod(W1).running()),
        phase="Restarting",
        reason="NodeLost",
        delete=(W0, W1),
        events=(("Warning", "NodeLost"),),
        requeue=1.0,
        status={"restartCount": ABSENT},
    ),
    Case(
        "node-lost-under-never-fails",
        running(job().run_policy(restartPolicy="Never")),
        (pod(W0).node_lost(), pod(W1).running()),
        phase="Failed",
        reason="PodFailed",
        message="lost its node",
        delete=(W0, W1),
        events=(("Warning", "PodFailed"),),
    ),
    Case(
        "image-pull-back-off-within-grace-waits",
        admitted(),
        (pod(W0).on(A100_1).image_pull(), pod(W1).on(A100_2).pending()),
        phase="Admitted",
        requeue=2.0,
    ),
    Case(
        "image-pull-back-off-past-grace-fails-naming-the-image",
        admitted().with_status(startTime=ago(121)),
        (pod(W0).on(A100_1).image_pull(), pod(W1).on(A100_2).pending()),
        phase="Failed",
        reason="ImagePullFailed",
        message=f"pod {W0} cannot pull image nvcr.io/x:1",
        delete=(W0, W1),
        events=(("Warning", "ImagePullFailed"),),
        status={
            "lastFailure": {
                "reason": "ImagePullFailed",
                "pod": W0,
                "retryable": False,
                "message": f"pod {W0} cannot pull image nvcr.io/x:1 (ImagePullBackOff: Back-off "
                'pulling image "nvcr.io/x:1"): fix spec.image (or the template\'s image), or the '
                "registry credentials (imagePullSecrets)",
            }
        },
    ),
    Case(
        "invalid-image-name-fails-at-once",
        admitted(),
        (pod(W0).on(A100_1).image_pull("InvalidImageName", "nvcr.io/X Y"), pod(W1).running()),
        phase="Failed",
        reason="ImagePullFailed",
        message="nvcr.io/X Y",
        delete=(W0, W1),
        events=(("Warning", "ImagePullFailed"),),
    ),
]


@pytest.mark.parametrize("case", [pytest.param(x, id=x.id) for x in CASES])
def test_lifecycle(case: Case) -> None:
    acts = run(case.job, case.pods, admission=case.admission)

    assert acts.delete_pods == list(case.delete)
    assert [o["metadata"]["name"] for o in acts.create] == list(case.create)
    assert acts.ungate == list(case.ungate)
    assert [(t, r) for t, r, _ in acts.events] == list(case.events)
    assert acts.delete_job is case.delete_job
    if case.requeue is None:
        assert acts.requeue_after is None
    else:
        assert acts.requeue_after == pytest.approx(case.requeue)

    status = acts.status
    assert status.get("phase") == case.phase
    if case.phase and (case.reason or case.message):
        phase_cond = cond(status, case.phase)
        assert phase_cond["status"] == "True"
        if case.reason:
            assert phase_cond["reason"] == case.reason
        if case.message:
            assert case.message in phase_cond["message"]
    for key, want in case.status.items():
        if want is ABSENT:
            assert key not in status, f"status.{key} = {status[key]!r}"
        else:
            assert status.get(key) == want, f"status.{key}"
    # An Event mirrors the condition of the phase entered: same reason, same message.
    for _, reason, message in acts.events:
        phase_cond = cond(status, status["phase"])
        assert (reason, message) == (phase_cond["reason"], phase_cond["message"])


def test_table_ids_are_unique() -> None:
    ids = [x.id for x in CASES]
    assert len(ids) == len(set(ids))


# --- invariants over every row -----------------------------------------------------------------

EXCLUSIVE = ("Queued", "Admitted", "Running", "Restarting", "Suspended")


@pytest.mark.parametrize(
    "case",
    [pytest.param(x, id=x.id) for x in CASES if x.phase not in ("Invalid", None)],
)
def test_one_exclusive_phase_condition_is_true(case: Case) -> None:
    """The phase's condition is True and no other lifecycle phase's is (Created aside)."""
    status = run(case.job, case.pods, admission=case.admission).status
    true = true_conditions(status) - {"Created"}
    assert true == {status["phase"]}


@pytest.mark.parametrize("case", [pytest.param(x, id=x.id) for x in CASES])
def test_observed_generation_follows_metadata(case: Case) -> None:
    body = case.job.build()
    body["metadata"]["generation"] = 7
    body.setdefault("status", {})["observedGeneration"] = 3
    acts = run(body, case.pods, admission=case.admission)
    assert acts.status["observedGeneration"] == 7
    if acts.events:  # the conditions this call set carry the generation they saw
        assert cond(acts.status, acts.status["phase"])["observedGeneration"] == 7


@pytest.mark.parametrize("case", [pytest.param(x, id=x.id) for x in CASES])
def test_reconcile_does_not_mutate_its_inputs(case: Case) -> None:
    body, pods = case.job.build(), build_all(case.pods)
    before = (repr(body), repr(pods))
    reconcile(body, pods, fleet_snapshot, CONFIG, NOW, case.admission)
    assert (repr(body), repr(pods)) == before


# --- the gang a new job gets -------------------------------------------------------------------


def test_a_created_gang_is_released_once_every_create_succeeded() -> None:
    """The shell releases the gang it just created without waiting for the watch; another
    controller's gate from the template stays on."""
    doc = job().build()
    worker = doc["spec"]["replicaSpecs"]["Worker"]
    worker["template"] = {"spec": {"schedulingGates": [{"name": "example.com/other"}]}}
    acts = run(doc)
    names = [p["metadata"]["name"] for p in acts.create if p["kind"] == "Pod"]
    assert acts.release_created and names == [W0, W1]
    assert acts.keep_gates == {n: [{"name": "example.com/other"}] for n in names}
    assert not run(running(), (pod(W0).running(), pod(W1).running())).release_created


def test_new_job_gets_a_pinned_ungated_gang_and_a_headless_service() -> None:
    acts = run(job())
    service, *pods = acts.create
    assert service["kind"] == "Service"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {c.LABEL_JOB_NAME: "bert"}
    assert [p["kind"] for p in pods] == ["Pod", "Pod"]
    for p, node in zip(pods, (A100_1, A100_2), strict=True):
        assert "schedulingGates" not in p["spec"]  # pinned: no gate (planner.needs_gate)
        assert p["metadata"]["ownerReferences"][0]["uid"] == "uid-bert"
        assert p["metadata"]["annotations"][c.ANNOTATION_RESTART_COUNT] == "0"
        terms = p["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        for term in terms:
            assert {"key": c.LABEL_HOSTNAME, "operator": "In", "values": [node]} in term[
                "matchExpressions"
            ]
    assert acts.needs_ssh_secret is None

    st = acts.status
    assert st["placement"] == {
        "level": "rack",
        "domain": "block-b/rack-a100",
        "nodes": [A100_1, A100_2],
        "span": {"node": 2, "clique": 0, "rack": 1, "block": 1},
        "score": 1.0,
        "estimatedAllreduceSeconds": 0.010066,  # 2 x 8 A100: ring at 8 x 25 GB/s of NICs
        "allreduceBottleneck": "rack",
    }
    assert st["image"] == IMAGE
    assert st["startTime"] == iso(NOW)
    assert st["replicaStatuses"] == {
        "Worker": {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    }
    assert cond(st, "Created") | {"lastTransitionTime": None} == {
        "type": "Created",
        "status": "True",
        "reason": "PodsCreated",
        "message": "",
        "lastTransitionTime": None,
        "observedGeneration": 1,
    }
    assert cond(st, "Invalid")["status"] == "False"
    assert cond(st, "Invalid")["reason"] == "Valid"


def test_mpi_job_asks_the_shell_for_its_ssh_secret() -> None:
    acts = run(mpi_job())
    assert (acts.needs_ssh_secret or "").startswith("hv-ssh-")
    assert [o["kind"] for o in acts.create] == ["Service", "ConfigMap", "Pod", "Pod", "Pod"]


def test_next_gang_carries_its_generation_and_keeps_start_time() -> None:
    acts = run(restarting(2, 60).with_status(startTime=ago(900)))
    pods = [o for o in acts.create if o["kind"] == "Pod"]
    assert {p["metadata"]["annotations"][c.ANNOTATION_RESTART_COUNT] for p in pods} == {"2"}
    assert acts.status["startTime"] == ago(900)  # the deadline runs across restarts
    assert acts.status["restartCount"] == 2


def test_admission_clears_pending_fields() -> None:
    body = job().with_status(pendingReason="NoFit", pendingMessage="full", queuePosition=4)
    st = run(body.phase("Queued", "NoFit", "full")).status
    assert st["phase"] == "Admitted"
    assert not {"pendingReason", "pendingMessage", "queuePosition"} & set(st)


def test_finishing_clears_pending_fields() -> None:
    body = running().with_status(pendingReason="NoFit", pendingMessage="x", queuePosition=1)
    st = run(body, [pod(W0).succeeded(), pod(W1).succeeded()]).status
    assert st["phase"] == "Succeeded"
    assert not {"pendingReason", "pendingMessage", "queuePosition"} & set(st)


def test_completion_time_is_not_moved_by_later_calls() -> None:
    body = finished("Failed", 300, job().run_policy(ttlSecondsAfterFinished=3600))
    st = run(body).status
    assert st["completionTime"] == ago(300)


# --- policy boundaries -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "code", "phase", "reason"),
    [
        pytest.param("ExitCode", 1, "Failed", "PodFailed", id="exitcode-1-permanent"),
        pytest.param("ExitCode", 2, "Failed", "PodFailed", id="exitcode-2-permanent"),
        pytest.param("ExitCode", 127, "Failed", "PodFailed", id="exitcode-127-permanent"),
        pytest.param("ExitCode", 128, "Restarting", "GangRestart", id="exitcode-128-retryable"),
        pytest.param("ExitCode", 137, "Restarting", "GangRestart", id="exitcode-137-retryable"),
        pytest.param("ExitCode", 255, "Restarting", "GangRestart", id="exitcode-255-retryable"),
        pytest.param("ExitCode", None, "Failed", "PodFailed", id="exitcode-unknown-permanent"),
        pytest.param("OnFailure", 1, "Restarting", "GangRestart", id="onfailure-1"),
        pytest.param("OnFailure", 137, "Restarting", "GangRestart", id="onfailure-137"),
        pytest.param("OnFailure", None, "Restarting", "GangRestart", id="onfailure-unknown"),
        pytest.param("Never", 137, "Failed", "PodFailed", id="never-137"),
        pytest.param("Never", 1, "Failed", "PodFailed", id="never-1"),
    ],
)
def test_restart_policy(policy: str, code: int | None, phase: str, reason: str) -> None:
    body = running(job().run_policy(restartPolicy=policy))
    acts = run(body, [pod(W0).failed(code), pod(W1).running()])
    assert (acts.status["phase"], cond(acts.status, phase)["reason"]) == (phase, reason)
    assert acts.delete_pods == [W0, W1]
    assert acts.events[0][0] == "Warning"
    assert acts.status.get("restartCount", 0) == (1 if phase == "Restarting" else 0)
    if code is not None:
        assert f"with exit code {code}" in acts.events[0][2]


def test_the_nonzero_exit_code_of_a_failed_pod_is_the_one_judged() -> None:
    """A sidecar exiting 0 does not hide the trainer's 2 (permanent under ExitCode)."""
    failed = pod(W0).failed(137).build()
    failed["status"]["containerStatuses"] = [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0}}},
        {"name": "trainer", "state": {"terminated": {"exitCode": 2}}},
    ]
    acts = run(running(job().run_policy(restartPolicy="ExitCode")), [failed, pod(W1).running()])
    assert acts.status["phase"] == "Failed"
    assert "with exit code 2" in acts.events[0][2]


@pytest.mark.parametrize(
    ("restarts", "limit", "phase"),
    [
        pytest.param(0, 3, "Restarting", id="first-of-3"),
        pytest.param(2, 3, "Restarting", id="third-of-3"),
        pytest.param(3, 3, "Failed", id="fourth-fails"),
        pytest.param(0, 0, "Failed", id="limit-0"),
    ],
)
def test_backoff_limit_counts_restarts(restarts: int, limit: int, phase: str) -> None:
    body = running(job().run_policy(backoffLimit=limit)).with_status(restartCount=restarts)
    acts = run(body, [pod(W0).failed(1), pod(W1).running()])
    assert acts.status["phase"] == phase
    assert acts.status["restartCount"] == (restarts + 1 if phase == "Restarting" else restarts)


@pytest.mark.parametrize(
    ("restarts", "since", "wait"),
    [
        pytest.param(1, 0, 10.0, id="1st-10s"),
        pytest.param(2, 0, 20.0, id="2nd-20s"),
        pytest.param(3, 1, 39.0, id="3rd-40s-minus-elapsed"),
        pytest.param(6, 0, 300.0, id="6th-capped"),
        pytest.param(1, 9, 1.0, id="almost-due"),
    ],
)
def test_backoff_wait(restarts: int, since: float, wait: float) -> None:
    acts = run(restarting(restarts, since, job().run_policy(backoffLimit=10)))
    assert acts.create == [] and acts.events == []
    assert acts.requeue_after == pytest.approx(wait)


def test_backoff_follows_operator_config() -> None:
    config = OperatorConfig(restart_backoff_seconds=1.0, restart_backoff_max_seconds=3.0)
    body = restarting(5, 0, job().run_policy(backoffLimit=10)).build()
    acts = reconcile(body, [], fleet_snapshot, config, NOW)
    assert acts.requeue_after == pytest.approx(3.0)


def test_deadline_not_reached_requeues_by_the_deadline() -> None:
    body = running(job().run_policy(activeDeadlineSeconds=600)).with_status(startTime=ago(598))
    acts = run(body, [pod(W0).running(), pod(W1).running()])
    assert acts.status["phase"] == "Running"
    assert acts.requeue_after == pytest.approx(2.0)


def test_deadline_fails_a_job_waiting_between_gangs() -> None:
    body = restarting(1, 5, job().run_policy(activeDeadlineSeconds=60)).with_status(
        startTime=ago(61)
    )
    acts = run(body)
    assert acts.status["phase"] == "Failed"
    assert cond(acts.status, "Failed")["reason"] == "DeadlineExceeded"
    assert acts.create == []


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec_edit", "reason", "message_start"),
    [
        pytest.param(
            lambda b: b.role("Worker", 2, 0),
            "InvalidSpec",
            "spec.replicaSpecs.Worker.gpus: no role asks for GPUs: set gpus >= 1",
            id="no-gpus",
        ),
        pytest.param(
            lambda b: b.role("PS", 1, 0),
            "InvalidSpec",
            "spec.replicaSpecs: ",
            id="role-of-another-framework",
        ),
        pytest.param(
            lambda b: b.role("Worker", 0, 8),
            "InvalidSpec",
            "spec.replicaSpecs.Worker.replicas",
            id="schema-replicas-0",
        ),
        pytest.param(
            lambda b: b.set("replicaSpecs", {"Chief": {"replicas": 1, "gpus": 8}}),
            "InvalidSpec",
            "spec.replicaSpecs",
            id="schema-no-worker",
        ),
        pytest.param(
            lambda b: b.role("Worker", 2, 8, {"spec": {"containers": {"name": "x"}}}),
            "InvalidSpec",
            "spec.replicaSpecs.Worker.template.spec.containers: must be a list",
            id="containers-not-a-list",
        ),
        pytest.param(
            lambda b: b.set("framework", {"name": "pytorch", "version": "9.9"}),
            "UnknownImage",
            "spec.framework.version: ",
            id="unknown-version",
        ),
    ],
)
def test_invalid_spec(
    spec_edit: Callable[[JobBuilder], Any], reason: str, message_start: str
) -> None:
    b = job()
    spec_edit(b)
    acts = run(b)
    st = acts.status
    assert st["phase"] == "Invalid"
    invalid = cond(st, "Invalid")
    assert (invalid["status"], invalid["reason"]) == ("True", reason)
    assert invalid["message"].startswith(message_start), invalid["message"]
    assert acts.events == [("Warning", reason, invalid["message"])]
    assert acts.create == [] and acts.ungate == []
    assert "startTime" not in st


def test_fixed_spec_leaves_invalid() -> None:
    body = job().phase("Invalid", "InvalidSpec", "spec.replicaSpecs.Worker.gpus: ...")
    st = run(body).status
    assert st["phase"] == "Admitted"
    assert cond(st, "Invalid")["status"] == "False"
    assert cond(st, "Invalid")["lastTransitionTime"] == iso(NOW)


# --- conditions and events over several calls --------------------------------------------------


def test_last_transition_time_moves_only_when_status_flips() -> None:
    t0 = -60.0
    first = run(job(), now_offset=t0)  # Admitted at NOW-60
    gang = [pod(W0).running(), pod(W1).running()]
    second = run(job().with_status(first.status), gang)  # Running at NOW
    ltt = {x["type"]: x["lastTransitionTime"] for x in second.status["conditions"]}
    assert ltt["Running"] == iso(NOW)  # False -> True
    assert ltt["Admitted"] == iso(NOW)  # True -> False
    assert ltt["Queued"] == ago(60)  # False -> False
    assert ltt["Invalid"] == ago(60)
    assert ltt["Created"] == ago(60)  # True -> True
    assert cond(second.status, "Admitted")["reason"] == "AllPodsRunning"

    third = run(job().with_status(second.status), gang, now_offset=30)
    assert third.status["conditions"] == second.status["conditions"]
    assert third.events == []


IDEMPOTENT = [
    pytest.param(job(), (), ADMIT_ALL, id="new-job"),
    pytest.param(admitted(), (pod(W0).gated(), pod(W1).gated()), ADMIT_ALL, id="ungate"),
    pytest.param(admitted(), (pod(W0).running(), pod(W1).running()), ADMIT_ALL, id="running"),
    pytest.param(job(workers=40), (), ADMIT_ALL, id="nofit"),
    pytest.param(
        job().placement("rack", "Required", ["Tesla-V100-SXM2-32GB"]),
        (),
        ADMIT_ALL,
        id="incompatible",
    ),
    pytest.param(job(), (), Admission(False, "QueueFull", "behind 2 jobs", 3), id="not-admitted"),
    pytest.param(job(gpus=0), (), ADMIT_ALL, id="invalid"),
    pytest.param(running(job().suspend()), (), ADMIT_ALL, id="suspended"),
    pytest.param(running(), (pod(W0).succeeded(), pod(W1).succeeded()), ADMIT_ALL, id="succeeded"),
    pytest.param(
        running(job().run_policy(restartPolicy="Never")),
        (pod(W0).failed(1), pod(W1).failed(1)),
        ADMIT_ALL,
        id="failed",
    ),
]


@pytest.mark.parametrize(("body", "pods", "admission"), IDEMPOTENT)
def test_second_call_on_the_same_state_emits_no_event(
    body: JobBuilder, pods: tuple[PodBuilder, ...], admission: Admission
) -> None:
    first = run(body, pods, admission=admission)
    again = run(job_with(body, first.status), pods, admission=admission, now_offset=1)
    assert again.events == []
    assert again.status["phase"] == first.status["phase"]
    assert again.status["conditions"] == first.status["conditions"]


def job_with(b: JobBuilder, status: Mapping[str, Any]) -> dict[str, Any]:
    body = b.build()
    body["status"] = dict(status)
    return body


def test_a_wait_whose_reason_stays_updates_its_message_without_an_event() -> None:
    """A deep queue would otherwise post an Event per waiting job whenever a gang starts
    or ends (NoFit messages quote the free GPUs)."""
    body = job(workers=40).phase("Queued", "NoFit", "needs 40 x 8 GPUs; (an older count)")
    body.with_status(pendingReason="NoFit")
    acts = run(body)
    assert acts.events == []
    assert cond(acts.status, "Queued")["message"].startswith("needs 40 x 8 GPUs")
    assert "(an older count)" not in acts.status["pendingMessage"]
    assert cond(acts.status, "Queued")["lastTransitionTime"] == ago(600)  # still True


def test_event_again_when_the_reason_of_a_wait_changes() -> None:
    body = job().phase("Queued", "QueueFull", "behind other jobs").with_status(queuePosition=5)
    acts = run(body, admission=Admission(False, "Quota", "the queue's quota is used up", 1))
    assert [(t, r) for t, r, _ in acts.events] == [("Normal", "Quota")]


def test_queue_position_change_keeps_quiet_when_the_message_does_not() -> None:
    body = job().phase("Queued", "QueueFull", "behind other jobs").with_status(queuePosition=5)
    acts = run(body, admission=Admission(False, "QueueFull", "behind other jobs", 2))
    assert acts.events == []
    assert acts.status["queuePosition"] == 2


# --- the snapshot is built only when needed ----------------------------------------------------
# The planning snapshot (GPU use counted, rebuilt by the shell on every pod change) is asked
# for only to plan; a started gang's node checks read the cheaper `fleet`.


@pytest.mark.parametrize(
    ("body", "pods", "admission", "calls"),
    [
        pytest.param(job(), (), ADMIT_ALL, 1, id="new-job-plans"),
        pytest.param(
            admitted(), (pod(W0).gated(), pod(W1).gated()), ADMIT_ALL, 0, id="gated-checks-fleet"
        ),
        pytest.param(running(), (pod(W0).running(), pod(W1).running()), ADMIT_ALL, 0, id="running"),
        pytest.param(finished("Succeeded", 5), (), ADMIT_ALL, 0, id="terminal"),
        pytest.param(running(job().suspend()), (pod(W0).running(),), ADMIT_ALL, 0, id="suspended"),
        pytest.param(restarting(1, 1), (), ADMIT_ALL, 0, id="backing-off"),
        pytest.param(job(), (), Admission(False, "QueueFull"), 0, id="not-admitted"),
    ],
)
def test_snapshot_is_built_only_for_planning_and_node_checks(
    body: JobBuilder, pods: tuple[PodBuilder, ...], admission: Admission, calls: int
) -> None:
    seen: list[int] = []

    def snapshot() -> Snapshot:
        seen.append(1)
        return fleet_snapshot()

    run(body, pods, admission=admission, snapshot=snapshot, fleet=fleet_snapshot)
    assert len(seen) == calls


# --- a whole lifecycle through a fake cluster ---------------------------------------------------


class FakeCluster:
    """Applies Actions the way the kopf shell does; the test plays kubelet and scheduler."""

    def __init__(self, body: JobBuilder) -> None:
        self.body = body.build()
        self.pods: dict[str, dict[str, Any]] = {}
        self.services: set[str] = set()
        self.events: list[str] = []
        self.job_deleted = False
        self.t = 0.0

    def reconcile(self, *, after: float = 1.0, crash_after_creates: int | None = None) -> Actions:
        """One reconcile, applied in the shell's order: delete, create, ungate, status, events.
        `crash_after_creates`: the operator dies after that many creates (nothing else lands)."""
        self.t += after
        acts = run(self.body, list(self.pods.values()), now_offset=self.t)
        for name in acts.delete_pods:
            self.pods[name]["metadata"]["deletionTimestamp"] = iso(NOW)
        for obj in acts.create[:crash_after_creates]:
            if obj["kind"] == "Pod":
                self.pods.setdefault(obj["metadata"]["name"], obj)  # 409 on a replay
            else:
                self.services.add(obj["metadata"]["name"])
        if crash_after_creates is not None:
            # The shell writes an admitting status before the creates (shellrules.admits).
            if shellrules.admits(self.body, acts.status, bool(acts.create)):
                self.body["status"] = acts.status
            return acts
        for name in acts.ungate:
            gates = self.pods[name]["spec"]["schedulingGates"]
            self.pods[name]["spec"]["schedulingGates"] = [
                g for g in gates if g["name"] != c.SCHEDULING_GATE
            ]
        self.body["status"] = acts.status
        self.events.extend(reason for _, reason, _ in acts.events)
        self.job_deleted = self.job_deleted or acts.delete_job
        return acts

    def settle(self) -> None:
        """The kubelet finishes deletions."""
        self.pods = {
            n: p for n, p in self.pods.items() if not p["metadata"].get("deletionTimestamp")
        }

    def set(self, name: str, state: Callable[[PodBuilder], PodBuilder]) -> None:
        self.pods[name] = state(PodBuilder.wrap(self.pods[name])).build()

    def all(self, state: Callable[[PodBuilder], PodBuilder]) -> None:
        for name in list(self.pods):
            self.set(name, state)

    @property
    def phase(self) -> str:
        return str(self.body["status"]["phase"])


def test_lifecycle_walk_with_one_gang_restart() -> None:
    k = FakeCluster(job().run_policy(ttlSecondsAfterFinished=30, restartPolicy="ExitCode"))
    k.reconcile()
    assert (k.phase, sorted(k.pods), k.services) == ("Admitted", [W0, W1], {"bert"})
    assert not any(is_gated(p) for p in k.pods.values())  # pinned: nothing to release
    k.all(PodBuilder.pending)
    assert k.reconcile().requeue_after == 2.0
    k.all(PodBuilder.running)
    k.reconcile()
    assert k.phase == "Running"

    k.set(W1, lambda p: p.failed(137))  # OOM-killed: retryable
    k.reconcile(after=60)
    assert (k.phase, k.body["status"]["restartCount"]) == ("Restarting", 1)
    restarted_at = k.t
    assert k.reconcile().requeue_after == 1.0  # old gang still terminating
    k.settle()
    acts = k.reconcile()
    assert acts.requeue_after == pytest.approx(10.0 - (k.t - restarted_at))
    k.reconcile(after=10)
    assert k.phase == "Admitted"
    assert {p["metadata"]["annotations"][c.ANNOTATION_RESTART_COUNT] for p in k.pods.values()} == {
        "1"
    }
    k.all(PodBuilder.running)
    k.reconcile()
    k.all(PodBuilder.succeeded)
    k.reconcile()
    assert k.phase == "Succeeded"
    assert k.body["status"]["restartCount"] == 1
    assert k.body["status"]["startTime"] == ago(-1)  # the first admission, at t=1
    assert k.reconcile(after=10).requeue_after == pytest.approx(20.0)
    assert not k.job_deleted
    k.reconcile(after=20)
    assert k.job_deleted
    assert k.events == ["GangRestart", "GangPlaced", "JobSucceeded"]  # the first: no news


def test_operator_dying_mid_create_converges_without_duplicates() -> None:
    k = FakeCluster(job())
    k.reconcile(crash_after_creates=2)  # Service and worker-0 made, then the process died
    assert (k.phase, sorted(k.pods)) == ("Admitted", [W0])  # status went first
    k.set(W0, PodBuilder.running)  # ungated: it binds and starts alone
    k.reconcile()  # a fresh operator sees half a gang: deleted, re-planned
    assert (k.phase, cond(k.body["status"], "Queued")["reason"]) == ("Queued", "Replanning")
    assert k.events == ["Replanning"]
    k.settle()
    k.reconcile()
    assert (k.phase, sorted(k.pods)) == ("Admitted", [W0, W1])
    k.reconcile()
    k.all(PodBuilder.running)
    k.reconcile()
    assert k.phase == "Running"
    assert k.body["status"].get("restartCount") is None


def test_suspend_then_resume() -> None:
    k = FakeCluster(job())
    k.reconcile()
    k.reconcile()
    k.all(PodBuilder.running)
    k.reconcile()
    k.body["spec"]["runPolicy"] = {"suspend": True}
    k.reconcile()
    assert k.phase == "Suspended" and all(
        p["metadata"].get("deletionTimestamp") for p in k.pods.values()
    )
    k.settle()
    k.reconcile()
    assert k.phase == "Suspended" and k.pods == {}
    k.body["spec"]["runPolicy"] = {"suspend": False}
    k.reconcile()
    assert (k.phase, sorted(k.pods)) == ("Admitted", [W0, W1])
    assert k.events == ["Suspended", "GangPlaced"]  # admitted at once first: no Event


def test_fleet_has_the_nodes_the_table_relies_on() -> None:
    names = fleet_node_names()
    assert A100_1 in names and A100_2 in names and GONE not in names


# --- regressions: bugs this suite found, now fixed ----------------------------------


@pytest.mark.parametrize(
    ("body", "pods"),
    [
        pytest.param(
            running(job().role("PS", 1, 0)),
            (pod(W0).running(), pod(W1).running()),
            id="running-then-invalid",
        ),
        pytest.param(
            job(gpus=0)
            .phase("Queued", "QueueFull", "behind 2 jobs")
            .with_status(
                pendingReason="QueueFull", pendingMessage="behind 2 jobs", queuePosition=3
            ),
            (),
            id="queued-then-invalid",
        ),
    ],
)
def test_invalid_clears_the_other_phases(body: JobBuilder, pods: tuple[PodBuilder, ...]) -> None:
    st = run(body, pods).status
    assert st["phase"] == "Invalid"
    assert true_conditions(st) - {"Created"} == {"Invalid"}
    assert not {"pendingReason", "pendingMessage", "queuePosition"} & set(st)


@pytest.mark.parametrize(
    ("body", "admission", "absent"),
    [
        pytest.param(
            job(workers=40)
            .phase("Queued", "QueueFull", "behind 2 jobs")
            .with_status(
                pendingReason="QueueFull", pendingMessage="behind 2 jobs", queuePosition=3
            ),
            ADMIT_ALL,
            {"queuePosition"},
            id="queue-admits-then-nofit",
        ),
        pytest.param(
            job(workers=40)
            .suspend()
            .phase("Queued", "NoFit", "needs 40 x 8 GPUs")
            .with_status(pendingReason="NoFit", pendingMessage="needs 40 x 8 GPUs"),
            ADMIT_ALL,
            {"pendingReason", "pendingMessage"},
            id="queued-then-suspended",
        ),
    ],
)
def test_pending_fields_describe_only_the_current_wait(
    body: JobBuilder, admission: Admission, absent: set[str]
) -> None:
    st = run(body, admission=admission).status
    assert not absent & set(st), {k: st[k] for k in absent & set(st)}


@pytest.mark.parametrize(
    ("body", "pods", "want"),
    [
        pytest.param(
            running(), (pod(W0).running(), pod(W1).running()), 3500.0, id="running-until-deadline"
        ),
        pytest.param(restarting(1, 4), (), 6.0, id="backoff-wait"),
        pytest.param(admitted(), (pod(W0).gated(), pod(W1).gated()), 1.0, id="after-ungate"),
    ],
)
def test_deadline_requeue_is_the_earliest_of_both(
    body: JobBuilder, pods: tuple[PodBuilder, ...], want: float
) -> None:
    doc = body.build()
    doc["spec"].setdefault("runPolicy", {})["activeDeadlineSeconds"] = 3600
    doc["status"]["startTime"] = ago(100)
    acts = run(doc, pods)
    assert acts.requeue_after == pytest.approx(want)


def test_resume_restarts_the_deadline_clock() -> None:
    body = (
        job()
        .run_policy(activeDeadlineSeconds=600, suspend=False)
        .with_status(startTime=ago(3600))
        .phase("Suspended", "Suspended", "spec.runPolicy.suspend is true; pods deleted")
    )
    acts = run(body)
    assert acts.status["phase"] == "Admitted"
    assert acts.status["startTime"] == iso(NOW)


@pytest.mark.parametrize(
    ("pods",),
    [
        pytest.param(
            (pod(W0).running(), pod(W1).failed(1), pod(W2).running()), id="stray-and-failure"
        ),
        pytest.param((pod(W0).gated(), pod(W1).gated(), pod(W2).gated()), id="stray-while-gated"),
    ],
)
def test_each_pod_gets_one_action(pods: tuple[PodBuilder, ...]) -> None:
    acts = run(admitted(), pods)
    assert len(acts.delete_pods) == len(set(acts.delete_pods))
    assert not set(acts.delete_pods) & set(acts.ungate)


def test_a_restart_is_counted_once_when_the_pod_index_lags() -> None:
    gang = [pod(W0).running().generation(0), pod(W1).failed(1).generation(0)]
    first = run(running(), gang)
    assert first.status["restartCount"] == 1
    # Same pods (no deletionTimestamp seen yet), newer status from the patch response.
    again = run(job_with(running(), first.status), gang, now_offset=0.5)
    assert again.status["restartCount"] == 1
    assert again.events == []


def test_release_keeps_other_controllers_gates() -> None:
    from trainop.handlers import operator as handlers
    from trainop.handlers.shell import Shell

    calls: list[tuple[str, str, list[dict[str, Any]]]] = []

    class Api:
        def delete_pod(self, ns: str, name: str) -> None: ...

        def create(self, obj: Mapping[str, Any]) -> bool:
            return True

        def ungate_pod(self, ns: str, name: str, remaining: list[dict[str, Any]]) -> None:
            calls.append((ns, name, remaining))

        def patch_job_status(self, *args: Any) -> None:
            return None

    shell = Shell(api=Api())  # type: ignore[arg-type]
    gang = [
        pod(W0).gate("example.com/quota").gated(),
        pod(W1).gate("example.com/quota").gated(),
    ]
    body = admitted().build()
    acts = run(body, gang)
    assert acts.ungate == [W0, W1]
    acts.events = []
    asyncio.run(handlers._apply(shell, "team-a", "bert", body, acts))
    assert sorted(calls) == [  # released concurrently: the order is not fixed
        ("team-a", W0, [{"name": "example.com/quota"}]),
        ("team-a", W1, [{"name": "example.com/quota"}]),
    ]


# --- nodes that fail under a running gang (NodeLost, not counted) ------------------------------


def _bound(name: str, node: str, gpus: int = 8) -> dict[str, Any]:
    p = pod(name).on(node).running().build()
    p["spec"]["nodeName"] = node
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return p


def _fleet(change: Callable[[dict[str, Any]], None] | None = None, drop: str | None = None):
    from trainop.inventory import build_snapshot

    nodes = [n for n in fleet_nodes() if n["metadata"]["name"] != drop]
    for n in nodes:
        n.setdefault("status", {}).setdefault("conditions", [{"type": "Ready", "status": "True"}])
        if change is not None and n["metadata"]["name"] == "a100-01":
            change(n)
    gang = [_bound(W0, "a100-01"), _bound(W1, "a100-02")]
    return gang, (lambda: build_snapshot(nodes, gang))


def _not_ready(seconds_ago: float) -> Callable[[dict[str, Any]], None]:
    def change(n: dict[str, Any]) -> None:
        n["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "lastTransitionTime": ago(seconds_ago),
            }
        ]

    return change


def _gpus(count: int) -> Callable[[dict[str, Any]], None]:
    def change(n: dict[str, Any]) -> None:
        n["status"]["allocatable"]["nvidia.com/gpu"] = str(count)

    return change


@pytest.mark.parametrize(
    ("change", "drop", "restarts", "phrase"),
    [
        pytest.param(None, "a100-01", True, "node a100-01 was deleted", id="node-deleted"),
        pytest.param(_not_ready(120), None, True, "has not been Ready since", id="not-ready-120s"),
        pytest.param(_not_ready(10), None, False, "", id="not-ready-10s-within-grace"),
        pytest.param(
            _gpus(4), None, True, "lost GPUs: 4 allocatable, 8 held by this gang", id="gpu-fell-off"
        ),
        pytest.param(None, None, False, "", id="healthy"),
    ],
)
def test_a_failing_node_restarts_the_whole_gang_without_counting(
    change: Any, drop: str | None, restarts: bool, phrase: str
) -> None:
    gang, snapshot = _fleet(change, drop)
    acts = run(running(), gang, snapshot=snapshot)
    if not restarts:
        assert acts.status["phase"] == "Running" and not acts.delete_pods
        return
    assert acts.status["phase"] == "Restarting"
    assert cond(acts.status, "Restarting")["reason"] == "NodeLost"
    assert phrase in cond(acts.status, "Restarting")["message"]
    assert sorted(acts.delete_pods) == [W0, W1]
    assert int(acts.status.get("restartCount") or 0) == 0
    # Only the pod of a deleted node goes without grace: no kubelet will confirm its end.
    assert acts.force_delete == ({W0: "a100-01"} if drop else {})


@pytest.mark.parametrize(
    ("drop", "forced"),
    [
        pytest.param("a100-01", {W0: "a100-01"}, id="old-pod-on-a-deleted-node"),
        pytest.param(None, {}, id="old-pods-on-live-nodes-keep-their-grace"),
    ],
)
def test_an_old_gang_stuck_on_a_deleted_node_is_deleted_without_grace(
    drop: str | None, forced: dict[str, str]
) -> None:
    # The restart waits for the old gang to be gone (names are reused); a pod of a deleted
    # node would stay Terminating until the pod garbage collector's quarantine ran out.
    gang, snapshot = _fleet(None, drop)
    for p in gang:
        p["metadata"]["deletionTimestamp"] = ago(10)
    acts = run(running(), gang, snapshot=snapshot)
    assert acts.force_delete == forced
    assert not acts.create


@pytest.mark.parametrize(
    ("change", "requeue"),
    [
        pytest.param(None, None, id="healthy-nodes-nothing-to-poll"),
        pytest.param(
            _not_ready(10), CONFIG.node_lost_seconds - 10, id="not-ready-look-at-grace-end"
        ),
    ],
)
def test_a_running_gang_is_looked_at_again_only_when_a_grace_ends(
    change: Any, requeue: float | None
) -> None:
    gang, snapshot = _fleet(change, None)
    acts = run(running(), gang, snapshot=snapshot)
    assert acts.status["phase"] == "Running"
    assert acts.requeue_after == (None if requeue is None else pytest.approx(requeue))


# --- fail loud (issue 12): PriorityClass checked before a gang, never under a running one ----


def test_missing_priority_class_is_invalid_with_nothing_created() -> None:
    body = job().set("priorityClassName", "urgent").build()
    acts = reconcile(body, [], fleet_snapshot, CONFIG, NOW, ADMIT_ALL, {"low", "high"})
    st = acts.status
    assert st["phase"] == "Invalid"
    invalid = cond(st, "Invalid")
    assert invalid["reason"] == "PriorityClassNotFound"
    assert invalid["message"].startswith("spec.priorityClassName: PriorityClass 'urgent' does not")
    assert "high, low" in invalid["message"]
    assert acts.events == [("Warning", "PriorityClassNotFound", invalid["message"])]
    assert acts.create == [] and acts.delete_pods == []


def test_existing_priority_class_lets_the_gang_start() -> None:
    body = job().set("priorityClassName", "high").build()
    acts = reconcile(body, [], fleet_snapshot, CONFIG, NOW, ADMIT_ALL, {"high"})
    assert acts.status["phase"] == "Admitted"
    assert all(p["spec"]["priorityClassName"] == "high" for p in acts.create if p["kind"] == "Pod")


def test_priority_class_deleted_under_a_running_gang_keeps_it() -> None:
    body = running(job().set("priorityClassName", "gone")).build()
    pods = as_pods([pod(W0).running(), pod(W1).running()])
    acts = reconcile(body, pods, fleet_snapshot, CONFIG, NOW, ADMIT_ALL, set())
    assert acts.status["phase"] == "Running" and acts.delete_pods == []


def test_priority_class_created_later_leaves_invalid() -> None:
    body = job().set("priorityClassName", "high").phase("Invalid", "PriorityClassNotFound", "x")
    acts = reconcile(body.build(), [], fleet_snapshot, CONFIG, NOW, ADMIT_ALL, {"high"})
    assert acts.status["phase"] == "Admitted"
    assert cond(acts.status, "Invalid")["status"] == "False"


def test_failure_is_reported_once_in_status_and_names_its_pod() -> None:
    acts = run(running(), [pod(W0).running(), pod(W1).evicted()])
    assert acts.status["lastFailure"]["reason"] == "Evicted"
    assert acts.status["lastFailure"]["pod"] == W1


# --- Degraded (issue 24; trainop.progress.judge_degraded) --------------------------------------
def _reported(step_seconds: float, **more: Any) -> dict[str, Any]:
    """status.progress of a gang past warm-up whose best step on this placement was 1 s."""
    return {
        "step": 500,
        "stepSeconds": step_seconds,
        "placementStartStep": 100,
        "bestStepSeconds": 1.0,
        "ranks": [
            {"rank": 0, "node": A100_1, "stepSeconds": step_seconds},
            {"rank": 1, "node": A100_2, "stepSeconds": 3 * step_seconds},
        ],
        **more,
    }


def test_a_slow_gang_is_degraded_naming_the_straggler_and_recovers() -> None:
    gang = [pod(W0).running(), pod(W1).running()]
    slow = run(running().with_status(progress=_reported(2.0)), gang)
    degraded = cond(slow.status, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "SlowerThanExpected"
    assert f"rank 1 on node {A100_2} is a straggler" in degraded["message"]
    assert [e[1] for e in slow.events] == ["Degraded"] and not slow.delete_pods
    again = run(job_with(running(), slow.status), gang)  # still slow: no second Event
    assert again.events == []
    fine = run(job_with(running(), {**slow.status, "progress": _reported(1.1)}), gang)
    assert cond(fine.status, "Degraded")["status"] == "False"


def test_replace_degraded_restarts_the_gang_at_most_once_an_hour() -> None:
    gang = [pod(W0).running(), pod(W1).running()]
    b = running(job())
    b.spec.setdefault("placement", {})["replaceDegraded"] = True
    first = run(b.with_status(progress=_reported(2.0)), gang)
    assert first.status["phase"] == "Restarting" and sorted(first.delete_pods) == [W0, W1]
    assert cond(first.status, "Restarting")["reason"] == "Degraded"
    assert first.status["progress"]["replacedAt"] == iso(NOW)
    assert first.status.get("restartCount", 0) == 0  # not counted against backoffLimit
    soon = run(b.with_status(progress=_reported(2.0, replacedAt=iso(NOW))), gang, now_offset=600)
    assert soon.status["phase"] == "Running" and not soon.delete_pods
    later = run(b.with_status(progress=_reported(2.0, replacedAt=iso(NOW))), gang, now_offset=3601)
    assert later.status["phase"] == "Restarting"


# --- a gang that never meets: Progressing (issue 38; trainop.progress.judge_startup) -------------
WIRED = OperatorConfig(progress_url="http://trainop-progress:8082/v1/progress")


def _started(
    checkpoint: bool = True, deadline: int | None = None, reported_ago: float | None = None
) -> JobBuilder:
    """A gang Running for 30 s; with spec.checkpoint, spec.progress.startupDeadlineSeconds
    and a report `reported_ago` seconds before NOW (as given)."""
    b = running(job())
    if checkpoint:
        b.checkpoint(gracePeriodSeconds=60)
    if deadline is not None:
        b.spec["progress"] = {"startupDeadlineSeconds": deadline}
    if reported_ago is not None:
        b.with_status(progress={"step": 3, "lastReportTime": ago(reported_ago)})
    return b


# (id, job, config, seconds after NOW, Progressing (None: absent) and reason, requeue)
STARTUP = [
    ("not-wired", _started(), CONFIG, 1000, None, None),
    ("reports-not-expected", _started(checkpoint=False), WIRED, 1000, None, None),
    ("before-the-deadline", _started(), WIRED, 0, None, 570.0),
    ("deadline-passed", _started(), WIRED, 570, ("False", "NoReport"), None),
    ("reported-since-running", _started(reported_ago=10), WIRED, 1000, ("True", "Reporting"), None),
    (
        "report-of-an-earlier-gang",
        _started(reported_ago=40),
        WIRED,
        570,
        ("False", "NoReport"),
        None,
    ),
    (
        "own-deadline",
        _started(checkpoint=False, deadline=60),
        WIRED,
        30,
        ("False", "NoReport"),
        None,
    ),
    ("turned-off", _started(deadline=0), WIRED, 5000, None, None),
]


@pytest.mark.parametrize(
    ("b", "config", "offset", "progressing", "requeue"),
    [pytest.param(*case[1:], id=case[0]) for case in STARTUP],
)
def test_a_running_gang_that_never_reports_is_not_progressing(
    b: JobBuilder,
    config: OperatorConfig,
    offset: float,
    progressing: tuple[str, str] | None,
    requeue: float | None,
) -> None:
    gang = [pod(W0).running(), pod(W1).running()]
    acts = reconcile(
        as_body(b), as_pods(gang), fleet_snapshot, config, NOW + timedelta(seconds=offset)
    )
    assert acts.status["phase"] == "Running" and not acts.delete_pods
    found = [x for x in acts.status["conditions"] if x["type"] == "Progressing"]
    assert [(x["status"], x["reason"]) for x in found] == ([progressing] if progressing else [])
    assert acts.requeue_after == requeue
    warned = [e for e in acts.events if e[1] == "NoReport"]
    assert len(warned) == (1 if progressing and progressing[0] == "False" else 0)
    if warned:
        assert warned[0][0] == "Warning" and "startupDeadlineSeconds" in warned[0][2]
        again = reconcile(  # still no report: the condition stays, no second Event
            job_with(b, acts.status),
            as_pods(gang),
            fleet_snapshot,
            config,
            NOW + timedelta(seconds=offset + 60),
        )
        assert cond(again.status, "Progressing")["status"] == "False" and again.events == []


# --- a node going away: checkpoint, then restart elsewhere (issue 24) --------------------------
def _cordoned(n: dict[str, Any]) -> None:
    n.setdefault("spec", {})["unschedulable"] = True


def _scaled_down(n: dict[str, Any]) -> None:
    taint = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1764000000", "effect": "NoSchedule"}
    n.setdefault("spec", {})["taints"] = [taint]


def _drain(b: JobBuilder, change: Callable[[dict[str, Any]], None], offset: float = 0.0) -> Actions:
    import dataclasses

    gang, snapshot = _fleet(change, None)
    config = dataclasses.replace(CONFIG, progress_url="http://trainop-progress:8082/v1/progress")
    return reconcile(
        as_body(b), as_pods(gang), snapshot, config, NOW + timedelta(seconds=offset), fleet=snapshot
    )


def _checkpointing(**status: Any) -> JobBuilder:
    b = running(job())
    b.checkpoint(gracePeriodSeconds=60)
    return b.with_status(**{"progress": {"step": 500, "lastReportTime": iso(NOW)}, **status})


@pytest.mark.parametrize("change", [_cordoned, _scaled_down], ids=["cordoned", "autoscaler-taint"])
def test_a_draining_node_asks_for_a_checkpoint_then_restarts_the_gang(change: Any) -> None:
    asked = _drain(_checkpointing(), change)
    request = asked.status["checkpointRequest"]
    assert (request["step"], request["reason"], request["deadline"]) == (
        500,
        "NodeDrain",
        iso(NOW + timedelta(seconds=60)),
    )
    assert not asked.delete_pods and asked.requeue_after == 60
    assert [e[1] for e in asked.events] == ["CheckpointRequested"]
    assert "a100-01" in asked.events[0][2]
    # A checkpoint newer than the request: the gang restarts elsewhere at once.
    ckpt = {"path": "/c/505.pt", "step": 505, "time": iso(NOW + timedelta(seconds=5))}
    saved = _checkpointing(
        checkpointRequest=request, progress={"step": 505, "lastCheckpoint": ckpt}
    )
    done = _drain(saved, change, offset=5)
    assert done.status["phase"] == "Restarting" and sorted(done.delete_pods) == [W0, W1]
    assert cond(done.status, "Restarting")["reason"] == "NodeDrain"
    assert "checkpointed at step 505" in cond(done.status, "Restarting")["message"]
    assert int(done.status.get("restartCount") or 0) == 0
    # No answer: still waiting within the grace period, evicted at its end.
    waiting = _drain(_checkpointing(checkpointRequest=request), change, offset=30)
    assert not waiting.delete_pods and waiting.requeue_after == 30
    late = _drain(_checkpointing(checkpointRequest=request), change, offset=60)
    assert late.status["phase"] == "Restarting"
    assert "evicted at the deadline" in cond(late.status, "Restarting")["message"]


def test_without_spec_checkpoint_a_cordon_changes_nothing() -> None:
    acts = _drain(running(job()), _cordoned)
    assert acts.status["phase"] == "Running" and not acts.delete_pods
    assert "checkpointRequest" not in acts.status


# --- drains that wait: the gang's PodDisruptionBudget (issue 35) -------------------------------
@pytest.mark.parametrize("change", [_cordoned, _scaled_down], ids=["cordoned", "autoscaler-taint"])
def test_the_budget_stands_until_the_checkpoint_is_in(change: Any) -> None:
    calm = _drain(_checkpointing(), lambda n: None)
    assert calm.budget is not None and calm.drop_budget is None
    assert calm.budget["metadata"]["name"] == "bert-checkpoint"
    assert calm.budget["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    assert calm.budget["spec"]["minAvailable"] == 2  # the gang's pods
    asked = _drain(_checkpointing(), change)
    assert asked.budget is not None  # the drain's evictions are refused while it waits
    request = asked.status["checkpointRequest"]
    ckpt = {"path": "/c/505.pt", "step": 505, "time": iso(NOW + timedelta(seconds=5))}
    saved = _checkpointing(
        checkpointRequest=request, progress={"step": 505, "lastCheckpoint": ckpt}
    )
    done = _drain(saved, change, offset=5)
    assert done.budget is None and done.drop_budget == "bert-checkpoint"
    late = _drain(_checkpointing(checkpointRequest=request), change, offset=60)
    assert late.budget is None and late.drop_budget == "bert-checkpoint"


def test_jobs_without_spec_checkpoint_get_no_budget() -> None:
    for acts in (_drain(running(job()), lambda n: None), _drain(running(job()), _cordoned)):
        assert acts.budget is None and acts.drop_budget is None


def test_without_the_report_channel_no_budget_holds_a_drain() -> None:
    gang, snapshot = _fleet(lambda n: None, None)
    acts = reconcile(
        as_body(_checkpointing()), as_pods(gang), snapshot, CONFIG, NOW, fleet=snapshot
    )
    assert not CONFIG.progress_url and acts.budget is None
    assert acts.drop_budget == "bert-checkpoint"
