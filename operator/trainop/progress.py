"""The pure rules of the training-aware lifecycle (issue 24): a progress report checked and
folded into status.progress, the throttle of status writes, the checkpoint-before-eviction
wait, the work a preemption victim loses, the pod wiring of the report channel and the
Degraded rule. No I/O and no clock of its own (`now` is an argument).

Neighbours: the trainer's side is `trainop.launcher.progress` (standard library only), the
endpoint that receives reports is `trainop.handlers.progress`, the models are
`trainop.api.progress`; `trainop.reconcile` wires pods and sets TRAINOP_RESUME_FROM,
`trainop.queueing.preemption` weighs lost work. docs/progress.md tells the whole story.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from trainop.api import constants as c
from trainop.api.progress import PROGRESS_AUDIENCE, PROGRESS_PATH, TRAINER_STATUS_PATH
from trainop.launcher.progress import (
    CA_FILE_ENV,
    INTERVAL_ENV,
    PROGRESS_URL_ENV,
    RANK_ENV,
    RESUME_ENV,
    RESUME_STEP_ENV,
    SIGNAL_ENV,
    SIGNAL_RANKS_ENV,
    TOKEN_FILE_ENV,
)

TOKEN_DIR = "/var/run/secrets/trainop.dev/progress"
CA_FILE = "ca.crt"  # the endpoint's CA bundle, beside the token (issue 35)
CA_ANNOTATION = "trainop.dev/progress-ca"
TOKEN_VOLUME = "trainop-progress-token"
TOKEN_SECONDS = 3600  # the kubelet refreshes it at 80% of its life
MAX_RANKS_KEPT = 4  # status.progress.ranks: the slowest few, so the status stays small
MAX_TEXT = 512
MAX_METRICS = 64  # a report's metrics: as many as a trainerStatus body may carry
MAX_METRIC_NAME = 64
# Kubeflow Trainer's status protocol (trainop.trainerstatus): the variables its controller
# injects and transformers' KubeflowCallback reads. TOKEN and CA_CERT name files
# (https://github.com/huggingface/transformers/blob/main/src/transformers/integrations/integration_utils.py,
# KubeflowCallback._get_token / _get_ssl_context).
KUBEFLOW_URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
KUBEFLOW_TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
KUBEFLOW_CA_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
KUBEFLOW_ENV = (KUBEFLOW_URL_ENV, KUBEFLOW_TOKEN_ENV, KUBEFLOW_CA_ENV)


class ReportError(ValueError):
    """A report that cannot be used; the message names the field and the fix. `status` is
    the HTTP answer, `reason` the label of trainop_progress_refusals_total, `temporary`
    whether sending the same again later may succeed (the rest are permanent)."""

    status = 400
    reason = "invalid"
    temporary = False


class NotJson(ReportError):
    reason = "not_json"


class TokenRefused(ReportError):
    """The bearer token is missing, not a pod-bound token for trainop's audience, or invalid."""

    status, reason = 401, "token"


class NotAPod(ReportError):
    """The token's pod is not a live pod of a TrainingJob."""

    status, reason = 403, "pod"


class JobGone(ReportError):
    status, reason = 410, "job_gone"


class TooLarge(ReportError):
    status, reason = 413, "too_large"


class RateLimited(ReportError):
    """More reports from one pod than the endpoint takes; `retry_after` seconds to wait."""

    status, reason, temporary = 429, "rate_limited", True

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# Every refusal, by reason (the labels of trainop_progress_refusals_total).
REFUSAL_REASONS = (
    "token",
    "pod",
    "too_large",
    "rate_limited",
    "not_json",
    "invalid",
    "checkpoint_path",
    "job_gone",
)


@dataclass(frozen=True)
class Report:
    """One progress report, as the trainer sent it (rank and node come from the pod)."""

    step: int
    step_seconds: float | None = None
    samples_per_second: float | None = None
    tokens_per_second: float | None = None
    checkpoint_path: str = ""
    checkpoint_step: int | None = None
    phase: str = ""
    total_steps: int | None = None  # the trainer's own total (spec.progress.totalSteps wins)
    metrics: tuple[tuple[str, str], ...] = ()  # (name, value as text), e.g. ("loss", "0.61")


MAX_NUMBER = 2**53  # steps and counts: the largest integer a JSON number holds exactly


def _number(data: Mapping[str, Any], key: str, integer: bool = False) -> Any:
    value = data.get(key)
    if value is None:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, int) and ok and not isinstance(value, bool) and value > MAX_NUMBER:
        ok = False  # (math.isfinite of a 400-digit integer raises OverflowError)
    if isinstance(value, bool) or not ok or not math.isfinite(value) or value < 0:
        kind = "an integer" if integer else "a number"
        raise ReportError(f"{key}: must be {kind} >= 0, got {value!r}")
    return value


def _text(data: Mapping[str, Any], key: str, limit: int = MAX_TEXT, where: str = "") -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or len(value) > limit:
        raise ReportError(f"{where or key}: must be a string of at most {limit} characters")
    return value


def _metrics(data: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """`metrics`: {name: finite number}, at most MAX_METRICS, names printable and short;
    kept as text, the form status.progress.metrics has for trainerStatus metrics too."""
    raw = data.get("metrics")
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or len(raw) > MAX_METRICS:
        raise ReportError(f"metrics: must be an object of at most {MAX_METRICS} name: number pairs")
    out = []
    for name, value in raw.items():
        if not isinstance(name, str) or not name or len(name) > MAX_METRIC_NAME:
            raise ReportError(
                f"metrics: names must be non-empty strings of at most {MAX_METRIC_NAME} "
                f"characters, got {name!r}"
            )
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and not (isinstance(value, int) and abs(value) > MAX_NUMBER)
        if not ok or not math.isfinite(value) or not name.isprintable():
            raise ReportError(f"metrics.{name}: must be a finite number, got {value!r}")
        out.append((name, f"{value:.6g}" if isinstance(value, float) else str(value)))
    return tuple(out)


def parse_report(data: Any) -> Report:
    """Check a decoded JSON report: {step, stepSeconds?, samplesPerSecond?,
    tokensPerSecond?, checkpoint?: {path, step}, phase?, totalSteps?, metrics?}."""
    if not isinstance(data, Mapping):
        raise ReportError("the report must be a JSON object")
    step = _number(data, "step", integer=True)
    if step is None:
        raise ReportError("step: required (the trainer's current step, an integer >= 0)")
    ckpt = data.get("checkpoint") or {}
    if not isinstance(ckpt, Mapping):
        raise ReportError("checkpoint: must be an object {path, step}")
    path = _text(ckpt, "path", MAX_PATH, "checkpoint.path")
    ckpt_step = _number(ckpt, "step", integer=True)
    if bool(path) != (ckpt_step is not None):
        raise ReportError("checkpoint: give both path and step")
    return Report(
        step=step,
        step_seconds=_number(data, "stepSeconds"),
        samples_per_second=_number(data, "samplesPerSecond"),
        tokens_per_second=_number(data, "tokensPerSecond"),
        checkpoint_path=path,
        checkpoint_step=ckpt_step,
        phase=_text(data, "phase"),
        total_steps=_number(data, "totalSteps", integer=True) or None,
        metrics=_metrics(data),
    )


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None


MAX_ETA_SECONDS = 100 * 365 * 86400  # an ETA further out is no ETA (and no datetime overflow)


def eta(now: datetime, seconds: float) -> str | None:
    """`now` + `seconds` as status.progress.eta; None when not finite or over a century
    away (a report's huge total at a tiny rate would overflow the datetime)."""
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_ETA_SECONDS:
        return None
    return iso(now + timedelta(seconds=seconds))


def summary(step: int, total: int | None) -> str:
    if not total:
        return f"step {step}"
    return f"{step}/{total} ({min(100, 100 * step // total)}%)"


def _rank_rows(
    old: list[Mapping[str, Any]], rank: int, node: str, seconds: float | None
) -> list[dict[str, Any]]:
    rows = {int(r["rank"]): dict(r) for r in old if "rank" in r}
    if seconds is not None:
        rows[rank] = {"rank": rank, "node": node, "stepSeconds": round(seconds, 4)}
    slowest = sorted(rows.values(), key=lambda r: (-float(r["stepSeconds"]), r["rank"]))
    keep = slowest[:MAX_RANKS_KEPT]
    if 0 in rows and rows[0] not in keep:  # rank 0 stays: the reference of a straggler
        keep[-1] = rows[0]
    return sorted(keep, key=lambda r: r["rank"])


def _rate(old: Mapping[str, Any], step: int, now: datetime) -> float | None:
    before = parse_time(old.get("lastReportTime"))
    was = old.get("step")
    if before is None or not isinstance(was, int) or step <= was or now <= before:
        return old.get("stepsPerSecond") if step == was else None
    return round((step - was) / (now - before).total_seconds(), 4)


def _rank0(out: dict[str, Any], old: Mapping[str, Any], report: Report, now: datetime) -> None:
    """Rank 0's report moves the job's step, rates, ETA and phase."""
    rate = _rate(old, report.step, now)
    out["step"] = report.step
    for key, value in (
        ("stepSeconds", report.step_seconds),
        ("samplesPerSecond", report.samples_per_second),
        ("tokensPerSecond", report.tokens_per_second),
        ("stepsPerSecond", rate),
    ):
        if value is None:
            out.pop(key, None)
        else:
            out[key] = round(float(value), 4)
    total = out.get("totalSteps")
    if not rate and report.step_seconds:
        rate = 1.0 / report.step_seconds
    when = (
        eta(now, (total - report.step) / rate) if total and rate and report.step < total else None
    )
    if when is None:
        out.pop("eta", None)
    else:
        out["eta"] = when
    out["phase"] = report.phase
    out["summary"] = summary(report.step, total)
    if report.metrics:  # the trainer's loss & co (the integrations send them)
        out["metrics"] = [{"name": n, "value": v} for n, v in report.metrics]


def fold(
    old: Mapping[str, Any] | None,
    report: Report,
    rank: int,
    node: str,
    now: datetime,
    total_steps: int | None,
) -> dict[str, Any]:
    """status.progress after `report` from the pod of `rank` on `node`. The total is
    spec.progress.totalSteps (`total_steps`), else the one rank 0's trainer reports."""
    before = dict(old or {})
    out = dict(before)
    out["source"] = "trainop"  # it wins over a trainerStatus report (trainop.trainerstatus)
    out.pop("percentage", None)
    if before.get("source") == "kubeflow":  # taking over: what trainerStatus said goes
        out.pop("metrics", None)
    if total_steps is None:
        total_steps = report.total_steps if rank == 0 else before.get("totalSteps")
    out["totalSteps"] = total_steps
    if total_steps is None:
        out.pop("totalSteps")
    if rank == 0:
        _rank0(out, before, report, now)
    out.setdefault("step", 0)
    out.setdefault("summary", summary(int(out["step"]), total_steps))
    if report.checkpoint_path and report.checkpoint_step is not None:
        last = before.get("lastCheckpoint") or {}
        if (last.get("path"), last.get("step")) != (report.checkpoint_path, report.checkpoint_step):
            out["lastCheckpoint"] = {
                "path": report.checkpoint_path,
                "step": report.checkpoint_step,
                "time": iso(now),
            }
    out["ranks"] = _rank_rows(list(before.get("ranks") or []), rank, node, report.step_seconds)
    out["lastReportTime"] = iso(now)
    return out


def should_write(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    last_write: float | None,
    clock: float,
    interval: float,
) -> bool:
    """Throttle: at most one status.progress write per job per `interval` seconds, except
    that a new checkpoint is written at once (an eviction may be waiting for it)."""
    if (old or {}).get("lastCheckpoint") != new.get("lastCheckpoint"):
        return True
    return last_write is None or clock - last_write >= interval


# --- checkpoint before eviction ------------------------------------------------------------
def checkpoint_request(
    progress: Mapping[str, Any] | None, grace_seconds: int, reason: str, now: datetime
) -> dict[str, Any]:
    """status.checkpointRequest: asked now, evicted at the deadline at the latest."""
    return {
        "requestedAt": iso(now),
        "deadline": iso(now + timedelta(seconds=grace_seconds)),
        "step": int((progress or {}).get("step") or 0),
        "reason": reason,
    }


def checkpoint_answered(
    progress: Mapping[str, Any] | None, request: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The checkpoint that answers `request`: reported at or after it, at or after its step."""
    ckpt = (progress or {}).get("lastCheckpoint") or {}
    at = parse_time(ckpt.get("time"))
    asked = parse_time(request.get("requestedAt"))
    if at is None or asked is None or at < asked:
        return None
    if int(ckpt.get("step") or 0) < int(request.get("step") or 0):
        return None
    return ckpt


def eviction_note(
    progress: Mapping[str, Any] | None, request: Mapping[str, Any], now: datetime
) -> tuple[bool, str]:
    """(evict now?, what the Preempted condition adds) for a gang with a checkpoint request."""
    ckpt = checkpoint_answered(progress, request)
    if ckpt is not None:
        return True, f"checkpointed at step {ckpt['step']} ({ckpt['path']}) before eviction"
    deadline = parse_time(request.get("deadline"))
    if deadline is None or now >= deadline:
        return True, (
            "no checkpoint was reported within the grace period "
            f"(asked at step {request.get('step', 0)}): evicted at the deadline"
        )
    return False, ""


def lost_work_gpu_seconds(
    progress: Mapping[str, Any] | None, started: datetime | None, gpus: int, now: datetime
) -> float:
    """GPU-seconds a victim loses when evicted now: time since its last checkpoint (or since
    its gang started, without one) x its GPUs."""
    ckpt = parse_time(((progress or {}).get("lastCheckpoint") or {}).get("time"))
    since = max((t for t in (ckpt, started) if t is not None), default=None)
    if since is None:
        return 0.0
    return max(0.0, (now - since).total_seconds()) * gpus


# --- where checkpoints may live (issue 35) -------------------------------------------------
MAX_PATH = 1024
CHECKPOINT_FIELD = "spec.checkpoint.volume"


class LocationError(ValueError):
    """spec.checkpoint names no usable location; `field` is the field to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class CheckpointRefused(ReportError):
    """A reported checkpoint path outside the job's checkpoint location (403, a Warning Event)."""

    status, reason = 403, "checkpoint_path"


def _clean_parts(path: str) -> list[str] | None:
    """The parts of an absolute, normalized path, None when it is not one: every part
    non-empty and neither . nor .. (so no //, no trailing /, no way up), printable."""
    if not path.startswith("/") or not path.isprintable():
        return None
    parts = path[1:].split("/")
    if path == "/":
        return []
    if any(p in ("", ".", "..") for p in parts):
        return None
    return parts


def checkpoint_root(
    checkpoint: Mapping[str, Any] | None,
    templates: Mapping[str, Mapping[str, Any]],
    roles: tuple[str, ...] | list[str],
) -> str | None:
    """The directory (as the trainer's containers see it) that every checkpoint of the job
    must lie under: the mountPath of spec.checkpoint.volume plus spec.checkpoint.path. None
    without spec.checkpoint; LocationError when it names no such place. `templates`: each
    role's pod template; `roles`: the roles whose pods train (the framework's ranked roles
    present in the job): each must declare the volume and mount it, at one mountPath."""
    if checkpoint is None:
        return None
    volume = str(checkpoint.get("volume") or "")
    fix = (
        "name the pod template volume the trainer writes checkpoints to, e.g. "
        "checkpoint: {volume: checkpoints}, with volumes: [{name: checkpoints, "
        "persistentVolumeClaim: ...}] and volumeMounts: [{name: checkpoints, "
        "mountPath: /checkpoints}]"
    )
    if not volume:
        raise LocationError(CHECKPOINT_FIELD, f"required with spec.checkpoint: {fix}")
    sub = str(checkpoint.get("path") or "")
    if sub and (_clean_parts("/" + sub) is None or sub.startswith("/")):
        raise LocationError(
            "spec.checkpoint.path",
            f"must be a relative directory under the volume with no empty, . or .. parts "
            f"(e.g. runs/bert), got {sub!r}",
        )
    mounts: set[str] = set()
    for role in roles:
        spec = (templates.get(role) or {}).get("spec") or {}
        declared = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, Mapping)}
        if volume not in declared:
            raise LocationError(
                CHECKPOINT_FIELD,
                f"{volume!r} is not a volume of spec.replicaSpecs.{role}.template: {fix}",
            )
        found = {
            str(m.get("mountPath") or "")
            for ctr in spec.get("containers") or []
            if isinstance(ctr, Mapping)
            for m in ctr.get("volumeMounts") or []
            if isinstance(m, Mapping) and m.get("name") == volume
        }
        if not found:
            raise LocationError(
                CHECKPOINT_FIELD,
                f"no container of spec.replicaSpecs.{role} mounts volume {volume!r}: add a "
                "volumeMounts entry for it to the trainer's container",
            )
        mounts |= found
    if len(mounts) > 1:
        raise LocationError(
            CHECKPOINT_FIELD,
            f"volume {volume!r} is mounted at {sorted(mounts)}: mount it at one mountPath in "
            "every container, so one reported path means one place",
        )
    mount = next(iter(mounts), "")
    if _clean_parts(mount.rstrip("/") or "/") is None:
        raise LocationError(
            CHECKPOINT_FIELD,
            f"volume {volume!r} is mounted at {mount!r}, not a clean absolute path",
        )
    root = mount.rstrip("/")
    return f"{root}/{sub}" if sub else (root or "/")


def confined(path: Any, root: str | None) -> str:
    """Why the checkpoint `path` may not be used for a job whose checkpoints live under
    `root` ("" when it may). What the operator checks is the string alone: it cannot see the
    volume, so a symlink inside it, which the job's own trainer (or anything else that writes
    to the volume) made, is followed by the next gang's trainer; the string cannot leave
    `root` by its parts (no .., no ., no //), by a prefix (/ckpt-evil is not under /ckpt), by
    a control character or NUL, or by length. docs/progress.md."""
    if root is None:
        return "the job names no checkpoint location (spec.checkpoint.volume)"
    if not isinstance(path, str) or not path:
        return "must be a non-empty string"
    if len(path) > MAX_PATH:
        return f"longer than {MAX_PATH} characters"
    parts = _clean_parts(path)
    if parts is None:
        return "must be an absolute path with no empty, . or .. parts and no control characters"
    base = _clean_parts(root) or []
    if parts[: len(base)] != base:
        return f"outside the job's checkpoint location {root}"
    return ""


def check_checkpoint(report: Report, root: str | None) -> None:
    """CheckpointRefused when `report` carries a checkpoint outside `root`."""
    if not report.checkpoint_path:
        return
    why = confined(report.checkpoint_path, root)
    if why:
        raise CheckpointRefused(f"checkpoint.path {report.checkpoint_path[:200]!r}: {why}")


# --- drains that wait for the checkpoint (issue 35) ---------------------------------------------
def budget_stands(
    phase: str | None,
    gang_running: bool,
    request: Mapping[str, Any] | None,
    progress: Mapping[str, Any] | None,
    now: datetime,
) -> bool:
    """Whether a job with spec.checkpoint keeps its PodDisruptionBudget now: while its gang
    runs (phase Running, pods not being deleted), and, once a checkpoint was asked for
    (status.checkpointRequest: a drain, a preemption), until that checkpoint is reported or
    its deadline passes; then the drain's evictions go through."""
    if phase != "Running" or not gang_running:
        return False
    if not request:
        return True
    done, _note = eviction_note(progress, request, now)
    return not done


# --- pod wiring ----------------------------------------------------------------------------
def resume_env(status: Mapping[str, Any], root: str | None) -> dict[str, str]:
    """TRAINOP_RESUME_FROM (and its step) from the last reported checkpoint, only when it
    lies under the job's checkpoint location `root` (a status written before the rule, or
    edited by hand, gives no resume)."""
    ckpt = ((status.get("progress") or {}).get("lastCheckpoint")) or {}
    if not ckpt.get("path") or confined(ckpt["path"], root):
        return {}
    return {RESUME_ENV: str(ckpt["path"]), RESUME_STEP_ENV: str(ckpt.get("step", 0))}


def trainer_status_url(url: str) -> str:
    """The trainerStatus path beside the report URL `url` (same scheme, host and port)."""
    parts = urlsplit(url)
    path = parts.path
    prefix = path[: -len(PROGRESS_PATH)] if path.endswith(PROGRESS_PATH) else ""
    return urlunsplit(parts._replace(path=prefix.rstrip("/") + TRAINER_STATUS_PATH))


def kubeflow_env(url: str, ca: str = "") -> dict[str, str]:
    """KUBEFLOW_TRAINER_SERVER_URL and _TOKEN for a pod that reports to `url`: the
    trainerStatus path and the same projected token file; with the endpoint's CA bundle
    (`ca`), _CA_CERT names its file beside the token (transformers then verifies the server
    with it). Without one the endpoint speaks plain HTTP, and transformers uses no CA."""
    env = {KUBEFLOW_URL_ENV: trainer_status_url(url), KUBEFLOW_TOKEN_ENV: f"{TOKEN_DIR}/token"}
    if ca:
        env[KUBEFLOW_CA_ENV] = f"{TOKEN_DIR}/{CA_FILE}"
    return env


def wire_pod(
    pod: Mapping[str, Any],
    url: str,
    spec_checkpoint: Mapping[str, Any] | None,
    extra_env: Mapping[str, str],
    interval: float,
    kubeflow: bool = False,
    ca: str = "",
) -> dict[str, Any]:
    """A copy of `pod` whose containers report to `url` with an audience-bound projected
    ServiceAccount token, and carry `extra_env` (TRAINOP_RESUME_FROM). With `kubeflow`, each
    container that sets none of KUBEFLOW_TRAINER_SERVER_* itself also gets them, so
    transformers' KubeflowCallback reports to trainop (trainop.trainerstatus)."""
    out = dict(pod)
    spec = dict(out["spec"])
    out["spec"] = spec
    env: dict[str, str] = dict(extra_env)
    if url and ca:  # the CA bundle travels as an annotation the projected volume makes a file
        meta = dict(out.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), CA_ANNOTATION: ca}
        out["metadata"] = meta
        env[CA_FILE_ENV] = f"{TOKEN_DIR}/{CA_FILE}"
    if url:
        env |= {PROGRESS_URL_ENV: url, TOKEN_FILE_ENV: f"{TOKEN_DIR}/token"}
        env[INTERVAL_ENV] = str(interval)
        env[RANK_ENV] = str(
            ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_RANK, "")
        )
        if spec_checkpoint:
            env[SIGNAL_ENV] = str(spec_checkpoint.get("signal", "SIGUSR1"))
            env[SIGNAL_RANKS_ENV] = str(spec_checkpoint.get("ranks", "RankZero"))
        volume = _token_volume(PROGRESS_AUDIENCE, bool(ca))
        spec["volumes"] = [*(spec.get("volumes") or []), volume]
    if not env:
        return out
    kf_env = kubeflow_env(url, ca) if url and kubeflow else {}
    containers = []
    for container in spec.get("containers") or []:
        ctr = dict(container)
        names = {e.get("name") for e in ctr.get("env") or []}
        # A container that sets any of the three keeps its own, and gets none of trainop's.
        own = env | kf_env if kf_env and not names & set(KUBEFLOW_ENV) else env
        ctr["env"] = [
            *(ctr.get("env") or []),
            *({"name": k, "value": v} for k, v in own.items() if k not in names),
        ]
        if url:
            mount = {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}
            ctr["volumeMounts"] = [*(ctr.get("volumeMounts") or []), mount]
        containers.append(ctr)
    spec["containers"] = containers
    return out


def _token_volume(audience: str, ca: bool = False) -> dict[str, Any]:
    """The token, and with `ca` the endpoint's CA bundle from the pod's own annotation, in
    one projected volume
    (https://kubernetes.io/docs/concepts/storage/projected-volumes/#serviceaccounttoken,
    #downwardapi): nothing per namespace to create or keep up to date, no RBAC."""
    token = {"audience": audience, "expirationSeconds": TOKEN_SECONDS, "path": "token"}
    sources: list[dict[str, Any]] = [{"serviceAccountToken": token}]
    if ca:
        field = {"fieldPath": f"metadata.annotations['{CA_ANNOTATION}']"}
        sources.append({"downwardAPI": {"items": [{"path": CA_FILE, "fieldRef": field}]}})
    return {"name": TOKEN_VOLUME, "projected": {"sources": sources}}


# --- how often a pod may report (issue 35) -----------------------------------------------------
@dataclass
class RateLimit:
    """A token bucket per key (a pod's uid): `rate` requests a second on average, `burst` at
    once. Pure: the clock is an argument. At most `max_keys` buckets are kept; when full,
    those refilled to `burst` (idle long enough to be as new) go first, then the oldest."""

    rate: float
    burst: float
    max_keys: int = 20_000
    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # key -> (left, at)

    def take(self, key: str, now: float) -> float:
        """0 when a request of `key` may go now (and count it), else the seconds to wait."""
        left, at = self.buckets.get(key, (self.burst, now))
        left = min(self.burst, left + max(0.0, now - at) * self.rate)
        if left < 1.0:
            self.buckets[key] = (left, now)
            return (1.0 - left) / self.rate
        if key not in self.buckets and len(self.buckets) >= self.max_keys:
            self._evict(now)
        self.buckets[key] = (left - 1.0, now)
        return 0.0

    def _evict(self, now: float) -> None:
        full = [
            k
            for k, (left, at) in self.buckets.items()
            if left + (now - at) * self.rate >= self.burst
        ]
        for k in (
            full
            or sorted(self.buckets, key=lambda k: self.buckets[k][1])[: self.max_keys // 10 + 1]
        ):
            del self.buckets[k]


# --- who is reporting ----------------------------------------------------------------------
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"


@dataclass(frozen=True)
class ReportingPod:
    """The pod a report comes from, as the TokenReview says (never as the report says)."""

    namespace: str
    pod: str
    pod_uid: str


def reporter_of(review: Mapping[str, Any], audience: str) -> ReportingPod:
    """The pod a reviewed token was made for; ReportError when the token is not a pod-bound
    ServiceAccount token for `audience`. A bound token's user is
    system:serviceaccount:<namespace>:<name>, and its extra names the pod
    (https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/#bound-service-account-token-volume)."""
    if not review.get("authenticated"):
        raise TokenRefused(f"token: not authenticated ({review.get('error') or 'rejected'})")
    if audience not in (review.get("audiences") or []):
        raise TokenRefused(f"token: its audience must be {audience} (a projected token)")
    user = review.get("user") or {}
    parts = str(user.get("username", "")).split(":")
    if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
        raise TokenRefused("token: not a ServiceAccount token")
    extra = user.get("extra") or {}
    pod = (extra.get(POD_NAME_EXTRA) or [""])[0]
    uid = (extra.get(POD_UID_EXTRA) or [""])[0]
    if not pod or not uid:
        raise TokenRefused("token: not bound to a pod (use the projected token trainop mounts)")
    return ReportingPod(parts[2], pod, uid)


def job_of_pod(
    pod: Mapping[str, Any] | None, who: ReportingPod, job: Mapping[str, Any] | None
) -> str:
    """The name of the job `who`'s pod belongs to; ReportError when the pod is not a live
    trainop gang pod with that uid, owned by that job."""
    meta = (pod or {}).get("metadata") or {}
    if not pod or meta.get("uid") != who.pod_uid:
        raise NotAPod(f"pod {who.namespace}/{who.pod}: not a pod trainop knows")
    name = (meta.get("labels") or {}).get(c.LABEL_JOB_NAME, "")
    owners = {o.get("uid") for o in meta.get("ownerReferences") or []}
    if not name or job is None or (job.get("metadata") or {}).get("uid") not in owners:
        raise NotAPod(f"pod {who.namespace}/{who.pod}: not a pod of a TrainingJob")
    return str(name)


# --- a slow placement noticed: the Degraded rule ---------------------------------------------
DEGRADED = "Degraded"


def placement_key(placement: Mapping[str, Any] | None) -> str:
    """One string per placement: the gang's nodes in rank order."""
    return ",".join((placement or {}).get("nodes") or [])


def note_placement(
    progress: Mapping[str, Any], placement: Mapping[str, Any] | None, warmup_steps: int
) -> dict[str, Any]:
    """Keep the step-time references of status.progress up to date with the placement:
    on a new placement, this placement's best step time after warm-up becomes the baseline
    (with its allreduce estimate) and the count of warm-up steps starts again."""
    out = dict(progress)
    key = placement_key(placement)
    step = int(out.get("step") or 0)
    if out.get("placementKey") != key:
        if out.get("bestStepSeconds"):
            out["baselineStepSeconds"] = out["bestStepSeconds"]
            out["baselineAllreduceSeconds"] = out.get("placementAllreduceSeconds")
        out["placementKey"] = key
        out["placementStartStep"] = step
        out["placementAllreduceSeconds"] = (placement or {}).get("estimatedAllreduceSeconds")
        out.pop("bestStepSeconds", None)
        return {k: v for k, v in out.items() if v is not None}
    seconds = out.get("stepSeconds")
    warm = step - int(out.get("placementStartStep") or 0) >= warmup_steps
    if warm and seconds and (not out.get("bestStepSeconds") or seconds < out["bestStepSeconds"]):
        out["bestStepSeconds"] = seconds
    return out


@dataclass(frozen=True)
class Degraded:
    """The Degraded rule's verdict: `expected` is the step time the placement should give."""

    degraded: bool
    reason: str = ""
    message: str = ""
    expected: float | None = None


def expected_step_seconds(progress: Mapping[str, Any]) -> float | None:
    """The step time this placement should give: the earlier placements' step time scaled
    by the ratio of the allreduce estimates (never below it), else this placement's own
    best step time after warm-up."""
    base = progress.get("baselineStepSeconds")
    if base:
        now_ar = progress.get("placementAllreduceSeconds")
        then_ar = progress.get("baselineAllreduceSeconds")
        ratio = now_ar / then_ar if now_ar and then_ar else 1.0
        return float(base) * max(1.0, ratio)
    best = progress.get("bestStepSeconds")
    return float(best) if best else None


def straggler(progress: Mapping[str, Any], factor: float) -> str:
    """The slowest rank when it is `factor` x slower than the median of the reporting ranks."""
    ranks = [r for r in progress.get("ranks") or [] if r.get("stepSeconds")]
    if len(ranks) < 2:
        return ""
    median = statistics.median(float(r["stepSeconds"]) for r in ranks)
    slow = max(ranks, key=lambda r: float(r["stepSeconds"]))
    if float(slow["stepSeconds"]) < factor * median:
        return ""
    node = f" on node {slow['node']}" if slow.get("node") else ""
    return (
        f"rank {slow['rank']}{node} is a straggler ({float(slow['stepSeconds']):.3g} s per "
        f"step, the ranks' median {median:.3g} s)"
    )


def judge_degraded(
    progress: Mapping[str, Any] | None,
    placement: Mapping[str, Any] | None,
    factor: float,
    warmup_steps: int,
) -> Degraded:
    """Whether the gang runs `factor` x slower than expected after warm-up, and why."""
    p = progress or {}
    seconds = p.get("stepSeconds")
    if (
        not seconds
        or int(p.get("step") or 0) - int(p.get("placementStartStep") or 0) < warmup_steps
    ):
        return Degraded(False, "WarmingUp")
    expected = expected_step_seconds(p)
    if expected is None or seconds < factor * expected:
        return Degraded(False, "AsExpected", expected=expected)
    why = straggler(p, factor)
    if not why:
        link = (placement or {}).get("allreduceBottleneck")
        why = (
            f"no straggler rank: the whole gang is slower; its allreduce crosses {link} links"
            if link and link not in ("node", "clique")
            else "no straggler rank: the whole gang is slower (contention on its nodes or links)"
        )
    message = (
        f"step time {float(seconds):.3g} s is {float(seconds) / expected:.1f}x the expected "
        f"{expected:.3g} s (factor {factor:g}): {why}"
    )
    return Degraded(True, "SlowerThanExpected", message, expected)


# --- a gang that never meets: the startup rule (issue 38) -------------------------------------
PROGRESSING = "Progressing"
DEFAULT_STARTUP_DEADLINE = 600


def startup_deadline(deadline: int | None, expects_reports: bool, wired: bool) -> int | None:
    """Seconds a running gang may go without a first report; None: not judged.
    `deadline`: spec.progress.startupDeadlineSeconds (0 turns the rule off);
    `expects_reports`: spec.checkpoint or spec.progress.totalSteps is set;
    `wired`: the operator gives pods a report endpoint."""
    if not wired or deadline == 0:
        return None
    if deadline is not None:
        return deadline
    return DEFAULT_STARTUP_DEADLINE if expects_reports else None


@dataclass(frozen=True)
class Startup:
    """The startup rule's verdict. status None: no condition to write (yet); recheck: the
    seconds until the verdict can change without a report (None: only a report changes it)."""

    status: bool | None
    reason: str = ""
    message: str = ""
    recheck: float | None = None


def judge_startup(
    reported: Mapping[str, Any] | None,
    running_since: datetime | None,
    deadline: int | None,
    now: datetime,
) -> Startup:
    """Progressing True once the trainer reported since the gang started running; False
    (NoReport) once `deadline` seconds passed without a report; nothing before that."""
    if deadline is None or running_since is None:
        return Startup(None)
    last = parse_time((reported or {}).get("lastReportTime"))
    if last is not None and last >= running_since:
        return Startup(True, "Reporting", "the trainer reports progress")
    waited = (now - running_since).total_seconds()
    if waited < deadline:
        return Startup(None, recheck=deadline - waited)
    return Startup(
        False,
        "NoReport",
        f"no progress report in the {deadline} s since the gang started running "
        f"({iso(running_since)}; spec.progress.startupDeadlineSeconds): the trainer has not "
        "started stepping; its "
        "rendezvous may never have completed (a peer that cannot be reached, a wrong address "
        "in the template): see `kubectl logs` of the job's pods, or set the deadline to 0 if "
        "this trainer does not report",
    )
