"""A JAX psum across processes on CPU (gloo), wired by trainop's JAX_* env only.

Run in each Worker pod (the jax-cpu image). `jax.distributed.initialize` reads the
coordinator from JAX_COORDINATOR_ADDRESS on its own; the process count and id come from
trainop's JAX_NUM_PROCESSES / JAX_PROCESS_ID (trainop.frameworks.jax says why). CPU
collectives across processes need gloo (`jax_cpu_collectives_implementation`), see
https://docs.jax.dev/en/latest/multi_process.html.

Each process contributes rank + 1 on its one CPU device; a psum over the global mesh must
give n(n+1)/2 on every process. Process 0 prints the line the tests read:
`jax: processes=<n> devices=<d> psum=<sum> expected=<sum> OK`.

Options (env): TRAINOP_HOLD seconds to stay up after the psum (default 0; the real tier's
restart test kills a worker in that window).
"""

import os
import signal
import sys
import time

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(
    num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
    process_id=int(os.environ["JAX_PROCESS_ID"]),
)
# SIGTERM: initialize() installs a preemption notifier that catches it and carries on, and
# PID 1 of a container ignores it without a handler anyway. Exit as a process the signal
# killed would (128 + 15), so `kill -TERM 1` stops a worker (the real tier's restart test).
signal.signal(signal.SIGTERM, lambda signum, _frame: os._exit(128 + signum))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402


def main() -> int:
    rank, n = jax.process_index(), jax.process_count()
    mesh = jax.make_mesh((jax.device_count(),), ("p",))
    local = np.full((jax.local_device_count(),), rank + 1, dtype=np.float32)
    values = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("p")), local)
    psum = jax.jit(
        jax.shard_map(
            lambda v: jax.lax.psum(v, "p"),
            mesh=mesh,
            in_specs=PartitionSpec("p"),
            out_specs=PartitionSpec(),
        )
    )
    total = int(jnp.asarray(psum(values).addressable_data(0))[0])
    expected = n * (n + 1) // 2
    verdict = "OK" if total == expected else "WRONG"
    print(f"jax: rank {rank} sees psum={total}", flush=True)
    if rank == 0:
        print(
            f"jax: processes={n} devices={jax.device_count()} psum={total} "
            f"expected={expected} {verdict}",
            flush=True,
        )
    time.sleep(float(os.environ.get("TRAINOP_HOLD", "0")))
    jax.distributed.shutdown()
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
