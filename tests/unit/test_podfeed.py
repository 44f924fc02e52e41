"""handlers.podfeed: the pod watch thread and its batches, with a scripted stream.

The HTTP side (KubeApi.watch_pods, 410 Gone) runs against a real API server in
tests/integration/test_trainingjob_lifecycle.py; every integration test that runs the
operator sees its pods through this feed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import busy, fleet_nodes
from trainop.handlers import podfeed
from trainop.handlers.state import ShellState
from trainop.kube.client import Expired, _events


def _pod(name: str, rv: str, node: str = "h100-a-01", gpus: int = 8) -> dict[str, Any]:
    body = busy(node, gpus, name)
    body["metadata"]["resourceVersion"] = rv
    body["spec"]["containers"][0]["env"] = [{"name": "BIG", "value": "x" * 1000}]
    return body


class ScriptedApi:
    """Streams: a list per watch call, each a list of (type, object) or an exception."""

    def __init__(
        self, streams: list[Any], listing: list[dict[str, Any]], list_failures: int = 0
    ) -> None:
        self.streams, self.listing, self.list_failures = streams, listing, list_failures
        self.watched_from: list[str] = []
        self.done = threading.Event()

    def watch_pods(
        self, namespace: str | None, version: str, stop: threading.Event
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        self.watched_from.append(version)
        if not self.streams:
            self.done.set()
            stop.wait()
            return
        step = self.streams.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step

    def list_pod_pages(
        self, namespace: str | None, versions: dict[str | None, str]
    ) -> Iterator[list[dict[str, Any]]]:
        if self.list_failures:
            self.list_failures -= 1
            raise ConnectionResetError("listing failed")
        versions[namespace] = "900"
        yield self.listing


def run_feed(api: ScriptedApi) -> list[podfeed.Item]:
    got: list[podfeed.Item] = []

    async def main() -> None:
        feed = podfeed.PodFeed(api, asyncio.get_running_loop(), got.extend)  # type: ignore[arg-type]
        feed.start({None: "10"})
        while not api.done.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the last batch's callback
        feed.close()

    asyncio.run(main())
    return got


def test_events_arrive_slim_in_order_and_the_watch_resumes_where_it_ended() -> None:
    api = ScriptedApi(
        [
            [("ADDED", _pod("a", "11")), ("MODIFIED", _pod("a", "12"))],
            [("BOOKMARK", {"metadata": {"resourceVersion": "20"}}), ("DELETED", _pod("a", "21"))],
        ],
        [],
    )
    got = run_feed(api)
    assert [(k, o["metadata"]["name"]) for k, o, _ in got] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    assert "env" not in got[0][1]["spec"]["containers"][0]  # slimmed in the thread
    assert api.watched_from == ["10", "12", "21"]  # each stream from the last version seen


def test_410_lists_again_and_hands_the_listing_over() -> None:
    api = ScriptedApi([Expired("too old")], [_pod("kept", "800")])
    got = run_feed(api)
    assert [(k, s) for k, _, s in got] == [(podfeed.RELISTED, None)]
    assert [p["metadata"]["name"] for p in got[0][1]] == ["kept"]
    assert api.watched_from == ["10", "900"]  # then from the listing's version


def test_a_listing_after_410_that_fails_is_retried() -> None:
    api = ScriptedApi([Expired("too old")], [_pod("kept", "800")], list_failures=1)
    got = run_feed(api)
    assert [(k, s) for k, _, s in got] == [(podfeed.RELISTED, None)]
    assert api.watched_from == ["10", "900"]


def test_a_broken_stream_is_retried_from_the_same_version() -> None:
    api = ScriptedApi([ConnectionResetError("reset"), [("ADDED", _pod("b", "13"))]], [])
    got = run_feed(api)
    assert [o["metadata"]["name"] for _, o, _ in got] == ["b"]
    assert api.watched_from == ["10", "10", "13"]


def test_a_relisting_forgets_only_the_absent_pods_of_its_scope() -> None:
    state = ShellState()
    for node in fleet_nodes():
        state.upsert_node(node)
    state.upsert_pod(busy("h100-a-01", 8, "gone"))
    state.upsert_pod(busy("h100-a-02", 8, "kept"))
    other = busy("h100-a-03", 8, "elsewhere")
    other["metadata"]["namespace"] = "other"
    state.upsert_pod(other)
    assert state.relisted_pods("default", [busy("h100-a-02", 4, "kept")]) == 1
    assert set(state.pods) == {("default", "kept"), ("other", "elsewhere")}
    assert state.pod_gpus[("default", "kept")][2] == 4  # the listing's version wins
    assert state.relisted_pods(None, []) == 2  # all namespaces: everything absent goes
    assert not state.pods


class Chunked:
    """A streamed response: the bytes of a watch, cut at arbitrary places."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        yield from self.chunks


def test_a_stream_is_split_into_events_wherever_its_chunks_end() -> None:
    stream = Chunked(
        b'{"type":"ADDED","object":{"metadata":{"na',
        b'me":"a"}}}\n\n{"type":"DEL',
        b'ETED","object":{"metadata":{"name":"a"}}}\n',
    )
    got = [(k, o["metadata"]["name"]) for k, o in _events(stream, threading.Event())]
    assert got == [("ADDED", "a"), ("DELETED", "a")]


def test_a_410_error_event_is_expired() -> None:
    gone = b'{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version"}}\n'
    with pytest.raises(Expired, match="too old"):
        list(_events(Chunked(gone), threading.Event()))
