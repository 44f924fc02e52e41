"""PaddlePaddle collective training on CPU (gloo), wired by trainop's PADDLE_* env only.

Run as one process per Worker pod (the paddle-cpu image):
`paddle.distributed.init_parallel_env()` reads PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM,
PADDLE_TRAINER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT and PADDLE_MASTER (rank 0's store),
see https://www.paddlepaddle.org.cn/documentation/docs/en/api/paddle/distributed/init_parallel_env_en.html.

On a CPU-only build the backend must be gloo (PADDLE_DISTRI_BACKEND), see main().

Two checks; rank 0 prints the line the tests read:
`paddle: world=<n> allreduce=<sum> expected=<sum> steps=<k> loss <first> -> <last> OK`
- an all_reduce of rank + 1 must give n(n+1)/2;
- a linear model fitting y = 3x + 2, each rank on its own shard, gradients all-reduced
  (summed, then averaged) every step: the mean loss must fall below a tenth of its first.

Options (env): TRAINOP_STEPS (default 40).
"""

import os
import sys

import paddle
import paddle.distributed as dist


def main() -> int:
    paddle.set_device("cpu")
    # The process group (and so dist.all_reduce) exists only for a named backend: left at
    # "auto", a CPU-only build falls back to a legacy context without one. trainop sets
    # gloo itself for pods without GPUs; these pods ask for a (patched, CPU-run) T4.
    if not paddle.is_compiled_with_cuda():
        os.environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    value = paddle.to_tensor([float(rank + 1)])
    dist.all_reduce(value)
    total, expected = int(value.item()), world * (world + 1) // 2

    steps = int(os.environ.get("TRAINOP_STEPS", "40"))
    paddle.seed(0)  # the same initial weights on every rank
    x = paddle.linspace(-1.0, 1.0, 256).reshape([-1, 1])
    y = 3.0 * x + 2.0
    xs, ys = x[rank::world], y[rank::world]
    model = paddle.nn.Linear(1, 1)
    opt = paddle.optimizer.SGD(learning_rate=0.2, parameters=model.parameters())
    first = last = 0.0
    for step in range(steps):
        loss = paddle.nn.functional.mse_loss(model(xs), ys)
        loss.backward()
        for p in model.parameters():  # the collective step: average the gradients
            dist.all_reduce(p.grad)
            p.grad.set_value(p.grad / world)
        opt.step()
        opt.clear_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        last = float(mean.item()) / world
        first = first or last
        if step % 10 == 0:
            print(f"rank {rank}/{world} step {step} loss {last:.6f}", flush=True)
    ok = total == expected and last < first / 10
    if rank == 0:
        print(
            f"paddle: world={world} allreduce={total} expected={expected} steps={steps} "
            f"loss {first:.4g} -> {last:.4g} {'OK' if ok else 'WRONG'}",
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
