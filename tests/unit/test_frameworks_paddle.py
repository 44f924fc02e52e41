"""Paddle wiring: collective-mode env, endpoints in rank order, loopback master on rank 0."""

from __future__ import annotations

import pytest

from trainop import frameworks as fw
from trainop.frameworks import Member, WiringInput, member_host


def gang(*members: tuple[str, int, int | None, int], port: int = 36543) -> WiringInput:
    """(role, index, rank, gpus) tuples -> WiringInput for job ernie in namespace team."""
    return WiringInput(
        job="ernie",
        namespace="team",
        members=tuple(
            Member(r, i, k, g, member_host("ernie", "team", r, i, served=True))
            for r, i, k, g in members
        ),
        port=port,
    )


def host(index: int) -> str:
    return f"ernie-worker-{index}.ernie.team.svc"


def test_two_workers() -> None:
    w = fw.wire("paddle", gang(("Worker", 0, 0, 8), ("Worker", 1, 1, 8)))
    endpoints = f"{host(0)}:36544,{host(1)}:36544"
    assert w.env == {
        ("Worker", 0): {
            "PADDLE_CURRENT_ENDPOINT": f"{host(0)}:36544",
            "PADDLE_MASTER": "127.0.0.1:36543",
            "PADDLE_NNODES": "2",
            "PADDLE_NPROC_PER_NODE": "8",
            "PADDLE_TRAINERS_NUM": "2",
            "PADDLE_TRAINER_ENDPOINTS": endpoints,
            "PADDLE_TRAINER_ID": "0",
        },
        ("Worker", 1): {
            "PADDLE_CURRENT_ENDPOINT": f"{host(1)}:36544",
            "PADDLE_MASTER": f"{host(0)}:36543",
            "PADDLE_NNODES": "2",
            "PADDLE_NPROC_PER_NODE": "8",
            "PADDLE_TRAINERS_NUM": "2",
            "PADDLE_TRAINER_ENDPOINTS": endpoints,
            "PADDLE_TRAINER_ID": "1",
        },
    }
    assert w.container_ports == {"Worker": (36543, 36544)}
    assert not w.needs_ssh and w.command_for is None and w.config_files == {}


ORDER_CASES = [
    pytest.param(
        [("Worker", 0, 0, 4), ("Worker", 1, 1, 4), ("Worker", 2, 2, 4)], [0, 1, 2], id="in-order"
    ),
    pytest.param(
        [("Worker", 0, 2, 4), ("Worker", 1, 0, 4), ("Worker", 2, 1, 4)],
        [1, 2, 0],
        id="rank-order-not-index",
    ),
    pytest.param(
        [("Worker", 1, None, 0), ("Worker", 0, None, 0)], [0, 1], id="unplaced-index-order"
    ),
]


@pytest.mark.parametrize(("members", "order"), ORDER_CASES)
def test_endpoints_follow_rank_order(
    members: list[tuple[str, int, int | None, int]], order: list[int]
) -> None:
    w = fw.wire("paddle", gang(*members))
    endpoints = ",".join(f"{host(i)}:36544" for i in order)
    for rank, index in enumerate(order):
        env = w.env[("Worker", index)]
        assert env["PADDLE_TRAINER_ENDPOINTS"] == endpoints
        assert env["PADDLE_TRAINER_ID"] == str(rank)
        assert env["PADDLE_CURRENT_ENDPOINT"] == endpoints.split(",")[rank]
        assert env["PADDLE_TRAINERS_NUM"] == env["PADDLE_NNODES"] == str(len(order))
        # Rank 0 serves the launcher's master on its own loopback; the rest dial it by name.
        master = "127.0.0.1:36543" if rank == 0 else f"{host(order[0])}:36543"
        assert env["PADDLE_MASTER"] == master


def test_cpu_pods_run_one_process() -> None:
    w = fw.wire("paddle", gang(("Worker", 0, 0, 0)))
    assert w.env[("Worker", 0)]["PADDLE_NPROC_PER_NODE"] == "1"


BACKEND_CASES = [
    # Without a named backend, init_parallel_env() on CPU never makes the global group.
    pytest.param(0, "gloo", id="cpu-pod-gloo"),
    pytest.param(8, None, id="gpu-pod-auto"),
]


@pytest.mark.parametrize(("gpus", "backend"), BACKEND_CASES)
def test_backend_is_gloo_on_cpu_pods_only(gpus: int, backend: str | None) -> None:
    w = fw.wire("paddle", gang(("Worker", 0, 0, gpus), ("Worker", 1, 1, gpus)))
    for env in w.env.values():
        assert env.get("PADDLE_DISTRI_BACKEND") == backend


def test_no_pod_ip() -> None:
    w = fw.wire("paddle", gang(("Worker", 0, 0, 8), ("Worker", 1, 1, 8)))
    for env in w.env.values():
        assert all("POD_IP" not in k and "$(" not in v for k, v in env.items())


def test_spec() -> None:
    spec = fw.get("paddle")
    assert spec.roles == ("Worker",)
    assert spec.default_port == 36543
