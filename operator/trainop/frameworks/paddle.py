"""PaddlePaddle wiring: collective-mode env for `paddle.distributed.launch` and direct runs.

Each Worker pod is one Paddle node; its rank is placement's rank (topology order).

- PADDLE_MASTER, PADDLE_NNODES, PADDLE_NPROC_PER_NODE: read by `python -m
  paddle.distributed.launch` in place of --master/--nnodes/--nproc_per_node, and
  PADDLE_TRAINER_ID overrides its --rank (the node rank), so peers are ordered by
  rank, not by arrival. The launcher then sets per-process env for its children.
- PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS (every pod's
  `host:port+1` in rank order), PADDLE_CURRENT_ENDPOINT: what
  `paddle.distributed.init_parallel_env()` reads when a script runs one process per pod
  without the launcher. Endpoints use port+1 so they never collide with the master's
  store on rank 0.
- PADDLE_DISTRI_BACKEND=gloo on pods without GPUs only. Left at its default "auto",
  `init_parallel_env()` picks nccl on a CUDA build (no GPU here) and, on a CPU-only
  build, a legacy context that never creates the global process group, so the first
  `paddle.distributed.all_reduce` fails with "The global group is not initialized"
  (found on the real-node tier with paddlepaddle 3.3.1; `init_parallel_env` in
  https://github.com/PaddlePaddle/Paddle/blob/develop/python/paddle/distributed/parallel.py).
  GPU pods keep "auto" (nccl).

No POD_IP (downward API) is used, only stable DNS names, with one exception that
keeps it that way: the launcher's HTTP master starts its key-value server only on the
pod whose PADDLE_MASTER host is 127.0.0.1 or its own IP (a DNS name never matches), so
the rank-0 pod gets PADDLE_MASTER=127.0.0.1:<port> (the launcher swaps in its own IP
when advertising) and every other pod gets rank 0's `host:<port>`. Paddle's TCP store
listens on all interfaces, so direct runs work with the same values.
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

PADDLE_MASTER = "PADDLE_MASTER"
PADDLE_NNODES = "PADDLE_NNODES"
PADDLE_NPROC_PER_NODE = "PADDLE_NPROC_PER_NODE"
PADDLE_TRAINER_ID = "PADDLE_TRAINER_ID"
PADDLE_TRAINERS_NUM = "PADDLE_TRAINERS_NUM"
PADDLE_TRAINER_ENDPOINTS = "PADDLE_TRAINER_ENDPOINTS"
PADDLE_CURRENT_ENDPOINT = "PADDLE_CURRENT_ENDPOINT"
PADDLE_DISTRI_BACKEND = "PADDLE_DISTRI_BACKEND"
DEFAULT_PORT = 36543  # Kubeflow PaddleJob's default master port
LOOPBACK = "127.0.0.1"


def wire(inp: WiringInput) -> Wiring:
    workers = ranked_members(inp, ("Worker",))
    if not workers:
        raise ValueError("paddle wiring needs at least one Worker member")
    master = f"{workers[0].host}:{inp.port}"
    endpoints = [f"{m.host}:{inp.port + 1}" for m in workers]
    count = str(len(workers))
    env: dict[MemberKey, dict[str, str]] = {}
    for rank, m in enumerate(workers):
        env[m.key] = {
            PADDLE_MASTER: f"{LOOPBACK}:{inp.port}" if rank == 0 else master,
            PADDLE_NNODES: count,
            PADDLE_NPROC_PER_NODE: str(m.procs),
            PADDLE_TRAINER_ID: str(rank),
            PADDLE_TRAINERS_NUM: count,
            PADDLE_TRAINER_ENDPOINTS: ",".join(endpoints),
            PADDLE_CURRENT_ENDPOINT: endpoints[rank],
        }
        if m.gpus == 0:
            env[m.key][PADDLE_DISTRI_BACKEND] = "gloo"
    return Wiring(
        env=ordered_env(env),
        container_ports=ports_for(inp, {"Worker": (inp.port, inp.port + 1)}),
    )


SPEC = FrameworkSpec(
    name="paddle",
    roles=("Worker",),
    required=("Worker",),
    ranked=("Worker",),
    default_port=DEFAULT_PORT,
    wire_fn=wire,
    purpose={"Worker": "the collective-mode training nodes"},
)
