"""A tiny PyTorch DDP training run on CPU (gloo), used by the real-node examples and tests.

Started by torchrun in each Worker pod (trainop sets torchrun's PET_* environment). It fits
y = 3x + 2 with a one-layer model wrapped in DistributedDataParallel, each rank on its own
shard of a fixed dataset, and prints the loss; rank 0 ends with a summary line the tests
read: `ddp: world=<n> steps=<k> loss <first> -> <last> OK`.

Options (env): TRAINOP_STEPS (default 60), TRAINOP_STEP_SLEEP seconds per step (default 0;
the restart example uses it to leave time for killing a worker mid-run).
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    steps = int(os.environ.get("TRAINOP_STEPS", "60"))
    pause = float(os.environ.get("TRAINOP_STEP_SLEEP", "0"))
    torch.manual_seed(0)  # the same data and initial weights on every rank
    x = torch.linspace(-1, 1, 256).unsqueeze(1)
    y = 3 * x + 2
    shard = slice(rank, None, world)
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    first = last = 0.0
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[shard]), y[shard])
        loss.backward()  # DDP all-reduces the gradients over gloo here
        opt.step()
        value = loss.detach().clone()
        dist.all_reduce(value)
        last = value.item() / world
        first = first or last
        if step % 10 == 0:
            print(f"rank {rank}/{world} step {step} loss {last:.6f}", flush=True)
        time.sleep(pause)
    if rank == 0:
        verdict = "OK" if last < first / 10 else "NOT DECREASING"
        print(f"ddp: world={world} steps={steps} loss {first:.4g} -> {last:.4g} {verdict}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
