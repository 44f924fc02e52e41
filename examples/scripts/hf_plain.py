"""An unmodified Hugging Face training script (issue 39): a tiny GPT-2 built from a config
(no downloads), a synthetic dataset, a plain `Trainer(...).train()`. No trainop import, no
callback argument, no `report_to`: transformers' own KubeflowCallback switches itself on
because trainop sets KUBEFLOW_TRAINER_SERVER_URL (and _TOKEN, _CA_CERT) in the pod, and
its progress reaches `kubectl get tj`. MAX_STEPS sets the length (default 300)."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


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


torch.manual_seed(0)
config = GPT2Config(
    vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0
)
args = TrainingArguments(
    output_dir="/tmp/hf-plain",
    max_steps=int(os.environ.get("MAX_STEPS", "300")),
    per_device_train_batch_size=8,
    learning_rate=3e-3,
    logging_steps=10,
    save_strategy="no",
    disable_tqdm=True,
)
trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Repeats())
print(f"hf-plain: report_to={args.report_to}", flush=True)
out = trainer.train()
print(f"hf-plain: done steps={out.global_step} loss={out.training_loss:.4f}", flush=True)
