"""Entry point of `trainop-launch`: discover GPUs and NICs, set NCCL's env, exec the trainer.

`trainop-launch [--dry-run] [--topo-file PATH] [--] COMMAND [ARGS...]`

Neighbours: `trainop.launcher.discover` reads sysfs/procfs/NVML, `trainop.launcher.topology`
ranks GPU-to-NIC paths. The operator (trainop.nccl.tuning) sets NCCL_IB_HCA to every
compute HCA of the node because the kubelet, not trainop, picks the GPUs; here, inside
the container, the GPUs are known, so the list is narrowed to the HCAs nearest to them.

What it sets (NCCL's variables: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html):
- CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA numbers GPUs in the bus order used here (CUDA's
  default puts the fastest first: https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars);
- NCCL_IB_HCA="=<nics>": the nearest RDMA NICs of the container's GPUs, `=` for exact
  names (without it, mlx5_1 would also match mlx5_10..mlx5_19). An NCCL_IB_HCA already in
  the environment bounds the choice: only NICs it allows are candidates.
- NCCL_SOCKET_IFNAME="=<default-route interface>" for NCCL's bootstrap, unless set;
- NCCL_TOPO_FILE=<path> when --topo-file (or TRAINOP_NCCL_TOPO_FILE) names an existing file.
No GPU: nothing is set, the command runs as given.

Also, for MPI jobs: when the job's SSH Secret is mounted at /etc/trainop-ssh, its keys
are installed into ~/.ssh with the modes ssh and sshd insist on (Secret volumes are
group-readable, which sshd refuses).

With progress reports wired and spec.checkpoint.signal set, it stays as the trainer's
parent and turns a checkpoint request into that signal (trainop.launcher.forward); the
trainer's own reports go through trainop.launcher.progress.

Before it execs the trainer it waits until every gang host name the operator wrote into
the pod (TRAINOP_PEER_HOSTS) resolves, and fails the pod naming the one that never does
(trainop.launcher.peers): a gang that cannot meet fails loud instead of hanging.

It prints one line on stderr saying what it found, chose and why. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from trainop.launcher import discover, forward, peers, topology
from trainop.launcher.topology import PciDevice

SSH_SOURCE = "/etc/trainop-ssh"
SSH_FILES = ("id_ed25519", "id_ed25519.pub", "authorized_keys")
TOPO_FILE_ENV = "TRAINOP_NCCL_TOPO_FILE"
ROOT_ENV = "TRAINOP_LAUNCH_ROOT"  # a fake machine for --dry-run demos and tests


@dataclass
class Plan:
    """Environment changes and the reasons, in the order they are printed."""

    env: dict[str, str] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    def line(self, command: Sequence[str]) -> str:
        tail = ["exec " + " ".join(command)] if command else []
        return "trainop-launch: " + "; ".join([*self.reasons, *tail])


def parse_hca_filter(value: str) -> tuple[str, list[str]]:
    """NCCL_IB_HCA as (mode, names): mode "=" exact, "^" exclude, "" prefix match.

    Port suffixes (mlx5_0:1) are dropped: the choice here is per device.
    """
    mode = value[:1] if value[:1] in ("=", "^") else ""
    body = value[len(mode) :]
    names = [n.split(":", 1)[0].strip() for n in body.split(",") if n.strip()]
    return mode, names


def allowed(nic: str, mode: str, names: Sequence[str]) -> bool:
    if not names:
        return True
    if mode == "^":
        return not any(nic.startswith(n) for n in names)
    if mode == "=":
        return nic in names
    return any(nic.startswith(n) for n in names)


def _visible(gpus: Sequence[PciDevice], env: Mapping[str, str]) -> tuple[Sequence[PciDevice], str]:
    """Apply CUDA_VISIBLE_DEVICES when it is a list of indices (bus order, set above)."""
    value = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not value:
        return gpus, ""
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        return gpus, f"CUDA_VISIBLE_DEVICES={value} is not indices, all GPUs considered"
    picked = [gpus[int(p)] for p in parts if int(p) < len(gpus)]
    return picked, f"CUDA_VISIBLE_DEVICES={value}"


def _hca_plan(
    plan: Plan, gpus: Sequence[PciDevice], nics: Sequence[PciDevice], env: Mapping[str, str]
) -> None:
    if not nics:
        plan.reasons.append("no RDMA NIC in /sys/class/infiniband, NCCL_IB_HCA untouched")
        return
    current = env.get("NCCL_IB_HCA", "")
    mode, names = parse_hca_filter(current)
    candidates = [n for n in nics if allowed(n.name, mode, names)]
    if not candidates:
        plan.reasons.append(f"no RDMA NIC allowed by NCCL_IB_HCA={current}, left as is")
        return
    choices = topology.choose(gpus, candidates)
    hcas = topology.union_in_order(choices)
    plan.env["NCCL_IB_HCA"] = "=" + ",".join(hcas)
    why = ", ".join(f"{c.gpu.name}->{'+'.join(c.nics)} {c.klass}" for c in choices)
    bound = f" within NCCL_IB_HCA={current}" if current else ""
    plan.reasons.append(f"NCCL_IB_HCA={plan.env['NCCL_IB_HCA']} (nearest{bound}: {why})")


def make_plan(
    env: Mapping[str, str],
    gpus: discover.Gpus,
    nics: Sequence[PciDevice],
    route_ifname: str,
    topo_file: str = "",
) -> Plan:
    """What to set, given what was discovered (pure: the tests drive it with fake trees)."""
    plan = Plan()
    if not gpus.devices:
        why = gpus.note or "no NVML, no /proc/driver/nvidia/gpus"
        plan.reasons.append(f"no NVIDIA GPU found ({why}): environment unchanged")
        return plan
    visible, note = _visible(gpus.devices, env)
    models = sorted({g.model for g in visible if g.model})
    plan.reasons.append(
        f"{len(visible)} GPU(s) via {gpus.source}"
        + (f" ({', '.join(models)})" if models else "")
        + (f", {note}" if note else "")
    )
    plan.env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    _hca_plan(plan, visible, nics, env)
    if "NCCL_SOCKET_IFNAME" in env:
        plan.reasons.append(f"NCCL_SOCKET_IFNAME={env['NCCL_SOCKET_IFNAME']} kept (already set)")
    elif route_ifname:
        plan.env["NCCL_SOCKET_IFNAME"] = "=" + route_ifname
        plan.reasons.append(f"NCCL_SOCKET_IFNAME=={route_ifname} (the default route's interface)")
    if topo_file:
        if Path(topo_file).is_file():
            plan.env["NCCL_TOPO_FILE"] = topo_file
            plan.reasons.append(f"NCCL_TOPO_FILE={topo_file}")
        else:
            plan.reasons.append(f"topology file {topo_file} not found, NCCL_TOPO_FILE not set")
    return plan


def install_ssh_keys(source: Path, home: Path) -> str:
    """Copy the job's keys to ~/.ssh (0700, keys 0600); "" when no keys are mounted."""
    if not (source / "id_ed25519").is_file():
        return ""
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(ssh, 0o700)
    copied = []
    for name in SSH_FILES:
        src = source / name
        if src.is_file():
            shutil.copyfile(src, ssh / name)
            os.chmod(ssh / name, 0o600)
            copied.append(name)
    return f"ssh keys {','.join(copied)} installed in {ssh}"


def _load_nvml() -> ModuleType | None:
    try:
        import pynvml
    except Exception:  # not installed, or a broken install: use procfs
        return None
    return pynvml


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainop-launch",
        usage="%(prog)s [-h] [--dry-run] [--topo-file PATH] [--] COMMAND [ARGS...]",
        description="Discover the container's GPUs and RDMA NICs, set NCCL's environment "
        "(CUDA_DEVICE_ORDER, NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_TOPO_FILE) and exec COMMAND.",
        epilog=f"Everything after COMMAND (or after --) is passed to it untouched. "
        f"{TOPO_FILE_ENV} is the default of --topo-file; {ROOT_ENV} points discovery at a "
        "fake machine (for --dry-run demos).",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the variables that would be set (NAME=VALUE), run nothing",
    )
    parser.add_argument(
        "--topo-file",
        metavar="PATH",
        default=os.environ.get(TOPO_FILE_ENV, ""),
        help="an NCCL topology XML file to pass as NCCL_TOPO_FILE when it exists",
    )
    # REMAINDER: the trainer's own options (torchrun --nproc-per-node ...) are not ours.
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARGS...]")
    return parser


def _parse(argv: Sequence[str]) -> tuple[bool, str, list[str]]:
    parser = _parser()
    ns = parser.parse_args(list(argv))
    command: list[str] = list(ns.command)
    if command[:1] == ["--"]:  # REMAINDER keeps the separator on Python 3.11
        command = command[1:]
    if not command and not ns.dry_run:
        parser.error("a COMMAND to run is required (or --dry-run)")
    return ns.dry_run, ns.topo_file, command


# Exit status when a peer's name never resolves (sysexits' EX_TEMPFAIL: try again later).
EXIT_PEER_UNRESOLVED = 75


def _wait_for_peers(env: Mapping[str, str]) -> None:
    """Every gang host name the operator wrote into this pod resolves, or the pod fails
    with a message naming it (trainop.launcher.peers)."""
    names = peers.hosts(env)
    if not names:
        return
    outcome = peers.wait_for(names, peers.timeout_of(env))
    if not outcome.missing:
        print(outcome.line(), file=sys.stderr, flush=True)
        return
    message = peers.failure_message(outcome, env)
    peers.write_termination(message)
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(EXIT_PEER_UNRESOLVED)


def main(argv: Sequence[str] | None = None) -> None:
    dry_run, topo_file, command = _parse(sys.argv[1:] if argv is None else argv)
    root = Path(os.environ.get(ROOT_ENV, "/"))
    gpus = discover.discover_gpus(root, _load_nvml())
    nics = discover.discover_nics(root) if gpus.devices else ()
    route = discover.default_route_interface(root) if gpus.devices else ""
    plan = make_plan(os.environ, gpus, nics, route, topo_file)
    ssh = install_ssh_keys(Path(SSH_SOURCE), Path.home()) if not dry_run else ""
    if ssh:
        plan.reasons.append(ssh)
    print(plan.line(command), file=sys.stderr, flush=True)
    if dry_run:
        for name in sorted(plan.env):
            print(f"{name}={plan.env[name]}")
        return
    os.environ.update(plan.env)
    _wait_for_peers(os.environ)
    signame = forward.wants_forwarding(os.environ)
    if signame:  # a checkpoint request becomes a signal to the trainer (launcher/forward.py)
        try:
            raise SystemExit(forward.run(command, os.environ, signame))
        except FileNotFoundError as err:
            raise SystemExit(f"trainop-launch: cannot run {command[0]}: {err.strerror}") from None
    try:
        os.execvp(command[0], command)
    except OSError as err:
        raise SystemExit(f"trainop-launch: cannot exec {command[0]}: {err.strerror}") from None
