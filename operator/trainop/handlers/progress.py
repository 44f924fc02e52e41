"""The progress report endpoint: pods POST reports, trainop folds them into status.progress.

`trainop run --progress-port` serves `POST /v1/progress` (a report) and `GET /v1/progress`
(is a checkpoint wanted?) on every replica, with aiohttp (kopf's own HTTP library), and
`POST /v1/trainer-status`, Kubeflow Trainer's `trainerStatus` body as transformers'
KubeflowCallback sends it (trainop.trainerstatus), with the same tokens and rules. Each
request carries the pod's projected ServiceAccount token (audience trainop.dev/progress) as
a bearer token. A TokenReview says whether it is valid and which pod it was made for
(trainop.progress.reporter_of); the pod's labels and owner reference name the job
(trainop.progress.job_of_pod). The report body never names a job, so a pod can only report
for its own. Reviews are cached per token for a minute, so a report costs the API server a
TokenReview per pod per minute and a status write per job per interval at most.

Neighbours: trainop.progress (the pure rules), trainop.launcher.progress (the sender),
trainop.handlers.operator (wiring, the eviction that waits for a checkpoint), trainop.kube
(TokenReview and status writes). docs/progress.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import ssl
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from trainop import metrics, progress, trainerstatus
from trainop.api import constants as c
from trainop.api.progress import PROGRESS_AUDIENCE, PROGRESS_PATH, TRAINER_STATUS_PATH
from trainop.handlers.state import JobKey, ShellState, job_key, split_key
from trainop.kube.client import KubeApi
from trainop.planner import InvalidJob, checkpoint_location, parse_spec

log = logging.getLogger("trainop.progress")

PATH = PROGRESS_PATH
REVIEW_TTL = 60.0
MAX_CACHED = 20_000
MAX_BODY = 16_384  # bytes of a report or trainerStatus body (413 above)
RATE, BURST = 5.0, 10.0  # requests a second per pod, on average and at once (429 above)
REVIEW_RATE = 20.0  # TokenReviews of new tokens a second per client address (429 above)
WARN_EVERY = 60.0  # at most one CheckpointRefused Event per job per minute
# status.progress keys a report may drop (trainop.progress.fold, trainop.trainerstatus).
DROPPED = frozenset(
    {
        "eta",
        "percentage",
        "stepsPerSecond",
        "stepSeconds",
        "samplesPerSecond",
        "tokensPerSecond",
        "totalSteps",
    }
)


class ProgressService:
    """Per-replica memory of the channel: reviewed tokens. What it keeps per job (the
    newest progress, which status may lag by up to one write interval, when it was last
    written, the checkpoint event, the throttled write) is in the job's JobMemory, so it
    goes with the job."""

    def __init__(
        self,
        api: Callable[[], KubeApi | None],
        state: Callable[[], ShellState],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        on_checkpoint: Callable[[JobKey], None] | None = None,
    ) -> None:
        self.api, self.state, self.interval, self.clock = api, state, interval, clock
        # Called when a job with an open checkpoint request reports a newer checkpoint: the
        # echo of our own status write reconciles nothing, and a drain waits on the reconcile.
        self.on_checkpoint = on_checkpoint
        # token digest -> (its pod, or why it was refused; until when that holds)
        self.reviews: dict[str, tuple[progress.ReportingPod | progress.TokenRefused, float]] = {}
        # (job uid, generation) -> where its checkpoints must lie (None: nowhere)
        self.roots: dict[tuple[str, int], str | None] = {}
        self.warned: dict[JobKey, float] = {}  # the last CheckpointRefused Event per job
        self.limit = progress.RateLimit(RATE, BURST)  # per pod uid
        self.review_limit = progress.RateLimit(REVIEW_RATE, 2 * REVIEW_RATE)  # per address

    def latest(self, key: JobKey) -> dict[str, Any] | None:
        """The job's newest progress report, None before its first (or once it is gone)."""
        mem = self.state().jobs.get(key)
        return None if mem is None else mem.progress

    def checkpointed(self, key: JobKey) -> asyncio.Event:
        """Set when the job reports a newer checkpoint (a detached one once it is gone)."""
        mem = self.state().jobs.get(key)
        if mem is None:
            return asyncio.Event()
        return mem.checkpoint_event()

    async def identify(self, request: web.Request) -> progress.ReportingPod:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not header[7:].strip():
            raise progress.TokenRefused("Authorization: send the pod's token as 'Bearer <token>'")
        token = header[7:].strip()
        digest = hashlib.sha256(token.encode()).hexdigest()
        cached = self.reviews.get(digest)
        now = self.clock()
        if cached is not None and cached[1] > now:
            if isinstance(cached[0], progress.TokenRefused):
                raise cached[0]  # a refused token is refused again without a review
            return cached[0]
        wait = self.review_limit.take(str(request.remote), now)
        if wait > 0:  # new tokens from one address: each costs the API server a TokenReview
            raise progress.RateLimited(
                f"more than {REVIEW_RATE:g} new tokens a second from {request.remote}", wait
            )
        api = self.api()
        assert api is not None
        review = await asyncio.to_thread(api.review_token, token, PROGRESS_AUDIENCE)
        if len(self.reviews) >= MAX_CACHED:
            self.reviews = {k: v for k, v in self.reviews.items() if v[1] > now}
        try:
            who = progress.reporter_of(review, PROGRESS_AUDIENCE)
        except progress.TokenRefused as err:
            self.reviews[digest] = (err, now + REVIEW_TTL)
            raise
        self.reviews[digest] = (who, now + REVIEW_TTL)
        return who

    def job_key(self, who: progress.ReportingPod) -> tuple[JobKey, dict[str, Any]]:
        state = self.state()
        pod = state.pods.get((who.namespace, who.pod))
        name = (((pod or {}).get("metadata") or {}).get("labels") or {}).get(c.LABEL_JOB_NAME, "")
        key = job_key(who.namespace, str(name))
        job = state.job(key) if name else None
        progress.job_of_pod(pod, who, job)
        assert job is not None and pod is not None
        return key, pod

    def spec(self, key: JobKey) -> Mapping[str, Any]:
        """The spec the job's gang runs with: merged with its runtime (spec.runtimeRef), whose
        progress and checkpoint settings it may take."""
        return (self.state().merged(key) or {}).get("spec") or {}

    def checkpoint_root(self, job: Mapping[str, Any]) -> str | None:
        """Where `job`'s checkpoints must lie (trainop.planner.checkpoint_location), kept
        per spec generation; None when it names no valid location."""
        meta = job.get("metadata") or {}
        memo = (str(meta.get("uid", "")), int(meta.get("generation") or 0))
        if memo not in self.roots:
            if len(self.roots) >= MAX_CACHED:
                self.roots.clear()
            try:
                self.roots[memo] = checkpoint_location(parse_spec(job))
            except InvalidJob:
                self.roots[memo] = None
        return self.roots[memo]

    def check_checkpoint(self, key: JobKey, report: progress.Report) -> None:
        """CheckpointRefused when the report's checkpoint lies outside the job's location."""
        if report.checkpoint_path:
            progress.check_checkpoint(report, self.checkpoint_root(self.state().merged(key) or {}))

    async def warn_refused(self, key: JobKey, err: progress.CheckpointRefused) -> None:
        """A Warning Event CheckpointRefused on the job, at most one a minute per job (a
        replayed token cannot flood the job's Events)."""
        now = self.clock()
        job, api = self.state().job(key), self.api()
        if job is None or api is None or now - self.warned.get(key, -WARN_EVERY) < WARN_EVERY:
            return
        self.warned[key] = now
        message = f"a progress report was refused: {err} (spec.checkpoint; docs/progress.md)"
        try:
            await asyncio.to_thread(api.post_event, job, "Warning", "CheckpointRefused", message)
        except Exception as error:  # an Event is news, not a duty
            log.warning("CheckpointRefused Event for %s failed: %s", key, error)

    def answer(self, key: JobKey) -> dict[str, Any]:
        """What the pod learns: whether a checkpoint is wanted, since when."""
        job = self.state().merged(key) or {}  # spec.checkpoint may be its runtime's
        spec_ckpt = (job.get("spec") or {}).get("checkpoint") or {}
        request = (job.get("status") or {}).get("checkpointRequest")
        if not request:
            return {"checkpointRequested": False}
        return {
            "checkpointRequested": True,
            "requestedAt": request.get("requestedAt"),
            "deadline": request.get("deadline"),
            "signal": spec_ckpt.get("signal", "SIGUSR1"),
        }

    async def accept(self, key: JobKey, pod: Mapping[str, Any], report: progress.Report) -> str:
        """Fold the report in; write status.progress when the throttle allows."""
        mem = self.state().jobs.get(key)
        if mem is None:
            raise progress.JobGone("the job is gone")
        job = mem.newest() or {}
        stored = (job.get("status") or {}).get("progress")
        old = mem.progress if mem.progress is not None else stored
        meta = pod.get("metadata") or {}
        rank = int((meta.get("annotations") or {}).get(c.ANNOTATION_RANK) or 0)
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        wanted = self.spec(key).get("progress") or {}
        now = datetime.now(UTC).replace(tzinfo=None)
        new = progress.fold(old, report, rank, node, now, wanted.get("totalSteps"))
        return await self._take(key, job, stored, new)

    async def accept_trainer_status(self, key: JobKey, status: trainerstatus.TrainerStatus) -> str:
        """Fold a Kubeflow trainerStatus body in (trainop's Reporter wins: see
        trainop.trainerstatus); the same throttle as trainop's reports."""
        mem = self.state().jobs.get(key)
        if mem is None:
            raise progress.JobGone("the job is gone")
        job = mem.newest() or {}
        stored = (job.get("status") or {}).get("progress")
        old = mem.progress if mem.progress is not None else stored
        if trainerstatus.overruled(old):
            return "ignored"
        wanted = self.spec(key).get("progress") or {}
        now = datetime.now(UTC).replace(tzinfo=None)
        new = trainerstatus.fold_trainer_status(old, status, now, wanted.get("totalSteps"))
        return await self._take(key, job, stored, new)

    async def _take(
        self,
        key: JobKey,
        job: Mapping[str, Any],
        stored: Mapping[str, Any] | None,
        new: dict[str, Any],
    ) -> str:
        """Keep `new` as the job's newest progress; write it when the throttle allows."""
        mem = self.state().jobs.get(key)
        if mem is None:
            raise progress.JobGone("the job is gone")
        wanted = self.spec(key).get("progress") or {}
        placement = (job.get("status") or {}).get("placement")
        new = progress.note_placement(new, placement, int(wanted.get("warmupSteps", 20)))
        mem.reported(new)
        metrics.observe_progress(*split_key(key), new)
        clock = self.clock()
        if not progress.should_write(stored, new, mem.progress_written, clock, self.interval):
            if mem.trailing is None:  # the newest report is written when the interval ends
                mem.trail(asyncio.ensure_future(self._trailing(key, clock)))
            return "throttled"
        await self._write(key, stored, new)
        return "accepted"

    async def _write(
        self, key: JobKey, stored: Mapping[str, Any] | None, new: Mapping[str, Any]
    ) -> None:
        api = self.api()
        assert api is not None
        mem = self.state().jobs.get(key)
        if mem is not None:
            mem.progress_written_at(self.clock())
        # A merge patch: a key the reports own that the new progress dropped is nulled out
        # (others, such as the reconcile's replacedAt, may be newer than this memory: kept).
        body = {k: None for k in stored or {} if k in DROPPED and k not in new} | dict(new)
        written = await asyncio.to_thread(
            api.patch_job_status, *split_key(key), {"progress": body}, {}
        )
        if written is not None:
            self.state().record_written(key, written)
        if (stored or {}).get("lastCheckpoint") != new.get("lastCheckpoint"):
            self.checkpointed(key).set()
            job = self.state().job(key) or {}
            if self.on_checkpoint is not None and (job.get("status") or {}).get(
                "checkpointRequest"
            ):
                self.on_checkpoint(key)

    async def _trailing(self, key: JobKey, clock: float) -> None:
        """Write a throttled job's newest progress once its interval is over (so the last
        report before a trainer exits is not lost)."""
        try:
            mem = self.state().jobs.get(key)
            written = mem.progress_written if mem is not None else None
            due = (written or clock) + self.interval - self.clock()
            await asyncio.sleep(max(0.0, due))
            job = self.state().job(key)
            new = self.latest(key)
            stored = ((job or {}).get("status") or {}).get("progress")
            if job is not None and new is not None and new != stored:
                await self._write(key, stored, new)
        except Exception as err:  # the API server away: the next report tries again
            log.warning("progress write for %s failed: %s", key, err)
        finally:
            mem = self.state().jobs.get(key)
            if mem is not None:
                mem.trailed(asyncio.current_task())

    def forget(self, key: JobKey) -> None:
        """A deleted job's series go (what it reported went with its JobMemory)."""
        self.warned.pop(key, None)
        metrics.forget_job(*split_key(key))


async def _admit(service: ProgressService, request: web.Request) -> tuple[JobKey, dict[str, Any]]:
    """Before the body is read: no larger than MAX_BODY by its Content-Length (413), a
    pod-bound token (401) of a live gang pod (403), and within the pod's rate (429)."""
    if (request.content_length or 0) > MAX_BODY:
        raise progress.TooLarge(f"the body is larger than {MAX_BODY} bytes")
    who = await service.identify(request)
    key, pod = service.job_key(who)
    wait = service.limit.take(who.pod_uid, service.clock())
    if wait > 0:
        raise progress.RateLimited(
            f"more than {RATE:g} reports a second from pod {who.namespace}/{who.pod} (burst "
            f"{BURST:g}): retry in {wait:.1f} s",
            wait,
        )
    return key, pod


async def _body(request: web.Request) -> Any:
    """The decoded JSON body: at most MAX_BODY bytes (413), JSON (400, nesting too)."""
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise progress.TooLarge(f"the body is larger than {MAX_BODY} bytes")
    try:
        return json.loads(raw or b"null")
    except (ValueError, RecursionError) as err:
        raise progress.NotJson(f"the body is not JSON: {str(err)[:200]}") from None


async def _handle(service: ProgressService, request: web.Request) -> web.Response:
    try:
        key, pod = await _admit(service, request)
        if request.method == "POST":
            report = progress.parse_report(await _body(request))
            try:
                service.check_checkpoint(key, report)
            except progress.CheckpointRefused as err:
                await service.warn_refused(key, err)
                raise
            outcome = await service.accept(key, pod, report)
            metrics.PROGRESS_REPORTS.labels(outcome).inc()
        return web.json_response(service.answer(key))
    except progress.ReportError as err:
        return _refused(err)
    except Exception as err:  # the API server away: the trainer goes on, and retries
        log.warning("progress report failed: %s", err)
        return web.json_response({"error": "trainop could not take the report now"}, status=503)


async def _handle_trainer_status(service: ProgressService, request: web.Request) -> web.Response:
    """POST /v1/trainer-status: a Kubeflow trainerStatus body, the same tokens and rules as
    trainop's reports. transformers' KubeflowCallback takes any answer but 200 as a failure
    (and says nothing), so a refusal's 4xx message is for curl and the operator's metrics."""
    try:
        key, _pod = await _admit(service, request)
        status = trainerstatus.parse_trainer_status(await _body(request))
        outcome = await service.accept_trainer_status(key, status)
        metrics.PROGRESS_REPORTS.labels(outcome).inc()
        return web.json_response(service.answer(key))
    except progress.ReportError as err:
        return _refused(err)
    except Exception as err:  # the API server away: the trainer goes on
        log.warning("trainerStatus report failed: %s", err)
        return web.json_response({"error": "trainop could not take the report now"}, status=503)


def _refused(err: progress.ReportError) -> web.Response:
    """The refusal's answer: its status, its words; counted by reason. Nothing of a refused
    report is kept (no memory, no status write)."""
    metrics.PROGRESS_REPORTS.labels("refused").inc()
    metrics.PROGRESS_REFUSALS.labels(err.reason).inc()
    headers = {}
    if isinstance(err, progress.RateLimited):
        headers["Retry-After"] = str(max(1, math.ceil(err.retry_after)))
    return web.json_response({"error": str(err)}, status=err.status, headers=headers)


async def serve(
    service: ProgressService, port: int, ssl_context: ssl.SSLContext | None = None
) -> web.AppRunner:
    """Start the endpoint on `port` (all interfaces), over TLS with `ssl_context` (which
    handlers.tls reloads in place on a rotation); the caller keeps the runner."""
    app = web.Application(client_max_size=MAX_BODY)

    async def handle(request: web.Request) -> web.Response:
        return await _handle(service, request)

    async def handle_trainer_status(request: web.Request) -> web.Response:
        return await _handle_trainer_status(service, request)

    app.router.add_route("POST", PATH, handle)
    app.router.add_route("GET", PATH, handle)
    app.router.add_route("POST", TRAINER_STATUS_PATH, handle_trainer_status)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port, ssl_context=ssl_context).start()
    scheme = "https" if ssl_context is not None else "http (plain: --progress-tls off)"
    log.info("progress reports accepted on :%d%s over %s", port, PATH, scheme)
    return runner
