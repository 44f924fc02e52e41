"""Training scenarios that run for real: the same code on the local cluster's real nodes
(tests/real) and on kind (tests/e2e/test_kind.py); each gets a `Target` from its fixture.

Every scenario applies an example from examples/real/ (with the image refs of the target),
waits for the TrainingJob to reach Succeeded through the operator, and returns the log
the assertions read.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from tests.integration.conftest import Kube, repo_root
from trainop.api import constants as c
from trainop.launcher import peers

JOB_TIMEOUT = 420.0


@dataclass(frozen=True)
class Target:
    """Where the scenarios run: a cluster, and the image ref per local image name."""

    kube: Kube
    images: dict[str, str]


def example(target: Target, file: str, namespace: str) -> dict[str, Any]:
    job = dict(yaml.safe_load((repo_root() / "examples" / "real" / file).read_text()))
    job["metadata"]["namespace"] = namespace
    name = job["spec"]["image"].split("/", 1)[1].split(":", 1)[0]
    job["spec"]["image"] = target.images[name]
    return job


def phase(kube: Kube, ns: str, name: str) -> str | None:
    tj = kube.maybe_get("trainingjob", name, "-n", ns)
    return None if tj is None else (tj.get("status") or {}).get("phase")


def wait_finished(target: Target, ns: str, name: str) -> dict[str, Any]:
    """Wait for Succeeded; on Failed (or a timeout) fail with the job's status and pods."""
    kube = target.kube
    try:
        kube.wait_for(
            f"{ns}/{name} to finish",
            lambda: phase(kube, ns, name) in ("Succeeded", "Failed"),
            JOB_TIMEOUT,
            interval=1.0,
        )
    finally:
        tj = kube.get("trainingjob", name, "-n", ns)
    assert tj["status"]["phase"] == "Succeeded", diagnose(kube, ns, tj)
    peers_resolved(kube, ns, name)
    return dict(tj)


def peers_resolved(kube: Kube, ns: str, name: str) -> list[str]:
    """Issue 38, in every job's pods: each pod that runs trainop-launch logged that every
    gang host name the operator wrote into it (TRAINOP_PEER_HOSTS: MASTER_ADDR, TF_CONFIG,
    the hostfile, ...) resolved inside the pod, through the C library as `getent hosts`
    does. Returns the lines checked."""
    pods = kube.get("pods", "-n", ns, "-l", f"{c.LABEL_JOB_NAME}={name}")["items"]
    checked = []
    for pod in pods:
        ctr = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value", "") for e in ctr.get("env") or []}
        hosts = env.get(c.ENV_PEER_HOSTS)
        if not hosts or "trainop-launch" not in " ".join(ctr.get("command") or []):
            continue
        line = f"trainop-launch: peers resolve ({hosts.replace(',', ', ')}) in"
        log = logs(kube, ns, pod["metadata"]["name"])
        assert peers.MARKER not in log, f"{pod['metadata']['name']}: {log[-2000:]}"
        if line not in log and "trainop-launch:" not in log:
            # The log no longer reaches back to the launch: the pod was deleted since the
            # listing (a TF worker once its Chief succeeded), its log is gone, or the
            # kubelet rotated it (kubectl logs reads the newest file only; a chatty
            # Hugging Face run). The launcher's own first line is missing too, so there
            # is nothing to check; a log that has it must have the peers line.
            continue
        assert line in log, f"{pod['metadata']['name']}: no {line!r} in\n{log[-2000:]}"
        checked.append(next(x for x in log.splitlines() if line in x))
        print(f"{pod['metadata']['name']}: {checked[-1]}")  # the run's record (-rP)
    return checked


def diagnose(kube: Kube, ns: str, tj: dict[str, Any]) -> str:
    pods = kube.get("pods", "-n", ns)["items"]
    lines = [json.dumps(tj.get("status"), indent=1)[:3000]]
    for p in pods:
        name = p["metadata"]["name"]
        lines.append(f"--- pod {name}: {p['status'].get('phase')}")
        lines.append(logs(kube, ns, name)[-2000:])
    return "\n".join(lines)


def logs(kube: Kube, ns: str, pod: str) -> str:
    proc = kube.run("logs", pod, "-n", ns, check=False)
    return proc.stdout + proc.stderr


def run_ddp(target: Target, ns: str) -> str:
    target.kube.apply(example(target, "pytorch-ddp-cpu.yaml", ns))
    wait_finished(target, ns, "ddp-cpu")
    return logs(target.kube, ns, "ddp-cpu-worker-0")


def run_mpi(target: Target, ns: str) -> str:
    target.kube.apply(example(target, "mpi-cpu.yaml", ns))
    wait_finished(target, ns, "mpi-cpu")
    return logs(target.kube, ns, "mpi-cpu-launcher-0")


def run_restart(target: Target, ns: str) -> tuple[dict[str, Any], str]:
    """Kill worker 1's trainer mid-run (SIGTERM to its PID 1, torchrun): the gang restarts."""
    kube = target.kube
    kube.apply(example(target, "pytorch-restart-cpu.yaml", ns))
    victim = "ddp-restart-worker-1"
    kube.wait_for(
        f"{victim} to train a few steps",
        lambda: re.search(r"step [1-9]0 ", logs(kube, ns, victim)),
        JOB_TIMEOUT,
        interval=1.0,
    )
    kube.run("exec", victim, "-n", ns, "--", "kill", "-TERM", "1")
    tj = wait_finished(target, ns, "ddp-restart")
    return tj, logs(kube, ns, "ddp-restart-worker-0")


def run_solo(target: Target, ns: str) -> tuple[str, list[str]]:
    """Issue 38's job: one pod, two processes, a gloo all_reduce; its log and peer lines."""
    target.kube.apply(example(target, "pytorch-solo-cpu.yaml", ns))
    wait_finished(target, ns, "solo")
    return logs(target.kube, ns, "solo-worker-0"), peers_resolved(target.kube, ns, "solo")


SOLO_LINE = re.compile(r"solo: world=2 master=(\S+) allreduce=3 expected=3 OK")
DDP_LINE = re.compile(r"ddp: world=\d+ steps=\d+ loss ([0-9.e+-]+) -> ([0-9.e+-]+) OK")
MPI_LINE = re.compile(r"mpi: size=2 allreduce=3 expected=3 OK")


# --- the other frameworks (tests/real/test_3_frameworks.py) ------------------------------
# Each job's number is printed by one member whose rank the framework decides (placement's
# rank 0 for JAX and Paddle, ps-lite's arrival order for MXNet), so the log read is that of
# every pod of the job, in pod-name order.


def run_example(target: Target, ns: str, file: str) -> tuple[dict[str, Any], str]:
    """Apply examples/real/<file>, wait for Succeeded, return the job and all its pods' logs."""
    job = example(target, file, ns)
    target.kube.apply(job)
    name = job["metadata"]["name"]
    tj = wait_finished(target, ns, name)
    pods = sorted(
        p["metadata"]["name"]
        for p in target.kube.get("pods", "-n", ns)["items"]
        if p["metadata"]["name"].startswith(f"{name}-")
    )
    return tj, "\n".join(f"--- {pod}\n{logs(target.kube, ns, pod)}" for pod in pods)


TF_LINE = re.compile(
    r"tf: replicas=(\d+) steps=\d+ allreduce_err=([0-9.e+-]+) loss ([0-9.e+-]+) -> ([0-9.e+-]+) OK"
)
JAX_LINE = re.compile(r"jax: processes=(\d+) devices=(\d+) psum=(\d+) expected=(\d+) OK")
PADDLE_LINE = re.compile(
    r"paddle: world=(\d+) allreduce=(\d+) expected=(\d+) steps=\d+ "
    r"loss ([0-9.e+-]+) -> ([0-9.e+-]+) OK"
)
MXNET_LINE = re.compile(r"mxnet: workers=(\d+) servers=(\d+) pulled=(\d+) expected=(\d+) OK")


def run_failing(
    target: Target, ns: str, file: str, role: str, command: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """examples/real/<file> with `role`'s command replaced and restartPolicy ExitCode: wait
    for Failed; return the job and the names of its pods still present and not finished."""
    job = example(target, file, ns)
    job["spec"]["replicaSpecs"][role]["template"]["spec"]["containers"][0]["command"] = command
    job["spec"]["runPolicy"] = {"restartPolicy": "ExitCode", "backoffLimit": 3}
    kube, name = target.kube, job["metadata"]["name"]
    kube.apply(job)
    kube.wait_for(f"{ns}/{name} to fail", lambda: phase(kube, ns, name) == "Failed", JOB_TIMEOUT)
    tj = kube.get("trainingjob", name, "-n", ns)

    def running() -> list[str]:
        pods = kube.get("pods", "-n", ns)["items"]
        return [
            p["metadata"]["name"]
            for p in pods
            if p["metadata"]["name"].startswith(f"{name}-")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]

    kube.wait_for(f"{ns}/{name}'s pods to be stopped", lambda: not running() or None, 60)
    return dict(tj), running()


def run_killed(
    target: Target, ns: str, file: str, victim: str, ready: str, env: dict[str, str]
) -> tuple[dict[str, Any], str]:
    """examples/real/<file> with `env` added to every container: once the pod `victim` has
    logged `ready`, SIGTERM its PID 1 (the trainer); wait for Succeeded; the job and logs."""
    kube = target.kube
    job = example(target, file, ns)
    for rs in job["spec"]["replicaSpecs"].values():
        for ctr in rs["template"]["spec"]["containers"]:
            ctr["env"] = [*ctr.get("env", []), *({"name": k, "value": v} for k, v in env.items())]
    kube.apply(job)
    kube.wait_for(
        f"{victim} to log {ready!r}", lambda: ready in logs(kube, ns, victim), JOB_TIMEOUT, 1.0
    )
    kube.run("exec", victim, "-n", ns, "--", "kill", "-TERM", "1")
    name = job["metadata"]["name"]
    tj = wait_finished(target, ns, name)
    pods = sorted(
        p["metadata"]["name"]
        for p in kube.get("pods", "-n", ns)["items"]
        if p["metadata"]["name"].startswith(f"{name}-")
    )
    return tj, "\n".join(f"--- {pod}\n{logs(kube, ns, pod)}" for pod in pods)


@contextlib.contextmanager
def tenant_queue(kube: Kube, name: str, namespace: str, gpus: int, **spec: Any) -> Iterator[str]:
    """A TrainingQueue serving `namespace` only (its default queue), with `gpus` GPUs of any
    product, that allows the hostPath volumes the tier's checkpoints go to; `spec`: more
    fields (preemption, topologyWaitSeconds). Deleted on the way out."""
    kube.apply(
        {
            "apiVersion": "trainop.dev/v1alpha1",
            "kind": "TrainingQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaces": [namespace],
                "default": True,
                "quotas": [{"name": "t4", "products": [], "gpus": gpus}],
                "policy": {"allowHostPath": True},
                **spec,
            },
        }
    )
    try:
        yield name
    finally:
        kube.run("delete", "trainingqueue", name, "--wait=false", check=False)
