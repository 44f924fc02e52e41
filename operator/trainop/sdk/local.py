"""The SDK's local backend: the same `train(func, ...)` as local processes, to debug a
training function without a cluster.

    from trainop.sdk import LocalBackend
    job = LocalBackend().train(train_fn, runtime=None, num_nodes=2, gpus_per_node=2)
    for line in job.logs(rank=0, follow=True):
        print(line)
    job.wait()

The env contract is the pod's, built by the same code: the TrainingJob body comes from
trainop.sdk.jobs.train_job (so the container env, the payload and
DISABLE_KUBEFLOW_INTEGRATION are the pod template's), and each "node" gets the wiring of
trainop.frameworks' PyTorch module, the function the planner calls for a pod, with every
member's host 127.0.0.1 and a free port instead of the gang's DNS names and 29500. So a
local node's env equals its rendered pod's apart from addresses (MASTER_ADDR/PORT,
PET_MASTER_ADDR/PORT, TRAINOP_PEER_HOSTS) and the NCCL variables trainop tunes for a node's
fabric (tests/unit/test_sdk_local.py checks it against `trainop render`).

Each node runs what a pod runs after trainop-launch: torchrun (`python -m
torch.distributed.run -m trainop.launcher.sdkrun`), which reads the PET_* variables, when
torch is installed; otherwise (`launcher="processes"`, or torch missing) this module starts
the node's processes itself with the variables torchrun gives its workers (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_*, TORCHELASTIC_*:
https://pytorch.org/docs/stable/elastic/run.html#environment-variables). A node runs
max(gpus_per_node, 1) processes, as a pod does. `packages` are not installed (the local
environment is used as it is); `queue` and `runtime` are recorded, not resolved: there is
no cluster to ask.

Neighbours: trainop.sdk.jobs (the body), trainop.frameworks (the wiring),
trainop.launcher.sdkrun (what each process runs).
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop import frameworks
from trainop.api import constants as c
from trainop.sdk import jobs
from trainop.sdk.errors import InvalidJobError, JobFailedError, WaitTimeoutError
from trainop.sdk.functions import pack

LOCAL_HOST = "127.0.0.1"
LOCAL_NAMESPACE = "local"
LAUNCHERS = ("auto", "torchrun", "processes")


def _module_of(requirement: str) -> str:
    """The import name a requirement most likely gives: `datasets>=3` -> datasets,
    `scikit-learn` -> scikit_learn (a guess, for a warning only)."""
    import re

    name = re.split(r"[\s<>=!~;\[@]", requirement.strip(), maxsplit=1)[0]
    return name.replace("-", "_").lower() or requirement


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL_HOST, 0))
        return int(s.getsockname()[1])


def node_envs(body: Mapping[str, Any], port: int) -> list[dict[str, str]]:
    """Each node's env, as its pod would get it with the gang on this machine (pure)."""
    meta, spec = body["metadata"], body["spec"]
    worker = spec["replicaSpecs"]["Worker"]
    container = worker["template"]["spec"]["containers"][0]
    base = {e["name"]: e["value"] for e in container.get("env") or []}
    members = tuple(
        frameworks.Member("Worker", i, i, int(worker["gpus"]), LOCAL_HOST)
        for i in range(int(worker["replicas"]))
    )
    inp = frameworks.WiringInput(meta["name"], meta["namespace"], members, port)
    wiring = frameworks.wire("pytorch", inp)
    return [{**base, **wiring.env.get(m.key, {}), c.ENV_PEER_HOSTS: LOCAL_HOST} for m in members]


def worker_env(node: Mapping[str, str], local_rank: int, run_id: str) -> dict[str, str]:
    """What torchrun adds for its worker `local_rank` on a node with env `node` (pure)."""
    nnodes, nproc = int(node[c.ENV_PET_NNODES]), int(node[c.ENV_PET_NPROC_PER_NODE])
    group = int(node[c.ENV_PET_NODE_RANK])
    world = nnodes * nproc
    rank = group * nproc + local_rank
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": str(group),
        "GROUP_WORLD_SIZE": str(nnodes),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "ROLE_NAME": "default",
        "MASTER_ADDR": node[c.ENV_PET_MASTER_ADDR],
        "MASTER_PORT": node[c.ENV_PET_MASTER_PORT],
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
    }


@dataclass
class LocalJob:
    """A train() running here: one log file per node, its processes, its exit."""

    name: str
    body: dict[str, Any]
    log_dir: Path
    procs: list[tuple[int, subprocess.Popen[bytes]]] = field(default_factory=list)

    def log_path(self, rank: int) -> Path:
        return self.log_dir / f"node-{rank}.log"

    def running(self) -> bool:
        return any(p.poll() is None for _, p in self.procs)

    def _first_failure(self) -> tuple[int, int] | None:
        for node, p in self.procs:
            code = p.poll()
            if code not in (None, 0):
                return node, int(code or 0)
        return None

    def stop(self) -> None:
        for _, p in self.procs:
            if p.poll() is None:
                p.terminate()
        for _, p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    def wait(self, timeout: float = 3600) -> None:
        """Until every process ends; JobFailedError naming the node and exit code when one
        fails (the others are stopped, as torchrun and the operator's gang do)."""
        deadline = time.monotonic() + timeout
        failed = None
        while self.running():
            failed = self._first_failure()
            if failed is not None:  # the first to fail, before stop() adds the others
                self.stop()
                break
            if time.monotonic() >= deadline:
                self.stop()
                raise WaitTimeoutError(self.name, ("Succeeded",), "Running", timeout)
            time.sleep(0.05)
        failed = failed or self._first_failure()
        if failed is not None:
            node, code = failed
            raise JobFailedError(
                self.name, "Failed", f"node {node} exited {code}; see {self.log_path(node)}"
            )

    def logs(self, rank: int = 0, follow: bool = True) -> Iterator[str]:
        """Node `rank`'s lines (all its processes, as a pod's log has them)."""
        path = self.log_path(rank)
        with open(path, "rb") as f:
            pending = b""
            while True:
                chunk = f.read()
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        yield line.decode(errors="replace")
                    continue
                if not follow or not self.running():
                    rest = f.read()
                    pending += rest
                    if rest:
                        continue
                    break
                time.sleep(0.05)
            if pending:
                yield pending.decode(errors="replace")


class LocalBackend:
    """train() as processes on this machine (see the module docstring)."""

    def __init__(
        self, log_dir: str | os.PathLike[str] | None = None, launcher: str = "auto"
    ) -> None:
        if launcher not in LAUNCHERS:
            raise InvalidJobError("launcher", f"must be one of {', '.join(LAUNCHERS)}")
        self.log_root = Path(log_dir or tempfile.mkdtemp(prefix="trainop-local-"))
        self.launcher = launcher

    def _use_torchrun(self) -> bool:
        if self.launcher == "processes":
            return False
        has_torch = importlib.util.find_spec("torch") is not None
        if self.launcher == "torchrun" and not has_torch:
            raise InvalidJobError("launcher", "torchrun needs torch installed here")
        return has_torch

    def train(
        self,
        func: Callable[..., Any],
        *,
        runtime: str | None = None,
        num_nodes: int = 1,
        gpus_per_node: int = 0,
        packages: Sequence[str] = (),
        queue: str | None = None,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> LocalJob:
        packed = pack(func, args)
        suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        body = jobs.train_job(
            packed,
            name=name or jobs.job_name(packed.name, suffix),
            namespace=LOCAL_NAMESPACE,
            runtime=jobs.runtime_ref(runtime) if runtime is not None else None,
            num_nodes=num_nodes,
            gpus_per_node=gpus_per_node,
            packages=packages,
            queue=queue,
            env=env,
        )
        job = LocalJob(body["metadata"]["name"], body, self.log_root / body["metadata"]["name"])
        job.log_dir.mkdir(parents=True, exist_ok=True)
        missing = [p for p in packages if importlib.util.find_spec(_module_of(p)) is None]
        if missing:  # a pod would pip-install them; here the environment is used as it is
            print(
                f"trainop-local: packages not installed here (not installed by the local "
                f"backend): {', '.join(missing)}",
                file=sys.stderr,
            )
        port = _free_port()
        torchrun = self._use_torchrun()
        for node, node_env in enumerate(node_envs(body, port)):
            self._start_node(job, node, node_env, torchrun)
        return job

    def _start_node(
        self, job: LocalJob, node: int, node_env: dict[str, str], torchrun: bool
    ) -> None:
        log = open(job.log_path(node), "ab")  # noqa: SIM115 - shared by the node's processes
        base = {**os.environ, **node_env}
        try:
            if torchrun:
                cmd = [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "-m",
                    "trainop.launcher.sdkrun",
                ]
                proc = subprocess.Popen(cmd, env=base, stdout=log, stderr=subprocess.STDOUT)
                job.procs.append((node, proc))
                return
            for local_rank in range(int(node_env[c.ENV_PET_NPROC_PER_NODE])):
                env = {**base, **worker_env(node_env, local_rank, job.name)}
                cmd = [sys.executable, "-m", "trainop.launcher.sdkrun"]
                proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
                job.procs.append((node, proc))
        finally:
            log.close()
