"""MXNet's dist_sync kvstore (ps-lite) on CPU, wired by trainop's DMLC_* env only.

The same command runs in every pod of the job (the mxnet-cpu image). In the Scheduler
and Server pods, `import mxnet` sees DMLC_ROLE=scheduler|server and runs ps-lite's
scheduler or parameter server until the workers are done, then exits
(https://mxnet.apache.org/versions/1.9.1/api/faq/distributed_training). In the Worker pods
it returns, and each worker pushes rank + 1 to one key and pulls it back: with dist_sync
and no optimizer on the servers, the pulled value is the sum of all workers' pushes,
n(n+1)/2. Worker rank 0 (ps-lite's rank, given by the scheduler) prints the line the tests
read: `mxnet: workers=<n> servers=<s> pulled=<sum> expected=<sum> OK`.
"""

import os
import sys

import mxnet as mx  # a scheduler or server blocks here, then exits


def main() -> int:
    kv = mx.kv.create("dist_sync")
    rank, n = kv.rank, kv.num_workers
    shape = (2, 3)
    kv.init(7, mx.nd.zeros(shape))
    kv.push(7, mx.nd.ones(shape) * (rank + 1))
    out = mx.nd.zeros(shape)
    kv.pull(7, out=out)
    values = set(out.asnumpy().ravel().tolist())
    expected = n * (n + 1) // 2
    ok = values == {float(expected)}
    print(f"mxnet: worker rank {rank} pulled {sorted(values)}", flush=True)
    if rank == 0:
        servers = os.environ.get("DMLC_NUM_SERVER", "?")
        pulled = int(values.pop()) if len(values) == 1 else sorted(values)
        print(
            f"mxnet: workers={n} servers={servers} pulled={pulled} expected={expected} "
            f"{'OK' if ok else 'WRONG'}",
            flush=True,
        )
    kv._barrier()  # every worker has checked before any leaves (MXNet 1.x: private name)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
