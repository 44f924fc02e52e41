"""Kubeflow Trainer's status protocol, spoken by transformers' KubeflowCallback (issue 39):
a `{"trainerStatus": {...}}` body checked and folded into status.progress. Pure: no I/O and
no clock of its own (`now` is an argument).

The protocol is Kubeflow Trainer's KEP-2779
(https://github.com/kubeflow/trainer/tree/master/docs/proposals/2779-trainjob-progress): a pod
POSTs `{"trainerStatus": {"progressPercentage": int 0..100, "estimatedRemainingSeconds": int
>= 0, "metrics": [{"name": str, "value": str}], "lastUpdatedTime": RFC 3339}}` with its
projected token as a bearer token. transformers' KubeflowCallback
(https://github.com/huggingface/transformers/blob/main/src/transformers/integrations/integration_utils.py,
class KubeflowCallback) switches itself on when KUBEFLOW_TRAINER_SERVER_URL is set (off with
DISABLE_KUBEFLOW_INTEGRATION=true), reads the token from the *file* named by
KUBEFLOW_TRAINER_SERVER_TOKEN and the CA from the file named by
KUBEFLOW_TRAINER_SERVER_CA_CERT, reports from the world's process zero only, at most every
5 s, and sends every metric as `str(value)`: the Trainer's logs (loss, grad_norm,
learning_rate, epoch, ...), `current_step`, `total_steps` and `current_epoch`.

Mapping (docs/progress.md): progressPercentage -> `percentage` and the summary;
estimatedRemainingSeconds -> `eta` (now + seconds); a step metric (current_step, currentStep,
step, global_step) -> `step` and the rate; a total (total_steps, totalSteps, max_steps) ->
`totalSteps` unless spec.progress.totalSteps says otherwise; the other metrics -> `metrics`
(replaced by each report, as Kubeflow does). lastUpdatedTime is checked and dropped: trainop
stamps `lastReportTime` with its own clock. Unknown keys are ignored.

Precedence: trainop's own Reporter wins. Once it has reported (`source: trainop`), a
trainerStatus body is answered 200 and ignored (`overruled`): the Reporter carries step,
total, ETA and metrics itself, so the job's progress has one author. Before its first report
the trainerStatus bodies move the progress; that report takes over and drops their metrics.

Neighbours: trainop.progress (trainop's own reports, the pod wiring), the endpoint in
trainop.handlers.progress, the models in trainop.api.progress.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainop import progress
from trainop.progress import ReportError

MAX_METRICS = 64
MAX_NAME = 64
MAX_VALUE = 64
MAX_TIME = 64
MAX_SECONDS = 2**31 - 1  # the KEP's int32
STEP_METRICS = ("current_step", "currentStep", "step", "global_step")
TOTAL_METRICS = ("total_steps", "totalSteps", "max_steps")
KUBEFLOW = "kubeflow"
TRAINOP = "trainop"


@dataclass(frozen=True)
class TrainerStatus:
    """One trainerStatus body, checked. `metrics` holds the metrics other than the steps,
    in the order sent, one per name (the last value sent wins)."""

    percentage: int | None = None
    remaining_seconds: int | None = None
    step: int | None = None
    total_steps: int | None = None
    metrics: tuple[tuple[str, str], ...] = ()


def _field(name: str) -> str:
    return f"trainerStatus.{name}"


def _integer(data: Mapping[str, Any], key: str, low: int, high: int) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ReportError(f"{_field(key)}: must be an integer from {low} to {high}, got {value!r}")
    return value


def _text(value: Any, where: str, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise ReportError(
            f"{where}: must be a non-empty printable string of at most {limit} characters, "
            f"got {shown}"
        )
    return value


def _count(value: str, where: str) -> int:
    """A step count sent as a string: "30" or "30.0"."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0 or number != int(number) or number > MAX_SECONDS:
        raise ReportError(f"{where}: must be a whole number >= 0, got {value!r}")
    return int(number)


def parse_trainer_status(data: Any) -> TrainerStatus:
    """Check a decoded JSON body {"trainerStatus": {...}}; ReportError names the bad field."""
    if not isinstance(data, Mapping):
        raise ReportError('the body must be a JSON object {"trainerStatus": {...}}')
    body = data.get("trainerStatus")
    if not isinstance(body, Mapping):
        raise ReportError(
            "trainerStatus: required, an object {progressPercentage?, "
            "estimatedRemainingSeconds?, metrics?, lastUpdatedTime?}"
        )
    percentage = _integer(body, "progressPercentage", 0, 100)
    remaining = _integer(body, "estimatedRemainingSeconds", 0, MAX_SECONDS)
    if body.get("lastUpdatedTime") is not None:
        _text(body["lastUpdatedTime"], _field("lastUpdatedTime"), MAX_TIME)
    raw = body.get("metrics")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ReportError(f"{_field('metrics')}: must be a list of {{name, value}} objects")
    if len(raw) > MAX_METRICS:
        raise ReportError(f"{_field('metrics')}: at most {MAX_METRICS} entries, got {len(raw)}")
    step = total = None
    kept: dict[str, str] = {}
    for i, entry in enumerate(raw):
        where = _field(f"metrics[{i}]")
        if not isinstance(entry, Mapping):
            raise ReportError(f"{where}: must be an object {{name, value}}")
        name = _text(entry.get("name"), f"{where}.name", MAX_NAME)
        value = _text(entry.get("value"), f"{where}.value", MAX_VALUE)
        if name in STEP_METRICS:
            step = _count(value, f"{where}.value ({name})")
        elif name in TOTAL_METRICS:
            total = _count(value, f"{where}.value ({name})") or None
        else:
            kept.pop(name, None)  # the last value sent wins, in the order sent
            kept[name] = value
    return TrainerStatus(percentage, remaining, step, total, tuple(kept.items()))


def _summary(step: int, total: int | None, percentage: int | None) -> str:
    if percentage is None:
        return progress.summary(step, total)
    if total:
        return f"{step}/{total} ({percentage}%)"
    return f"step {step} ({percentage}%)" if step else f"{percentage}%"


def _rate(old: Mapping[str, Any], step: int, now: datetime) -> float | None:
    before = progress.parse_time(old.get("lastReportTime"))
    was = old.get("step")
    if before is None or not isinstance(was, int) or step <= was or now <= before:
        return old.get("stepsPerSecond") if step == was else None
    return round((step - was) / (now - before).total_seconds(), 4)


def overruled(progress_now: Mapping[str, Any] | None) -> bool:
    """Whether trainop's own Reporter has reported for the job: trainerStatus is ignored."""
    return (progress_now or {}).get("source") == TRAINOP


def fold_trainer_status(
    old: Mapping[str, Any] | None,
    status: TrainerStatus,
    now: datetime,
    total_steps: int | None,
) -> dict[str, Any]:
    """status.progress after a trainerStatus body; `total_steps` is spec.progress.totalSteps
    (it wins over the total the trainer reports)."""
    before = dict(old or {})
    if overruled(before):  # trainop's own Reporter wins
        return before
    out = dict(before)
    out["metrics"] = [{"name": n, "value": v} for n, v in status.metrics]
    out["source"] = KUBEFLOW
    total = total_steps or status.total_steps or before.get("totalSteps")
    if total:
        out["totalSteps"] = int(total)
    step = status.step
    if step is None:
        step = int(before.get("step") or 0)
        if total and status.percentage is not None:  # no step sent: as far as the percentage
            step = max(step, int(total) * status.percentage // 100)
    rate = _rate(before, step, now) if status.step is not None else None
    if rate is None:
        out.pop("stepsPerSecond", None)
    else:
        out["stepsPerSecond"] = rate
    out["step"] = step
    if status.percentage is None:
        out.pop("percentage", None)
    else:
        out["percentage"] = status.percentage
    when = None
    if status.remaining_seconds is not None:
        when = progress.eta(now, status.remaining_seconds)
    elif total and rate and step < int(total):
        when = progress.eta(now, (int(total) - step) / rate)
    if when is None:
        out.pop("eta", None)
    else:
        out["eta"] = when
    out["summary"] = _summary(step, int(total) if total else None, out.get("percentage"))
    out["lastReportTime"] = progress.iso(now)
    return out
