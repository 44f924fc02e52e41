"""trainop's Hugging Face `Trainer` integration: one line, `callbacks=[TrainopCallback()]`.

    from trainop.integrations.transformers import TrainopCallback, resume_from_checkpoint
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[TrainopCallback()])
    trainer.train(resume_from_checkpoint=resume_from_checkpoint())   # TRAINOP_RESUME_FROM or None

A `transformers.TrainerCallback`
(https://huggingface.co/docs/transformers/main_classes/callback) that:
- reports step (`state.global_step`), step time, samples per second
  (`args.train_batch_size x gradient_accumulation_steps x world_size` per step), the planned
  total (`state.max_steps`, for the ETA) and the numeric logs of `on_log` (loss,
  learning_rate, grad_norm, epoch) through trainop's Reporter, from each node's local
  process zero;
- on a checkpoint request (preemption, node drain) sets `control.should_save` (the request
  is reduced over the ranks every `check_every` steps, 10 by default, every step in a single
  process), so the Trainer saves through its own machinery (model, optimizer, scheduler, RNG, trainer
  state: what `resume_from_checkpoint` restores) right after that step, and reports
  `<output_dir>/checkpoint-<step>`, the directory `on_save` follows, once every rank has
  reached `on_save` (a barrier: the checkpoint is whole when trainop hears of it); every
  other save (save_steps) is reported as well;
- keeps transformers' own KubeflowCallback quiet where trainop's Reporter is wired
  (trainop.integrations.common.silence_kubeflow), so the job gets one report stream: at the
  end of the Trainer's `__init__` (`on_init_end`), or at `on_train_begin` for a callback
  added later, never when the callback is made. transformers 5's KubeflowCallback raises in
  its own `__init__` when the URL is gone or DISABLE_KUBEFLOW_INTEGRATION is set, and the
  Trainer makes it after `callbacks=[TrainopCallback()]` was evaluated, from
  TrainingArguments built before (report_to ["kubeflow"]): silencing in our `__init__` made
  `Trainer(..., callbacks=[TrainopCallback()])` fail in every pod trainop wires (found on the
  real tier, tests/real/test_6_trainers.py). A callback added to a built Trainer lets the
  KubeflowCallback's first body (progress 0) out, which the operator drops once trainop's
  own reports come (trainop.trainerstatus).

`install()` (what SDK jobs run, trainop.launcher.sdkrun) does it with no line at all: every
`Trainer` built afterwards gets the callback unless it has one, and `Trainer.train()`
without `resume_from_checkpoint` resumes from TRAINOP_RESUME_FROM when that exists.

transformers is imported when the callback class is first used, never by importing this
module: `pip install trainop[transformers]` is an extra, not a dependency of the operator.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from trainop.integrations.common import StepReports, resume_path, silence_kubeflow

CHECKPOINT_PREFIX = (
    "checkpoint"  # transformers' PREFIX_CHECKPOINT_DIR: <output_dir>/checkpoint-<step>
)


def resume_from_checkpoint() -> str | None:
    """What to pass as `Trainer.train(resume_from_checkpoint=...)`: trainop's checkpoint to
    resume from after a preemption, or None on a first start."""
    return resume_path()


def _sync_any(flag: bool) -> bool:
    """`flag` of any rank (a MAX all-reduce when torch.distributed runs, else `flag`)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return flag
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return flag
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _barrier() -> None:
    """Wait for every rank (when torch.distributed runs with several)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


@functools.cache
def _callback_class() -> type:
    from transformers import TrainerCallback

    base: Any = TrainerCallback

    class TrainopCallback(base):
        """Reports to trainop and checkpoints on its request (module docstring)."""

        def __init__(
            self,
            reports: StepReports | None = None,
            sync: Any = _sync_any,
            check_every: int = 10,
            barrier: Any = _barrier,
        ) -> None:
            self.reports = reports if reports is not None else StepReports(check_every=check_every)
            self.sync = sync
            self.barrier = barrier

        def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            silence_kubeflow()  # the Trainer has made its callbacks (module docstring)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            silence_kubeflow()  # a callback added after the Trainer was built
            wanted = os.environ.get("TRAINOP_RESUME_FROM")
            if wanted and state.global_step == 0 and state.is_world_process_zero:
                print(
                    f"trainop: TRAINOP_RESUME_FROM={wanted} but training starts at step 0: pass "
                    "trainer.train(resume_from_checkpoint=trainop.integrations.transformers."
                    "resume_from_checkpoint())"
                )

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.reports.begin()

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            self.reports.log(logs)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            per_step = (
                getattr(args, "train_batch_size", 0)
                * getattr(args, "gradient_accumulation_steps", 1)
                * getattr(args, "world_size", 1)
            )
            self.reports.end(
                state.global_step, state.max_steps, per_step, state.is_local_process_zero
            )
            world = int(getattr(args, "world_size", 1) or 1)
            if self.reports.check_now(state.global_step, world) and self.sync(
                self.reports.requested()
            ):
                control.should_save = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # Every rank calls on_save once its own part is written (its RNG state); global
            # rank 0 writes the model, optimizer and trainer state. A node's local rank 0
            # reporting before rank 0 had finished let trainop evict a gang mid-save (2 pods x
            # 2 processes on the real tier: checkpoint-30 had no model, the resume failed).
            self.barrier()
            path = os.path.join(args.output_dir, f"{CHECKPOINT_PREFIX}-{state.global_step}")
            self.reports.saved(path, state.global_step, state.is_local_process_zero)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.reports.finish()

    return TrainopCallback


def __getattr__(name: str) -> Any:
    if name == "TrainopCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install() -> None:
    """Every transformers `Trainer` built from now on gets a TrainopCallback (unless it has
    one) and resumes from TRAINOP_RESUME_FROM when `train()` is given no checkpoint."""
    import transformers

    silence_kubeflow()
    trainer = transformers.Trainer
    if getattr(trainer, "_trainop_installed", False):
        return
    callback = _callback_class()
    init, train = trainer.__init__, trainer.train

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        handler = getattr(self, "callback_handler", None)
        if not any(isinstance(cb, callback) for cb in getattr(handler, "callbacks", [])):
            self.add_callback(callback())

    @functools.wraps(train)
    def _train(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and kwargs.get("resume_from_checkpoint") is None:
            path = resume_from_checkpoint()
            if path is not None:
                kwargs["resume_from_checkpoint"] = path
        return train(self, *args, **kwargs)

    trainer.__init__ = __init__
    trainer.train = _train
    trainer._trainop_installed = True
