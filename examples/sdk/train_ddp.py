"""A two-node PyTorch DDP job from Python (README: "From Python: the SDK").

pip install trainop                        # the CLI and the SDK
python examples/sdk/train_ddp.py           # a cluster with trainop (KUBECONFIG)
python examples/sdk/train_ddp.py --local   # no cluster: the same function, local processes
"""

import sys

from trainop.sdk import LocalBackend, TrainopClient


def train(steps: int = 60) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 10), torch.randn(64, 1)
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dist.get_rank() == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    backend = LocalBackend() if "--local" in sys.argv else TrainopClient()
    job = backend.train(train, runtime=None, num_nodes=2, gpus_per_node=1, args={"steps": 60})
    if isinstance(job, str):  # the cluster: a TrainingJob's name
        for line in backend.logs(job, follow=True):  # rank 0, across gang restarts
            print(line)
        print(backend.wait(job).phase)
    else:  # local processes
        for line in job.logs(rank=0, follow=True):
            print(line)
        job.wait()
