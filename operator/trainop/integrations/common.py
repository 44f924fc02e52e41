"""What trainop's trainer callbacks share: a step's report, the checkpoint-request latch and
the resume path. Standard library only; the trainer libraries stay in their own modules.

`StepReports` turns the callback hooks' facts (a step began, a step ended with these
numbers, a checkpoint was saved at this path) into trainop.launcher.progress.Reporter
calls: step, step time, samples per second, the trainer's planned total (the operator
derives the ETA and the PROGRESS column from it when the job sets no
spec.progress.totalSteps) and its numeric logs (loss, learning_rate, ...). The Reporter
sends the newest at most every TRAINOP_PROGRESS_INTERVAL seconds from its own thread, so a
step costs a clock read and a dict, never a network call.

The checkpoint request: the operator's answer to a report says whether it wants a
checkpoint (preemption or a node drain, docs/progress.md). Only the processes that report
(one per pod) hear it, and a save is collective in DDP, FSDP and DeepSpeed, so the
callbacks reduce the flag over all ranks (`any`) before they ask their trainer to save;
every rank then saves at the same step. One request gets one save: the latch re-arms when
the operator stops asking.

Neighbours: trainop.integrations.transformers and .lightning (the callbacks),
trainop.launcher.progress (the channel), trainop.launcher.sdkrun (installs them for SDK
jobs).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from trainop.launcher.progress import RESUME_ENV, Reporter

KUBEFLOW_URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
KUBEFLOW_DISABLE_ENV = "DISABLE_KUBEFLOW_INTEGRATION"


def silence_kubeflow(env: Any = None) -> bool:
    """When trainop's Reporter is wired, keep transformers' KubeflowCallback quiet so the
    job gets one report stream: DISABLE_KUBEFLOW_INTEGRATION=true stops TrainingArguments
    built from now on from adding it, and removing KUBEFLOW_TRAINER_SERVER_URL silences one
    already made (call it only then: transformers 5's KubeflowCallback refuses to be made
    without the URL or with the flag; it reads the URL at every send and sends nothing
    without it:
    https://github.com/huggingface/transformers/blob/main/src/transformers/integrations/integration_utils.py,
    KubeflowCallback._update_status). The operator's precedence (trainop wins,
    trainop.trainerstatus) covers the rest. Returns whether it did anything."""
    env = os.environ if env is None else env
    if not env.get("TRAINOP_PROGRESS_URL"):
        return False
    env[KUBEFLOW_DISABLE_ENV] = "true"
    env.pop(KUBEFLOW_URL_ENV, None)
    return True


def resume_path(
    env: Mapping[str, str] | None = None, say: Callable[[str], Any] | None = None
) -> str | None:
    """TRAINOP_RESUME_FROM when it names something that exists, else None (said once)."""
    env = os.environ if env is None else env
    path = env.get(RESUME_ENV, "")
    if not path:
        return None
    if os.path.exists(path):
        return path
    (say or _stderr)(f"trainop: {RESUME_ENV}={path} does not exist here; starting afresh")
    return None


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def numeric(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """The finite numbers among a trainer's logs (tensors of one element included)."""
    out: dict[str, float] = {}
    for key, value in (metrics or {}).items():
        if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[str(key)] = float(value)
    return out


class StepReports:
    """One callback's report state (see the module docstring).

    `check_every`: in a job of several ranks, the steps at which the request is reduced
    over the ranks (a collective, so every rank must take the same steps: a step count, not
    a clock). 10 by default: a checkpoint comes at most 10 steps after the operator's answer
    arrives, for one 1-element all-reduce (and a host sync) every 10 steps instead of every
    step. A single process looks at every step, for free."""

    def __init__(
        self,
        reporter: Reporter | None = None,
        clock: Callable[[], float] = time.perf_counter,
        phase: str = "train",
        check_every: int = 10,
    ) -> None:
        self.reporter = reporter if reporter is not None else Reporter()
        self.clock = clock
        self.phase = phase
        self.check_every = max(1, int(check_every))
        self._metrics_at: float | None = None
        self._handed: float | None = None
        self._hand_every = float(getattr(self.reporter, "interval", 0.0) or 0.0) / 4
        self.samples: float | None = None
        self.reporting = False
        self._handed_step: int | None = None
        self.metrics: dict[str, float] = {}
        self.started: float | None = None
        self.step_seconds: float | None = None
        self.step = 0
        self.total: int | None = None
        self.armed = True  # one save per request
        self.saves = 0

    def begin(self) -> None:
        self.started = self.clock()

    def log(self, metrics: Mapping[str, Any] | None) -> None:
        self.metrics.update(numeric(metrics))

    def end(self, step: int, total: int | None, samples: float | None, report: bool) -> None:
        """A step ended: time it and (from the reporting process) hand the Reporter the
        newest report; it goes out within the interval."""
        now = self.clock()
        if self.started is not None:
            self.step_seconds = max(now - self.started, 1e-9)
        self.started = None
        self.step, self.total = int(step), int(total) if total and total > 0 else None
        self.samples = samples
        if not report:
            return
        self.reporting = True
        # The Reporter sends the newest report once an interval: handing it one every step
        # of a fast loop is work thrown away (a lock and a dict each), so at most 4 per interval.
        mono = time.monotonic()
        if self._handed is not None and mono - self._handed < self._hand_every:
            return
        self._handed = mono
        self._hand()

    def _hand(self) -> None:
        self._handed_step = self.step
        samples = self.samples
        rate = samples / self.step_seconds if samples and self.step_seconds else None
        self.reporter.report(
            self.step,
            step_seconds=self.step_seconds,
            samples_per_second=rate,
            total_steps=self.total,
            metrics=dict(self.metrics),
            phase=self.phase,
        )

    def check_now(self, step: int, world_size: int) -> bool:
        """Whether to look at the request at this step (see check_every)."""
        return world_size <= 1 or int(step) % self.check_every == 0

    def metrics_due(self) -> bool:
        """True at most once per report interval: a trainer whose metrics are device tensors
        reads them (a host sync each) only as often as a report can go out."""
        now = time.monotonic()
        every = float(getattr(self.reporter, "interval", 0.0) or 0.0) / 2
        if self._metrics_at is not None and now - self._metrics_at < every:
            return False
        self._metrics_at = now
        return True

    def requested(self) -> bool:
        """This process's view of the request, latched: True once per request."""
        asked = self.reporter.checkpoint_requested()
        if not asked:
            self.armed = True
        return asked and self.armed

    def saved(self, path: str, step: int, report: bool) -> None:
        """A checkpoint was written: report it at once (an eviction may be waiting)."""
        self.armed = False
        self.saves += 1
        if report:
            self.reporter.report(
                int(step),
                step_seconds=self.step_seconds,
                checkpoint=(str(path), int(step)),
                total_steps=self.total,
                metrics=dict(self.metrics),
                phase=self.phase,
            )

    def finish(self) -> None:
        """The run ended: the last step's report goes now (the sending thread dies with the
        process)."""
        if self.reporting and self._handed_step != self.step:
            self._hand()
        self.reporter.flush()
