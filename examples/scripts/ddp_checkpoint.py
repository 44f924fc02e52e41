"""ddp_train.py's model with progress reports and a checkpoint when trainop asks for one.

Started by torchrun in each Worker pod. Every step goes to trainop through
`trainop.launcher.progress.Reporter` (step, step time, samples per second); when trainop is
about to preempt the gang it answers a report with "checkpoint requested" (or SIGUSR1
arrives, for a trainer run without torchrun), and rank 0 saves model, optimizer, step and
loss under TRAINOP_CHECKPOINT_DIR and reports the file (its name carries step and loss). A
gang started again after the preemption gets TRAINOP_RESUME_FROM and goes on from that
step. Reports carry the loss in their phase; the last one says
`done start=<s> loss <first> -> <last>`, which stays in status.progress.phase. Rank 0 prints:
  `ckpt: saved step <s> loss <l> at <path>` when it checkpoints,
  `ckpt: resumed step <s> loss <l> from <path>` when it resumes,
  `ddp-ckpt: world=<n> start=<s> steps=<k> loss <first> -> <last> OK` at the end.

Options (env): TRAINOP_STEPS (default 300), TRAINOP_STEP_SLEEP (default 0.2 s).
"""

import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from trainop.launcher.progress import Reporter

asked_by_signal = False


def _on_signal(_signum: int, _frame: object) -> None:
    global asked_by_signal
    asked_by_signal = True


def save(
    path: str, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int, loss: float
) -> None:
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "loss": loss}
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)  # a reader never sees half a file


def resume(
    reporter: Reporter, model: DistributedDataParallel, opt: torch.optim.Optimizer, rank: int
) -> int:
    """The step to start from: after TRAINOP_RESUME_FROM's, or 0."""
    if not (reporter.resume_from and os.path.exists(reporter.resume_from)):
        return 0
    state = torch.load(reporter.resume_from)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    if rank == 0:
        print(
            f"ckpt: resumed step {state['step']} loss {state['loss']:.6f} from {reporter.resume_from}",
            flush=True,
        )
    return int(state["step"]) + 1


def main() -> None:
    global asked_by_signal
    signal.signal(signal.SIGUSR1, _on_signal)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    steps = int(os.environ.get("TRAINOP_STEPS", "300"))
    pause = float(os.environ.get("TRAINOP_STEP_SLEEP", "0.2"))
    directory = os.environ.get("TRAINOP_CHECKPOINT_DIR", "/tmp/checkpoints")
    reporter = Reporter()
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 256).unsqueeze(1)
    y = 3 * x + 2
    shard = slice(rank, None, world)
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    start, first, last = resume(reporter, model, opt, rank), 0.0, 0.0
    saved = False
    for step in range(start, steps):
        began = time.monotonic()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[shard]), y[shard])
        loss.backward()
        opt.step()
        value = loss.detach().clone()
        dist.all_reduce(value)
        last = value.item() / world
        first = first or last
        time.sleep(pause)
        took = time.monotonic() - began
        phase = f"train loss {last:.4g} (first {first:.4g})"
        reporter.report(step, step_seconds=took, samples_per_second=256 / took, phase=phase)
        if step % 10 == 0:
            print(f"rank {rank}/{world} step {step} loss {last:.6f}", flush=True)
        wanted = reporter.checkpoint_requested() or asked_by_signal
        if rank == 0 and wanted and not saved:
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f"step-{step}-loss-{last:.6f}.pt")
            save(path, model.module, opt, step, last)
            reporter.report(step, checkpoint=(path, step), phase=phase)
            print(f"ckpt: saved step {step} loss {last:.6f} at {path}", flush=True)
        saved, asked_by_signal = wanted and (saved or rank == 0), False
    reporter.report(
        steps - 1, phase=f"done start={start} loss {first:.6g} -> {last:.6g}", force=True
    )
    reporter.flush()
    if rank == 0:
        verdict = "OK" if last < first else "NOT DECREASING"
        print(
            f"ddp-ckpt: world={world} start={start} steps={steps} loss {first:.4g} -> "
            f"{last:.4g} {verdict}",
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
