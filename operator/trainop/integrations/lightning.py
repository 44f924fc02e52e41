"""trainop's PyTorch Lightning integration: one line, `callbacks=[TrainopCallback()]`.

    from trainop.integrations.lightning import TrainopCallback, ckpt_path
    trainer = L.Trainer(max_steps=1000, callbacks=[TrainopCallback()])
    trainer.fit(model, data, ckpt_path=ckpt_path())        # TRAINOP_RESUME_FROM or None

A Lightning `Callback` (https://lightning.ai/docs/pytorch/stable/extensions/callbacks.html)
that:
- reports step (`trainer.global_step`), step time, samples per second (the batch's
  length x world size), the planned total (`max_steps`, else
  `estimated_stepping_batches`) and `trainer.callback_metrics` plus the step's loss, from
  each node's local rank 0, through trainop's Reporter;
- on a checkpoint request, calls `trainer.save_checkpoint(<dirpath>/step-<N>.ckpt)` on every
  rank at the same step (the request is reduced with the strategy's
  `reduce_boolean_decision`, every `check_every` steps when there are several ranks, every
  step with one), Lightning's own full checkpoint (model, optimizers, schedulers, loops),
  and reports the path. The metrics (device tensors) are read at most once a report
  interval, so the callback adds no host sync to most steps. `dirpath` defaults to
  `<trainer.default_root_dir>/trainop-checkpoints`; give a shared volume in a real job.

`install()` (SDK jobs, trainop.launcher.sdkrun): every Lightning `Trainer` built afterwards
gets the callback unless it has one, and `fit()` without `ckpt_path` resumes from
TRAINOP_RESUME_FROM when that exists. Both `lightning.pytorch` and the older
`pytorch_lightning` package are handled.

Lightning is imported when the callback class is first used, never by importing this module
(`pip install trainop[lightning]` is an extra).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from trainop.integrations.common import StepReports, resume_path

PACKAGES = ("lightning.pytorch", "pytorch_lightning")


def ckpt_path() -> str | None:
    """What to pass as `Trainer.fit(..., ckpt_path=...)`: trainop's checkpoint to resume from
    after a preemption, or None on a first start."""
    return resume_path()


def _batch_size(batch: Any) -> int | None:
    """Samples in a batch: a tensor's first dimension, or the first element's of a tuple,
    list or dict (x, y), None when it cannot be told."""
    if isinstance(batch, dict):
        batch = next(iter(batch.values()), None)
    elif isinstance(batch, list | tuple):
        batch = batch[0] if batch else None
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    return len(batch) if isinstance(batch, list | tuple) else None


def _total(trainer: Any) -> int | None:
    """The planned number of steps: max_steps, else Lightning's estimate (None if unbounded)."""
    if trainer.max_steps and trainer.max_steps > 0:
        return int(trainer.max_steps)
    estimated = getattr(trainer, "estimated_stepping_batches", None)
    if isinstance(estimated, int | float) and estimated != float("inf"):
        return int(estimated)
    return None


def _loss(outputs: Any) -> dict[str, Any]:
    if isinstance(outputs, dict):
        return {"loss": outputs["loss"]} if "loss" in outputs else {}
    return {"loss": outputs} if outputs is not None else {}


def _package() -> str:
    for name in PACKAGES:
        try:
            importlib.import_module(name)
            return name
        except ImportError:
            continue
    raise ImportError("neither lightning nor pytorch_lightning is installed")


def _callback_class(package: str | None = None) -> type:
    """The callback class over `package`'s Callback (the first installed by default): one
    class per package, so install() recognises a callback the user added."""
    return _make(package or _package())


@functools.cache
def _make(package: str) -> type:
    base: Any = importlib.import_module(package).Callback

    class TrainopCallback(base):
        """Reports to trainop and checkpoints on its request (module docstring)."""

        def __init__(
            self,
            dirpath: str | None = None,
            reports: StepReports | None = None,
            check_every: int = 10,
        ) -> None:
            super().__init__()
            self.dirpath = dirpath
            self.reports = reports if reports is not None else StepReports(check_every=check_every)
            self._fixed: tuple[int | None, int] | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            wanted = os.environ.get("TRAINOP_RESUME_FROM")
            if wanted and trainer.global_step == 0 and trainer.is_global_zero:
                print(
                    f"trainop: TRAINOP_RESUME_FROM={wanted} but training starts at step 0: pass "
                    "trainer.fit(..., ckpt_path=trainop.integrations.lightning.ckpt_path())"
                )

        def on_train_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
        ) -> None:
            self.reports.begin()

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            if self._fixed is None:  # what does not change during a fit, read once
                self._fixed = (_total(trainer), int(getattr(trainer, "world_size", 1) or 1))
            total, world = self._fixed
            step = trainer.global_step
            local_zero = getattr(trainer, "local_rank", 0) == 0
            if local_zero and self.reports.metrics_due():  # tensors: read once an interval
                self.reports.log({**dict(trainer.callback_metrics or {}), **_loss(outputs)})
            size = _batch_size(batch)
            self.reports.end(step, total, size * world if size else None, local_zero)
            if not self.reports.check_now(step, world):
                return
            wanted = trainer.strategy.reduce_boolean_decision(self.reports.requested(), all=False)
            if wanted:
                self.save(trainer)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self._fixed = None
            self.reports.finish()

        def save(self, trainer: Any) -> str:
            """Lightning's own checkpoint, on every rank, then the report (from local rank 0)."""
            root = self.dirpath or os.path.join(trainer.default_root_dir, "trainop-checkpoints")
            path = os.path.join(root, f"step-{trainer.global_step}.ckpt")
            trainer.save_checkpoint(path)
            self.reports.saved(path, trainer.global_step, getattr(trainer, "local_rank", 0) == 0)
            return path

    return TrainopCallback


def __getattr__(name: str) -> Any:
    if name == "TrainopCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install() -> None:
    """Every Lightning `Trainer` built from now on (either package) gets a TrainopCallback
    unless it has one, and `fit()` without `ckpt_path` resumes from TRAINOP_RESUME_FROM."""
    found = 0
    for package in PACKAGES:
        try:
            module = importlib.import_module(package)
        except ImportError:
            continue
        found += 1
        _patch(module.Trainer, _callback_class(package))
    if not found:
        raise ImportError("neither lightning nor pytorch_lightning is installed")


def _patch(trainer: Any, callback: type) -> None:
    if getattr(trainer, "_trainop_installed", False):
        return
    init, fit = trainer.__init__, trainer.fit

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        given = kwargs.get("callbacks")
        cbs = [] if given is None else list(given) if isinstance(given, list | tuple) else [given]
        if not any(isinstance(cb, callback) for cb in cbs):
            cbs.append(callback())
        kwargs["callbacks"] = cbs
        init(self, *args, **kwargs)

    @functools.wraps(fit)
    def _fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ckpt_path") is None and len(args) < 4:
            path = ckpt_path()
            if path is not None:
                kwargs["ckpt_path"] = path
        return fit(self, *args, **kwargs)

    trainer.__init__ = __init__
    trainer.fit = _fit
    trainer._trainop_installed = True
