"""trainop.integrations against minimal fakes of the trainer interfaces they use.

transformers, lightning and torch are not in the dev lock (torch alone is gigabytes), so
these fakes stand in for them, each keeping only what the callbacks touch and the order of
the hooks: transformers' Trainer calls on_step_begin, on_step_end, then (in
_maybe_log_save_evaluate) on_log and, when `control.should_save`, saves
`<output_dir>/checkpoint-<step>` and calls on_save
(https://huggingface.co/docs/transformers/main_classes/callback); Lightning's fit loop calls
on_train_start, on_train_batch_start/_end per batch and on_train_end, and
`trainer.save_checkpoint(path)` writes the checkpoint
(https://lightning.ai/docs/pytorch/stable/extensions/callbacks.html). The Reporter is a fake
too: what a callback asks it to send is what is checked."""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trainop.integrations import common
from trainop.integrations import lightning as pl_integration
from trainop.integrations import transformers as hf_integration
from trainop.integrations.common import StepReports


class FakeReporter:
    """Records what the callbacks hand trainop's Reporter; answers `requested`."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []
        self.requested = False
        self.flushed = 0

    def report(self, step: int, **kw: Any) -> None:
        self.reports.append({"step": step, **kw})

    def checkpoint_requested(self) -> bool:
        return self.requested

    def flush(self) -> None:
        self.flushed += 1

    def checkpoints(self) -> list[tuple[str, int]]:
        return [r["checkpoint"] for r in self.reports if r.get("checkpoint")]


def ticking() -> Any:
    t = [0.0]

    def clock() -> float:
        t[0] += 0.25
        return t[0]

    return clock


# --- a fake transformers ------------------------------------------------------------------------
@dataclass
class HFArgs:
    output_dir: str
    train_batch_size: int = 4
    gradient_accumulation_steps: int = 2
    world_size: int = 2


@dataclass
class HFState:
    max_steps: int
    global_step: int = 0
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True


@dataclass
class HFControl:
    should_save: bool = False


class HFTrainerCallback:
    pass


class HFTrainer:
    """transformers.Trainer's callback order, nothing else."""

    def __init__(
        self, args: HFArgs | None = None, callbacks: list[Any] | None = None, max_steps: int = 6
    ) -> None:
        self.args = args or HFArgs("out")
        self.callback_handler = types.SimpleNamespace(callbacks=list(callbacks or []))
        self.max_steps = max_steps
        self.resumed_from: Any = "never trained"
        self.hook: Any = None  # called after each step, e.g. to raise a request
        self._call("on_init_end", HFState(max_steps), HFControl())  # its callbacks are made

    def add_callback(self, cb: Any) -> None:
        self.callback_handler.callbacks.append(cb)

    def _call(self, event: str, state: HFState, control: HFControl, **kw: Any) -> None:
        for cb in self.callback_handler.callbacks:
            getattr(cb, event, lambda *a, **k: None)(self.args, state, control, **kw)

    def train(self, resume_from_checkpoint: Any = None) -> HFState:
        self.resumed_from = resume_from_checkpoint
        state, control = HFState(self.max_steps), HFControl()
        self._call("on_train_begin", state, control)
        for _ in range(self.max_steps):
            self._call("on_step_begin", state, control)
            state.global_step += 1
            self._call("on_step_end", state, control)
            self._call(
                "on_log",
                state,
                control,
                logs={
                    "loss": 2.0 / state.global_step,
                    "learning_rate": 1e-3,
                    "epoch": 0.5,
                    "note": "x",
                },
            )
            if control.should_save:
                os.makedirs(os.path.join(self.args.output_dir, f"checkpoint-{state.global_step}"))
                control.should_save = False
                self._call("on_save", state, control)
            if self.hook:
                self.hook(state.global_step)
        self._call("on_train_end", state, control)
        return state


@pytest.fixture
def fake_transformers(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    class Trainer(HFTrainer):  # a fresh class per test: install() patches it
        pass

    mod = types.ModuleType("transformers")
    mod.TrainerCallback = HFTrainerCallback  # type: ignore[attr-defined]
    mod.Trainer = Trainer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers", mod)
    hf_integration._callback_class.cache_clear()
    monkeypatch.delenv("TRAINOP_RESUME_FROM", raising=False)
    yield mod
    hf_integration._callback_class.cache_clear()


def hf_callback(reporter: FakeReporter, check_every: int = 1) -> Any:
    reports = StepReports(reporter, clock=ticking(), check_every=check_every)
    return hf_integration.TrainopCallback(reports=reports)  # type: ignore[attr-defined]


def test_hf_reports_step_throughput_total_and_logs(fake_transformers: Any, tmp_path: Path) -> None:
    rep = FakeReporter()
    trainer = fake_transformers.Trainer(
        HFArgs(str(tmp_path)), callbacks=[hf_callback(rep)], max_steps=3
    )
    trainer.train()
    first, last = rep.reports[0], rep.reports[-1]
    # 4 per device x 2 accumulation x 2 ranks = 16 samples a step, 0.25 s a step
    assert (
        first["step"],
        first["step_seconds"],
        first["samples_per_second"],
        first["total_steps"],
    ) == (1, 0.25, 64.0, 3)
    assert first["metrics"] == {}  # on_log comes after on_step_end: step 1 has no loss yet
    assert last["metrics"] == {
        "loss": 1.0,
        "learning_rate": 1e-3,
        "epoch": 0.5,
    }  # step 2's, text dropped
    assert [r["step"] for r in rep.reports] == [1, 2, 3] and rep.flushed == 1


def test_hf_only_a_nodes_local_process_zero_reports(fake_transformers: Any, tmp_path: Path) -> None:
    rep = FakeReporter()
    cb = hf_callback(rep)
    cb.on_step_end(HFArgs(str(tmp_path)), HFState(10, 1, is_local_process_zero=False), HFControl())
    assert rep.reports == []


@dataclass(frozen=True)
class RequestCase:
    name: str
    asked_at: tuple[int, ...]  # after these steps the operator's answer says "checkpoint"
    cleared_at: tuple[int, ...]  # and after these, it stops asking
    saves: list[int] = field(default_factory=list)


REQUESTS = [
    RequestCase("no request, no save", (), (), []),
    RequestCase("a request: one save at the next step", (2,), (), [3]),
    RequestCase("one request, asked on and on: still one save", (2, 3, 4, 5), (), [3]),
    RequestCase("a second request after the first ended", (1,), (3,), [2, 5]),
]


@pytest.mark.parametrize("case", REQUESTS, ids=[c.name for c in REQUESTS])
def test_hf_checkpoints_through_should_save_once_per_request(
    fake_transformers: Any, tmp_path: Path, case: RequestCase
) -> None:
    rep = FakeReporter()
    trainer = fake_transformers.Trainer(
        HFArgs(str(tmp_path)), callbacks=[hf_callback(rep)], max_steps=6
    )

    def operator(step: int) -> None:
        if step in case.asked_at:
            rep.requested = True
        if step in case.cleared_at:
            rep.requested = False
        if case.name.startswith("a second") and step == 4:
            rep.requested = True

    trainer.hook = operator
    trainer.train()
    saved = [int(p.rsplit("-", 1)[1]) for p, _ in rep.checkpoints()]
    assert saved == case.saves
    assert rep.checkpoints() == [
        (os.path.join(str(tmp_path), f"checkpoint-{s}"), s) for s in case.saves
    ]
    assert all(os.path.isdir(p) for p, _ in rep.checkpoints())


def test_hf_request_heard_by_one_rank_saves_on_every_rank(
    fake_transformers: Any, tmp_path: Path
) -> None:
    """The flag goes through the all-ranks reduction: a rank that heard nothing saves too."""
    rep = FakeReporter()  # this rank never hears the request
    cb = hf_integration.TrainopCallback(
        reports=StepReports(rep, check_every=1), sync=lambda flag: True
    )  # type: ignore[attr-defined]
    control = HFControl()
    cb.on_step_end(HFArgs(str(tmp_path)), HFState(10, 4, is_local_process_zero=False), control)
    assert control.should_save


CADENCE = [
    ("several ranks: every 10th step by default", 10, 2, [10]),
    ("several ranks, check_every=1: the next step", 1, 2, [3]),
    ("one process: every step, whatever check_every", 10, 1, [3]),
]


@pytest.mark.parametrize(("name", "every", "world", "saves"), CADENCE, ids=[c[0] for c in CADENCE])
def test_hf_the_ranks_look_at_the_request_on_the_same_steps(
    fake_transformers: Any, tmp_path: Path, name: str, every: int, world: int, saves: list[int]
) -> None:
    """The reduction is a collective: every rank takes it at the same steps, a step count."""
    rep = FakeReporter()
    args = HFArgs(str(tmp_path), world_size=world)
    trainer = fake_transformers.Trainer(
        args, callbacks=[hf_callback(rep, check_every=every)], max_steps=12
    )
    trainer.hook = lambda step: setattr(rep, "requested", rep.requested or step == 2)
    trainer.train()
    assert [s for _, s in rep.checkpoints()] == saves


def test_without_torch_the_reduction_is_the_flag() -> None:
    assert hf_integration._sync_any(True) is True and hf_integration._sync_any(False) is False


# --- transformers' KubeflowCallback stays quiet where trainop reports -------------------------
class KubeflowLike:
    """What matters of transformers' KubeflowCallback: it reads the URL at every send."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self) -> None:
        if os.environ.get("KUBEFLOW_TRAINER_SERVER_URL"):
            self.sent += 1


SILENCE = [
    (
        "trainop wired: transformers' callback goes quiet",
        {"TRAINOP_PROGRESS_URL": "http://op/v1/progress"},
        0,
        "true",
    ),
    ("not wired: left as it is", {}, 1, None),
]


@pytest.mark.parametrize(("name", "env", "sent", "disabled"), SILENCE, ids=[c[0] for c in SILENCE])
def test_one_report_stream_not_two(
    fake_transformers: Any,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    env: dict[str, str],
    sent: int,
    disabled: str | None,
) -> None:
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", "http://op/v1/trainer-status")
    monkeypatch.delenv("DISABLE_KUBEFLOW_INTEGRATION", raising=False)
    monkeypatch.delenv("TRAINOP_PROGRESS_URL", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    callback = hf_callback(FakeReporter())
    # Made first, as in Trainer(..., callbacks=[TrainopCallback()]): the environment stays as
    # it is until the Trainer has made its own callbacks, transformers' KubeflowCallback
    # among them (transformers 5's refuses to be made without the URL, or when disabled).
    assert os.environ["KUBEFLOW_TRAINER_SERVER_URL"] == "http://op/v1/trainer-status"
    assert "DISABLE_KUBEFLOW_INTEGRATION" not in os.environ
    kubeflow = KubeflowLike()  # made by the Trainer, from TrainingArguments built before
    callback.on_init_end(None, None, None)  # the end of the Trainer's __init__
    kubeflow.send()
    assert kubeflow.sent == sent
    assert os.environ.get("DISABLE_KUBEFLOW_INTEGRATION") == disabled


def test_a_callback_added_to_a_built_trainer_silences_at_train_begin(
    fake_transformers: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", "http://op/v1/trainer-status")
    monkeypatch.delenv("DISABLE_KUBEFLOW_INTEGRATION", raising=False)
    monkeypatch.setenv("TRAINOP_PROGRESS_URL", "http://op/v1/progress")
    kubeflow = KubeflowLike()
    trainer = fake_transformers.Trainer(HFArgs(str(tmp_path)), max_steps=2)
    trainer.add_callback(hf_callback(FakeReporter()))
    trainer.train()
    kubeflow.send()
    assert kubeflow.sent == 0
    assert os.environ.get("DISABLE_KUBEFLOW_INTEGRATION") == "true"


# --- install(): what SDK jobs run --------------------------------------------------------------
def test_hf_install_adds_one_callback_and_resumes(
    fake_transformers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hf_integration.install()
    hf_integration.install()  # twice is once
    cls = hf_integration.TrainopCallback  # type: ignore[attr-defined]
    plain = fake_transformers.Trainer(HFArgs(str(tmp_path)))
    own = fake_transformers.Trainer(HFArgs(str(tmp_path)), callbacks=[cls()])
    assert [type(cb) for cb in plain.callback_handler.callbacks] == [cls]
    assert len(own.callback_handler.callbacks) == 1
    plain.max_steps = 0
    plain.train()
    assert plain.resumed_from is None  # a first start
    ckpt = tmp_path / "checkpoint-40"
    ckpt.mkdir()
    monkeypatch.setenv("TRAINOP_RESUME_FROM", str(ckpt))
    plain.train()
    assert plain.resumed_from == str(ckpt)
    plain.train(resume_from_checkpoint="mine")
    assert plain.resumed_from == "mine"  # the caller's own wins


def test_a_resume_path_that_is_not_there_starts_afresh_saying_so() -> None:
    said: list[str] = []
    assert common.resume_path({"TRAINOP_RESUME_FROM": "/nowhere/ckpt"}, say=said.append) is None
    assert "does not exist here" in said[0]
    assert common.resume_path({}) is None


def test_numeric_keeps_finite_numbers_and_one_element_tensors() -> None:
    class Tensor:
        def __init__(self, v: float, n: int = 1) -> None:
            self.v, self.n = v, n

        def item(self) -> float:
            return self.v

        def numel(self) -> int:
            return self.n

    got = common.numeric(
        {"loss": Tensor(0.5), "vec": Tensor(1.0, 3), "nan": float("nan"), "b": True, "n": 2}
    )
    assert got == {"loss": 0.5, "n": 2.0}


# --- a fake Lightning ---------------------------------------------------------------------------
class PLCallback:
    pass


class PLStrategy:
    def __init__(self, others_heard: bool = False) -> None:
        self.others_heard = others_heard

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        assert all is False  # any rank's request counts
        return decision or self.others_heard


class PLBatch:
    shape = (32, 10)


class PLTrainer:
    """Lightning's fit loop order, nothing else."""

    def __init__(
        self, callbacks: Any = None, max_steps: int = 5, default_root_dir: str = "."
    ) -> None:
        self.callbacks = list(callbacks or [])
        self.max_steps = max_steps
        self.default_root_dir = default_root_dir
        self.global_step = 0
        self.local_rank = 0
        self.world_size = 2
        self.is_global_zero = True
        self.callback_metrics: dict[str, Any] = {}
        self.strategy = PLStrategy()
        self.saved: list[str] = []
        self.fit_ckpt: Any = "never fitted"
        self.hook: Any = None

    def save_checkpoint(self, path: str) -> None:
        self.saved.append(path)

    def fit(
        self,
        model: Any = None,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: Any = None,
        ckpt_path: Any = None,
    ) -> None:
        self.fit_ckpt = ckpt_path
        for cb in self.callbacks:
            cb.on_train_start(self, model)
        for i in range(self.max_steps):
            for cb in self.callbacks:
                cb.on_train_batch_start(self, model, (PLBatch(), PLBatch()), i)
            self.global_step += 1
            self.callback_metrics = {"train_acc": 0.5}
            for cb in self.callbacks:
                cb.on_train_batch_end(
                    self, model, {"loss": 1.0 / self.global_step}, (PLBatch(), PLBatch()), i
                )
            if self.hook:
                self.hook(self.global_step)
        for cb in self.callbacks:
            cb.on_train_end(self, model)


@pytest.fixture
def fake_lightning(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    class Trainer(PLTrainer):
        pass

    pkg = types.ModuleType("lightning")
    mod = types.ModuleType("lightning.pytorch")
    mod.Callback = PLCallback  # type: ignore[attr-defined]
    mod.Trainer = Trainer  # type: ignore[attr-defined]
    pkg.pytorch = mod  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lightning", pkg)
    monkeypatch.setitem(sys.modules, "lightning.pytorch", mod)
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)  # the old package: absent
    pl_integration._make.cache_clear()
    monkeypatch.delenv("TRAINOP_RESUME_FROM", raising=False)
    yield mod
    pl_integration._make.cache_clear()


def pl_callback(reporter: FakeReporter, dirpath: str | None = None, check_every: int = 1) -> Any:
    cls = pl_integration.TrainopCallback  # type: ignore[attr-defined]
    return cls(
        dirpath=dirpath, reports=StepReports(reporter, clock=ticking(), check_every=check_every)
    )


def test_lightning_reports_step_throughput_total_and_metrics(
    fake_lightning: Any, tmp_path: Path
) -> None:
    rep = FakeReporter()
    trainer = fake_lightning.Trainer(callbacks=[pl_callback(rep)], max_steps=4)
    trainer.fit()
    first = rep.reports[0]
    # 32 samples a batch x 2 ranks, 0.25 s a step; loss from the step's outputs
    assert (
        first["step"],
        first["step_seconds"],
        first["samples_per_second"],
        first["total_steps"],
    ) == (1, 0.25, 256.0, 4)
    assert first["metrics"] == {"train_acc": 0.5, "loss": 1.0}
    assert [r["step"] for r in rep.reports] == [1, 2, 3, 4] and rep.flushed == 1


def test_lightning_saves_its_own_checkpoint_on_request_and_reports_the_path(
    fake_lightning: Any, tmp_path: Path
) -> None:
    rep = FakeReporter()
    trainer = fake_lightning.Trainer(
        callbacks=[pl_callback(rep)], max_steps=5, default_root_dir=str(tmp_path)
    )
    trainer.hook = lambda step: setattr(rep, "requested", step >= 2)
    trainer.fit()
    want = os.path.join(str(tmp_path), "trainop-checkpoints", "step-3.ckpt")
    assert trainer.saved == [want]
    assert rep.checkpoints() == [(want, 3)]


def test_lightning_saves_on_every_rank_when_any_heard(fake_lightning: Any, tmp_path: Path) -> None:
    rep = FakeReporter()
    trainer = fake_lightning.Trainer(
        callbacks=[pl_callback(rep, dirpath=str(tmp_path))], max_steps=1
    )
    trainer.local_rank = 1  # not a reporting process, and it never heard the request
    trainer.strategy = PLStrategy(others_heard=True)
    trainer.fit()
    assert trainer.saved == [os.path.join(str(tmp_path), "step-1.ckpt")]
    assert rep.reports == []  # saved, but reporting is local rank 0's


def test_lightning_install_adds_one_callback_and_resumes(
    fake_lightning: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pl_integration.install()
    cls = pl_integration.TrainopCallback  # type: ignore[attr-defined]
    plain = fake_lightning.Trainer(max_steps=0)
    own = fake_lightning.Trainer(callbacks=[cls()], max_steps=0)
    assert [type(cb) for cb in plain.callbacks] == [cls] and len(own.callbacks) == 1
    plain.fit()
    assert plain.fit_ckpt is None
    ckpt = tmp_path / "step-7.ckpt"
    ckpt.write_text("x")
    monkeypatch.setenv("TRAINOP_RESUME_FROM", str(ckpt))
    plain.fit(None)
    assert plain.fit_ckpt == str(ckpt)
    assert pl_integration.ckpt_path() == str(ckpt)


BATCHES = [
    ("a tensor", PLBatch(), 32),
    ("(x, y)", (PLBatch(), PLBatch()), 32),
    ("a dict", {"input_ids": PLBatch()}, 32),
    ("a list (x, y): its first element", [[1, 2], [3, 4]], 2),
    ("nothing", None, None),
]


@pytest.mark.parametrize(("name", "batch", "want"), BATCHES, ids=[c[0] for c in BATCHES])
def test_lightning_batch_size(name: str, batch: Any, want: int | None) -> None:
    assert pl_integration._batch_size(batch) == want


def test_the_libraries_are_imported_only_when_a_callback_is_used() -> None:
    """Importing the integrations imports neither library (they are extras)."""
    import importlib

    for mod in ("trainop.integrations.transformers", "trainop.integrations.lightning"):
        importlib.reload(importlib.import_module(mod))
    assert "transformers" not in sys.modules or isinstance(
        sys.modules["transformers"], types.ModuleType
    )
    with pytest.raises(AttributeError):
        hf_integration.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def test_lightning_reads_its_metric_tensors_once_per_half_interval(fake_lightning: Any) -> None:
    """callback_metrics and the loss are device tensors: reading one is a host sync, so
    they are read at most once per half report interval, not every step."""
    rep = FakeReporter()
    rep.interval = 3600.0  # type: ignore[attr-defined]
    reads = []

    class Counting(fake_lightning.Trainer):  # type: ignore[misc,name-defined]
        @property
        def callback_metrics(self) -> dict[str, Any]:
            reads.append(self.global_step)
            return {"train_acc": 0.5}

        @callback_metrics.setter
        def callback_metrics(self, value: Any) -> None:
            pass

    Counting(callbacks=[pl_callback(rep)], max_steps=6).fit()
    assert reads == [1]
    # and the Reporter is handed a report at most 4 times an interval, the last step's at
    # the end: it sends only the newest once an interval anyway
    assert [(r["step"], r["metrics"]) for r in rep.reports] == [
        (1, {"train_acc": 0.5, "loss": 1.0}),
        (6, {"train_acc": 0.5, "loss": 1.0}),
    ]


def test_hf_reports_a_checkpoint_only_after_every_rank_saved(
    fake_transformers: Any, tmp_path: Path
) -> None:
    # Global rank 0 writes the model and optimizer; another node's local rank 0 must not
    # report the checkpoint (trainop then evicts the gang) before that is done.
    rep, order = FakeReporter(), []
    reports = StepReports(rep, clock=ticking(), check_every=1)
    callback = hf_integration.TrainopCallback(  # type: ignore[attr-defined]
        reports=reports, barrier=lambda: order.append(("barrier", len(rep.checkpoints())))
    )
    trainer = fake_transformers.Trainer(HFArgs(str(tmp_path)), callbacks=[callback], max_steps=3)
    rep.requested = True
    trainer.train()
    assert order == [("barrier", 0)]
    assert rep.checkpoints() == [(str(tmp_path / "checkpoint-1"), 1)]
