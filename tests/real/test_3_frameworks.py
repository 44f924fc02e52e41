"""TensorFlow, JAX, PaddlePaddle and MXNet jobs that run for real, wired only by trainop.

Each job is an example from examples/real/ whose pods run a script of examples/scripts/ in
its framework's local image (trainop.cluster.images: tensorflow-cpu, jax-cpu, paddle-cpu,
mxnet-cpu). The scripts read nothing but the env, ports, Service and ConfigMap trainop
renders, and print a number the test checks: a distributed job that runs with wrong
wiring hangs or fails, and one that runs prints a wrong number.

Failure paths, one per family: on the parameter-server family (MXNet), where a failed
worker leaves a scheduler and a server that would wait for ever, a worker command that
exits 3 fails the job (restartPolicy ExitCode, failure class ExitCode, not retried) and
stops the rest of the gang; on the collective family (JAX), a worker killed mid-run
restarts the whole gang and the job still succeeds. The JAX restart takes about 3
minutes, so it runs only with TRAINOP_REAL_LONG=1 (CI's cold run has a time budget; the
PyTorch gang restart of test_1_training.py covers the same operator path by default).
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from tests.real.scenarios import (
    JAX_LINE,
    MXNET_LINE,
    PADDLE_LINE,
    TF_LINE,
    Target,
    run_example,
    run_failing,
    run_killed,
)


@pytest.fixture(scope="module")
def fw_target(target: Target, framework_images: dict[str, str]) -> Target:
    """The session's target plus the four framework images, imported into the real nodes
    (in the background from the start of the session: tests/real/conftest.py)."""
    return replace(target, images={**target.images, **framework_images})


def test_tensorflow_multiworker_allreduce_and_loss(fw_target: Target, namespace: str) -> None:
    tj, log = run_example(fw_target, namespace, "tensorflow-cpu.yaml")
    match = TF_LINE.search(log)
    assert match, log[-4000:]
    print(match.group(0))  # the checked line, for the run's record (-s, -rP)
    replicas, err, first, last = match.groups()
    assert int(replicas) == 3  # the Chief and both Workers joined the collective
    assert float(err) < 1e-4  # each replica's all-reduced gradient == the sum over workers
    assert float(last) < float(first) / 10
    assert tj["status"]["restartCount"] == 0


def test_jax_psum_across_three_processes(fw_target: Target, namespace: str) -> None:
    _, log = run_example(fw_target, namespace, "jax-cpu.yaml")
    match = JAX_LINE.search(log)
    assert match, log[-4000:]
    print(match.group(0))  # the checked line, for the run's record (-s, -rP)
    assert [int(g) for g in match.groups()] == [3, 3, 6, 6]
    assert log.count("sees psum=6") == 3  # every process got the sum, not only rank 0


def test_paddle_collective_allreduce_and_training(fw_target: Target, namespace: str) -> None:
    _, log = run_example(fw_target, namespace, "paddle-cpu.yaml")
    match = PADDLE_LINE.search(log)
    assert match, log[-4000:]
    print(match.group(0))  # the checked line, for the run's record (-s, -rP)
    world, total, expected, first, last = match.groups()
    assert (int(world), int(total), int(expected)) == (2, 3, 3)
    assert float(last) < float(first) / 10


def test_mxnet_dist_sync_kvstore_sum(fw_target: Target, namespace: str) -> None:
    _, log = run_example(fw_target, namespace, "mxnet-cpu.yaml")
    match = MXNET_LINE.search(log)
    assert match, log[-4000:]
    print(match.group(0))  # the checked line, for the run's record (-s, -rP)
    assert [int(g) for g in match.groups()] == [2, 1, 3, 3]
    assert log.count("pulled [3.0]") == 2  # both workers pulled the sum


def test_mxnet_failing_worker_fails_the_job_and_stops_the_gang(
    fw_target: Target, namespace: str
) -> None:
    tj, running = run_failing(
        fw_target, namespace, "mxnet-cpu.yaml", "Worker", ["python3", "-c", "raise SystemExit(3)"]
    )
    failure = tj["status"]["lastFailure"]
    assert (failure["reason"], failure["exitCode"], failure["retryable"]) == ("ExitCode", 3, False)
    assert tj["status"].get("restartCount", 0) == 0
    assert running == []  # the scheduler and server did not outlive the failed job


@pytest.mark.skipif(
    os.environ.get("TRAINOP_REAL_LONG") != "1", reason="about 3 minutes: TRAINOP_REAL_LONG=1"
)
def test_jax_killed_worker_restarts_the_gang_and_job_succeeds(
    fw_target: Target, namespace: str
) -> None:
    tj, log = run_killed(
        fw_target,
        namespace,
        "jax-cpu.yaml",
        "jax-cpu-worker-2",
        "sees psum=6",
        {"TRAINOP_HOLD": "20"},
    )
    assert tj["status"]["restartCount"] >= 1
    assert tj["status"]["lastFailure"]["reason"] == "Signal"  # SIGTERM: retried
    match = JAX_LINE.search(log)
    assert match, log[-4000:]
    print(match.group(0))
