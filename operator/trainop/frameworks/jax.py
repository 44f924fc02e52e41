"""JAX wiring: coordinator address, process count and process id for jax.distributed.

One JAX process per pod, owning all of the pod's GPUs (JAX's usual GPU layout), so the
process id is the pod's rank from placement and the coordinator is rank 0's pod.

What JAX reads on its own: `jax.distributed.initialize()` falls back to the env var
JAX_COORDINATOR_ADDRESS for `coordinator_address`, but takes `num_processes` and
`process_id` only as arguments or from a detected cluster (Slurm, Open MPI, TPU, or a
Kubernetes Indexed Job, which trainop pods are not). So JAX_NUM_PROCESSES and
JAX_PROCESS_ID are trainop's names by convention: trainop-launch (or the user's script)
passes them as `initialize(num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
process_id=int(os.environ["JAX_PROCESS_ID"]))`. The coordinator binds [::]:<port> by
default, so rank 0 needs no bind address of its own.
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

JAX_COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"
JAX_NUM_PROCESSES = "JAX_NUM_PROCESSES"
JAX_PROCESS_ID = "JAX_PROCESS_ID"
DEFAULT_PORT = 1234  # the coordinator port in JAX's multi-process documentation


def wire(inp: WiringInput) -> Wiring:
    workers = ranked_members(inp, ("Worker",))
    if not workers:
        raise ValueError("jax wiring needs at least one Worker member")
    coordinator = f"{workers[0].host}:{inp.port}"
    count = str(len(workers))
    env: dict[MemberKey, dict[str, str]] = {
        m.key: {
            JAX_COORDINATOR_ADDRESS: coordinator,
            JAX_NUM_PROCESSES: count,
            JAX_PROCESS_ID: str(m.rank),
        }
        for m in workers
    }
    return Wiring(
        env=ordered_env(env),
        container_ports=ports_for(inp, {"Worker": (inp.port,)}),
    )


SPEC = FrameworkSpec(
    name="jax",
    roles=("Worker",),
    required=("Worker",),
    ranked=("Worker",),
    default_port=DEFAULT_PORT,
    wire_fn=wire,
    purpose={"Worker": "one JAX process per pod"},
)
