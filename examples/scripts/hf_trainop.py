"""A Hugging Face Trainer with trainop's callback (issue 34): the tiny GPT-2 of hf_plain.py
trained with DDP under torchrun (gloo on CPU), `callbacks=[TrainopCallback()]` and
`train(resume_from_checkpoint=resume_from_checkpoint())`. On a checkpoint request
(preemption) the callback makes the Trainer save `<output_dir>/checkpoint-<step>` and
reports it; the gang that comes back gets TRAINOP_RESUME_FROM and resumes there.
Env: MAX_STEPS (default 200), STEP_SLEEP (seconds per step, to give a test time),
OUTPUT_DIR (the checkpoints, default /checkpoints/hf). Rank 0 prints `step N loss X`."""

import os
import time

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from trainop.integrations.transformers import TrainopCallback, resume_from_checkpoint


class Repeats(torch.utils.data.Dataset):
    """n samples drawn from 8 fixed random sequences: a language model learns them fast."""

    def __init__(self, n: int = 512, length: int = 32, vocab: int = 256) -> None:
        g = torch.Generator().manual_seed(0)
        patterns = torch.randint(0, vocab, (8, length), generator=g)
        self.rows = [patterns[i % 8] for i in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


class Pace(TrainerCallback):
    """Sleeps STEP_SLEEP after each step; rank 0 prints each logged loss with its step."""

    def __init__(self) -> None:
        self.sleep = float(os.environ.get("STEP_SLEEP", "0"))

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(self.sleep)

    def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
        if state.is_world_process_zero and logs and "loss" in logs:
            print(f"hf-trainop: step {state.global_step} loss {logs['loss']:.4f}", flush=True)

    def on_save(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if state.is_world_process_zero:
            print(f"hf-trainop: saved checkpoint-{state.global_step}", flush=True)


torch.manual_seed(0)
config = GPT2Config(
    vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0
)
args = TrainingArguments(
    output_dir=os.environ.get("OUTPUT_DIR", "/checkpoints/hf"),
    max_steps=int(os.environ.get("MAX_STEPS", "200")),
    per_device_train_batch_size=8,
    learning_rate=3e-3,
    logging_steps=1,
    save_strategy="no",  # saves only when trainop asks (the callback sets should_save)
    disable_tqdm=True,
    report_to="none",
    ddp_backend="gloo",
)
trainer = Trainer(
    model=GPT2LMHeadModel(config),
    args=args,
    train_dataset=Repeats(),
    callbacks=[TrainopCallback(), Pace()],
)
resume = resume_from_checkpoint()
if args.process_index == 0:
    print(f"hf-trainop: world={args.world_size} resume_from={resume}", flush=True)
out = trainer.train(resume_from_checkpoint=resume)
if args.process_index == 0:
    print(f"hf-trainop: done steps={out.global_step} loss={out.training_loss:.4f}", flush=True)
