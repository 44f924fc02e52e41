"""One local control plane for the whole integration run, plus helpers to talk to it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainop.cluster.local import LocalCluster

CLUSTER_NAME = os.environ.get("TRAINOP_TEST_CLUSTER", "trainop-it")


class Kube:
    """Thin kubectl wrapper for tests: JSON in and out, and polling with a clear failure."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.kubeconfig = str(cluster.kubeconfig)

    def run(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, input=input, check=check)

    def apply(self, obj: dict[str, Any] | list[dict[str, Any]] | str, *extra: str,
              check: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
        doc = obj if isinstance(obj, str) else json.dumps(
            obj if isinstance(obj, dict) else {"apiVersion": "v1", "kind": "List", "items": obj}
        )
        return self.run("apply", "-f", "-", *extra, input=doc, check=check)

    def get(self, *args: str) -> Any:
        return json.loads(self.run("get", *args, "-o", "json").stdout)

    def maybe_get(self, *args: str) -> Any | None:
        proc = self.run("get", *args, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def wait_for(self, what: str, probe: Callable[[], Any], timeout: float = 60,
                 interval: float = 0.5) -> Any:  # fmt: skip
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = probe()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")

    def events_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        items = self.get("events", "-n", namespace,
                         "--field-selector", f"involvedObject.name={name}")["items"]  # fmt: skip
        return list(items)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    lc = LocalCluster(name=CLUSTER_NAME, bin_dir=os.environ.get("TRAINOP_BIN_DIR"))
    lc.up()
    yield lc
    if os.environ.get("TRAINOP_KEEP_CLUSTER") != "1":
        lc.down()


@pytest.fixture(scope="session")
def kube(local_cluster: LocalCluster) -> Kube:
    return Kube(local_cluster)


_ns_counter = iter(range(1, 10_000))


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    base = request.node.name.lower().replace("_", "-")[:40].strip("-")
    name = f"t{next(_ns_counter)}-{base}".rstrip("-")
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube.wait_for(f"default ServiceAccount in {name}",
                  lambda: kube.maybe_get("serviceaccount", "default", "-n", name))  # fmt: skip
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]
