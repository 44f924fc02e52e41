"""The SDK's local backend (trainop.sdk.local): train(func) as local processes with the env
contract of a pod. The env each local rank sees is compared with what `trainop render`
(the operator's planner) gives the same TrainingJob's pods: equal apart from addresses and
the NCCL variables tuned for a node's fabric. torch is not in the dev lock, so the nodes run
the backend's own processes with torchrun's worker variables (launcher="processes")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builders import fleet_nodes
from trainop.cli.render import render_job
from trainop.planner import OperatorConfig
from trainop.sdk import JobFailedError, LocalBackend
from trainop.sdk.functions import pack
from trainop.sdk.jobs import train_job
from trainop.sdk.local import node_envs, worker_env

# Where an address goes: the gang's DNS names and 29500 in a pod, 127.0.0.1 and a free port
# here. NCCL_* are the node's fabric tuning (trainop.nccl), which a laptop has none of.
ADDRESSES = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "TRAINOP_PEER_HOSTS",
}
TORCHRUN_WORKER = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
}  # fmt: skip


def dump_env(out: str) -> None:
    import json
    import os

    with open(f"{out}/rank-{os.environ['RANK']}.json", "w") as f:
        json.dump(dict(os.environ), f)


def fails_on_rank_one() -> None:
    import os
    import sys

    print(f"rank {os.environ['RANK']} says hello", flush=True)
    if os.environ["RANK"] == "1":
        sys.exit(3)


def prints_steps(steps: int) -> None:
    import os
    import time

    for step in range(steps):
        print(f"rank {os.environ['RANK']} step {step}", flush=True)
        time.sleep(0.01)


def _pod_envs(body: dict[str, Any]) -> dict[int, dict[str, str]]:
    rendered = render_job(body, fleet_nodes(), [], OperatorConfig())
    assert rendered.plan is not None, rendered.errors
    out = {}
    for p in rendered.plan.pods:
        if p.get("kind") != "Pod":
            continue
        rank = int(p["metadata"]["labels"]["trainop.dev/replica-index"])
        out[rank] = {
            e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"] if "value" in e
        }
    return out


def test_a_local_rank_sees_the_env_its_rendered_pod_gets(tmp_path: Path) -> None:
    job = LocalBackend(tmp_path / "logs", launcher="processes").train(
        dump_env,
        runtime=None,
        num_nodes=2,
        gpus_per_node=2,
        env={"HF_HOME": "/cache"},
        name="envcheck",
        args={"out": str(tmp_path)},
    )
    job.wait(60)
    pods = _pod_envs(job.body | {"metadata": {**job.body["metadata"], "namespace": "team"}})
    assert sorted(pods) == [0, 1]
    for rank in range(4):
        local = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        pod = pods[rank // 2]
        contract = {k: v for k, v in pod.items() if not k.startswith("NCCL_")}
        missing = sorted(set(contract) - set(local))
        assert not missing, f"rank {rank} lacks {missing}"
        differ = sorted(k for k in contract if k not in ADDRESSES and local[k] != contract[k])
        assert not differ, {k: (local[k], contract[k]) for k in differ}
        assert {k for k in contract if local[k] != contract[k]} <= ADDRESSES
        # what torchrun adds in the pod, the backend adds here
        assert set(local) >= TORCHRUN_WORKER
        assert (local["RANK"], local["LOCAL_RANK"], local["WORLD_SIZE"]) == (
            str(rank),
            str(rank % 2),
            "4",
        )
        assert local["MASTER_ADDR"] == local["PET_MASTER_ADDR"] == "127.0.0.1"


def test_node_envs_are_the_frameworks_wiring_on_loopback() -> None:
    body = train_job(
        pack(dump_env, {"out": "/x"}),
        name="w",
        namespace="local",
        runtime=None,
        num_nodes=3,
        gpus_per_node=0,
    )
    envs = node_envs(body, 4321)
    assert [(e["PET_NODE_RANK"], e["PET_NNODES"], e["PET_NPROC_PER_NODE"]) for e in envs] == [
        ("0", "3", "1"), ("1", "3", "1"), ("2", "3", "1"),
    ]  # fmt: skip
    assert {e["PET_MASTER_ADDR"] + ":" + e["PET_MASTER_PORT"] for e in envs} == {"127.0.0.1:4321"}
    w = worker_env(envs[2], 0, "w")
    assert (w["RANK"], w["GROUP_RANK"], w["WORLD_SIZE"], w["LOCAL_WORLD_SIZE"]) == (
        "2",
        "2",
        "3",
        "1",
    )


def test_a_failing_rank_fails_the_job_naming_the_node(tmp_path: Path) -> None:
    job = LocalBackend(tmp_path, launcher="processes").train(
        fails_on_rank_one, runtime=None, num_nodes=2, gpus_per_node=0
    )
    with pytest.raises(JobFailedError, match=r"node 1 exited 3; see .*node-1.log"):
        job.wait(60)
    assert "rank 1 says hello" in list(job.logs(rank=1, follow=False))


def test_logs_follow_a_node_until_it_ends(tmp_path: Path) -> None:
    job = LocalBackend(tmp_path, launcher="processes").train(
        prints_steps, runtime=None, num_nodes=1, gpus_per_node=2, args={"steps": 20}
    )
    lines = list(job.logs(rank=0, follow=True))
    job.wait(30)
    assert sorted(lines) == sorted(f"rank {r} step {s}" for r in (0, 1) for s in range(20))


def test_packages_are_not_installed_here_and_it_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = LocalBackend(tmp_path, launcher="processes").train(
        prints_steps, runtime=None, num_nodes=1, gpus_per_node=0, args={"steps": 1},
        packages=["yaml-not-a-module>=1", "pytest"],
    )  # fmt: skip
    job.wait(30)
    err = capsys.readouterr().err
    assert "packages not installed here" in err and "yaml-not-a-module>=1" in err
    assert "pytest" not in err.split(":")[-1]
