"""Helpers the chart and Prometheus integration tests share: running helm, rendering the chart."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.integration.conftest import Kube, repo_root
from trainop.cluster.binaries import resolve_binaries

CHART = repo_root() / "charts" / "trainop"
ALL_VALUES = repo_root() / "tests" / "integration" / "chart-values-all.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Helm:
    """The helm binary the local cluster tooling built, with its own cache/config dirs."""

    def __init__(self, kube: Kube, home: Path) -> None:
        self.binary = str(resolve_binaries(build=False)["helm"])
        self.kube = kube
        self.env = dict(
            os.environ,
            KUBECONFIG=kube.kubeconfig,
            HELM_CACHE_HOME=str(home / "cache"),
            HELM_CONFIG_HOME=str(home / "config"),
            HELM_DATA_HOME=str(home / "data"),
        )

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.binary, *args], env=self.env, capture_output=True, text=True, timeout=300
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def template(
        self,
        *extra: str,
        values: Path | None = None,
        namespace: str = "trainop-system",
        release: str = "trainop",
    ) -> str:
        args = ["template", release, str(CHART), "--namespace", namespace]
        if values is not None:
            args += ["--values", str(values)]
        return self.run(*args, *extra).stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, got {len(hits)}"
    return hits[0]
