"""PyTorch wiring: torchrun's PET_* env and the plain MASTER_*/WORLD_SIZE/NODE_RANK twins."""

from __future__ import annotations

import pytest

from trainop import frameworks as fw
from trainop.frameworks import Member, WiringInput, member_host


def gang(*members: tuple[str, int, int | None, int], port: int = 29500) -> WiringInput:
    """(role, index, rank, gpus) tuples -> WiringInput for job bert in namespace team."""
    return WiringInput(
        job="bert",
        namespace="team",
        members=tuple(
            Member(r, i, k, g, member_host("bert", "team", r, i, served=True))
            for r, i, k, g in members
        ),
        port=port,
    )


def host(index: int) -> str:
    return f"bert-worker-{index}.bert.team.svc"


CASES = [
    pytest.param(
        gang(("Worker", 0, 0, 8), ("Worker", 1, 1, 8)),
        {
            0: {
                "PET_NNODES": "2",
                "PET_NPROC_PER_NODE": "8",
                "PET_NODE_RANK": "0",
                "PET_MASTER_ADDR": host(0),
                "PET_MASTER_PORT": "29500",
                "MASTER_ADDR": host(0),
                "MASTER_PORT": "29500",
                "WORLD_SIZE": "16",
                "NODE_RANK": "0",
            },
            1: {
                "PET_NNODES": "2",
                "PET_NPROC_PER_NODE": "8",
                "PET_NODE_RANK": "1",
                "PET_MASTER_ADDR": host(0),
                "PET_MASTER_PORT": "29500",
                "MASTER_ADDR": host(0),
                "MASTER_PORT": "29500",
                "WORLD_SIZE": "16",
                "NODE_RANK": "1",
            },
        },
        id="two-nodes-by-eight",
    ),
    pytest.param(
        gang(("Worker", 0, 2, 4), ("Worker", 1, 0, 4), ("Worker", 2, 1, 4), port=23456),
        {
            0: {
                "PET_NNODES": "3",
                "PET_NPROC_PER_NODE": "4",
                "PET_NODE_RANK": "2",
                "PET_MASTER_ADDR": host(1),
                "PET_MASTER_PORT": "23456",
                "MASTER_ADDR": host(1),
                "MASTER_PORT": "23456",
                "WORLD_SIZE": "12",
                "NODE_RANK": "2",
            },
            1: {
                "PET_NNODES": "3",
                "PET_NPROC_PER_NODE": "4",
                "PET_NODE_RANK": "0",
                "PET_MASTER_ADDR": host(1),
                "PET_MASTER_PORT": "23456",
                "MASTER_ADDR": host(1),
                "MASTER_PORT": "23456",
                "WORLD_SIZE": "12",
                "NODE_RANK": "0",
            },
            2: {
                "PET_NNODES": "3",
                "PET_NPROC_PER_NODE": "4",
                "PET_NODE_RANK": "1",
                "PET_MASTER_ADDR": host(1),
                "PET_MASTER_PORT": "23456",
                "MASTER_ADDR": host(1),
                "MASTER_PORT": "23456",
                "WORLD_SIZE": "12",
                "NODE_RANK": "1",
            },
        },
        id="rank-from-placement-not-index",
    ),
    pytest.param(
        gang(("Worker", 0, None, 0), ("Worker", 1, None, 0)),
        {
            0: {
                "PET_NNODES": "2",
                "PET_NPROC_PER_NODE": "1",
                "PET_NODE_RANK": "0",
                "PET_MASTER_ADDR": host(0),
                "PET_MASTER_PORT": "29500",
                "MASTER_ADDR": host(0),
                "MASTER_PORT": "29500",
                "WORLD_SIZE": "2",
                "NODE_RANK": "0",
            },
            1: {
                "PET_NNODES": "2",
                "PET_NPROC_PER_NODE": "1",
                "PET_NODE_RANK": "1",
                "PET_MASTER_ADDR": host(0),
                "PET_MASTER_PORT": "29500",
                "MASTER_ADDR": host(0),
                "MASTER_PORT": "29500",
                "WORLD_SIZE": "2",
                "NODE_RANK": "1",
            },
        },
        id="cpu-pods-one-process-each",
    ),
]


@pytest.mark.parametrize(("inp", "want"), CASES)
def test_env_per_member(inp: WiringInput, want: dict[int, dict[str, str]]) -> None:
    w = fw.wire("pytorch", inp)
    assert w.env == {("Worker", i): env for i, env in want.items()}
    assert w.container_ports == {"Worker": (inp.port,)}
    assert w.config_files == {}
    assert not w.needs_ssh
    assert w.command_for is None


def test_spec() -> None:
    spec = fw.get("pytorch")
    assert spec.roles == ("Worker",)
    assert spec.ranked == ("Worker",)
    assert spec.default_port == 29500


def test_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one Worker"):
        fw.wire("pytorch", gang())
