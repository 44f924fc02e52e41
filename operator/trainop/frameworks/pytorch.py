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
"""

from __future__ import annotations

from trainop.api import constants as c
from trainop.frameworks.base import (
    FrameworkSpec,
    MemberKey,
    Wiring,
    WiringInput,
    ordered_env,
    ports_for,
    ranked_members,
)

MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
WORLD_SIZE = "WORLD_SIZE"
NODE_RANK = "NODE_RANK"


def wire(inp: WiringInput) -> Wiring:
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
