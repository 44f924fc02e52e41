"""An MPI allreduce over the ranks mpirun started on the Worker pods (trainop's hostfile).

Each rank contributes rank + 1; the sum must be n(n+1)/2. Rank 0 prints the line the
tests read: `mpi: size=<n> allreduce=<sum> expected=<sum> OK` plus the hosts it ran on.
"""

import socket
import sys

from mpi4py import MPI


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    hosts = comm.gather(socket.gethostname(), root=0)
    expected = size * (size + 1) // 2
    if rank == 0:
        verdict = "OK" if total == expected else "WRONG"
        print(f"mpi: size={size} allreduce={total} expected={expected} {verdict}", flush=True)
        print(f"mpi: hosts={','.join(hosts)}", flush=True)
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
