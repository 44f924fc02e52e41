"""The progress endpoint (trainop.handlers.progress) over HTTP, with the token review and the
API server replaced by fakes (issue 35): a checkpoint outside the job's location is refused
with 403 and one Warning Event, and nothing is written. The real TokenReview and API server
are in tests/integration/test_progress_reports.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.builders import job
from trainop import progress
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


def _post(service: endpoint.ProgressService, bodies: list[Any]) -> list[tuple[int, Any]]:
    """POST each body (a dict as JSON, bytes as they are) to a real aiohttp server."""

    async def go() -> list[tuple[int, Any]]:
        async def handle(request: web.Request) -> web.Response:
            return await endpoint._handle(service, request)

        app = web.Application(client_max_size=endpoint.MAX_BODY)
        app.router.add_route("POST", endpoint.PATH, handle)
        out = []
        async with TestClient(TestServer(app)) as client:
            for body in bodies:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                resp = await client.post(
                    endpoint.PATH, data=data, headers={"Authorization": "Bearer good"}
                )
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
