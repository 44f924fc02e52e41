"""Wait until every gang host name the operator wrote into this pod resolves (issue 38).

The planner lists, in TRAINOP_PEER_HOSTS, each host name of the gang that it wrote into the
pod's env or config files (MASTER_ADDR, TF_CONFIG, the JAX coordinator, Paddle's endpoints,
the MPI hostfile, ...). `trainop-launch` calls `wait_for` before it execs the trainer:

- A peer's name appears in the cluster DNS only once that pod exists and has an IP, so a
  name that does not resolve yet is retried every `interval` seconds until `timeout`
  (TRAINOP_PEER_RESOLVE_SECONDS, default 300 s, as the MPI launcher's own DNS wait).
- A name that never resolves fails the pod at once with a sentence naming the host, the
  variables that carry it and the likely fix. It goes to the container's termination
  message, where `trainop.failures` reads it as the failure class PeerUnresolved, instead
  of a trainer looping for ever in its rendezvous while the job shows Running.

Resolution goes through the C library (`socket.getaddrinfo`), so /etc/hosts and the
resolver's search domains count exactly as they do for the trainer (and `getent hosts`).
Standard library only: the launcher runs in any framework image.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

PEER_HOSTS_ENV = "TRAINOP_PEER_HOSTS"  # trainop.api.constants.ENV_PEER_HOSTS
TIMEOUT_ENV = "TRAINOP_PEER_RESOLVE_SECONDS"
DEFAULT_TIMEOUT = 300.0
TERMINATION_LOG = "/dev/termination-log"
# The words trainop.failures recognises in a termination message.
MARKER = "trainop-launch: peer host"


@dataclass(frozen=True)
class Outcome:
    """The names that resolved, those that did not, and the seconds it took."""

    resolved: tuple[str, ...]
    missing: tuple[str, ...]
    seconds: float

    def line(self) -> str:
        took = f"{self.seconds:.1f} s"
        return f"trainop-launch: peers resolve ({', '.join(self.resolved)}) in {took}"


def _resolves(host: str) -> bool:
    try:
        return bool(socket.getaddrinfo(host, None))
    except (OSError, UnicodeError):
        return False


def hosts(env: Mapping[str, str]) -> tuple[str, ...]:
    """The names listed in TRAINOP_PEER_HOSTS, in order, without blanks."""
    return tuple(h.strip() for h in env.get(PEER_HOSTS_ENV, "").split(",") if h.strip())


def timeout_of(env: Mapping[str, str]) -> float:
    raw = env.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if value >= 0 else DEFAULT_TIMEOUT


def wait_for(
    names: tuple[str, ...],
    timeout: float,
    *,
    resolve: Callable[[str], bool] = _resolves,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    interval: float = 1.0,
) -> Outcome:
    """Resolve each name, retrying those that fail until `timeout` seconds have passed."""
    start = clock()
    pending = list(names)
    while True:
        pending = [h for h in pending if not resolve(h)]
        elapsed = clock() - start
        if not pending or elapsed >= timeout:
            done = tuple(h for h in names if h not in pending)
            return Outcome(done, tuple(pending), elapsed)
        sleep(min(interval, max(timeout - elapsed, 0.0)))


def failure_message(outcome: Outcome, env: Mapping[str, str]) -> str:
    """The sentence for the termination message: what did not resolve, who named it, why."""
    parts = []
    for host in outcome.missing:
        carriers = sorted(
            k for k, v in env.items() if host in v and k not in (PEER_HOSTS_ENV, TIMEOUT_ENV)
        )
        where = f" (named by {', '.join(carriers)})" if carriers else " (in the job's config files)"
        parts.append(f"{host}{where}")
    return (
        f"{MARKER}(s) {'; '.join(parts)} did not resolve within {outcome.seconds:.0f} s: "
        "the gang cannot meet. A peer pod that never started, a missing headless Service "
        "or a pod template that changes hostname, subdomain, hostNetwork or dnsConfig "
        "are the usual causes (`kubectl get pods,svc -l trainop.dev/job-name=<job>`)"
    )


def write_termination(message: str, path: str = TERMINATION_LOG) -> None:
    """Best effort: the kubelet copies this file into the container status' message."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(message[:4000])
    except OSError:
        pass
