"""JAX wiring: coordinator of rank 0, one process per pod, process id = placement rank."""

from __future__ import annotations

import pytest

from trainop import frameworks as fw
from trainop.frameworks import Member, WiringInput, member_host


def gang(*members: tuple[str, int, int | None, int], port: int = 1234) -> WiringInput:
    """(role, index, rank, gpus) tuples -> WiringInput for job t5x in namespace team."""
    return WiringInput(
        job="t5x",
        namespace="team",
        members=tuple(
            Member(r, i, k, g, member_host("t5x", "team", r, i, served=True))
            for r, i, k, g in members
        ),
        port=port,
    )


COORD0 = "t5x-worker-0.t5x.team.svc:1234"
COORD2 = "t5x-worker-2.t5x.team.svc:1234"

CASES = [
    pytest.param(
        gang(("Worker", 0, 0, 8), ("Worker", 1, 1, 8)),
        {
            0: {"JAX_COORDINATOR_ADDRESS": COORD0, "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"},
            1: {"JAX_COORDINATOR_ADDRESS": COORD0, "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"},
        },
        id="two-pods",
    ),
    pytest.param(
        gang(("Worker", 0, 1, 8), ("Worker", 1, 2, 8), ("Worker", 2, 0, 8)),
        {
            0: {"JAX_COORDINATOR_ADDRESS": COORD2, "JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": "1"},
            1: {"JAX_COORDINATOR_ADDRESS": COORD2, "JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": "2"},
            2: {"JAX_COORDINATOR_ADDRESS": COORD2, "JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": "0"},
        },
        id="rank-from-placement-not-index",
    ),
]


@pytest.mark.parametrize(("inp", "want"), CASES)
def test_env_per_member(inp: WiringInput, want: dict[int, dict[str, str]]) -> None:
    w = fw.wire("jax", inp)
    assert w.env == {("Worker", i): env for i, env in want.items()}
    assert w.container_ports == {"Worker": (1234,)}
    assert not w.needs_ssh and w.command_for is None and w.config_files == {}


def test_coordinator_uses_given_port() -> None:
    env = fw.wire("jax", gang(("Worker", 0, 0, 8), port=6000)).env[("Worker", 0)]
    assert env["JAX_COORDINATOR_ADDRESS"] == "t5x-worker-0.t5x.team.svc:6000"


def test_spec() -> None:
    spec = fw.get("jax")
    assert spec.roles == ("Worker",)
    assert spec.default_port == 1234


def test_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one Worker"):
        fw.wire("jax", gang())
