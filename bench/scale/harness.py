"""The shared harness of `bench.scale`'s scenarios: the bench cluster (settled: every node
untainted, the CRDs established) and the operator process with its metrics endpoint (under
py-spy or memray on request).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench import kubeflow_baseline
from bench.scale import common
from bench.scale.workload import fleet_file


# --- the run --------------------------------------------------------------------------------------
def start_operator(
    kubeconfig: str, log: Path, extra: Iterable[str] = ()
) -> tuple[subprocess.Popen[bytes], Callable[[], str]]:
    import urllib.request

    mport, hport = kubeflow_baseline.free_port(), kubeflow_baseline.free_port()
    # TRAINOP_BENCH_PROFILE=DIR: the operator runs under py-spy, which writes its sampled
    # stacks (collapsed, flamegraph.pl's input) there, one file per operator start.
    profile = os.environ.get("TRAINOP_BENCH_PROFILE")
    spy: list[str] = []
    if profile:
        Path(profile).mkdir(parents=True, exist_ok=True)
        out = Path(profile) / f"{log.stem}-{int(time.time())}.txt"
        spy = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw"]
        spy += ["--rate", "100", "--nonblocking", "-o", str(out), "--"]
    # TRAINOP_BENCH_MEMRAY=DIR: the operator runs under memray (aggregated capture; `memray
    # flamegraph` on it shows what was allocated at the peak of its memory).
    memray = os.environ.get("TRAINOP_BENCH_MEMRAY")
    python = [sys.executable]
    if memray:
        Path(memray).mkdir(parents=True, exist_ok=True)
        out = Path(memray) / f"{log.stem}-{int(time.time())}.bin"
        python += ["-m", "memray", "run", "--aggregate", "--force", "-o", str(out)]
    proc = subprocess.Popen(
        [
            *spy,
            *python,
            "-m",
            "trainop.cli.main",
            "run",
            "--metrics-port",
            str(mport),
            "--health-port",
            str(hport),
            *extra,
        ],
        env=dict(os.environ, KUBECONFIG=kubeconfig),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    if spy:  # stop the operator, not py-spy: py-spy writes its file when its target exits
        proc.terminate = lambda: _signal_children(proc.pid, signal.SIGTERM)  # type: ignore[method-assign]
        proc.kill = lambda: _signal_children(proc.pid, signal.SIGKILL)  # type: ignore[method-assign]

    def metrics() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
            return str(r.read().decode())

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            metrics()
            return proc, metrics
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"operator did not start; see {log}")


def _signal_children(pid: int, sig: int) -> None:
    """Signal the processes `pid` started (py-spy's target, the operator)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    for child in children.read_text().split() if children.exists() else ():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(child), sig)


def cluster_with(nodes: int, rack: int, kueue: bool = False) -> Any:
    """The bench cluster; with `kueue`, on the version-stamped API server Kueue needs (a
    separate cluster name, so a plain one is never reused for it)."""
    from trainop.cluster.kueue import cluster_bin_dir
    from trainop.cluster.local import LocalCluster

    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = str(cluster_bin_dir(Path(tmp))) if kueue else None
        lc = LocalCluster(
            name=f"{common.CLUSTER}-kueue" if kueue else common.CLUSTER, bin_dir=bin_dir
        )
        lc.up(str(fleet_file(nodes, rack, Path(tmp) / "fleet.yaml")), wait_seconds=600)
    lc.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(common.REPO / "crds"))
    _wait_established(lc, "crd/trainingjobs.trainop.dev")
    _wait_untainted(lc, 900)
    return lc


def _wait_established(lc: Any, crd: str, tries: int = 10) -> None:
    """kubectl wait on a CRD created a moment ago can fail before the API server has written
    any condition ("<nil> is of the type <nil>"): ask again for a few seconds."""
    for attempt in range(tries):
        try:
            lc.kubectl("wait", "--for", "condition=established", crd)
            return
        except Exception:
            if attempt == tries - 1:
                raise
            time.sleep(1.0)


_STARTUP_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _wait_untainted(lc: Any, timeout: float) -> None:
    """Wait until the node lifecycle controller has lifted the start-up taints from every
    node. Ready comes first; on a busy machine the taint of a thousand new nodes lingers
    for minutes, and the bare-pod baseline (which tolerates every taint) would get nodes
    that a TrainingJob, rightly, may not use yet."""
    deadline = time.monotonic() + timeout
    tainted = -1
    while time.monotonic() < deadline:
        out = lc.kubectl(
            "get", "nodes", "-o", "jsonpath={range .items[*]}{.spec.taints}{'\\n'}{end}"
        )
        tainted = sum(any(t in line for t in _STARTUP_TAINTS) for line in out.stdout.splitlines())
        if tainted == 0:
            return
        time.sleep(5)
    print(f"bench: {tainted} nodes still carry a start-up taint after {timeout:.0f} s", flush=True)
