"""MPI wiring (Open MPI, e.g. Horovod): hostfile, mpirun env, ssh, and a launcher DNS wait.

Shape: one Launcher pod runs the user's `mpirun ...` and no ranks itself (it may have 0
GPUs); Worker pods run sshd and host the ranks. mpirun reaches the workers over ssh with
the per-job keypair in the Secret `<job>-ssh-<uid digest>`, mounted in every pod (the planner makes
it; this module only declares `needs_ssh`).

- `hostfile` (ConfigMap `<job>-config`, mounted at /etc/trainop) lists each worker as
  `<host> slots=<gpus>` (1 slot on a CPU pod) in rank order. Open MPI's default mapping
  fills slots in hostfile order, so MPI rank order follows placement's topology order
  and a bare `mpirun` (no -np) starts one rank per GPU.
- OMPI_MCA_orte_default_hostfile (Open MPI <= 4) and PRTE_MCA_prte_default_hostfile
  (Open MPI 5, whose runtime is PRRTE) point mpirun at that file without flags.
- *_keep_fqdn_hostnames: Open MPI shortens host names to their first label by default;
  `<job>-worker-0` alone does not resolve from another pod, the full name does.
- *_rsh_args / *_ssh_args: retry while a worker's sshd is still starting, and do not pin
  host keys: pods are recreated under the same names with fresh host keys, so a pinned
  key would break every restart; the trust anchor is the job's own client keypair.
- OMPI_ALLOW_RUN_AS_ROOT(+_CONFIRM): mpirun refuses to run as root unless both are set
  (or --allow-run-as-root is passed), and NGC images run as root.
These are set on the Launcher only: mpirun forwards what the remote daemons need.

Workers: the container command is the user's; it must run sshd in the foreground
(trainop's images provide it through trainop-launch). The Launcher's command is wrapped
by `command_for["Launcher"]`: a shell loop that waits until every worker host in the
hostfile resolves in DNS (pods of a headless Service appear in DNS only once created and
assigned an IP), failing after a timeout, then execs the user's command.
"""

from __future__ import annotations

import shlex

from trainop.frameworks.base import (
    FrameworkSpec,
    MemberKey,
    Wiring,
    WiringInput,
    config_path,
    ordered_env,
    ports_for,
    ranked_members,
)

HOSTFILE = "hostfile"
SSH_PORT = 22
DNS_WAIT_SECONDS = 300

_SSH_ARGS = "-o ConnectionAttempts=10 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"

OMPI_ALLOW_RUN_AS_ROOT = "OMPI_ALLOW_RUN_AS_ROOT"
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"

# The name given to the wrapper's $0 (shows up in `ps` and in its error messages).
WAIT_SCRIPT_NAME = "trainop-wait-for-workers"


def hostfile(inp: WiringInput) -> str:
    """Open MPI hostfile: one `<host> slots=<gpus>` line per worker, in rank order."""
    workers = ranked_members(inp, ("Worker",))
    return "".join(f"{m.host} slots={m.procs}\n" for m in workers)


def launcher_env(path: str) -> dict[str, str]:
    return {
        OMPI_ALLOW_RUN_AS_ROOT: "1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1",
        "OMPI_MCA_orte_default_hostfile": path,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_plm_rsh_args": _SSH_ARGS,
        "PRTE_MCA_prte_default_hostfile": path,
        "PRTE_MCA_prte_keep_fqdn_hostnames": "1",
        "PRTE_MCA_plm_ssh_args": _SSH_ARGS,
    }


def wait_script(path: str, timeout_s: int = DNS_WAIT_SECONDS) -> str:
    """POSIX sh: wait until every host in the hostfile resolves, then exec "$@"."""
    f = shlex.quote(path)
    return (
        f'[ "$#" -gt 0 ] || {{ echo "{WAIT_SCRIPT_NAME}: no command to run" >&2; exit 64; }}\n'
        f'[ -r {f} ] || {{ echo "{WAIT_SCRIPT_NAME}: cannot read {f}" >&2; exit 1; }}\n'
        f"deadline=$(( $(date +%s) + {int(timeout_s)} ))\n"
        f"for host in $(cut -d' ' -f1 {f}); do\n"
        '  until getent hosts "$host" >/dev/null 2>&1; do\n'
        '    if [ "$(date +%s)" -ge "$deadline" ]; then\n'
        f'      echo "{WAIT_SCRIPT_NAME}: $host did not resolve within {int(timeout_s)}s" >&2\n'
        "      exit 1\n"
        "    fi\n"
        "    sleep 2\n"
        "  done\n"
        "done\n"
        'exec "$@"\n'
    )


def launcher_command(path: str, timeout_s: int = DNS_WAIT_SECONDS) -> tuple[str, ...]:
    """The wrapper the user's launcher command and args are appended to."""
    return ("/bin/sh", "-c", wait_script(path, timeout_s), WAIT_SCRIPT_NAME)


def wire(inp: WiringInput) -> Wiring:
    workers = ranked_members(inp, ("Worker",))
    launchers = inp.of_role("Launcher")
    if not workers or len(launchers) != 1:
        raise ValueError("mpi wiring needs exactly one Launcher and at least one Worker member")
    path = config_path(HOSTFILE)
    env: dict[MemberKey, dict[str, str]] = {m.key: {} for m in workers}
    env[launchers[0].key] = launcher_env(path)
    return Wiring(
        env=ordered_env(env),
        config_files={HOSTFILE: hostfile(inp)},
        container_ports=ports_for(inp, {"Worker": (SSH_PORT,)}),
        needs_ssh=True,
        command_for={"Launcher": launcher_command(path)},
    )


SPEC = FrameworkSpec(
    name="mpi",
    roles=("Launcher", "Worker"),
    required=("Launcher", "Worker"),
    ranked=("Worker",),
    # sshd's port, informational: mpirun reaches workers over ssh and Open MPI picks
    # its own ports for its daemons, so WiringInput.port is not used.
    default_port=SSH_PORT,
    wire_fn=wire,
    min_replicas={"Launcher": 1, "Worker": 1},
    max_replicas={"Launcher": 1},
    purpose={
        "Launcher": "the pod that runs mpirun",
        "Worker": "the pods running sshd that host the MPI ranks",
    },
)
