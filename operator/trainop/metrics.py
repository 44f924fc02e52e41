"""Every Prometheus metric trainop exports, defined once; help texts list the label values.

With several replicas (`trainop run --leader-elect`) every replica keeps a full cache, so
the gauges that describe the cluster (trainop_jobs, trainop_queue_gpus, trainop_assumed_gpus,
trainop_counted_gpus) are exported only by the replica that acts (`LEADERSHIP`, wired by
`trainop run` to the shell state): summing them over all scraped replicas counts each job
once. trainop_leader says which replica that is.
Counters and histograms need no such care: only the acting replica reconciles and admits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

_JOBS_HELP = (
    "TrainingJobs by phase (Queued|Admitted|Running|Restarting|Succeeded|Failed|Suspended|Invalid), "
    "queue (the TrainingQueue that admitted it, else the one it names; '' for none) and "
    "framework (pytorch|tensorflow|jax|mpi|paddle|mxnet); counted from the operator's job "
    "cache at every scrape, so a restart or a missed transition cannot make it drift."
)


class Leadership:
    """Whether this replica acts: `probe` (set by `trainop run`) or, unset, always."""

    def __init__(self) -> None:
        self.probe: Callable[[], bool] | None = None

    def leading(self) -> bool:
        return self.probe is None or bool(self.probe())


LEADERSHIP = Leadership()


class LeaderOnly:
    """A collector that exports `metric` only while this replica acts; a standby clears it,
    so values it set while it led do not come back stale when it leads again."""

    def __init__(self, metric: Gauge) -> None:
        self.metric = metric

    def describe(self) -> Iterable[Any]:
        return self.metric.describe()

    def collect(self) -> Iterable[Any]:
        if LEADERSHIP.leading():
            return self.metric.collect()
        self.metric.clear()
        return self.metric.describe()  # the family, with no samples


class JobsCollector:
    """trainop_jobs, computed at scrape time from `source` (the shell's job bodies); empty
    on a replica that does not act (see LEADERSHIP)."""

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[Mapping[str, Any]]] | None = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("trainop_jobs", _JOBS_HELP, labels=["phase", "queue", "framework"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "trainop_jobs", _JOBS_HELP, labels=["phase", "queue", "framework"]
        )
        bodies = self._bodies() if LEADERSHIP.leading() else []
        for labels, value in sorted(count_jobs(bodies).items()):
            family.add_metric(list(labels), value)
        yield family

    def _bodies(self) -> list[Mapping[str, Any]]:
        for _ in range(3):  # the event loop may change the cache while this thread reads it
            try:
                return list(self.source()) if self.source is not None else []
            except RuntimeError:
                continue
        return []


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
    "GPUXid|OOMKilled|ImagePullFailed|NCCLError|PeerUnresolved|Signal|ExitCode|Unknown, see trainop.failures).",
    ["reason"],
)
PREEMPTIONS = Counter(
    "trainop_preemptions_total",
    "Gangs preempted; label queue (the victim's queue) and reason (Reclaim|Priority|"
    "Migration: moved to a better placement).",
    ["queue", "reason"],
)
MIGRATIONS = Counter(
    "trainop_migrations_total",
    "Running gangs moved to a better placement by checkpoint and restart (operator config "
    "migration; queueing.migration); label queue.",
    ["queue"],
)
MIGRATION_GAIN_SECONDS = Counter(
    "trainop_migration_estimated_gain_seconds_total",
    "Summed estimated gain of the moves started (seconds of the moved gangs' time).",
)
QUEUE_GPUS = Gauge(
    "trainop_queue_gpus",
    "GPUs per queue and product group; label kind (quota|used|borrowed|pending); exported "
    "by the acting replica only.",
    ["queue", "product", "kind"],
    registry=None,  # registered through LeaderOnly, below
)
LEADER = Gauge(
    "trainop_leader",
    "1 on the replica that acts (holds the leader Lease, or runs without --leader-elect, and "
    "has listed the cluster), else 0; only that replica exports trainop_jobs and "
    "trainop_queue_gpus.",
)
LEADER.set_function(lambda: 1.0 if LEADERSHIP.leading() else 0.0)
PLACEMENT_SPAN = Histogram(
    "trainop_placement_span",
    "Distinct topology domains a placed gang spans; label level (node|rack|block).",
    ["level"],
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64),
)
API_WRITES = Counter(
    "trainop_api_writes_total",
    "API writes trainop's own client made (kopf's finalizer patches and Events not included); "
    "label verb (create|patch|delete) and kind (Pod|Service|ConfigMap|Secret|TrainingJob|"
    "TrainingQueue|ResourceClaimTemplate).",
    ["verb", "kind"],
)
API_FAULTS_INJECTED = Counter(
    "trainop_api_faults_injected_total",
    "API errors injected by TRAINOP_FAULTS (tests only; always 0 in production).",
)
ADMISSION_CYCLES = Counter(
    "trainop_admission_cycles_total",
    "Admission cycles run by the operator's admission loop.",
)
ADMISSION_CYCLE_SECONDS = Histogram(
    "trainop_admission_cycle_seconds",
    "Duration of one admission cycle (decide every pending gang).",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)


def job_queue(body: Mapping[str, Any]) -> str:
    """The queue that admitted the job (status.queue) or, before that, the one it asked for."""
    return str(
        (body.get("status") or {}).get("queue") or (body.get("spec") or {}).get("queue") or ""
    )


def count_jobs(bodies: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], int]:
    """(phase, queue, framework) -> jobs, from the job bodies themselves (pure)."""
    counts: dict[tuple[str, str, str], int] = {}
    for body in bodies:
        phase = (body.get("status") or {}).get("phase")
        if not phase:
            continue
        framework = ((body.get("spec") or {}).get("framework") or {}).get("name", "")
        key = (str(phase), job_queue(body), str(framework))
        counts[key] = counts.get(key, 0) + 1
    return counts


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
    """Histograms and counters of a phase change (trainop_jobs comes from set_job_counts)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    queue = str(status.get("queue") or spec.get("queue") or "")
    framework = (spec.get("framework") or {}).get("name", "")
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


ASSUMED_GPUS = Gauge(
    "trainop_assumed_gpus",
    "GPUs the admission cycle counts for gangs it admitted whose pods the watch has not "
    "shown yet (assumed or just created); 0 once every admitted gang's pods are seen. A value "
    "that stays above 0 is a leaked assumption. Exported by the acting replica only.",
    registry=None,  # registered through LeaderOnly, below
)
COUNTED_GPUS = Gauge(
    "trainop_counted_gpus",
    "GPUs admission counts as used: those of the live pods it sees plus trainop_assumed_gpus. "
    "Exported by the acting replica only.",
    registry=None,
)

JOBS = JobsCollector()
REGISTRY.register(JOBS)
# Set by the admission cycle, which runs on the leader only: a former leader's last values
# would otherwise stay, and a sum over replicas would count them twice.
for _gauge in (QUEUE_GPUS, ASSUMED_GPUS, COUNTED_GPUS):
    REGISTRY.register(LeaderOnly(_gauge))


# --- training progress (issue 24; trainop.handlers.progress) ------------------------------
# Per-job series: labels namespace and job only, and a job's series are removed when it is
# deleted or finishes (`forget_job`), so their number is bounded by the live jobs. Exported
# by whichever replica received the report.
JOB_STEP = Gauge("trainop_job_step", "Last step reported by rank 0.", ["namespace", "job"])
JOB_STEP_SECONDS = Gauge(
    "trainop_job_step_seconds", "Step time last reported by rank 0.", ["namespace", "job"]
)
JOB_THROUGHPUT = Gauge(
    "trainop_job_throughput",
    "Throughput last reported by rank 0; label unit (samples|tokens) per second.",
    ["namespace", "job", "unit"],
)
JOB_DEGRADED = Gauge(
    "trainop_job_degraded",
    "1 while the job's Degraded condition is True (step time beyond the expected), else 0.",
    ["namespace", "job"],
)
JOB_TRAINER_METRIC = Gauge(
    "trainop_job_trainer_metric",
    "The latest value of each numeric metric the trainer reported with Kubeflow's "
    "trainerStatus (loss, grad_norm, learning_rate, ...); label name as reported, at most 64 "
    "per job.",
    ["namespace", "job", "name"],
)
_TRAINER_METRIC_NAMES: dict[tuple[str, str], set[str]] = {}
PROGRESS_REPORTS = Counter(
    "trainop_progress_reports_total",
    "Progress reports received; label outcome (accepted|throttled|refused|ignored: a "
    "Kubeflow trainerStatus body for a job whose trainop Reporter reports).",
    ["outcome"],
)
PROGRESS_REFUSALS = Counter(
    "trainop_progress_refusals_total",
    "Progress and trainerStatus requests refused; label reason (token: 401, no valid "
    "pod-bound token | pod: 403, not a live gang pod | checkpoint_path: 403, a checkpoint "
    "outside spec.checkpoint's location | too_large: 413 | rate_limited: 429 | not_json, "
    "invalid: 400 | job_gone: 410).",
    ["reason"],
)
CHECKPOINT_WAITS = Histogram(
    "trainop_checkpoint_wait_seconds",
    "From a checkpoint request to the gang's eviction; label outcome (checkpointed|deadline).",
    ["outcome"],
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)


def observe_progress(namespace: str, job: str, progress: Mapping[str, Any]) -> None:
    JOB_STEP.labels(namespace, job).set(float(progress.get("step") or 0))
    if progress.get("stepSeconds") is not None:
        JOB_STEP_SECONDS.labels(namespace, job).set(float(progress["stepSeconds"]))
    for unit in ("samples", "tokens"):
        value = progress.get(f"{unit}PerSecond")
        if value is not None:
            JOB_THROUGHPUT.labels(namespace, job, unit).set(float(value))
    _observe_trainer_metrics(namespace, job, progress.get("metrics") or [])


def _observe_trainer_metrics(namespace: str, job: str, reported: list[Any]) -> None:
    """The numeric ones of status.progress.metrics; a name the newest report lacks goes."""
    values: dict[str, float] = {}
    for entry in reported:
        try:
            values[str(entry["name"])] = float(entry["value"])
        except (KeyError, TypeError, ValueError):
            continue  # not a number: status and `trainop explain` still show it
    for name in _TRAINER_METRIC_NAMES.get((namespace, job), set()) - values.keys():
        with contextlib.suppress(KeyError):
            JOB_TRAINER_METRIC.remove(namespace, job, name)
    for name, value in values.items():
        JOB_TRAINER_METRIC.labels(namespace, job, name).set(value)
    if values:
        _TRAINER_METRIC_NAMES[(namespace, job)] = set(values)
    else:
        _TRAINER_METRIC_NAMES.pop((namespace, job), None)


def forget_job(namespace: str, job: str) -> None:
    """Drop a job's per-job series (deleted or finished)."""
    for gauge in (JOB_STEP, JOB_STEP_SECONDS, JOB_DEGRADED):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, job)
    for unit in ("samples", "tokens"):
        with contextlib.suppress(KeyError):
            JOB_THROUGHPUT.remove(namespace, job, unit)
    _observe_trainer_metrics(namespace, job, [])
