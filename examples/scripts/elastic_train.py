"""Elastic DDP on CPU (gloo) that survives resizes, for the real tier's elastic job.

Started by torchrun's elastic agent in each Worker pod (trainop sets PET_NNODES=min:max and
the c10d rendezvous). When a pod joins or leaves, the agents stop their workers and start
them again in a new group of the new size (https://pytorch.org/docs/stable/elastic/run.html):
the process starts over, so the training state must come from outside it. Rank 0 saves
model, optimizer and step to TRAINOP_CHECKPOINT after every step (write, then rename: a
reader never sees half a file); every rank loads it at start and goes on from the next step.
The file must be on storage every worker of the job sees across restarts: a hostPath on a
one-node cluster (the real tier), a ReadWriteMany volume elsewhere. A pod's emptyDir is not
enough: ranks move between pods at each resize, and a removed pod's emptyDir is gone.

Each rank prints `elastic: rank <r> world <w> step <s> loss <l>` every TRAINOP_LOG_EVERY
steps (default 10) and `elastic: rank <r> world <w> resumes at step <s>` at start.
Env: TRAINOP_CHECKPOINT (required), TRAINOP_STEPS (default 100000), TRAINOP_STEP_SLEEP
seconds per step (default 0.2).
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def load(path: str, model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    """The step to start at: the one after the checkpoint's, or 0 without one."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return int(state["step"]) + 1


def save(path: str, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    tmp = f"{path}.tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    path = os.environ["TRAINOP_CHECKPOINT"]
    steps = int(os.environ.get("TRAINOP_STEPS", "100000"))
    pause = float(os.environ.get("TRAINOP_STEP_SLEEP", "0.2"))
    every = int(os.environ.get("TRAINOP_LOG_EVERY", "10"))
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = load(path, model, opt)
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's weights to the others
    print(f"elastic: rank {rank} world {world} resumes at step {start}", flush=True)
    x = torch.linspace(-1, 1, 256).unsqueeze(1)
    y = 3 * x + 2
    shard = slice(rank, None, world)
    for step in range(start, steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x[shard]), y[shard])
        loss.backward()  # DDP all-reduces the gradients over gloo here
        opt.step()
        if rank == 0:
            save(path, model, opt, step)
        if step % every == 0:
            print(
                f"elastic: rank {rank} world {world} step {step} loss {loss.item():.6f}", flush=True
            )
        time.sleep(pause)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
