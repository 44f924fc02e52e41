"""Every Prometheus metric trainop exports, defined once; help texts list the label values."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

JOBS = Gauge(
    "trainop_jobs",
    "TrainingJobs by phase (Queued|Admitted|Running|Restarting|Succeeded|Failed|Suspended|Invalid), "
    "queue (TrainingQueue name, '' for none) and framework (pytorch|tensorflow|jax|mpi|paddle|mxnet).",
    ["phase", "queue", "framework"],
)
ADMISSION_WAIT = Histogram(
    "trainop_admission_wait_seconds",
    "Seconds from TrainingJob creation to its gang being admitted and placed; label queue.",
    ["queue"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600),
)
TIME_TO_RUNNING = Histogram(
    "trainop_job_time_to_running_seconds",
    "Seconds from TrainingJob creation until all of its pods are Running; label framework.",
    ["framework"],
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
)
RECONCILE_DURATION = Histogram(
    "trainop_reconcile_duration_seconds",
    "Duration of one reconcile; label handler (trainingjob).",
    ["handler"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
RECONCILE_ERRORS = Counter(
    "trainop_reconcile_errors_total",
    "Reconciles that raised; label handler (trainingjob).",
    ["handler"],
)
RESTARTS = Counter(
    "trainop_gang_restarts_total",
    "Gang restarts; label reason (GangRestart|PodMissing|NodeLost|Replanning).",
    ["reason"],
)
FAILURES = Counter(
    "trainop_job_failures_total",
    "Classified pod failures that restarted or failed a gang; label reason (NodeLost|Evicted|"
    "GPUXid|OOMKilled|ImagePullFailed|NCCLError|Signal|ExitCode|Unknown, see trainop.failures).",
    ["reason"],
)
PREEMPTIONS = Counter(
    "trainop_preemptions_total",
    "Gangs preempted; label queue (the victim's queue) and reason (Reclaim|Priority).",
    ["queue", "reason"],
)
QUEUE_GPUS = Gauge(
    "trainop_queue_gpus",
    "GPUs per queue and product group; label kind (quota|used|borrowed|pending).",
    ["queue", "product", "kind"],
)
PLACEMENT_SPAN = Histogram(
    "trainop_placement_span",
    "Distinct topology domains a placed gang spans; label level (node|rack|block).",
    ["level"],
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64),
)

# Last phase counted per job, so the gauge moves one job from one phase to another.
_job_phase: dict[tuple[str, str], tuple[str, str, str]] = {}


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None


def observe_transition(
    body: Mapping[str, Any], old: str | None, new: str, status: Mapping[str, Any]
) -> None:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    key = (meta.get("namespace", ""), meta.get("name", ""))
    queue = spec.get("queue") or ""
    framework = (spec.get("framework") or {}).get("name", "")
    prev = _job_phase.get(key)
    if prev is not None:
        JOBS.labels(*prev).dec()
    labels = (new, queue, framework)
    JOBS.labels(*labels).inc()
    _job_phase[key] = labels
    created = _parse(meta.get("creationTimestamp"))
    now = datetime.utcnow()
    if new == "Admitted" and created is not None and old in (None, "Queued", "Created"):
        ADMISSION_WAIT.labels(queue).observe(max((now - created).total_seconds(), 0))
        span = (status.get("placement") or {}).get("span") or {}
        for level in ("node", "rack", "block"):
            if level in span:
                PLACEMENT_SPAN.labels(level).observe(span[level])
    if new == "Running" and created is not None and old == "Admitted":
        TIME_TO_RUNNING.labels(framework).observe(max((now - created).total_seconds(), 0))
    observe_failure(body.get("status") or {}, status)
    if new == "Restarting":
        conds = {c.get("type"): c for c in status.get("conditions") or []}
        RESTARTS.labels((conds.get("Restarting") or {}).get("reason", "GangRestart")).inc()


def observe_failure(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Count status.lastFailure once: when it differs from the one already reported."""
    failure = new.get("lastFailure")
    if isinstance(failure, Mapping) and failure != old.get("lastFailure"):
        FAILURES.labels(str(failure.get("reason") or "Unknown")).inc()


def forget_job(namespace: str, name: str) -> None:
    prev = _job_phase.pop((namespace, name), None)
    if prev is not None:
        JOBS.labels(*prev).dec()
