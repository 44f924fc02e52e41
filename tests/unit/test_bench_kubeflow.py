"""The Kubeflow baseline's PyTorchJobs are the burst's gangs: same pods, GPUs and node choice."""

from __future__ import annotations

import pytest
from bench.kubeflow_baseline import pytorch_job
from bench.scale import Gang, bare_pod


@pytest.mark.parametrize(
    ("replicas", "roles"),
    [
        pytest.param(1, {"Master": 1}, id="one-pod-gang-is-a-master"),
        pytest.param(4, {"Master": 1, "Worker": 3}, id="master-plus-workers"),
    ],
)
def test_a_gang_becomes_one_pytorchjob(replicas: int, roles: dict[str, int]) -> None:
    body = pytorch_job("g", "ns", replicas, 8)
    specs = body["spec"]["pytorchReplicaSpecs"]
    assert {role: s["replicas"] for role, s in specs.items()} == roles
    bare = bare_pod(Gang("g", replicas, 8), 0, "ns")
    for spec in specs.values():
        pod = spec["template"]
        assert pod["metadata"]["labels"]["gang"] == "g"  # how the bench times its pods
        (container,) = pod["spec"]["containers"]
        assert container["name"] == "pytorch"  # the container the operator configures
        assert container["resources"] == bare["spec"]["containers"][0]["resources"]
        assert pod["spec"]["nodeSelector"] == bare["spec"]["nodeSelector"]
