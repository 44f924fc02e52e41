"""MXNet wiring: the DMLC_* env ps-lite (MXNet's dist kvstore) reads to find the scheduler.

Roles: one Scheduler (the rendezvous), Servers (hold parameters), Workers (train; the
ranked GPU role). Only what ps-lite reads at start-up is set:
DMLC_ROLE (scheduler|server|worker), DMLC_PS_ROOT_URI (the scheduler's host),
DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER, and DMLC_USE_KUBERNETES=1, which
makes the scheduler bind 0.0.0.0 instead of DMLC_PS_ROOT_URI (a DNS name ZeroMQ cannot
bind to). Servers and workers pick their own ports and register with the scheduler,
which hands out ranks in arrival order: ps-lite has no way to take a rank from outside,
so no DMLC_WORKER_ID is set (that name is BytePS's, not MXNet's).
"""

from __future__ import annotations

from trainop.frameworks.base import (
    FrameworkSpec,
    MemberKey,
    Wiring,
    WiringInput,
    ordered_env,
    ports_for,
    ranked_members,
)

DMLC_ROLE = "DMLC_ROLE"
DMLC_PS_ROOT_URI = "DMLC_PS_ROOT_URI"
DMLC_PS_ROOT_PORT = "DMLC_PS_ROOT_PORT"
DMLC_NUM_SERVER = "DMLC_NUM_SERVER"
DMLC_NUM_WORKER = "DMLC_NUM_WORKER"
DMLC_USE_KUBERNETES = "DMLC_USE_KUBERNETES"
DEFAULT_PORT = 9091  # Kubeflow MXJob's default scheduler port


def wire(inp: WiringInput) -> Wiring:
    schedulers = inp.of_role("Scheduler")
    servers = inp.of_role("Server")
    # Workers' ranks are not passed to ps-lite, but checking them keeps inputs honest.
    workers = ranked_members(inp, ("Worker",))
    if len(schedulers) != 1 or not workers:
        raise ValueError("mxnet wiring needs exactly one Scheduler and at least one Worker member")
    common = {
        DMLC_PS_ROOT_URI: schedulers[0].host,
        DMLC_PS_ROOT_PORT: str(inp.port),
        DMLC_NUM_SERVER: str(len(servers)),
        DMLC_NUM_WORKER: str(len(workers)),
        DMLC_USE_KUBERNETES: "1",
    }
    env: dict[MemberKey, dict[str, str]] = {
        m.key: {**common, DMLC_ROLE: m.role.lower()} for m in (*schedulers, *servers, *workers)
    }
    return Wiring(
        env=ordered_env(env),
        container_ports=ports_for(inp, {"Scheduler": (inp.port,)}),
    )


SPEC = FrameworkSpec(
    name="mxnet",
    roles=("Scheduler", "Server", "Worker"),
    required=("Scheduler", "Server", "Worker"),
    ranked=("Worker",),
    default_port=DEFAULT_PORT,
    wire_fn=wire,
    min_replicas={"Scheduler": 1, "Server": 1, "Worker": 1},
    max_replicas={"Scheduler": 1},
    purpose={
        "Scheduler": "the ps-lite rendezvous every server and worker connects to",
        "Server": "the parameter servers",
        "Worker": "the pods that train",
    },
)
