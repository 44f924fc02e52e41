"""The real tier's elastic scenario (issue 25): a CPU DDP job under torchrun's elastic agent
starts at 2 of max 3 workers, grows to 3 when a job holding two of the real node's four GPU
slots ends, and shrinks back to 2 when a higher-priority job needs two; its training goes on
from its checkpoint through both changes.

The job is examples/real/pytorch-elastic-cpu.yaml; its namespace gets a TrainingQueue of its
own (the built-in queue never preempts) and the urgent job a PriorityClass. Rank 0 lands on
worker 0 (c10d ranks follow the sorted node names), so worker 0's log holds the
`elastic: rank 0 world <w> step <s>` lines read here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tests.builders import job, queue
from tests.real.scenarios import JOB_TIMEOUT, Target, example, logs

RANK0 = re.compile(r"elastic: rank 0 world (\d+) step (\d+) ")
NAME = "elastic-cpu"


@dataclass
class Phases:
    """Rank 0's (step -> world size) as seen so far, and its stretches at one size.

    Polled and merged, not read once at the end: a log read later may have lost its first
    lines (kubelet rotates container logs). Steps only go up (each restart resumes after the
    last checkpointed step), so the stretches are the runs of equal world size by step."""

    seen: dict[int, int] = field(default_factory=dict)

    def add(self, log: str) -> Phases:
        for world, step in RANK0.findall(log):
            self.seen[int(step)] = int(world)
        return self

    @property
    def runs(self) -> list[tuple[int, int, int]]:
        """(world size, first step, last step) of each stretch, in step order."""
        out: list[tuple[int, int, int]] = []
        for step in sorted(self.seen):
            world = self.seen[step]
            if out and out[-1][0] == world:
                out[-1] = (world, out[-1][1], step)
            else:
                out.append((world, step, step))
        return out

    def worlds(self) -> list[int]:
        return [w for w, _, _ in self.runs]


def _sleeper(target: Target, ns: str, name: str, priority: str | None = None) -> dict[str, Any]:
    """A one-pod job holding two GPU slots of the real node and doing nothing."""
    builder = job(name, version="1.13", cuda="12.2", namespace=ns, workers=1, gpus=2)
    builder.set("image", target.images["pytorch-cpu"]).template(
        containers=[{"name": "trainer", "command": ["sleep", "3600"]}]
    )
    if priority:
        builder.priority(priority)
    return builder.manifest()


def _running(target: Target, ns: str, name: str) -> list[str]:
    pods = target.kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"]
    return sorted(
        p["metadata"]["name"]
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


def _wait_world(target: Target, ns: str, phases: Phases, world: int, stretch: int) -> None:
    """Until rank 0 has trained at `world` workers in its `stretch`-th stretch (0-based)."""

    def seen() -> bool:
        runs = phases.add(logs(target.kube, ns, f"{NAME}-worker-0")).runs
        return (
            len(runs) > stretch
            and runs[stretch][0] == world
            and runs[stretch][2] > runs[stretch][1]
        )

    target.kube.wait_for(f"rank 0 training at world {world}", seen, JOB_TIMEOUT, interval=1.0)


def run_elastic(target: Target, ns: str) -> Phases:
    kube = target.kube
    priority = f"{ns}-urgent"
    # The checkpoint is a hostPath (one node): the job's queue must allow it.
    tq = queue(ns).serves(ns, default=True).policy(allowHostPath=True)
    kube.apply(tq.set("topologyWaitSeconds", 0).build())
    kube.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": priority},
            "value": 1000,
        }
    )
    try:
        kube.apply(_sleeper(target, ns, "hold"))
        kube.wait_for("hold running", lambda: _running(target, ns, "hold"), JOB_TIMEOUT)
        body = example(target, "pytorch-elastic-cpu.yaml", ns)
        container = body["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        container["env"] = [{"name": "TRAINOP_CHECKPOINT", "value": f"/checkpoint/{ns}.pt"}]
        kube.apply(body)
        phases = Phases()
        _wait_world(target, ns, phases, 2, 0)
        assert _running(target, ns, NAME) == [f"{NAME}-worker-0", f"{NAME}-worker-1"]
        kube.run("delete", "trainingjob", "hold", "-n", ns)
        _wait_world(target, ns, phases, 3, 1)
        kube.apply(_sleeper(target, ns, "urgent", priority))
        kube.wait_for("urgent running", lambda: _running(target, ns, "urgent"), JOB_TIMEOUT)
        _wait_world(target, ns, phases, 2, 2)
        return phases
    finally:
        kube.run("delete", "trainingqueue", ns, "--wait=false", check=False)
        kube.run("delete", "priorityclass", priority, "--wait=false", check=False)
