"""The SDK (trainop.sdk.TrainopClient) against the local API server and the real operator:
train() a function as a 2-node gang and follow it with wait() (callback), progress, events
and explain; suspend, resume, delete; submit() of YAML and its refusals; list_runtimes()
and what train() makes of a runtime. The KWOK pods run nothing, so the function itself is
not run here (the unit tests run it through trainop.launcher.sdkrun and the local
backend); the pods are finished with trainop.dev/fake-exit-code."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import job, runtime
from tests.integration.conftest import Kube
from trainop.sdk import (
    ApiError,
    InvalidJobError,
    Job,
    JobExistsError,
    JobNotFoundError,
    RuntimeNotFoundError,
    TrainopClient,
)

pytestmark = pytest.mark.usefixtures("operator")


def train_ddp(steps: int = 10) -> None:
    import os

    print("rank", os.environ["RANK"], "steps", steps)


def _client(kube: Kube, namespace: str) -> TrainopClient:
    return TrainopClient(namespace, kubeconfig=kube.kubeconfig, poll_seconds=0.3)


def _finish(kube: Kube, namespace: str, name: str) -> None:
    kube.run(
        "annotate", "pods", "-n", namespace, "-l", f"trainop.dev/job-name={name}",
        "trainop.dev/fake-exit-code=0",
    )  # fmt: skip


def _container(tj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = tj["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    return out


def test_train_a_two_node_gang_and_follow_it(kube: Kube, namespace: str) -> None:
    sdk = _client(kube, namespace)
    name = sdk.train(train_ddp, runtime=None, num_nodes=2, gpus_per_node=8, args={"steps": 20})
    assert name.startswith("train-ddp-")
    stored = kube.get("trainingjob", name, "-n", namespace)
    assert _container(stored)["command"] == [
        "trainop-launch",
        "--",
        "torchrun",
        "-m",
        "trainop.launcher.sdkrun",
    ]
    seen: list[str] = []
    running = sdk.wait(name, until="Running", timeout=90, callback=lambda j: seen.append(j.phase))
    assert isinstance(running, Job) and running.status is not None
    assert running.status.placement is not None and len(running.status.placement.nodes) == 2
    assert seen[-1] == "Running" and len(set(seen)) == len(seen)  # once per change
    pods = kube.get("pods", "-n", namespace, "-l", f"trainop.dev/job-name={name}")["items"]
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["TRAINOP_SDK_FUNC"] and env["PET_NNODES"] == "2" and env["PYTHONUNBUFFERED"] == "1"
    assert sdk.progress(name) is None  # nothing reported: KWOK pods run nothing
    # Admitted at its first decision: no GangPlaced Event (docs/operator.md#events).
    assert "GangPlaced" not in [e.reason for e in sdk.events(name)]
    assert name in sdk.explain(name)
    # logs() finds rank 0's pod and asks for its log; a KWOK node has no kubelet to serve it,
    # and the API server's answer comes back as a typed error in its own words
    with pytest.raises(ApiError, match="no preferred addresses"):
        list(sdk.logs(name, rank=0, follow=False))
    _finish(kube, namespace, name)
    done = sdk.wait(name, timeout=90)
    assert done.phase == "Succeeded"
    assert [j.name for j in sdk.list_jobs()] == [name]


def test_suspend_resume_delete(kube: Kube, namespace: str) -> None:
    sdk = _client(kube, namespace)
    name = sdk.train(train_ddp, runtime=None, num_nodes=1, gpus_per_node=1, name="pausable")
    sdk.wait(name, until="Running", timeout=90)
    sdk.suspend(name)
    sdk.wait(name, until="Suspended", timeout=60)
    sdk.resume(name)
    sdk.wait(name, until="Running", timeout=90)
    sdk.delete(name)
    kube.wait_for(
        "the job gone", lambda: kube.maybe_get("trainingjob", name, "-n", namespace) is None
    )
    with pytest.raises(JobNotFoundError, match=f"TrainingJob {namespace}/pausable not found"):
        sdk.get(name)
    with pytest.raises(JobNotFoundError):
        sdk.delete(name)


def test_submit_yaml_and_its_refusals(kube: Kube, namespace: str) -> None:
    sdk = _client(kube, namespace)
    body = job("yamljob", namespace=namespace, workers=1, gpus=1).build()
    import yaml

    assert sdk.submit(yaml.safe_dump(body)) == "yamljob"
    assert sdk.get("yamljob").name == "yamljob"
    with pytest.raises(JobExistsError, match="already exists"):
        sdk.submit(body)
    bad = job("badjob", namespace=namespace, workers=1, gpus=1).build()
    bad["spec"]["replicaSpecs"]["Worker"]["gpus"] = -1
    with pytest.raises(InvalidJobError) as err:
        sdk.submit(bad)
    assert err.value.field == "spec.replicaSpecs.Worker.gpus"
    with pytest.raises(InvalidJobError, match=r"env\.TRAINOP_SDK_FUNC"):
        sdk.train(
            train_ddp, runtime=None, num_nodes=1, gpus_per_node=1, env={"TRAINOP_SDK_FUNC": "x"}
        )


def _runtime_crds(kube: Kube) -> None:
    for crd in ("clustertrainingruntimes", "trainingruntimes"):
        kube.wait_for(
            f"CRD {crd}.trainop.dev Established",
            lambda crd=crd: any(
                c.get("type") == "Established" and c.get("status") == "True"
                for c in (kube.get("crd", f"{crd}.trainop.dev").get("status") or {}).get(
                    "conditions"
                )
                or []
            ),
            timeout=30,
        )


def test_runtimes_listed_checked_and_named(kube: Kube, namespace: str) -> None:
    _runtime_crds(kube)
    cluster_rt = f"{namespace}-torch"[:60]
    torch = (
        runtime(cluster_rt)
        .framework("pytorch", "2.4")
        .role(
            "Worker",
            template={
                "spec": {
                    "containers": [{"name": "pytorch", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}]
                }
            },
        )
        .build()
    )
    jax = runtime("jx", namespace=namespace).framework("jax").build()
    kube.apply(torch)
    kube.apply(jax)
    try:
        sdk = _client(kube, namespace)
        listed = {(r.kind, r.name): r for r in sdk.list_runtimes()}
        assert listed[("ClusterTrainingRuntime", cluster_rt)].framework == "pytorch"
        assert listed[("TrainingRuntime", "jx")].namespace == namespace
        assert listed[("TrainingRuntime", "jx")].spec is not None
        with pytest.raises(
            RuntimeNotFoundError,
            match=f"ClusterTrainingRuntime missing not found: runtimes here: .*{cluster_rt}",
        ):
            sdk.train(train_ddp, runtime="missing", num_nodes=1, gpus_per_node=1)
        with pytest.raises(InvalidJobError, match="jx is a jax runtime") as err:
            sdk.train(train_ddp, runtime="TrainingRuntime/jx", num_nodes=1, gpus_per_node=1)
        assert err.value.field == "runtime"
        name = sdk.train(train_ddp, runtime=cluster_rt, num_nodes=2, gpus_per_node=8)
        stored = kube.get("trainingjob", name, "-n", namespace)
        assert stored["spec"]["runtimeRef"] == {
            "kind": "ClusterTrainingRuntime",
            "name": cluster_rt,
        }
        assert "framework" not in stored["spec"]  # the runtime's, version included
        assert _container(stored)["name"] == "pytorch"  # merged over the runtime's container
        # the operator merges it: admitted and running, status.runtime says which generation
        job = sdk.wait(name, until="Running", timeout=90)
        assert job.status is not None and job.status.runtime is not None
        assert (job.status.runtime.name, job.status.runtime.generation) == (cluster_rt, 1)
        pods = kube.get("pods", "-n", namespace, "-l", f"trainop.dev/job-name={name}")["items"]
        trainer = pods[0]["spec"]["containers"][0]
        assert (
            trainer["name"] == "pytorch" and trainer["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
        )
        assert trainer["command"][:2] == ["trainop-launch", "--"]
    finally:
        kube.run("delete", "clustertrainingruntime", cluster_rt, "--wait=false", check=False)
