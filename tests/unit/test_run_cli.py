"""`trainop run` flag handling through click's CliRunner, with kopf, the API and HTTP stubbed.

Nothing is started: the kube config loader, the metrics server and `kopf.operator` are
replaced, so the test sees only what the command hands to the operator (the Shell it makes,
and kopf.operator's arguments).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from trainop.cli.main import cli
from trainop.handlers import operator as handlers
from trainop.handlers.shell import Shell


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Stub everything `trainop run` starts; returns kopf.operator's keyword arguments."""
    import kopf
    import prometheus_client

    import trainop.cli.run as run_module
    import trainop.kube.client as kube_client

    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        handlers, "register", lambda shell, registry: seen.update(shell=shell, registry=registry)
    )
    monkeypatch.setattr(kube_client, "load_kube_config", lambda path=None: None)
    monkeypatch.setattr(prometheus_client, "start_http_server", lambda port: seen.update(port=port))
    monkeypatch.setattr(kopf, "operator", lambda **kw: seen.update(kw))
    monkeypatch.setattr(run_module, "asyncio", SimpleNamespace(run=lambda coro: None))
    return seen


def invoke(*args: str) -> None:
    result = CliRunner().invoke(cli, ["run", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_defaults(started: dict[str, Any]) -> None:
    invoke()
    shell, registry = started.pop("shell"), started.pop("registry")
    assert isinstance(shell, Shell) and shell.namespaces == [] and shell.elector is None
    assert registry is not None  # the handlers were registered there, over this shell
    assert started == {
        "port": 8080,
        "clusterwide": True,
        "namespaces": [],
        "liveness_endpoint": "http://0.0.0.0:8081/healthz",
        "standalone": True,
    }
    assert shell.config.restart_backoff_seconds == 10.0
    assert shell.config.restart_backoff_max_seconds == 300.0


def test_flags(started: dict[str, Any]) -> None:
    invoke(
        "--namespace=team-a",
        "--namespace=team-b",
        "--metrics-port=9090",
        "--health-port=9091",
        "--restart-backoff-seconds=3",
        "--restart-backoff-max-seconds=30",
    )
    assert started["port"] == 9090
    assert (started["clusterwide"], started["namespaces"]) == (False, ["team-a", "team-b"])
    assert started["liveness_endpoint"] == "http://0.0.0.0:9091/healthz"
    assert started["shell"].config.restart_backoff_seconds == 3.0
    assert started["shell"].config.restart_backoff_max_seconds == 30.0


def test_config_file_topology_levels_are_used(started: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("topologyLevels: [trainop.dev/rack, kubernetes.io/hostname]\n")
    invoke(f"--config={path}")
    assert started["shell"].config.topology_levels == ("trainop.dev/rack", "kubernetes.io/hostname")


def test_config_file_backoff_is_used_when_no_flag_is_given(
    started: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("restartBackoffSeconds: 2\nrestartBackoffMaxSeconds: 20\n")
    invoke(f"--config={path}")
    assert started["shell"].config.restart_backoff_seconds == 2.0
    assert started["shell"].config.restart_backoff_max_seconds == 20.0
