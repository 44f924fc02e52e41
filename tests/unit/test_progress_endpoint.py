"""The progress endpoint (trainop.handlers.progress) over HTTP, with the token review and the
API server replaced by fakes (issue 35): a checkpoint outside the job's location is refused
with 403 and one Warning Event, and nothing is written; the limits (body size 413, field
lengths and numbers 400, reports per pod per second 429) each have a named case, and every
refusal is counted by reason. The real TokenReview and API server
are in tests/integration/test_progress_reports.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.builders import job
from trainop import metrics, progress
from trainop.handlers import progress as endpoint
from trainop.handlers.state import ShellState

POD = {
    "metadata": {
        "name": "a-worker-0",
        "namespace": "ns",
        "uid": "uid-pod",
        "labels": {"trainop.dev/job-name": "a"},
        "annotations": {"trainop.dev/rank": "0"},
    },
    "spec": {"nodeName": "n1"},
}


class FakeApi:
    """The writes the endpoint makes, recorded."""

    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    def patch_job_status(self, ns: str, name: str, status: dict[str, Any], old: Any) -> None:
        self.writes.append(status)

    def post_event(self, obj: Any, etype: str, reason: str, message: str) -> None:
        self.events.append((etype, reason, message))


def _service(checkpoint: bool = True) -> tuple[endpoint.ProgressService, FakeApi]:
    state, api = ShellState(), FakeApi()
    builder = job("a", namespace="ns", workers=1, gpus=1)
    if checkpoint:
        builder.checkpoint(mount="/ckpt")
    body = builder.meta(resourceVersion="1").build()
    state.upsert_job(body)
    pod = json.loads(json.dumps(POD))
    pod["metadata"]["ownerReferences"] = [{"uid": body["metadata"]["uid"]}]
    state.pods[("ns", "a-worker-0")] = pod
    service = endpoint.ProgressService(lambda: api, lambda: state, 10.0)  # type: ignore[arg-type, return-value]

    async def identify(request: web.Request) -> progress.ReportingPod:
        if request.headers.get("Authorization") != "Bearer good":
            raise progress.ReportError("token: not authenticated (rejected)")
        return progress.ReportingPod("ns", "a-worker-0", "uid-pod")

    service.identify = identify  # type: ignore[method-assign]
    return service, api


def _post(
    service: endpoint.ProgressService, bodies: list[Any], path: str = endpoint.PATH
) -> list[tuple[int, Any]]:
    """POST each body (a dict as JSON, bytes as they are) to a real aiohttp server."""

    async def go() -> list[tuple[int, Any]]:
        async def handle(request: web.Request) -> web.Response:
            return await endpoint._handle(service, request)

        async def handle_ts(request: web.Request) -> web.Response:
            return await endpoint._handle_trainer_status(service, request)

        app = web.Application(client_max_size=endpoint.MAX_BODY)
        app.router.add_route("POST", endpoint.PATH, handle)
        app.router.add_route("POST", endpoint.TRAINER_STATUS_PATH, handle_ts)
        out = []
        async with TestClient(TestServer(app)) as client:
            for body in bodies:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                resp = await client.post(path, data=data, headers={"Authorization": "Bearer good"})
                out.append((resp.status, await resp.json()))
        return out

    return asyncio.run(go())


def test_a_checkpoint_outside_the_location_is_refused_with_one_event() -> None:
    service, api = _service()
    evil = {"step": 9, "checkpoint": {"path": "/ckpt/../etc/passwd", "step": 9}}
    answers = _post(service, [evil, evil])
    assert [a[0] for a in answers] == [403, 403]
    assert "no empty, . or .. parts" in answers[0][1]["error"]
    assert api.writes == []  # nothing of a refused report is kept
    assert service.latest("ns/a") is None
    assert [(e[0], e[1]) for e in api.events] == [("Warning", "CheckpointRefused")]  # one a minute
    assert "/ckpt/../etc/passwd" in api.events[0][2]


def test_a_checkpoint_inside_is_taken() -> None:
    service, api = _service()
    answers = _post(service, [{"step": 9, "checkpoint": {"path": "/ckpt/step-9.pt", "step": 9}}])
    assert answers == [(200, {"checkpointRequested": False})]
    assert api.writes[0]["progress"]["lastCheckpoint"]["path"] == "/ckpt/step-9.pt"
    assert api.events == []


def test_a_job_without_spec_checkpoint_records_no_checkpoint() -> None:
    service, api = _service(checkpoint=False)
    answers = _post(service, [{"step": 9, "checkpoint": {"path": "/ckpt/9.pt", "step": 9}}])
    assert answers[0][0] == 403 and "names no checkpoint location" in answers[0][1]["error"]
    assert api.writes == []


def _refusals(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value("trainop_progress_refusals_total", {"reason": reason})
    return value or 0.0


DEEP = b"[" * 5000 + b"]" * 5000
# name, body (bytes as sent), status, the refusal's reason ("" = taken), words of the error
LIMITS = [
    ("a-plain-report", {"step": 3}, 200, "", ""),
    ("eta-past-a-century", {"step": 0, "totalSteps": 2**53, "stepSeconds": 1e300}, 200, "", ""),
    ("too-large", b'{"step": 1, "phase": "' + b"x" * 20_000 + b'"}', 413, "too_large", "larger"),
    ("not-json", b"{step: 1", 400, "not_json", "not JSON"),
    ("nested-too-deep", DEEP, 400, "not_json", "not JSON"),
    ("a-list", [1, 2], 400, "invalid", "JSON object"),
    ("negative-step", {"step": -1}, 400, "invalid", "step: must be an integer >= 0"),
    ("huge-step", {"step": 10**400}, 400, "invalid", "step: must be an integer >= 0"),
    ("step-as-text", {"step": "7"}, 400, "invalid", "step: must be an integer"),
    ("infinite-rate", b'{"step": 1, "stepSeconds": 1e999}', 400, "invalid", "stepSeconds"),
    ("long-phase", {"step": 1, "phase": "p" * 513}, 400, "invalid", "phase: must be a string"),
    (
        "too-many-metrics",
        {"step": 1, "metrics": {f"m{i}": i for i in range(65)}},
        400,
        "invalid",
        "metrics",
    ),
    ("long-metric-name", {"step": 1, "metrics": {"n" * 65: 1}}, 400, "invalid", "metrics"),
    ("huge-metric", {"step": 1, "metrics": {"loss": 10**400}}, 400, "invalid", "metrics.loss"),
    (
        "long-path",
        {"step": 1, "checkpoint": {"path": "/c/" + "p" * 1100, "step": 1}},
        400,
        "invalid",
        "checkpoint.path",
    ),
    (
        "path-outside",
        {"step": 1, "checkpoint": {"path": "/etc/x", "step": 1}},
        403,
        "checkpoint_path",
        "outside",
    ),
]


@pytest.mark.parametrize(
    ("name", "body", "status", "reason", "words"), LIMITS, ids=[c[0] for c in LIMITS]
)
def test_the_limits_refuse_and_count_by_reason(
    name: str, body: Any, status: int, reason: str, words: str
) -> None:
    service, api = _service()
    before = _refusals(reason) if reason else 0.0
    [(got, answer)] = _post(service, [body])
    assert got == status, answer
    if reason:
        assert words in answer["error"] and _refusals(reason) == before + 1
        assert api.writes == [] and service.latest("ns/a") is None  # nothing kept
    else:
        assert len(api.writes) == 1


def test_a_flood_from_one_pod_is_refused_with_429_and_retry_after() -> None:
    service, api = _service()
    answers = _post(service, [{"step": i} for i in range(int(endpoint.BURST) + 5)])
    codes = [a[0] for a in answers]
    assert codes[: int(endpoint.BURST)] == [200] * int(endpoint.BURST)
    assert set(codes[int(endpoint.BURST) :]) == {429}
    assert "reports a second from pod ns/a-worker-0" in answers[-1][1]["error"]
    assert len(api.writes) == 1  # the throttle: one write an interval, refusals none


def test_trainer_status_bodies_share_the_limits() -> None:
    service, _api = _service()
    big = b'{"trainerStatus": {"metrics": [' + b'{"name": "a", "value": "1"},' * 900 + b"]}}"
    [(status, answer)] = _post(service, [big], endpoint.TRAINER_STATUS_PATH)
    assert status == 413, answer


def test_a_refused_token_is_reviewed_once() -> None:
    state, reviews = ShellState(), []

    class Api:
        def review_token(self, token: str, audience: str) -> dict[str, Any]:
            reviews.append(token)
            return {"authenticated": False, "error": "invalid bearer token"}

    service = endpoint.ProgressService(lambda: Api(), lambda: state, 10.0)  # type: ignore[arg-type, return-value]

    async def go() -> list[int]:
        async def handle(request: web.Request) -> web.Response:
            return await endpoint._handle(service, request)

        app = web.Application()
        app.router.add_route("POST", endpoint.PATH, handle)
        async with TestClient(TestServer(app)) as client:
            out = []
            for _ in range(5):
                resp = await client.post(
                    endpoint.PATH, json={"step": 1}, headers={"Authorization": "Bearer stolen"}
                )
                out.append(resp.status)
            return out

    assert asyncio.run(go()) == [401] * 5
    assert reviews == ["stolen"]  # a flood of one bad token costs one TokenReview


# name, (rate, burst), requests at these times, the waits answered (0: taken)
BUCKETS = [
    ("burst-then-wait", (1.0, 2.0), [0, 0, 0], [0, 0, 1.0]),
    ("refills-at-rate", (1.0, 2.0), [0, 0, 0.5, 1.0], [0, 0, 0.5, 0]),
    ("idle-refills-to-burst-only", (2.0, 2.0), [0, 100, 100, 100], [0, 0, 0, 0.5]),
]


@pytest.mark.parametrize(("name", "limits", "times", "waits"), BUCKETS, ids=[b[0] for b in BUCKETS])
def test_the_rate_limit_is_a_token_bucket(
    name: str, limits: tuple[float, float], times: list[float], waits: list[float]
) -> None:
    bucket = progress.RateLimit(*limits)
    assert [round(bucket.take("pod", t), 3) for t in times] == waits


def test_the_rate_limit_keeps_a_bounded_number_of_pods() -> None:
    bucket = progress.RateLimit(1.0, 1.0, max_keys=10)
    for i in range(100):
        assert bucket.take(f"pod-{i}", float(i)) == 0.0
    assert len(bucket.buckets) <= 10


def test_a_checkpoint_answering_a_request_wakes_the_reconcile() -> None:
    """A drain waits on the reconcile, and the echo of our own status write reconciles
    nothing: a new checkpoint of a job with an open request calls on_checkpoint."""
    service, _api = _service()
    woken: list[str] = []
    service.on_checkpoint = woken.append
    mem = service.state().jobs["ns/a"]
    body = mem.newest() or {}
    body["status"] = {"checkpointRequest": {"requestedAt": "2026-11-27T03:00:00Z"}}
    _post(service, [{"step": 9, "checkpoint": {"path": "/ckpt/9.pt", "step": 9}}])
    assert woken == ["ns/a"]
    body["status"] = {}
    _post(service, [{"step": 10, "checkpoint": {"path": "/ckpt/10.pt", "step": 10}}])
    assert woken == ["ns/a"]  # no open request: nothing to wake
