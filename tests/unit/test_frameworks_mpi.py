"""MPI wiring: hostfile in rank order, launcher env, ssh, and the launcher's DNS wait."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from trainop import frameworks as fw
from trainop.frameworks import Member, WiringInput, member_host, mpi


def gang(*members: tuple[str, int, int | None, int]) -> WiringInput:
    """(role, index, rank, gpus) tuples -> WiringInput for job hvd in namespace team."""
    return WiringInput(
        job="hvd",
        namespace="team",
        members=tuple(
            Member(r, i, k, g, member_host("hvd", "team", r, i, served=True))
            for r, i, k, g in members
        ),
    )


def worker(index: int) -> str:
    return f"hvd-worker-{index}.hvd.team.svc"


HOSTFILE_CASES = [
    pytest.param(
        gang(("Launcher", 0, None, 0), ("Worker", 0, 0, 8), ("Worker", 1, 1, 8)),
        f"{worker(0)} slots=8\n{worker(1)} slots=8\n",
        id="two-by-eight",
    ),
    pytest.param(
        gang(
            ("Launcher", 0, None, 0), ("Worker", 0, 2, 4), ("Worker", 1, 0, 4), ("Worker", 2, 1, 4)
        ),
        f"{worker(1)} slots=4\n{worker(2)} slots=4\n{worker(0)} slots=4\n",
        id="rank-order-not-index",
    ),
    pytest.param(
        gang(("Launcher", 0, None, 0), ("Worker", 0, None, 0), ("Worker", 1, None, 0)),
        f"{worker(0)} slots=1\n{worker(1)} slots=1\n",
        id="cpu-workers-one-slot",
    ),
]


@pytest.mark.parametrize(("inp", "content"), HOSTFILE_CASES)
def test_hostfile_lists_every_worker_with_gpu_slots_in_rank_order(
    inp: WiringInput, content: str
) -> None:
    w = fw.wire("mpi", inp)
    assert w.config_files == {"hostfile": content}
    # The launcher runs no ranks, so it is never a hostfile entry.
    assert "launcher" not in content


def test_launcher_env() -> None:
    w = fw.wire("mpi", gang(("Launcher", 0, None, 0), ("Worker", 0, 0, 8)))
    assert w.env[("Launcher", 0)] == {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_orte_default_hostfile": "/etc/trainop/hostfile",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_plm_rsh_args": (
            "-o ConnectionAttempts=10 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
        ),
        "PRTE_MCA_plm_ssh_args": (
            "-o ConnectionAttempts=10 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
        ),
        "PRTE_MCA_prte_default_hostfile": "/etc/trainop/hostfile",
        "PRTE_MCA_prte_keep_fqdn_hostnames": "1",
    }
    assert w.env[("Worker", 0)] == {}


def test_ssh_ports_and_wrapper() -> None:
    w = fw.wire("mpi", gang(("Launcher", 0, None, 0), ("Worker", 0, 0, 8), ("Worker", 1, 1, 8)))
    assert w.needs_ssh
    assert w.container_ports == {"Launcher": (), "Worker": (22,)}
    assert w.command_for is not None and set(w.command_for) == {"Launcher"}
    sh, flag, script, name = w.command_for["Launcher"]
    assert (sh, flag, name) == ("/bin/sh", "-c", "trainop-wait-for-workers")
    assert "getent hosts" in script
    assert "/etc/trainop/hostfile" in script
    assert "+ 300 ))" in script
    assert script.rstrip().endswith('exec "$@"')


@pytest.mark.parametrize(
    "members",
    [
        pytest.param([("Worker", 0, 0, 8)], id="no-launcher"),
        pytest.param([("Launcher", 0, None, 0)], id="no-workers"),
        pytest.param(
            [("Launcher", 0, None, 0), ("Launcher", 1, None, 0), ("Worker", 0, 0, 8)],
            id="two-launchers",
        ),
    ],
)
def test_wire_needs_one_launcher_and_workers(
    members: list[tuple[str, int, int | None, int]],
) -> None:
    with pytest.raises(ValueError, match="exactly one Launcher"):
        fw.wire("mpi", gang(*members))


def test_spec() -> None:
    spec = fw.get("mpi")
    assert spec.roles == ("Launcher", "Worker")
    assert spec.ranked == ("Worker",)
    assert spec.min_for("Launcher") == 1 and spec.max_replicas["Launcher"] == 1


# --- the wait script, run for real under sh --------------------------------------------

needs_sh = pytest.mark.skipif(
    not (shutil.which("sh") and shutil.which("getent")), reason="needs sh and getent"
)


def run_wrapper(hostfile: Path, timeout_s: int, *command: str) -> subprocess.CompletedProcess[str]:
    argv = [*mpi.launcher_command(str(hostfile), timeout_s), *command]
    argv[0] = shutil.which("sh") or "/bin/sh"
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


@needs_sh
def test_wait_script_execs_command_once_hosts_resolve(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=8\nlocalhost slots=8\n")
    done = run_wrapper(hostfile, 5, "echo", "trained", "with spaces")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "trained with spaces\n"


@needs_sh
def test_wait_script_times_out(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    # RFC 6761: .invalid never resolves; /etc/hosts answers for localhost first.
    hostfile.write_text("localhost slots=1\nnope.invalid slots=1\n")
    done = run_wrapper(hostfile, 0, "echo", "never")
    assert done.returncode == 1
    assert "nope.invalid did not resolve within 0s" in done.stderr
    assert "never" not in done.stdout


@needs_sh
@pytest.mark.parametrize(
    ("make_file", "command", "rc", "message"),
    [
        pytest.param(True, [], 64, "no command to run", id="no-command"),
        pytest.param(False, ["true"], 1, "cannot read", id="no-hostfile"),
    ],
)
def test_wait_script_fails_loudly(
    tmp_path: Path, make_file: bool, command: list[str], rc: int, message: str
) -> None:
    hostfile = tmp_path / "hostfile"
    if make_file:
        hostfile.write_text("localhost slots=1\n")
    done = run_wrapper(hostfile, 1, *command)
    assert done.returncode == rc
    assert message in done.stderr
