"""Jobs that train, on real nodes, through the operator: DDP, MPI, and a gang restart."""

from __future__ import annotations

from tests.real.scenarios import (
    DDP_LINE,
    MPI_LINE,
    SOLO_LINE,
    Target,
    example,
    logs,
    run_ddp,
    run_mpi,
    run_restart,
    run_solo,
    wait_finished,
)


def test_real_node_is_labelled_with_gpu_capacity(target: Target) -> None:
    nodes = target.kube.get("nodes", "-l", "trainop.dev/real-node=true")["items"]
    assert len(nodes) == 1
    node = nodes[0]
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-T4"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")


def test_one_pod_two_process_job_allreduces(target: Target, namespace: str) -> None:
    """Issue 38: a one-pod job gets no Service, so MASTER_ADDR must be a name the pod
    resolves by itself (its hostname, in its /etc/hosts); it once named the Service and
    torchrun's store looped for ever on a name nobody served."""
    log, peers = run_solo(target, namespace)
    match = SOLO_LINE.search(log)
    assert match, log[-3000:]
    print(match.group(0))  # the checked line, for the run's record (-s, -rP)
    print(*peers, sep="\n")
    assert match.group(1) == "solo-worker-0"
    assert peers and "(solo-worker-0)" in peers[0]
    assert target.kube.maybe_get("service", "solo", "-n", namespace) is None


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


def test_own_image_without_cuda_or_version_trains(target: Target, namespace: str) -> None:
    """Issue 27's job: an image of the user's own, neither `cuda` nor `framework.version`,
    3 workers x 1 GPU. Its pods once carried `driver-version.major Gt "-1"`, which the API
    server refused (422); now the driver term is `Exists` and the gang trains."""
    job = example(target, "pytorch-ddp-cpu.yaml", namespace)
    job["metadata"]["name"] = "ddp-nocuda"
    spec = job["spec"]
    spec.pop("cuda", None)
    spec["framework"] = {"name": "pytorch"}
    spec["replicaSpecs"]["Worker"]["replicas"] = 3
    target.kube.apply(job)
    wait_finished(target, namespace, "ddp-nocuda")
    pod = target.kube.get("pod", "ddp-nocuda-worker-0", "-n", namespace)
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    exprs = [e for t in terms["nodeSelectorTerms"] for e in t.get("matchExpressions", [])]
    assert all(e.get("values", ["0"])[0][:1] != "-" for e in exprs), exprs
    log = logs(target.kube, namespace, "ddp-nocuda-worker-0")
    match = DDP_LINE.search(log)
    assert match, log[-3000:]
    assert float(match.group(2)) < float(match.group(1)) / 10
