"""trainop.launcher.progress and .forward: the trainer's side of the progress channel, run
against a real HTTP server on loopback (standing in for the operator's endpoint)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from trainop.launcher import forward, progress


class Endpoint:
    """A stand-in for /v1/progress: records what arrives, answers `answer`."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, dict[str, Any] | None]] = []
        self.answer: dict[str, Any] = {"checkpointRequested": False}
        self.delay = 0.0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, body: dict[str, Any] | None) -> None:
                time.sleep(outer.delay)
                outer.received.append((self.command, self.headers["Authorization"], body))
                data = json.dumps(outer.answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                self._reply(json.loads(self.rfile.read(length)))

            def do_GET(self) -> None:
                self._reply(None)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/progress"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def posts(self) -> list[dict[str, Any]]:
        return [b for m, _, b in self.received if m == "POST" and b is not None]


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    ep = Endpoint()
    yield ep
    ep.server.shutdown()


def env_for(url: str, tmp_path: Any, **more: str) -> dict[str, str]:
    token = tmp_path / "token"
    token.write_text("the-pod-token\n")
    return {
        progress.PROGRESS_URL_ENV: url,
        progress.TOKEN_FILE_ENV: str(token),
        progress.INTERVAL_ENV: "1",
        **more,
    }


def wait_until(probe: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.02)
    raise AssertionError("not within the time")


def test_without_url_the_reporter_does_nothing() -> None:
    reporter = progress.Reporter(env={})
    reporter.report(5, step_seconds=1.0)
    assert not reporter.enabled and reporter.sent == 0 and reporter._thread is None


def test_reports_go_out_throttled_with_the_token(endpoint: Endpoint, tmp_path: Any) -> None:
    reporter = progress.Reporter(env=env_for(endpoint.url, tmp_path))
    reporter.report(1, step_seconds=0.5, samples_per_second=512)
    wait_until(lambda: len(endpoint.posts()) == 1)
    for step in range(2, 50):  # many reports within one interval: only the newest goes
        reporter.report(step, step_seconds=0.5)
    wait_until(lambda: len(endpoint.posts()) == 2)
    time.sleep(0.3)
    assert [b["step"] for b in endpoint.posts()] == [1, 49]
    assert endpoint.received[0][1] == "Bearer the-pod-token"
    assert endpoint.posts()[0] == {
        "step": 1,
        "phase": "",
        "stepSeconds": 0.5,
        "samplesPerSecond": 512.0,
    }


def test_the_total_and_finite_metrics_travel_and_parse(endpoint: Endpoint, tmp_path: Any) -> None:
    """What trainop.integrations send: the planned total and the trainer's numbers; a NaN
    loss or a text value is dropped here, so the endpoint never refuses the whole report."""
    from trainop import progress as core

    reporter = progress.Reporter(env=env_for(endpoint.url, tmp_path))
    metrics = {"loss": 0.25, "lr": 1e-4, "nan": float("nan"), "text": "x", "epoch": 1}
    reporter.report(3, total_steps=100, metrics=metrics)
    wait_until(lambda: len(endpoint.posts()) == 1)
    body = endpoint.posts()[0]
    assert body["totalSteps"] == 100
    assert body["metrics"] == {"loss": 0.25, "lr": 1e-4, "epoch": 1.0}
    assert core.parse_report(body).metrics == (("loss", "0.25"), ("lr", "0.0001"), ("epoch", "1"))


def test_a_checkpoint_goes_at_once_and_the_answer_is_kept(
    endpoint: Endpoint, tmp_path: Any
) -> None:
    reporter = progress.Reporter(env=env_for(endpoint.url, tmp_path))
    reporter.report(1)
    wait_until(lambda: len(endpoint.posts()) == 1)
    endpoint.answer = {"checkpointRequested": True}
    began = time.monotonic()
    reporter.report(2, checkpoint=("/ckpt/2.pt", 2))
    wait_until(lambda: len(endpoint.posts()) == 2)
    assert time.monotonic() - began < 0.9  # not held back for the interval
    assert endpoint.posts()[1]["checkpoint"] == {"path": "/ckpt/2.pt", "step": 2}
    wait_until(reporter.checkpoint_requested)


def test_an_unreachable_operator_never_stops_the_trainer(tmp_path: Any) -> None:
    reporter = progress.Reporter(env=env_for("http://127.0.0.1:9/v1/progress", tmp_path))
    began = time.monotonic()
    for step in range(100):
        reporter.report(step)
    assert time.monotonic() - began < 0.5  # report() never waits for the network
    wait_until(lambda: reporter.failures >= 1)
    assert reporter.sent == 0 and not reporter.checkpoint_requested()


def test_flush_waits_for_the_send_under_way(endpoint: Endpoint, tmp_path: Any) -> None:
    """The last report before the trainer exits arrives (the sending thread dies with it)."""
    endpoint.delay = 0.5
    reporter = progress.Reporter(env=env_for(endpoint.url, tmp_path))
    reporter.report(299, phase="done", force=True)
    time.sleep(0.1)  # the thread has taken it and is sending
    reporter.flush()
    assert [b["phase"] for b in endpoint.posts()] == ["done"]


def test_resume_step_comes_from_the_env() -> None:
    env = {progress.RESUME_ENV: "/c/7.pt", progress.RESUME_STEP_ENV: "7"}
    reporter = progress.Reporter(env=env)
    assert (reporter.resume_from, reporter.resume_step()) == ("/c/7.pt", 7)
    assert progress.Reporter(env={progress.RESUME_STEP_ENV: "x"}).resume_step() == 0


FORWARDING = [
    ("no-url", {progress.SIGNAL_ENV: "SIGUSR1"}, ""),
    ("no-signal", {progress.PROGRESS_URL_ENV: "u"}, ""),
    ("signal-none", {progress.PROGRESS_URL_ENV: "u", progress.SIGNAL_ENV: "None"}, ""),
    (
        "rank0",
        {progress.PROGRESS_URL_ENV: "u", progress.SIGNAL_ENV: "SIGUSR1", progress.RANK_ENV: "0"},
        "SIGUSR1",
    ),
    (
        "rank1-rank-zero-only",
        {progress.PROGRESS_URL_ENV: "u", progress.SIGNAL_ENV: "SIGUSR1", progress.RANK_ENV: "1"},
        "",
    ),
    (
        "rank1-all-ranks",
        {
            progress.PROGRESS_URL_ENV: "u",
            progress.SIGNAL_ENV: "SIGUSR2",
            progress.RANK_ENV: "1",
            progress.SIGNAL_RANKS_ENV: "All",
        },
        "SIGUSR2",
    ),
    ("unknown-signal", {progress.PROGRESS_URL_ENV: "u", progress.SIGNAL_ENV: "SIGNOPE"}, ""),
]


@pytest.mark.parametrize(("name", "env", "want"), FORWARDING, ids=[c[0] for c in FORWARDING])
def test_who_forwards_a_signal(name: str, env: dict[str, str], want: str) -> None:
    assert forward.wants_forwarding(env) == want


CHILD = """
import signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
deadline = time.time() + 20
while not got and time.time() < deadline:
    time.sleep(0.05)
print("checkpoint signal received" if got else "no signal", flush=True)
sys.exit(0 if got else 3)
"""


def test_the_launcher_turns_a_request_into_the_signal(endpoint: Endpoint, tmp_path: Any) -> None:
    endpoint.answer = {"checkpointRequested": True, "requestedAt": "2026-11-25T12:00:00Z"}
    env = env_for(endpoint.url, tmp_path, **{progress.SIGNAL_ENV: "SIGUSR1"})
    status = forward.run([sys.executable, "-c", CHILD], env, "SIGUSR1")
    assert status == 0
    assert any(m == "GET" for m, _, _ in endpoint.received)


def test_exit_status_of_a_signalled_trainer() -> None:
    assert forward.exit_status(-15) == 143 and forward.exit_status(2) == 2
