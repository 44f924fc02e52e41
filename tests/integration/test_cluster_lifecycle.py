"""`trainop cluster up` / `down` on a second, throwaway cluster: down leaves no process behind."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from trainop.cluster.local import LocalCluster

SMALL_FLEET = {
    "classes": {
        "t4": {
            "gpu": {
                "product": "Tesla-T4",
                "count": 4,
                "memoryMiB": 15360,
                "family": "turing",
                "computeCapability": "7.5",
            },
            "driver": "535.183.01",
            "cudaRuntime": "12.2",
        }
    },
    "groups": [{"class": "t4", "count": 2, "block": "b", "rack": "r", "prefix": "t4"}],
}


def _listening_ports(pids: set[int]) -> set[int]:
    """Ports held open by the given processes, read from /proc (no extra tools needed)."""
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            for fd in fd_dir.iterdir():
                target = fd.readlink().as_posix() if fd.is_symlink() else ""
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def test_up_then_down_leaves_nothing(tmp_path: Path) -> None:
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(SMALL_FLEET))
    lc = LocalCluster(name="trainop-lifecycle")
    try:
        lc.up(str(fleet_file))
        procs = lc.processes()
        assert set(procs) >= {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok-controller",
        }
        ports = _listening_ports(set(procs.values()))
        assert ports, "the components should be listening"
        assert lc.status()["readyNodes"] == 2
        lc.up(str(fleet_file))  # idempotent
        assert lc.processes() == procs, "a second up must reuse the running components"
    finally:
        lc.down()
    assert not lc.processes()
    assert not lc.exists()
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                continue
        # Open again: make test's other workers create clusters meanwhile, and kwokctl gives
        # each the first free ports, these among them. A leftover of this cluster is a
        # process whose command line names its directory (every component's does).
        mine = [p for p in _listeners(port) if str(lc.cluster_dir) in _cmdline(p)]
        assert not mine, f"port {port} still open after down: {[_cmdline(p) for p in mine]}"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _listeners(port: int) -> set[int]:
    """The processes listening on `port`: every process, by the ports its sockets hold."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and port in _listening_ports({int(proc.name)}):
            pids.add(int(proc.name))
    return pids
