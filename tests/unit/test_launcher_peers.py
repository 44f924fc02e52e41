"""trainop-launch's wait for the gang's host names (`trainop.launcher.peers`, issue 38)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from trainop import failures
from trainop.api import constants as c
from trainop.launcher import main, peers


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


# (id, names, resolvable after (seconds per name; None: never), timeout, missing, seconds)
WAITS = [
    ("none", (), {}, 300.0, (), 0.0),
    ("all-at-once", ("a", "b"), {"a": 0, "b": 0}, 300.0, (), 0.0),
    ("peer-late", ("a", "b"), {"a": 0, "b": 5}, 300.0, (), 5.0),
    ("never", ("a", "b"), {"a": 0, "b": None}, 10.0, ("b",), 10.0),
    ("zero-timeout-tries-once", ("a",), {"a": None}, 0.0, ("a",), 0.0),
]


@pytest.mark.parametrize(
    ("names", "after", "timeout", "missing", "seconds"),
    [pytest.param(*w[1:], id=w[0]) for w in WAITS],
)
def test_wait_for(
    names: tuple[str, ...],
    after: dict[str, float | None],
    timeout: float,
    missing: tuple[str, ...],
    seconds: float,
) -> None:
    clock = FakeClock()

    def resolve(host: str) -> bool:
        at = after[host]
        return at is not None and clock.now >= at

    out = peers.wait_for(names, timeout, resolve=resolve, clock=clock, sleep=clock.sleep)
    assert out.missing == missing
    assert out.resolved == tuple(n for n in names if n not in missing)
    assert out.seconds == seconds


def test_failure_message_names_the_host_and_its_variables() -> None:
    env = {
        "MASTER_ADDR": "j-worker-0.j.ns.svc",
        "PET_MASTER_ADDR": "j-worker-0.j.ns.svc",
        c.ENV_PEER_HOSTS: "j-worker-0.j.ns.svc",
    }
    out = peers.Outcome((), ("j-worker-0.j.ns.svc",), 300.0)
    msg = peers.failure_message(out, env)
    assert msg.startswith(
        "trainop-launch: peer host(s) j-worker-0.j.ns.svc (named by MASTER_ADDR, "
        "PET_MASTER_ADDR) did not resolve within 300 s"
    )
    assert msg.startswith(failures.PEER_MARKER)  # the classifier's words are the launcher's


def test_the_env_names_the_same_variable() -> None:
    assert peers.PEER_HOSTS_ENV == c.ENV_PEER_HOSTS


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("", 300.0), ("5", 5.0), ("0", 0.0), ("-1", 300.0), ("soon", 300.0)],
)
def test_timeout_of(raw: str, expected: float) -> None:
    assert peers.timeout_of({peers.TIMEOUT_ENV: raw}) == expected


def test_real_resolver_own_hostname_and_a_name_nobody_serves() -> None:
    """Through the C library, as the trainer resolves: this machine's own hostname is in
    its /etc/hosts; a `.invalid` name never resolves (RFC 2606)."""
    own = socket.gethostname()
    out = peers.wait_for((own, "solo-worker-0.solo.real.invalid"), 0.0)
    assert out.resolved == (own,)
    assert out.missing == ("solo-worker-0.solo.real.invalid",)


def test_launcher_fails_the_pod_naming_the_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    monkeypatch.setattr(peers, "TERMINATION_LOG", str(log))
    monkeypatch.setattr(
        peers, "write_termination", lambda m, path=str(log): Path(path).write_text(m)
    )
    env = {
        "MASTER_ADDR": "solo-worker-0.solo.real.invalid",
        c.ENV_PEER_HOSTS: "solo-worker-0.solo.real.invalid",
        peers.TIMEOUT_ENV: "0",
    }
    with pytest.raises(SystemExit) as exc:
        main._wait_for_peers(env)
    assert exc.value.code == main.EXIT_PEER_UNRESOLVED
    said = log.read_text()
    assert "solo-worker-0.solo.real.invalid (named by MASTER_ADDR)" in said
    assert said in capsys.readouterr().err
    # and the operator reads it as its own failure class
    pod = {
        "metadata": {"name": "solo-worker-0"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "t", "state": {"terminated": {"exitCode": 75, "message": said}}}
            ],
        },
    }
    f = failures.classify_failed(pod)
    assert (f.reason, f.retryable) == (failures.PEER_UNRESOLVED, True)


def test_launcher_goes_on_when_every_peer_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    main._wait_for_peers({c.ENV_PEER_HOSTS: "localhost"})
    assert "trainop-launch: peers resolve (localhost) in" in capsys.readouterr().err
