"""trainop-launch as the trainer's parent: forward a checkpoint request as a signal.

When the pod is wired for progress reports and its job sets spec.checkpoint.signal (env
TRAINOP_CHECKPOINT_SIGNAL, and TRAINOP_CHECKPOINT_RANKS says whether this rank is asked),
trainop-launch runs the trainer as a child instead of exec'ing it. A thread asks the
operator every interval whether a checkpoint is wanted (`progress.poll_request`); on a new
request it sends the signal to the trainer once. SIGTERM, SIGINT and SIGHUP are passed on
to the trainer, and trainop-launch exits with the trainer's status (128 + signal when a
signal ended it, as a shell reports it).

The signal goes to the direct child only: a trainer started through torchrun should use
`signal: None` and read `Reporter.checkpoint_requested()` instead, since torchrun's agent
does not pass SIGUSR1 on to its workers. Standard library only.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from trainop.launcher import progress

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def wants_forwarding(env: Mapping[str, str]) -> str:
    """The signal name to forward for this pod, or "" (then trainop-launch just execs)."""
    name = env.get(progress.SIGNAL_ENV, "")
    if not env.get(progress.PROGRESS_URL_ENV) or name in ("", "None"):
        return ""
    if env.get(progress.SIGNAL_RANKS_ENV, "RankZero") != "All" and env.get(
        progress.RANK_ENV, "0"
    ) not in ("0", ""):
        return ""
    return name if name in signal.Signals.__members__ else ""


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _watch(
    env: Mapping[str, str],
    child: subprocess.Popen[bytes],
    sig: signal.Signals,
    stop: threading.Event,
) -> None:
    interval = progress._interval(env)
    answered: set[str] = set()
    while not stop.wait(interval):
        answer = progress.poll_request(env)
        if not answer.get("checkpointRequested"):
            continue
        key = str(answer.get("requestedAt", ""))
        if key in answered:
            continue
        answered.add(key)
        print(
            f"trainop-launch: checkpoint requested, sending {sig.name} to the trainer",
            file=sys.stderr,
            flush=True,
        )
        if child.poll() is None:
            child.send_signal(sig)


def run(command: Sequence[str], env: Mapping[str, str], signame: str) -> int:
    """Run `command` as a child, forward requests and signals, return its exit status."""
    child = subprocess.Popen(list(command))
    before = {s: signal.signal(s, lambda num, _frame: child.send_signal(num)) for s in FORWARDED}
    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(env, child, signal.Signals[signame], stop), daemon=True
    )
    watcher.start()
    try:
        return exit_status(child.wait())
    finally:
        stop.set()
        for s, handler in before.items():
            signal.signal(s, handler)
