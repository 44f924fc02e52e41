"""A Hugging Face Trainer function: train() sees `from transformers import Trainer` and adds
trainop's callback in every pod (progress, checkpoint on the operator's request, resume
from TRAINOP_RESUME_FROM); the function itself has no trainop line.

    python examples/sdk/hf_trainer.py   # a cluster with trainop; a small GPT-2 from a config
"""

from trainop.sdk import TrainopClient


def finetune(steps: int = 200) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64))
    data = [{"input_ids": torch.randint(0, 50257, (32,))} for _ in range(512)]
    for d in data:
        d["labels"] = d["input_ids"]
    args = TrainingArguments(
        "/checkpoints/gpt2", max_steps=steps, logging_steps=10, report_to="none"
    )
    Trainer(model=model, args=args, train_dataset=data).train()


if __name__ == "__main__":
    client = TrainopClient()
    name = client.train(
        finetune, runtime=None, num_nodes=2, gpus_per_node=1, packages=["transformers[torch]"]
    )
    client.wait(name, until="Running")
    print(client.progress(name))
