"""Failure classification (`trainop.failures`): every kind of pod failure as a named case."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import PodBuilder, pod
from trainop.failures import (
    INFRASTRUCTURE,
    REASONS,
    RETRYABLE,
    Failure,
    classify_failed,
    image_pull_failure,
    strongest,
)

P = "bert-worker-0"


def raw(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": P}, "status": status}


def term(code: int, reason: str = "Error", message: str = "") -> dict[str, Any]:
    return {
        "name": "trainer",
        "state": {"terminated": {"exitCode": code, "reason": reason, "message": message}},
    }


# (id, pod, reason, exit code, text in the message)
CLASSIFY = [
    ("exit-1", pod(P).failed(1), "ExitCode", 1, "exited with code 1"),
    ("exit-127", pod(P).failed(127), "ExitCode", 127, "code 127"),
    ("sigkill", pod(P).failed(137), "Signal", 137, "killed by signal 9"),
    ("sigterm", pod(P).failed(143), "Signal", 143, "signal 15"),
    ("oom", pod(P).oom_killed(), "OOMKilled", 137, "raise the container's memory limit"),
    ("evicted", pod(P).evicted(), "Evicted", None, "low on resource: memory"),
    ("node-lost-condition", pod(P).node_lost(), "NodeLost", None, "node no longer exists"),
    (
        "node-lost-reason",
        raw({"phase": "Failed", "reason": "NodeLost", "message": "gone"}),
        "NodeLost",
        None,
        "lost its node: gone",
    ),
    (
        "node-shutdown",
        raw(
            {
                "phase": "Failed",
                "reason": "Terminated",
                "message": "Pod was terminated in response to imminent node shutdown.",
            }
        ),
        "NodeLost",
        None,
        "imminent node shutdown",
    ),
    (
        "taint-manager",
        raw(
            {
                "phase": "Failed",
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "DeletionByTaintManager",
                    }
                ],
            }
        ),
        "NodeLost",
        None,
        "DeletionByTaintManager",
    ),
    (
        "disruption-false-is-not-lost",
        raw(
            {
                "phase": "Failed",
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "False",
                        "reason": "DeletionByTaintManager",
                    }
                ],
            }
        ),
        "Unknown",
        None,
        "no exit status",
    ),
    (
        "preemption-disruption-is-not-node-loss",
        raw(
            {
                "phase": "Failed",
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                    }
                ],
                "containerStatuses": [term(137)],
            }
        ),
        "Signal",
        137,
        "signal 9",
    ),
    (
        "nccl-error",
        pod(P).terminated(
            1,
            message="torch.distributed.DistBackendError: NCCL error "
            "in: ProcessGroupNCCL.cpp:1970, unhandled system "
            "error",
        ),
        "NCCLError",
        1,
        "NCCL error in",
    ),
    (
        "nccl-remote-error",
        pod(P).terminated(
            1, message="ncclRemoteError: A call failed possibly due to a network error"
        ),
        "NCCLError",
        1,
        "ncclRemoteError",
    ),
    (
        "nccl-abort",
        pod(P).terminated(134, message="NCCL communicator was aborted on rank 3"),
        "NCCLError",
        134,
        "aborted",
    ),
    (
        "xid-kernel-line",
        pod(P).terminated(1, message="NVRM: Xid (PCI:0000:3b:00): 79, pid=1"),
        "GPUXid",
        1,
        "GPU Xid 79 (GPU has fallen off the bus)",
    ),
    (
        "xid-short",
        pod(P).terminated(1, message="saw Xid 48 on GPU 2"),
        "GPUXid",
        1,
        "double-bit ECC",
    ),
    ("xid-unknown-number", pod(P).terminated(1, message="Xid: 999"), "GPUXid", 1, "GPU Xid 999"),
    (
        "xid-beats-nccl",
        pod(P).terminated(1, message="Xid 74\nNCCL error: remote"),
        "GPUXid",
        1,
        "NVLink",
    ),
    ("xid-beats-oom", pod(P).terminated(137, "OOMKilled", "Xid 31"), "GPUXid", 137, "page fault"),
    (
        "peer-unresolved",
        pod(P).terminated(
            75,
            message="trainop-launch: peer host(s) bert-worker-0.bert.ns.svc (named by "
            "MASTER_ADDR, PET_MASTER_ADDR) did not resolve within 300 s: the gang cannot meet.",
        ),
        "PeerUnresolved",
        75,
        "bert-worker-0.bert.ns.svc (named by MASTER_ADDR, PET_MASTER_ADDR)",
    ),
    ("no-exit-status", pod(P).failed(None), "Unknown", None, "no exit status"),
    (
        "zero-sidecar-nonzero-trainer",
        raw({"phase": "Failed", "containerStatuses": [term(0, "Completed"), term(3)]}),
        "ExitCode",
        3,
        "code 3",
    ),
    (
        "init-container-failed",
        raw({"phase": "Failed", "initContainerStatuses": [term(2)]}),
        "ExitCode",
        2,
        "code 2",
    ),
    (
        "garbage-exit-code",
        raw(
            {
                "phase": "Failed",
                "containerStatuses": [{"name": "t", "state": {"terminated": {"exitCode": "x"}}}],
            }
        ),
        "Unknown",
        None,
        "",
    ),
    ("garbage-status", {"metadata": {"name": P}, "status": "oops"}, "Unknown", None, ""),
    ("no-status", {"metadata": {"name": P}}, "Unknown", None, ""),
]


@pytest.mark.parametrize(
    ("obj", "reason", "code", "says"), [pytest.param(*c[1:], id=c[0]) for c in CLASSIFY]
)
def test_classify_failed(obj: Any, reason: str, code: int | None, says: str) -> None:
    body = obj.build() if isinstance(obj, PodBuilder) else obj
    got = classify_failed(body)
    assert (got.reason, got.exit_code, got.pod) == (reason, code, P)
    assert says in got.message, got.message
    status = got.to_status()
    assert status["reason"] == reason and status["retryable"] == (reason in RETRYABLE)


@pytest.mark.parametrize(
    ("reason", "retryable", "infrastructure"),
    [
        ("NodeLost", True, True),
        ("Evicted", True, True),
        ("GPUXid", True, False),
        ("OOMKilled", True, False),
        ("NCCLError", True, False),
        ("Signal", True, False),
        ("ImagePullFailed", False, False),
        ("ExitCode", False, False),
        ("Unknown", False, False),
    ],
)
def test_what_restart_policy_exit_code_does_with_each_reason(
    reason: str, retryable: bool, infrastructure: bool
) -> None:
    f = Failure(reason, P, "")
    assert (f.retryable, f.infrastructure) == (retryable, infrastructure)
    assert reason in REASONS and INFRASTRUCTURE <= RETRYABLE


@pytest.mark.parametrize(
    ("obj", "permanent"),
    [
        pytest.param(pod(P).image_pull("ErrImagePull"), False, id="err-image-pull"),
        pytest.param(pod(P).image_pull("ImagePullBackOff"), False, id="back-off"),
        pytest.param(pod(P).image_pull("InvalidImageName"), True, id="invalid-name"),
        pytest.param(pod(P).image_pull("ErrImageNeverPull"), True, id="never-pull"),
    ],
)
def test_image_pull_failures_name_the_image(obj: PodBuilder, permanent: bool) -> None:
    got = image_pull_failure(obj.build())
    assert got is not None
    failure, perm = got
    assert perm is permanent
    assert failure.reason == "ImagePullFailed" and not failure.retryable
    assert "cannot pull image nvcr.io/x:1" in failure.message
    assert "fix spec.image" in failure.message


def test_image_taken_from_the_spec_when_the_status_lacks_it() -> None:
    body = raw(
        {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "trainer", "state": {"waiting": {"reason": "ErrImagePull"}}}
            ],
        }
    )
    body["spec"] = {"containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:1"}]}
    got = image_pull_failure(body)
    assert got is not None and "nvcr.io/nvidia/pytorch:1" in got[0].message


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod(P).running(), id="running"),
        pytest.param(pod(P).pending(), id="pending"),
        pytest.param(
            raw({"containerStatuses": [{"state": {"waiting": {"reason": "Created"}}}]}),
            id="container-creating",
        ),
        pytest.param(raw({"containerStatuses": ["junk"]}), id="junk"),
    ],
)
def test_no_image_pull_failure(obj: Any) -> None:
    assert image_pull_failure(obj.build() if isinstance(obj, PodBuilder) else obj) is None


def test_strongest_prefers_the_root_cause_then_the_first_pod() -> None:
    fs = [
        Failure("ExitCode", "a", ""),
        Failure("NCCLError", "b", ""),
        Failure("GPUXid", "d", ""),
        Failure("GPUXid", "c", ""),
    ]
    assert strongest(fs).pod == "c"
    assert strongest([Failure("ExitCode", "b", ""), Failure("ExitCode", "a", "")]).pod == "a"


def test_each_failure_is_counted_once() -> None:
    from trainop import metrics

    def count(reason: str) -> float:
        return metrics.FAILURES.labels(reason)._value.get()

    before = count("OOMKilled")
    failure = Failure("OOMKilled", P, "x", 137).to_status()
    metrics.observe_failure({}, {"lastFailure": failure})
    metrics.observe_failure({"lastFailure": failure}, {"lastFailure": failure})  # same one again
    metrics.observe_failure({"lastFailure": failure}, {})
    assert count("OOMKilled") == before + 1


def test_a_locally_built_image_that_is_missing_says_how_to_load_it() -> None:
    """An image of `trainop images build` is never pulled: the message names the commands
    that build it and load it into the real nodes."""
    from trainop.cluster import images
    from trainop.failures import LOCAL_IMAGE_REGISTRY

    assert LOCAL_IMAGE_REGISTRY == images.REGISTRY + "/"
    got = image_pull_failure(
        pod(P).image_pull("ErrImagePull", images.image_ref("pytorch-cpu")).build()
    )
    assert got is not None
    message = got[0].message
    assert "trainop images build" in message and "trainop cluster up --real-nodes" in message
    assert "fix spec.image" not in message
