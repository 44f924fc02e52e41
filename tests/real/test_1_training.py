"""Jobs that train, on real nodes, through the operator: DDP, MPI, and a gang restart."""

from __future__ import annotations

from tests.real.scenarios import DDP_LINE, MPI_LINE, Target, run_ddp, run_mpi, run_restart


def test_real_node_is_labelled_with_gpu_capacity(target: Target) -> None:
    nodes = target.kube.get("nodes", "-l", "trainop.dev/real-node=true")["items"]
    assert len(nodes) == 1
    node = nodes[0]
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-T4"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")


def test_pytorch_ddp_trains_and_loss_goes_down(target: Target, namespace: str) -> None:
    log = run_ddp(target, namespace)
    assert "trainop-launch: no NVIDIA GPU found" in log
    match = DDP_LINE.search(log)
    assert match, log[-3000:]
    first, last = float(match.group(1)), float(match.group(2))
    assert last < first / 10


def test_mpi_allreduce_over_ssh(target: Target, namespace: str) -> None:
    log = run_mpi(target, namespace)
    assert MPI_LINE.search(log), log[-3000:]
    hosts = log.split("mpi: hosts=", 1)[1].split()[0].split(",")
    assert sorted(hosts) == ["mpi-cpu-worker-0", "mpi-cpu-worker-1"]


def test_killed_worker_restarts_gang_and_job_succeeds(target: Target, namespace: str) -> None:
    tj, log = run_restart(target, namespace)
    assert tj["status"]["restartCount"] >= 1
    assert DDP_LINE.search(log), log[-3000:]
