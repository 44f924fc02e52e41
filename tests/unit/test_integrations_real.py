"""trainop.integrations and the SDK's local backend against the real libraries: a tiny GPT-2
built from a config (no download) under transformers' Trainer, a tiny LightningModule under
Lightning's Trainer, and torchrun on this machine. transformers, lightning and torch are
extras, not in the dev lock, so `make test` skips these (the fakes in
tests/unit/test_integrations.py cover the same paths there); with the libraries installed
(`pip install trainop[transformers,lightning]`) they run on CPU in about a minute.

What they show that the fakes cannot: the hooks fire with the arguments assumed, a request
makes the Trainer save a checkpoint it can resume from (the step goes on from there), the
Lightning checkpoint is one `fit(ckpt_path=)` accepts, transformers' KubeflowCallback, added
by TrainingArguments before trainop's callback existed, sends nothing once it does, and the
local backend's torchrun path forms a real process group."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an extra, not in the dev lock")


class FakeReporter:
    """Records reports; the test raises the operator's request with `requested`."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []
        self.requested = False

    def report(self, step: int, **kw: Any) -> None:
        self.reports.append({"step": step, **kw})

    def checkpoint_requested(self) -> bool:
        return self.requested

    def flush(self) -> None:
        pass

    def checkpoints(self) -> list[tuple[str, int]]:
        return [r["checkpoint"] for r in self.reports if r.get("checkpoint")]


# --- Hugging Face --------------------------------------------------------------------------------
def _gpt2_trainer(out: Path, steps: int, callbacks: list[Any] | None) -> Any:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=128, n_positions=32)
    )
    data = []
    for _ in range(64):
        ids = torch.randint(0, 128, (16,))
        data.append({"input_ids": ids, "labels": ids})
    args = transformers.TrainingArguments(
        str(out), max_steps=steps, per_device_train_batch_size=4, logging_steps=1,
        report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    return transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)


def test_hf_checkpoint_on_request_then_resume(tmp_path: Path) -> None:
    from trainop.integrations.common import StepReports
    from trainop.integrations.transformers import TrainopCallback

    rep = FakeReporter()
    cb = TrainopCallback(reports=StepReports(rep))
    trainer = _gpt2_trainer(tmp_path, 12, [cb])
    asked: dict[str, float] = {}

    class Ask(pytest.importorskip("transformers").TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == 5:
                rep.requested = True  # the operator's answer, heard after step 5
                asked["at"] = time.perf_counter()

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            asked.setdefault("saved", time.perf_counter())

    trainer.add_callback(Ask())
    trainer.train()
    ((path, step),) = rep.checkpoints()
    assert step in (5, 6) and path == str(tmp_path / f"checkpoint-{step}")
    assert (Path(path) / "trainer_state.json").is_file()
    assert "loss" in rep.reports[-1]["metrics"] and rep.reports[-1]["total_steps"] == 12
    assert rep.reports[-1]["samples_per_second"] > 0
    print(
        f"HF: request after step 5 -> checkpoint-{step} saved in {1000 * (asked['saved'] - asked['at']):.1f} ms"
    )

    again = FakeReporter()
    resumed = _gpt2_trainer(tmp_path, 12, [TrainopCallback(reports=StepReports(again))])
    resumed.train(resume_from_checkpoint=path)
    assert again.reports[0]["step"] == step + 1  # it went on from the checkpoint


def test_hf_kubeflow_callback_goes_quiet_once_trainop_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers.integrations.integration_utils, "KubeflowCallback"):
        pytest.skip("this transformers has no KubeflowCallback")
    posts: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("t")
    monkeypatch.setenv(
        "KUBEFLOW_TRAINER_SERVER_URL",
        f"http://127.0.0.1:{server.server_address[1]}/v1/trainer-status",
    )
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", str(token))
    monkeypatch.delenv("DISABLE_KUBEFLOW_INTEGRATION", raising=False)
    monkeypatch.setenv("TRAINOP_PROGRESS_URL", "http://127.0.0.1:9/v1/progress")  # trainop wired
    try:
        from trainop.integrations.common import StepReports
        from trainop.integrations.transformers import TrainopCallback

        # Ours made first, as scripts write it; the Trainer then makes the KubeflowCallback
        # its TrainingArguments asked for, which transformers 5 refuses to do without the URL
        # (trainop silences it at the end of the Trainer's __init__, not before).
        ours = TrainopCallback(reports=StepReports(FakeReporter()))
        trainer = _gpt2_trainer(tmp_path, 3, [ours])
        kinds = [type(c).__name__ for c in trainer.callback_handler.callbacks]
        assert "KubeflowCallback" in kinds
        trainer.train()
        assert posts == []  # one report stream: trainop's
        assert os.environ["DISABLE_KUBEFLOW_INTEGRATION"] == "true"
    finally:
        server.shutdown()


def test_hf_install_adds_the_callback_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainop.integrations import transformers as hf

    hf.install()
    first = _gpt2_trainer(tmp_path, 4, None)
    assert sum(isinstance(c, hf.TrainopCallback) for c in first.callback_handler.callbacks) == 1
    first.args.save_strategy = "steps"
    first.args.save_steps = 4
    first.train()
    monkeypatch.setenv("TRAINOP_RESUME_FROM", str(tmp_path / "checkpoint-4"))
    second = _gpt2_trainer(tmp_path, 6, None)
    second.train()  # no argument: trainop's checkpoint
    assert second.state.global_step == 6


# --- Lightning --------------------------------------------------------------------------------------
def _lightning_module() -> Any:
    L = pytest.importorskip("lightning")

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> Any:
            data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
            return torch.utils.data.DataLoader(data, batch_size=16)

    return Tiny()


def _pl_trainer(root: Path, steps: int, callbacks: list[Any]) -> Any:
    L = pytest.importorskip("lightning")
    return L.Trainer(
        max_steps=steps, accelerator="cpu", devices=1, default_root_dir=str(root), callbacks=callbacks,
        enable_progress_bar=False, enable_model_summary=False, logger=False, enable_checkpointing=False,
    )  # fmt: skip


def test_lightning_checkpoint_on_request_then_resume(tmp_path: Path) -> None:
    from trainop.integrations.common import StepReports
    from trainop.integrations.lightning import TrainopCallback

    rep = FakeReporter()
    L = pytest.importorskip("lightning")

    class Ask(L.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, trainer: Any, *a: Any) -> None:
            if trainer.global_step == 5:
                rep.requested = True

    trainer = _pl_trainer(tmp_path, 12, [Ask(), TrainopCallback(reports=StepReports(rep))])
    start = time.perf_counter()
    trainer.fit(_lightning_module())
    ((path, step),) = rep.checkpoints()
    assert step == 5 and path == str(tmp_path / "trainop-checkpoints" / "step-5.ckpt")
    assert Path(path).is_file()
    assert "train_loss" in rep.reports[-1]["metrics"] and rep.reports[-1]["total_steps"] == 12
    print(f"Lightning: 12 steps with a checkpoint in {time.perf_counter() - start:.2f} s")

    again = FakeReporter()
    resumed = _pl_trainer(tmp_path, 12, [TrainopCallback(reports=StepReports(again))])
    resumed.fit(_lightning_module(), ckpt_path=path)
    assert again.reports[0]["step"] == 6 and resumed.global_step == 12


# --- the local backend's torchrun path -------------------------------------------------------------
def allreduce_ranks() -> None:
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print(
        f"rank {dist.get_rank()}/{dist.get_world_size()} node {os.environ['GROUP_RANK']} sum {t.item():g}",
        flush=True,
    )
    dist.destroy_process_group()


def test_local_backend_runs_torchrun_nodes_that_meet(tmp_path: Path) -> None:
    from trainop.sdk import LocalBackend

    job = LocalBackend(tmp_path, launcher="torchrun").train(
        allreduce_ranks, runtime=None, num_nodes=2, gpus_per_node=2
    )
    job.wait(180)
    lines = [x for r in (0, 1) for x in job.logs(rank=r, follow=False) if x.startswith("rank ")]
    assert sorted(lines) == [f"rank {r}/4 node {r // 2} sum 10" for r in range(4)]


# --- train() adds the callback: detection, payload, sdkrun's install(), the Trainer ------------
def hf_function(out: str) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    model = GPT2LMHeadModel(
        GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=128, n_positions=32)
    )
    data = [{"input_ids": (ids := torch.randint(0, 128, (16,))), "labels": ids} for _ in range(16)]
    args = TrainingArguments(out, max_steps=2, report_to="none", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    names = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    print("callbacks:", ",".join(names), flush=True)


def lightning_function() -> None:
    import lightning as L

    trainer = L.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_progress_bar=False)
    print("callbacks:", ",".join(type(c).__name__ for c in trainer.callbacks), flush=True)


@pytest.mark.parametrize(
    ("func", "args", "integration"),
    [(hf_function, True, "transformers"), (lightning_function, False, "lightning")],
    ids=["transformers", "lightning"],
)
def test_train_adds_the_right_callback_with_no_line_of_trainop(
    tmp_path: Path, func: Any, args: bool, integration: str
) -> None:
    pytest.importorskip(integration)
    from trainop.sdk import LocalBackend

    job = LocalBackend(tmp_path, launcher="torchrun").train(
        func,
        runtime=None,
        num_nodes=1,
        gpus_per_node=0,
        args={"out": str(tmp_path / "out")} if args else None,
    )
    assert job.body["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    job.wait(180)
    line = next(x for x in job.logs(follow=False) if x.startswith("callbacks:"))
    assert line.count("TrainopCallback") == 1, line
