"""MXNet wiring: DMLC_* env pointing every pod at the one scheduler, with role counts."""

from __future__ import annotations

import pytest

from trainop import frameworks as fw
from trainop.frameworks import Member, WiringInput, member_host


def gang(*members: tuple[str, int, int | None, int], port: int = 9091) -> WiringInput:
    """(role, index, rank, gpus) tuples -> WiringInput for job rn50 in namespace team."""
    return WiringInput(
        job="rn50",
        namespace="team",
        members=tuple(
            Member(r, i, k, g, member_host("rn50", "team", r, i, served=True))
            for r, i, k, g in members
        ),
        port=port,
    )


SCHEDULER = "rn50-scheduler-0.rn50.team.svc"

CASES = [
    pytest.param(
        gang(("Scheduler", 0, None, 0), ("Server", 0, None, 0), ("Worker", 0, 0, 8)),
        1,
        1,
        id="one-each",
    ),
    pytest.param(
        gang(
            ("Scheduler", 0, None, 0),
            ("Server", 0, None, 0),
            ("Server", 1, None, 0),
            ("Worker", 0, 1, 4),
            ("Worker", 1, 0, 4),
            ("Worker", 2, 2, 4),
        ),
        2,
        3,
        id="two-servers-three-workers",
    ),
]


@pytest.mark.parametrize(("inp", "servers", "workers"), CASES)
def test_env_per_member(inp: WiringInput, servers: int, workers: int) -> None:
    w = fw.wire("mxnet", inp)
    assert set(w.env) == {m.key for m in inp.members}
    for (role, _), env in w.env.items():
        assert env == {
            "DMLC_NUM_SERVER": str(servers),
            "DMLC_NUM_WORKER": str(workers),
            "DMLC_PS_ROOT_PORT": "9091",
            "DMLC_PS_ROOT_URI": SCHEDULER,
            "DMLC_ROLE": role.lower(),
            "DMLC_USE_KUBERNETES": "1",
        }
    assert w.container_ports == {"Scheduler": (9091,), "Server": (), "Worker": ()}
    assert not w.needs_ssh and w.command_for is None and w.config_files == {}


def test_roles_map_to_dmlc_role() -> None:
    w = fw.wire(
        "mxnet", gang(("Scheduler", 0, None, 0), ("Server", 0, None, 0), ("Worker", 0, 0, 8))
    )
    roles = {k: env["DMLC_ROLE"] for k, env in w.env.items()}
    assert roles == {
        ("Scheduler", 0): "scheduler",
        ("Server", 0): "server",
        ("Worker", 0): "worker",
    }


def test_port_is_the_scheduler_port() -> None:
    w = fw.wire(
        "mxnet",
        gang(("Scheduler", 0, None, 0), ("Server", 0, None, 0), ("Worker", 0, 0, 8), port=9000),
    )
    assert {env["DMLC_PS_ROOT_PORT"] for env in w.env.values()} == {"9000"}
    assert w.container_ports["Scheduler"] == (9000,)


def test_no_worker_id_is_set() -> None:
    # ps-lite hands out ranks itself; DMLC_WORKER_ID is BytePS's name, not MXNet's.
    w = fw.wire(
        "mxnet", gang(("Scheduler", 0, None, 0), ("Server", 0, None, 0), ("Worker", 0, 0, 8))
    )
    assert all("DMLC_WORKER_ID" not in env for env in w.env.values())


def test_wire_needs_one_scheduler() -> None:
    with pytest.raises(ValueError, match="exactly one Scheduler"):
        fw.wire("mxnet", gang(("Server", 0, None, 0), ("Worker", 0, 0, 8)))


def test_spec() -> None:
    spec = fw.get("mxnet")
    assert spec.roles == ("Scheduler", "Server", "Worker")
    assert spec.min_for("Scheduler") == 1 and spec.max_replicas == {"Scheduler": 1}
    assert spec.min_for("Server") == 1
    assert spec.ranked == ("Worker",)
    assert spec.default_port == 9091
