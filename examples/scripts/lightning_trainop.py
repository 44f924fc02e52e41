"""A Lightning Trainer with trainop's callback (issue 34): a small regression model trained
with DDP across 2 nodes (torchrun, gloo on CPU), `callbacks=[TrainopCallback(dirpath=...)]`
and `fit(..., ckpt_path=ckpt_path())`. On a checkpoint request (preemption) every rank calls
`trainer.save_checkpoint(<dirpath>/step-<N>.ckpt)` at the same step and the path is
reported; the gang that comes back gets TRAINOP_RESUME_FROM and Lightning resumes there
(model, optimizer, loops). Env: MAX_STEPS (default 300), STEP_SLEEP (seconds per step),
OUTPUT_DIR (default /checkpoints/lightning). Rank 0 prints `lightning: step N loss X`."""

import os
import time

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy

from trainop.integrations.lightning import TrainopCallback, ckpt_path


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
        )

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Pace(L.Callback):
    """Sleeps STEP_SLEEP after each step; rank 0 prints each step's loss."""

    def __init__(self) -> None:
        self.sleep = float(os.environ.get("STEP_SLEEP", "0"))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # type: ignore[no-untyped-def]
        if trainer.is_global_zero:
            loss = float(outputs["loss"])
            print(f"lightning: step {trainer.global_step} loss {loss:.4f}", flush=True)
        time.sleep(self.sleep)


g = torch.Generator().manual_seed(0)
x = torch.randn(4096, 16, generator=g)
y = x @ torch.randn(16, 1, generator=g) + 0.1 * torch.randn(4096, 1, generator=g)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
torch.manual_seed(0)
local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun's processes on this node
trainer = L.Trainer(
    accelerator="cpu",
    devices=local,
    num_nodes=int(os.environ.get("WORLD_SIZE", "1")) // local,
    strategy=DDPStrategy(process_group_backend="gloo"),
    max_steps=int(os.environ.get("MAX_STEPS", "300")),
    callbacks=[
        TrainopCallback(dirpath=os.environ.get("OUTPUT_DIR", "/checkpoints/lightning")),
        Pace(),
    ],
    enable_progress_bar=False,
    enable_checkpointing=False,
    logger=False,
)
resume = ckpt_path()
if trainer.is_global_zero:
    print(f"lightning: world={trainer.world_size} resume_from={resume}", flush=True)
trainer.fit(Regression(), data, ckpt_path=resume)
if trainer.is_global_zero:
    print(f"lightning: done steps={trainer.global_step}", flush=True)
