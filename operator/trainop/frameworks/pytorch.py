"""PyTorch wiring: torchrun's PET_* environment for a static gang of Worker pods.

torchrun reads every command-line option from an env var named PET_<OPTION> when the
flag is not given (torch.distributed.argparse_util), so a plain `torchrun train.py` in
each pod picks up --nnodes, --nproc-per-node, --node-rank, --master-addr and
--master-port from the PET_* vars below and uses the static rendezvous: rank order is
exactly PET_NODE_RANK, which is the rank placement chose (topology order), not the
replica index. torchrun then sets RANK/LOCAL_RANK/WORLD_SIZE/MASTER_* for its children.
The un-prefixed MASTER_ADDR, MASTER_PORT, WORLD_SIZE and NODE_RANK are for scripts that
read them directly (e.g. launched with `python -m torch.distributed.run` wrappers or
frameworks such as Lightning); RANK is not set because it is per process.

An elastic job (spec.elastic) gets torchrun's elastic agent instead
(https://pytorch.org/docs/stable/elastic/run.html): PET_NNODES=min:max, the c10d
rendezvous at worker 0 through the job's headless Service, and no static rank or world
size, so the env of a pod is the same whatever size the gang has: pods added when the job
grows join the running rendezvous, and the agents re-form the group (restarting their
workers, which resume from their own checkpoint) when pods join or leave. Worker 0 hosts
the rendezvous store (rdzv_conf is_host=1; the others is_host=0, so no pod has to match
the endpoint's name against its own hostname); shrinking removes the highest indexes, so
worker 0 stays for the job's life.
"""

from __future__ import annotations

from trainop.api import constants as c
from trainop.frameworks.base import (
    FrameworkSpec,
    MemberKey,
    Wiring,
    WiringInput,
    member_host,
    ordered_env,
    ports_for,
    ranked_members,
)

MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
WORLD_SIZE = "WORLD_SIZE"
NODE_RANK = "NODE_RANK"
ENV_PET_RDZV_BACKEND = "PET_RDZV_BACKEND"
ENV_PET_RDZV_ENDPOINT = "PET_RDZV_ENDPOINT"
ENV_PET_RDZV_ID = "PET_RDZV_ID"
ENV_PET_RDZV_CONF = "PET_RDZV_CONF"
ENV_PET_MAX_RESTARTS = "PET_MAX_RESTARTS"


# Membership changes the elastic agent may absorb before it gives up (each shrink costs
# one; https://pytorch.org/docs/stable/elastic/run.html, --max-restarts). Pod failures
# beyond it fall to trainop's own restart policy.
ELASTIC_MAX_RESTARTS = 100


def wire_elastic(inp: WiringInput, size: tuple[int, int]) -> Wiring:
    """torchrun c10d rendezvous env for an elastic Worker role (see the module doc)."""
    workers = inp.of_role("Worker")
    # Worker 0 is always there (shrinking removes the highest indexes) and an elastic gang
    # always has its Service (gang_has_service), even at one pod.
    host = member_host(inp.job, inp.namespace, "Worker", 0, served=True)
    # last_call_timeout: the c10d handler's wait for more nodes once min have joined
    # (https://pytorch.org/docs/stable/elastic/rendezvous.html, DynamicRendezvousHandler).
    last_call = (
        "" if inp.last_call_seconds is None else f",last_call_timeout={inp.last_call_seconds}"
    )
    env: dict[MemberKey, dict[str, str]] = {}
    for m in workers:
        env[m.key] = {
            c.ENV_PET_NNODES: f"{size[0]}:{size[1]}",
            c.ENV_PET_NPROC_PER_NODE: str(m.procs),
            ENV_PET_RDZV_BACKEND: "c10d",
            ENV_PET_RDZV_ENDPOINT: f"{host}:{inp.port}",
            ENV_PET_RDZV_ID: inp.job,
            ENV_PET_RDZV_CONF: f"is_host={1 if m.index == 0 else 0}{last_call}",
            ENV_PET_MAX_RESTARTS: str(ELASTIC_MAX_RESTARTS),
        }
    return Wiring(
        env=ordered_env(env),
        container_ports=ports_for(inp, {"Worker": (inp.port,)}),
    )


def wire(inp: WiringInput) -> Wiring:
    if inp.elastic is not None:
        return wire_elastic(inp, inp.elastic)
    workers = ranked_members(inp, ("Worker",))
    if not workers:
        raise ValueError("pytorch wiring needs at least one Worker member")
    master = workers[0]
    nnodes = str(len(workers))
    world = str(sum(m.procs for m in workers))
    port = str(inp.port)
    env: dict[MemberKey, dict[str, str]] = {}
    for m in workers:
        env[m.key] = {
            c.ENV_PET_NNODES: nnodes,
            c.ENV_PET_NPROC_PER_NODE: str(m.procs),
            c.ENV_PET_NODE_RANK: str(m.rank),
            c.ENV_PET_MASTER_ADDR: master.host,
            c.ENV_PET_MASTER_PORT: port,
            MASTER_ADDR: master.host,
            MASTER_PORT: port,
            WORLD_SIZE: world,
            NODE_RANK: str(m.rank),
        }
    return Wiring(
        env=ordered_env(env),
        container_ports=ports_for(inp, {"Worker": (inp.port,)}),
    )


SPEC = FrameworkSpec(
    name="pytorch",
    roles=("Worker",),
    required=("Worker",),
    ranked=("Worker",),
    default_port=c.DEFAULT_MASTER_PORT,
    wire_fn=wire,
    purpose={"Worker": "the pods torchrun starts the training processes in"},
)
