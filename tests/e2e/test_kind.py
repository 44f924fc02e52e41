"""e2e tier on kind: runs where a Docker engine and kind exist, skipped with the reason elsewhere."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def _docker_engine_running() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(
    not (_docker_engine_running() and shutil.which("kind")),
    reason="e2e needs a running Docker engine and `kind` on PATH; this machine has "
    + ("no Docker engine" if not _docker_engine_running() else "no kind binary"),
)


def test_kind_cluster_reachable() -> None:
    out = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True)
    assert out.returncode == 0
