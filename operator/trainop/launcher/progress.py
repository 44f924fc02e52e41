"""Progress reports from the training process to trainop, standard library only.

    from trainop.launcher.progress import Reporter
    reporter = Reporter()                      # configured by the pod's env; a no-op without it
    start = reporter.resume_step()             # TRAINOP_RESUME_STEP (0 on a first start)
    for step in range(start, total):
        ...
        reporter.report(step, step_seconds=dt, samples_per_second=n / dt)
        if reporter.checkpoint_requested():    # trainop is about to preempt or drain the gang
            save(path); reporter.report(step, checkpoint=(path, step), force=True)

The operator wires the pod (trainop.progress.wire_pod): TRAINOP_PROGRESS_URL, the file of a
projected ServiceAccount token whose audience is trainop's (TRAINOP_PROGRESS_TOKEN_FILE),
TRAINOP_PROGRESS_INTERVAL and TRAINOP_RANK, and for an https URL the endpoint's CA bundle
beside the token (TRAINOP_PROGRESS_CA_FILE), with which the server is verified. Reports are JSON POSTs with the token as a
bearer token; the operator checks it with a TokenReview, whose answer names the pod the
token was made for, so a pod can only ever report for its own job (docs/progress.md).

`report()` never blocks and never raises: it keeps the newest report and a daemon thread
sends it at most every interval seconds (a checkpoint at once). An operator that cannot be
reached costs a debug line and a back-off, not a failed training. The answer to a report
says whether a checkpoint is wanted; `checkpoint_requested()` returns that.

Neighbours: `trainop.launcher.main` (trainop-launch) uses `poll_request` to forward the
request as a signal to the trainer it runs; `trainop.handlers.progress` is the endpoint.
"""

from __future__ import annotations

import functools
import json
import os
import ssl
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

PROGRESS_URL_ENV = "TRAINOP_PROGRESS_URL"
TOKEN_FILE_ENV = "TRAINOP_PROGRESS_TOKEN_FILE"
CA_FILE_ENV = "TRAINOP_PROGRESS_CA_FILE"  # the endpoint's CA bundle (https URLs)
INTERVAL_ENV = "TRAINOP_PROGRESS_INTERVAL"
RANK_ENV = "TRAINOP_RANK"
SIGNAL_ENV = "TRAINOP_CHECKPOINT_SIGNAL"
SIGNAL_RANKS_ENV = "TRAINOP_CHECKPOINT_RANKS"
RESUME_ENV = "TRAINOP_RESUME_FROM"
RESUME_STEP_ENV = "TRAINOP_RESUME_STEP"
DEFAULT_INTERVAL = 10.0
TIMEOUT = 3.0
MAX_BACKOFF = 120.0

# (method, url, token, body or None) -> decoded JSON answer; raises OSError/ValueError
Send = Callable[[str, str, str, "dict[str, Any] | None"], "dict[str, Any]"]


def tls_context(cafile: str) -> ssl.SSLContext:
    """A client context that trusts the CAs in `cafile` (the endpoint's bundle, projected
    beside the token; read on every send: a rotation updates it in place), or the system's
    when it is empty; the server's name and chain are always verified."""
    return ssl.create_default_context(cafile=cafile or None)


def http_send(
    method: str, url: str, token: str, body: dict[str, Any] | None, cafile: str = ""
) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    context = tls_context(cafile) if url.startswith("https:") else None
    with urllib.request.urlopen(req, timeout=TIMEOUT, context=context) as resp:
        answer = json.loads(resp.read() or b"{}")
    return answer if isinstance(answer, dict) else {}


def _sender(env: Mapping[str, str], send: Send) -> Send:
    """`send`, given the pod's CA file when it is the default sender."""
    cafile = env.get(CA_FILE_ENV, "")
    return functools.partial(http_send, cafile=cafile) if send is http_send and cafile else send


def _interval(env: Mapping[str, str]) -> float:
    try:
        return max(1.0, float(env.get(INTERVAL_ENV, DEFAULT_INTERVAL)))
    except ValueError:
        return DEFAULT_INTERVAL


MAX_METRICS = 64


def _finite(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """The metrics a report may carry: finite numbers under short printable names."""
    out: dict[str, float] = {}
    for name, value in (metrics or {}).items():
        if len(out) >= MAX_METRICS or not isinstance(name, str) or not 0 < len(name) <= 64:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if number == number and abs(number) != float("inf") and name.isprintable():
            out[name] = number
    return out


def _token(path: str) -> str:
    """Read on every send: the kubelet rotates the projected token in place."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


class Reporter:
    """Sends the newest report at most every `interval` seconds from a daemon thread."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        send: Send = http_send,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        env = os.environ if env is None else env
        self.url = env.get(PROGRESS_URL_ENV, "")
        self.token_file = env.get(TOKEN_FILE_ENV, "")
        self.interval = _interval(env)
        self.resume_from = env.get(RESUME_ENV, "")
        self._resume_step = env.get(RESUME_STEP_ENV, "")
        self._send, self._clock = _sender(env, send), clock
        self._cond = threading.Condition()
        self._pending: dict[str, Any] | None = None
        self._urgent = False
        self._requested = False
        self._sending = False
        self._last_sent: float | None = None
        self._backoff = 0.0
        self.sent = 0
        self.failures = 0
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def resume_step(self) -> int:
        """The step of the checkpoint trainop says to resume from (0: start afresh)."""
        try:
            return max(0, int(self._resume_step))
        except ValueError:
            return 0

    def checkpoint_requested(self) -> bool:
        """Whether the operator's last answer asked for a checkpoint."""
        return self._requested

    def report(
        self,
        step: int,
        *,
        step_seconds: float | None = None,
        samples_per_second: float | None = None,
        tokens_per_second: float | None = None,
        checkpoint: tuple[str, int] | None = None,
        phase: str = "",
        force: bool = False,
        total_steps: int | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Keep this report as the newest; it goes out within `interval` seconds (at once
        with a checkpoint or `force`). Never blocks, never raises.

        `total_steps`: the trainer's planned total, for the ETA and the PROGRESS column when
        the job sets no spec.progress.totalSteps. `metrics`: finite numbers by name (loss,
        learning_rate, ...; at most 64), shown by `trainop explain` and exported as
        trainop_job_trainer_metric; others are dropped here so one NaN loss never costs a
        whole report."""
        if not self.enabled:
            return
        body: dict[str, Any] = {"step": int(step), "phase": phase}
        if total_steps:
            body["totalSteps"] = int(total_steps)
        kept = _finite(metrics)
        if kept:
            body["metrics"] = kept
        for key, value in (
            ("stepSeconds", step_seconds),
            ("samplesPerSecond", samples_per_second),
            ("tokensPerSecond", tokens_per_second),
        ):
            if value is not None:
                body[key] = float(value)
        if checkpoint is not None:
            body["checkpoint"] = {"path": str(checkpoint[0]), "step": int(checkpoint[1])}
        urgent = force or checkpoint is not None
        with self._cond:
            idle = self._pending is None
            self._pending = body
            self._urgent = self._urgent or urgent
            # Wake the sender only when it waits for a report at all, or for an urgent one:
            # while it sleeps out the interval it takes the newest report when it wakes.
            # Waking it on every report of a training loop costs a thread switch and a GIL
            # hand-over per step (measured: 2 ms a step of a 43 ms CPU step, bench/integrations.py).
            if idle or urgent:
                self._cond.notify()
        self._start()

    def flush(self, timeout: float = TIMEOUT) -> None:
        """Send what is pending now, in the caller's thread, after a send under way ends
        (call it before exiting: the sending thread dies with the process)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._sending and time.monotonic() < deadline:
                self._cond.wait(0.05)
            body, self._pending = self._pending, None
        if body is not None:
            self._deliver(body)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trainop-progress", daemon=True)
            self._thread.start()

    def _due(self) -> float:
        """Seconds until the pending report may go (0: now)."""
        if self._last_sent is None:
            return 0.0
        wait = self.interval + self._backoff
        if self._urgent and not self._backoff:
            wait = 0.0
        return max(0.0, self._last_sent + wait - self._clock())

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None:
                    self._cond.wait()
                due = self._due()
                if due > 0:
                    self._cond.wait(due)
                    continue
                body, self._pending, self._urgent = self._pending, None, False
                self._sending = True
            try:
                self._deliver(body)
            finally:
                with self._cond:
                    self._sending = False
                    self._cond.notify_all()

    def _deliver(self, body: dict[str, Any]) -> None:
        self._last_sent = self._clock()
        try:
            answer = self._send("POST", self.url, _token(self.token_file), body)
        except Exception as err:  # unreachable, refused, timed out: training goes on
            self.failures += 1
            self._backoff = min(MAX_BACKOFF, max(self.interval, 2 * self._backoff))
            if self.failures in (1, 10, 100):
                print(f"trainop-progress: report not delivered ({err}); retrying", file=sys.stderr)
            return
        self.sent += 1
        self._backoff = 0.0
        self._requested = bool(answer.get("checkpointRequested"))


def poll_request(env: Mapping[str, str], send: Send = http_send) -> dict[str, Any]:
    """Ask the endpoint (GET) whether a checkpoint is wanted from this pod's job: {} when
    it cannot be reached."""
    try:
        url, token = env.get(PROGRESS_URL_ENV, ""), _token(env.get(TOKEN_FILE_ENV, ""))
        return _sender(env, send)("GET", url, token, None)
    except Exception:  # the operator away is no reason to stop the trainer
        return {}
